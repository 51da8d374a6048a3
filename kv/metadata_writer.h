// MetadataWriter: the pages the log writer writes beside the log, which say where the log is
// rather than hold it: the segment map's pages (segment_map.h; a segment is announced in the map
// before a head takes it) and sealed segments' summaries (segment_summary.h). A part of the
// LogWriter, run by its thread: each pass submits what it has buffers for, through the writer's
// queue and its one way of making up a page write.
//
// Summaries. A head queues its sealed segment's summary (any thread, shard locks may be held);
// the writer writes it once every earlier page of the head is durable (so that a power cut never
// leaves a summary behind a lost data page, which would make that page a hole instead of a torn
// tail), with FUA; once its pages are durable, the map says where it is
// (SegmentTable::MarkSummarized).
//
// The map. Each pass has the table announce segments for the heads (or, closing, withdraw them),
// and writes the map pages that changed, with FUA, one write in flight per page; when one lands
// the heads waiting for a segment are woken.
//
// Before the writer starts and after it stopped, WriteMapAlone writes the map instead (below).
//
// Thread contract: Queue from any thread; everything else from the writer's thread.
#ifndef NVKV_KV_METADATA_WRITER_H_
#define NVKV_KV_METADATA_WRITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kv/segment_map.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "kv/sticky_error.h"
#include "storage/device.h"

namespace nvkv::kv {

class LogWriter;
struct WriteCounters;

// A sealed segment's summary (segment_summary.h) for the writer to write: its pages were
// assigned at the head (head counters first_counter.., pages first_in_segment.. of the segment).
struct SummaryWrite {
  Shard* shard = nullptr;
  uint64_t segment = 0;
  uint64_t generation = 0;  // of the segment's log
  uint64_t first_page = 0;  // the page number of its first page
  uint32_t first_in_segment = 0;
  uint32_t pages = 0;
  uint64_t first_counter = 0;
  std::string bytes;  // SummaryBuilder::Take
};

// A zone a head left (a zoned store). Once every page the head assigned up to `last_counter` is
// durable, the zone no longer counts among the device's active ones: at once when the head
// filled it or never wrote to it, else once finished (`finish`: Zone Management Send); then its
// token is given back (SegmentTable::ZoneDone). Counted as a write pending in its segment until
// then (SegmentTable::AddPending): compaction does not take the segment before (and reset a zone
// the finish would then make full).
struct LeftZone {
  Shard* shard = nullptr;
  uint64_t segment = 0;
  uint64_t last_counter = 0;
  bool finish = false;
};

class MetadataWriter {
 public:
  // Segment map pages in flight at most.
  static constexpr uint32_t kMapWrites = 2;
  // Summary pages in flight at most: a summary is written in one round (most take a few pages;
  // MaxSummaryPages is 15 for 1 MiB segments of 4 KiB pages).
  static constexpr uint32_t kSummaryWrites = 16;
  // Page writes in flight at most, and the page buffers it takes.
  static constexpr uint32_t kPageWrites = kMapWrites + kSummaryWrites;

  // Takes kPageWrites page buffers from `queue`'s pool when the table has a map (without one it
  // writes nothing), and gives them back when destroyed. `volatile_cache`:
  // the device's (its writes go with FUA then). Every argument must outlive it.
  MetadataWriter(LogWriter& writer, const StoreShape& shape, const ShardSet& shards,
                 SegmentTable& segments, StickyError& error, WriteCounters& counters,
                 storage::Device& queue, bool volatile_cache);
  ~MetadataWriter();
  MetadataWriter(const MetadataWriter&) = delete;
  MetadataWriter& operator=(const MetadataWriter&) = delete;

  // Queues a summary whose pages a head assigned; the caller wakes the writer.
  void Queue(SummaryWrite write);
  // Queues a zone a head left; the caller wakes the writer.
  void QueueLeftZone(LeftZone zone);

  // Has the table announce segments (or withdraw them, `stopping`), then writes the changed map
  // pages it has buffers for. Returns whether it submitted any.
  bool SubmitMapWrites(bool stopping);
  // Takes the summaries queued, submits the pages of theirs it has buffers for, and has the map
  // say where the durable ones are. Returns whether it submitted any page.
  bool SubmitSummaries();
  // Gives back the zones left whose pages are durable, finishing those not full. Returns whether
  // it submitted a finish.
  bool SubmitLeftZones();
  // Whether the map on the device says what the table does (or there is no map, or the store
  // failed: then it stays as safe as it is, and recovery reads what it must), every summary
  // queued is written, durable and in the map, and every zone left is given back (or the
  // store failed).
  bool done() const;

 private:
  static void OnMapWritten(storage::IoRequest* request);
  static void OnSummaryPageWritten(storage::IoRequest* request);
  static void OnZoneFinished(storage::IoRequest* request);
  // The zone of `job` is no longer active: its token back, the heads that wait woken.
  void GiveBack(const LeftZone& zone);
  // Wakes whoever waits on a shard for the writer (a segment announced, a zone token back, a map
  // change on the device), taking each shard's lock in turn.
  void WakeHeads();

  LogWriter& writer_;
  const StoreShape& shape_;
  const ShardSet& shards_;
  SegmentTable& segments_;
  StickyError& error_;
  WriteCounters& counters_;
  storage::Device& queue_;
  const bool volatile_cache_;

  // A segment map page write and its buffer.
  struct MapWrite {
    MetadataWriter* owner = nullptr;
    storage::Buffer buffer;
    storage::IoRequest request;
    SegmentMap::PageWrite page;
    bool in_flight = false;
  };
  std::vector<MapWrite> map_writes_;
  // Summaries: queued by heads, then the writer thread's own until durable and in the map.
  struct SummaryJob {
    SummaryWrite write;
    uint32_t submitted = 0;  // pages
    uint32_t completed = 0;
    bool failed = false;
  };
  struct SummaryPageWrite {
    MetadataWriter* owner = nullptr;
    SummaryJob* job = nullptr;
    uint32_t index = 0;  // within the summary
    storage::Buffer buffer;
    storage::IoRequest request;
    bool in_flight = false;
  };
  absl::Mutex queued_mu_;  // a leaf
  std::vector<SummaryWrite> queued_summaries_ ABSL_GUARDED_BY(queued_mu_);
  // How many are queued: read without the lock, so that a pass takes it only when there are.
  std::atomic<uint32_t> queued_summary_count_{0};
  std::vector<std::unique_ptr<SummaryJob>> summary_jobs_;
  std::vector<SummaryPageWrite> summary_writes_;
  // Zones left: queued by heads, then the writer thread's own until given back.
  struct LeftZoneJob {
    MetadataWriter* owner = nullptr;
    LeftZone zone;
    storage::IoRequest request;  // its finish
    bool submitted = false;
    bool done = false;
  };
  // Whether `job` needs nothing more: its zone given back, or never to be (the store failed).
  // done() counts such a job gone before a pass erases it.
  bool Over(const LeftZoneJob& job) const;
  std::vector<LeftZone> queued_left_zones_ ABSL_GUARDED_BY(queued_mu_);
  std::atomic<uint32_t> queued_left_zone_count_{0};
  std::vector<std::unique_ptr<LeftZoneJob>> left_zone_jobs_;
};

// The map's other writer, while the log writer is not running: writes the map pages that
// changed through `device` (the table's one write protocol: TakeMapWrite, MapPageWritten), at
// Open before the writer starts (recovery's corrections, the first announced segments, a
// checkpoint's segments free again) and at Close after it stopped (a checkpoint's marks). With
// a `volatile_cache`, flushes before (what recovery read, or a checkpoint's pages, may sit in
// it: no map page may name what a power cut could take back) and after (on zones each page is
// appended with FUA instead, and the map moved when its zone is full). Returns the first
// failure, as the map's write protocol words it.
absl::Status WriteMapAlone(SegmentTable& segments, const StoreShape& shape,
                           storage::Device& device, bool volatile_cache);

// On a zoned store, when the current metadata zone is full and no map write is in flight
// (SegmentMap::MoveTarget), moves the map: starts the other zone (StartMetadataZone) through
// `device` and `page` (a page buffer), after which every map page is written again there. Does
// nothing otherwise. The one way both writers of the map move it.
absl::Status MoveMapWhenFull(SegmentMap& map, const Geometry& geometry, storage::Device& device,
                             const storage::Buffer& page);

}  // namespace nvkv::kv

#endif  // NVKV_KV_METADATA_WRITER_H_
