// SegmentMap: the segment map's pages (kv/FORMAT.md "Segment map") as they are in memory, and
// which of them must be written again. The map tells recovery which segments it need not read:
// the ones it says are free. Its one rule: the map on the device never says kFree of a segment
// that may hold a log with acknowledged records. So a segment is marked in use, and that write
// completed, before a log head may take it (SegmentTable hands out only such segments), and it
// is marked free only after compaction's free markers are durable (a free marker already makes a
// segment read as holding nothing, so the map may say kFree later, lazily).
//
// State: one entry per segment, and per map page the number of changes made to it (`version`)
// and how many of them a completed write carried (`written`). A change is on the device once
// its page's written version reaches the version the change got. At most one write of a page
// is in flight at once (NVMe orders nothing among commands in flight: of two writes of one page,
// either could land last).
//
// On a zoned store the map is a log in the metadata zones (kv/FORMAT.md "The segment map's
// log"): a page write is an append to the current zone (MapZoneLog says which, and whether it
// has room), each write counted above every earlier one, across sessions; when the zone is full
// the writer moves the map to the other zone (MoveTarget, then Moved), after which every page
// is written again there.
//
// Thread contract: thread-safe (a leaf mutex). Set is called by SegmentTable under its lock;
// TakeWrite, Written, MoveTarget and Moved by the one thread that writes the map (the log
// writer, or Open).
#ifndef NVKV_KV_SEGMENT_MAP_H_
#define NVKV_KV_SEGMENT_MAP_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "kv/map_zone_log.h"
#include "kv/page_format.h"
#include "storage/device.h"

namespace nvkv::kv {

class SegmentMap {
 public:
  // A change: on the device once page `index`'s written version reaches `version`.
  struct Ticket {
    uint64_t index = 0;
    uint64_t version = 0;
  };
  // A page write TakeWrite prepared: map page `index` at `page_number`, carrying `version`. On
  // a zoned store (`append`) it goes by Zone Append to the zone that starts at `page_number`.
  struct PageWrite {
    uint64_t index = 0;
    uint64_t page_number = 0;
    uint64_t version = 0;
    bool append = false;
  };

  // Every entry kUnknown, every page written (nothing to write until something changes).
  SegmentMap(const Geometry& geometry, uint64_t store_seed);

  uint64_t page_count() const { return page_count_; }

  // A zoned store (`geometry` zoned): the map is a log in the metadata zones, as a format
  // leaves them (MapZoneLog), each zone starting with its copy of `superblock`. Before anything
  // is written.
  void UseZones(const Superblock& superblock);
  // Zoned: takes the log up where Open found it, its next write counted `next_write_count`. When
  // the current zone does not hold every page, each is written again.
  void ResumeZones(const MapZoneLog::Found& found, uint64_t next_write_count);
  // The current metadata zone; nullopt without zones.
  std::optional<uint32_t> current_zone() const;

  // Recovery: map page `index` as the device holds it (no write needed): its entries, as many
  // as the segments it describes.
  void LoadPage(uint64_t index, const SegmentMapEntry* entries);
  // Changes `segment`'s entry (`summary` only with kSummarized, which needs one, and with
  // kCheckpoint and kBaseCheckpoint, for its place in the checkpoint); nothing to do
  // when it says so already (the ticket of the page's current version).
  Ticket Set(uint64_t segment, MapState state, const SummaryPlace& summary = {});
  // Has the page holding `segment` written again, unchanged but for its floors, which its next
  // write takes then: above every generation and sequence taken before this call.
  Ticket Rewrite(uint64_t segment);
  // Whether the change that gave `ticket` is on the device.
  bool Durable(const Ticket& ticket) const;
  // Whether some page has changes not yet written (or being written); takes no lock.
  bool dirty() const { return dirty_pages_.load(std::memory_order_acquire) != 0; }

  // What a page written now carries as floors (SegmentTable::MapFloors). Called under the map's
  // lock, after the entries are copied: a change made before (a free marker's generation taken,
  // then the segment marked free) is below them.
  using Floors = absl::FunctionRef<SegmentMapPageHeader()>;
  // Encodes into `page` (page_bytes) the next changed page with no write in flight (one that
  // announces a segment first: heads may be waiting for it), and marks its write in flight;
  // nullopt when there is none.
  std::optional<PageWrite> TakeWrite(uint8_t* page, Floors floors);
  // The write TakeWrite prepared completed (`ok`: without error). A failed write leaves the page
  // changed, to be written again.
  void Written(const PageWrite& write, bool ok);

  // Zoned: the metadata zone the map must move to before any changed page can be written (the
  // current one is full), once no write is in flight; nullopt otherwise. The writer then resets
  // it and appends its superblock copy (StartMetadataZone), and calls Moved.
  std::optional<MapZoneLog::Move> MoveTarget() const;
  // The zone MoveTarget named is current now: every page is written again there.
  void Moved();
  // Zoned: the writer filled the current zone up to its last page (FillMetadataZone): the map
  // moves at its next write, which comes at once (every page is written again, in the other
  // zone).
  void MoveOn();

 private:
  struct PageState {
    uint64_t version = 0;
    uint64_t written = 0;
    bool in_flight = false;
    bool announces = false;  // a change not yet written marks a segment in use
  };
  // Page `index` has a change to write: a new version, and dirty if it was not.
  void ChangedLocked(uint64_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PageWrite EncodeLocked(uint64_t index, uint8_t* page, Floors floors)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every page changed: written again (in the current zone).
  void ChangeEveryPageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether page `index` may be written now: changed, no write of it in flight, and (on zones)
  // room for it in the current zone.
  bool WritableLocked(uint64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which changed page TakeWrite writes first: 2 for one the current zone has no copy of (a
  // move goes on), 1 for one that announces a segment (heads may wait for it), else 0.
  int UrgencyLocked(uint64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Geometry geometry_;
  const uint64_t store_seed_;
  const uint32_t per_page_;
  const uint64_t page_count_;
  mutable absl::Mutex mu_;
  std::vector<SegmentMapEntry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<PageState> pages_ ABSL_GUARDED_BY(mu_);
  // Pages with version > written: changed under mu_, read without it by dirty().
  std::atomic<uint64_t> dirty_pages_{0};
  // Page writes prepared: on zones it orders the copies of a page, so it goes on across
  // sessions (UseZones); elsewhere it is for diagnostics.
  uint64_t write_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<MapZoneLog> zones_ ABSL_GUARDED_BY(mu_);
};

// Reads the segment map of `geometry` as the device holds it, through `device` into `chunk` (a
// run of pages at a time), and calls `visit` for each page that verifies with its index, floors
// and the entries of the segments it describes (`count` of them). Returns how many pages could
// not be read or did not verify: they say nothing (kv/FORMAT.md "Segment map"). Used by
// recovery, and by a grow that moves the map.
using MapPageVisitor = absl::FunctionRef<void(uint64_t index, const SegmentMapPageHeader& floors,
                                              const SegmentMapEntry* entries, uint64_t count)>;
uint64_t ReadMapPages(storage::Device& device, const Geometry& geometry, uint64_t store_seed,
                      uint32_t blocks_per_page, const storage::Buffer& chunk,
                      MapPageVisitor visit);

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_MAP_H_
