// FreeSegments: the segments that hold nothing, and which of them the segment map announces.
//
// A table given a map (segment_map.h) keeps it saying what recovery must read: a free segment
// reaches a log head only once the map on the device says it is in use. A few free segments are
// kept *announced* (marked in use, and the map write done) for the heads to take (NextForHead
// gives no other), and the map's writer (the log writer; Open before it starts) announces more
// as they are taken (AnnounceMore, then Written once the map write is done). A segment freed is
// marked free in the map lazily: its free markers already say so. So after a crash recovery
// reads the segments in use and the announced ones, and skips the rest. Without a map, every
// free segment may go to a head at once.
//
// Thread contract: thread-safe. SegmentTable makes every change of which segments are free under
// its own lock (this `mu_` is taken under it, and SegmentMap's under this); the map's writer
// announces more and reports its writes without the table's lock, which only moves segments
// between the kinds of free: never takes one.
#ifndef NVKV_KV_FREE_SEGMENTS_H_
#define NVKV_KV_FREE_SEGMENTS_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "kv/segment_map.h"

namespace nvkv::kv {

class FreeSegments {
 public:
  // `map` (may be null) must outlive this; `announced_target` free segments are kept announced.
  FreeSegments(SegmentMap* map, uint32_t announced_target)
      : map_(map), announced_target_(announced_target) {}

  // Free segments of every kind: announced, being announced and not.
  uint64_t count();

  // The segment a log head takes next: with a map, the first announced one (none: nullopt, the
  // heads wait for the map's writer); without, the last one freed.
  std::optional<uint64_t> NextForHead();
  // A head took NextForHead's segment.
  void TakeForHead(uint64_t segment);
  // Takes `count` free segments that are not announced (the highest numbers when the list is as
  // Rebuild made it: heads fill the device from the front), leaving at least `keep` free of
  // every kind; none when there are not as many (false).
  bool TakeUnannounced(uint64_t count, uint64_t keep, std::vector<uint64_t>* taken);
  // `segment` holds nothing any more: free, and marked so in the map (once written).
  void Add(uint64_t segment);
  // Free `segment` is no longer to be taken (its zone went out of service): off the list, of
  // whatever kind, and free in the map.
  void Remove(uint64_t segment);
  // After recovery: the free segments are `free` (heads take them from its back), none
  // announced, and the map says each is free.
  void Rebuild(std::vector<uint64_t> free);

  // The map's writer: marks free segments in use in the map until the target of them are
  // announced or being announced; their map pages are then written (SegmentMap::TakeWrite).
  // Takes `mu_` only when a segment was taken or freed since it last ran.
  void AnnounceMore();
  // A map page was written: the segments whose marks are on the device now are announced.
  void Written();
  // The store is closing: announced segments (and ones being announced) are free again, and
  // marked so in the map.
  void Withdraw();

 private:
  SegmentMap* const map_;
  const uint32_t announced_target_;
  absl::Mutex mu_;
  // Not announced (free_), being announced (announcing_, with the map change that must be on the
  // device first), announced (ready_). Without a map, only free_.
  std::vector<uint64_t> free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<uint64_t, SegmentMap::Ticket>> announcing_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> ready_ ABSL_GUARDED_BY(mu_);
  // Set (under mu_) when announcing more may be possible and needed: a segment left ready_ or
  // joined free_; cleared by AnnounceMore once nothing more is. Read without the lock, so that
  // the writer's passes take mu_ only when there is something to announce.
  std::atomic<bool> announce_due_{true};
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_FREE_SEGMENTS_H_
