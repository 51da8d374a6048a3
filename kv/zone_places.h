// ZonePlaces: where the positions of a zoned store's log landed (kv/FORMAT.md "Page identity").
//
// On zones a log page is named by its position (the zone's first page plus its index in the
// head's log), and Zone Append puts it wherever the zone's write pointer stands when the device
// gets to it. Per zone this table keeps the runs of positions that did not land at the place of
// their own number, as (first position, pages, first place), sorted by position; a position in
// no run landed at its own number. Appends land in order in the common case, and a zone's table
// is then empty: a read of it takes no lock.
//
// Filled by completions (Landed) before their pages leave memory (Shard::unwritten), so that a
// reader that finds a page no longer in memory finds its place here; emptied when a zone is
// reset (Clear); persisted by summaries and checkpoints and rebuilt by recovery (Restore,
// RunsFromPlaces).
//
// Thread contract: thread-safe. PlaceOf and ContiguousFrom from any thread, lock-free for a zone
// without runs; the rest under a mutex of its own (a leaf).
#ifndef NVKV_KV_ZONE_PLACES_H_
#define NVKV_KV_ZONE_PLACES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kv/page_format.h"

namespace nvkv::kv {

// Positions `position`.. (pages of them) of a zone landed at places `place`.., both counted from
// the zone's first page.
struct PlaceRun {
  uint32_t position = 0;
  uint32_t pages = 0;
  uint32_t place = 0;

  bool operator==(const PlaceRun&) const = default;
};

// The runs that say where `landed` positions are: pairs (position, place) of one zone, each
// position once, in any order. Positions at their own place need no run.
std::vector<PlaceRun> RunsFromPlaces(std::vector<std::pair<uint32_t, uint32_t>> landed);

class ZonePlaces {
 public:
  // REQUIRES: geometry.zoned().
  explicit ZonePlaces(const Geometry& geometry);
  ZonePlaces(const ZonePlaces&) = delete;
  ZonePlaces& operator=(const ZonePlaces&) = delete;

  // Where page `page` is: the place of the position it names, or `page` itself (a position that
  // landed at its own number, or a page outside the segments).
  uint64_t PlaceOf(uint64_t page) const;
  // How many of the `count` pages from `page` on lie at consecutive places from PlaceOf(page):
  // at least 1 (a read of a run of positions takes them in pieces this long).
  uint32_t ContiguousFrom(uint64_t page, uint32_t count) const;

  // `count` pages from page `first` (positions of one zone, in a row) landed at page `place` on
  // (a completion of one append). kDataLoss, recording nothing, when that cannot be (a device
  // that says so is not to be believed): pages or place outside the zone's writable pages, or
  // positions a run landed apart holds already since the zone's last Clear.
  absl::Status Landed(uint64_t first, uint32_t count, uint64_t place);
  // Segment `segment`'s zone was reset: its positions will land anew.
  void Clear(uint64_t segment);
  // The runs of segment `segment`'s zone, and the same put back (a summary's or a checkpoint's,
  // or what recovery found), replacing what it had.
  std::vector<PlaceRun> Runs(uint64_t segment) const;
  void Restore(uint64_t segment, std::vector<PlaceRun> runs);
  // Runs in all zones (Stats: positions that landed apart).
  uint64_t run_count() const;

 private:
  struct Zone {
    std::atomic<uint32_t> run_count{0};  // runs.size(), read without the lock
    std::vector<PlaceRun> runs;          // under mu_
  };
  // The run of `zone` holding `position`, or null. REQUIRES: mu_ held (shared).
  static const PlaceRun* RunHolding(const Zone& zone, uint32_t position);

  const Geometry geometry_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Zone[]> zones_;  // one per segment; `runs` under mu_
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ZONE_PLACES_H_
