// Recovery: rebuilds the shards' indexes and the segment table from the log at Open.
//
// After a clean Close the segment map names a checkpoint (checkpoint.h) of what this would
// rebuild: recovery reads it and nothing else. After a crash it names the checkpoint the last
// Open read, the base of the log written since (kv/FORMAT.md "Recovery from a base"): recovery
// reads it, forgets what it says of segments compaction freed since (their last pages tell),
// and applies over it the log the heads went on with in their segments and the segments it does
// not know (read as below); in hash mode a delete among those reads the pages of its tag's
// entries, to erase its key's. A checkpoint that cannot be used is set aside (the indexes and
// the table are made anew) and the log is read, as follows.
//
// The segment map says which segments hold nothing (not read) and which have a summary
// (segment_summary.h: recovery reads the summary and the segment's last page, many at once, and
// the segment whole only when the summary cannot be used). Every other segment is read whole
// with large reads kept in flight together (device bandwidth, not latency, bounds it), then
// scanned by ScanSegment (segment_scan.h): damaged pages inside a
// segment's log are holes whose records are lost, and recovery goes on with the rest of the
// segment; a segment counts as free only when it holds no log at all. A page the device fails to
// read is not damaged (the read may work later): recovery fails, naming it (kUnavailable),
// unless RecoveryOptions::open_degraded (then it is a hole, noted in the report). For each key
// the record with the highest sequence wins; a winning delete means the key is absent.
//
// Memory: while it reads, recovery keeps the newest record of every key, by hash (87 bits,
// kv/newest_records.h: 24 bytes per entry, 27-34 per key, no key bytes), one table per shard.
// Hash mode then builds each shard's index from its table and frees the table before the next
// shard's; ordered mode builds its index during the reads (it holds the keys), so its tables
// keep only each key's newest sequence. The largest table is RecoveryReport::table_bytes_peak.
//
// Passes: the tables grow with the keys of the log, not with the index, and a process whose
// memory is limited (a cgroup kills it as it touches pages past the limit) may hold the index but
// not the tables beside it. Within a budget for the tables (RecoveryOptions), recovery reads the
// log in as many passes as keep them within it: each pass takes the keys of its share of the
// hash space (hash bits no table or shard choice uses), reads the same summaries and segments
// again, and builds their index entries before the next pass. The first pass also gives the
// segment table every record. The number of passes is estimated from the summaries' sizes once
// the segment map is read, before any summary is (a try in fewer passes stops there and starts
// again). Segments read whole name their records only as they are read: where there are many
// (128 or more), the first pass projects their keys from the first thirty-second of them, and
// when the passes planned would not keep the tables within the budget, recovery starts again at
// once in as many passes as would, its tables sized for the projected keys (one pass sizes them
// so too, instead of growing them step by step). When the tables outgrow the budget all the
// same, recovery starts again with more passes, from what the tables took for the part read.
// Every pass after the first must find what the first found (the same
// summaries verifying, the same holes and logs in each segment read whole): a read that fails
// only in a later pass is tried again (kRereadsInLaterPasses times: a transient error), and
// kUnavailable when it still differs, a device that reads differently from one read to the
// next. At most kMaxRecoveryPasses: past that the budget is exceeded rather than Open refused.
//
// The parts (kv/README.md "A recovery"): the driver (recovery.cc), MapView (recovery_map.h),
// RecoveryBase (recovery_base.h), RecoveryBudget (recovery_budget.h), LogReplay (log_replay.h)
// and RecordSink (recovery_sink.h).
#ifndef NVKV_KV_RECOVERY_H_
#define NVKV_KV_RECOVERY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/checkpoint.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "nvkv/stats.h"
#include "storage/device.h"

namespace nvkv::kv {

using ::nvkv::RecoveryStart;

inline constexpr uint32_t kMaxRecoveryPasses = 64;
// By default recovery over a base checkpoint keeps its tables within 1/kTableShareOfIndex of the
// index the base gave it, or kMinTableBudget when that is more: Open's peak memory stays within
// the index plus a tenth of it ("Passes" above). Without a base (none written yet, set aside,
// released for room, or checkpoint_log_ratio 0) the tables hold every key of the log, and each
// pass more reads the whole log again: they may take what the process's memory limits leave
// (table_budget_ceiling_bytes) once the index and the key filters being built are set aside, as
// projected from the summaries and the first segments read whole, so that such an Open is one
// pass wherever memory allows, and peaks above the index by its tables (about 24-48 bytes a key)
// for as long as it runs. Where not even kMaxRecoveryPasses passes fit, recovery fails with
// kResourceExhausted saying so, rather than grow until a memory cgroup kills the process.
inline constexpr uint64_t kTableShareOfIndex = 16;
inline constexpr uint64_t kMinTableBudget = uint64_t{256} << 10;

struct RecoveryOptions {
  // Read every segment, whatever the segment map says (EngineSeams::recovery_reads_all); a
  // checkpoint is then not used either.
  bool read_all = false;
  // The most bytes the tables of newest records may take together, when not 0: a log whose
  // tables would take more is read in several passes ("Memory" above). 0: the default (above:
  // a share of a base's index, or without a base what table_budget_ceiling_bytes leaves), and
  // when that is not 0 (the memory the process may still take), the tables, the index and the
  // key filters together within table_budget_ceiling_bytes.
  uint64_t table_budget_bytes = 0;
  uint64_t table_budget_ceiling_bytes = 0;
  // Pages of a log the device cannot read do not fail recovery (Options::open_degraded):
  // it goes on without their records, notes them (RecoveryReport::unread_pages) and starts the
  // next sequence UnreadSequenceGap above what it read.
  bool open_degraded = false;
};

// How far above every sequence it read (and the map's floors) a recovery that could not read
// some pages of the log starts the next one, so that no record it hands out loses to a record on
// those pages once they read again. Every sequence above the highest one found was taken by a
// record that is on a page not read, or that never reached the device (on a page in memory or in
// flight at the crash): the record with the highest sequence that did reach the device stays on
// a page of the store until a newer record replaces it (compaction copies a record with its
// sequence). Either way the record sits on a page of the store, each page holding at most
// payload_bytes / RecordBytes(0, 0) records: twice the store's pages times that bounds them
// (for 64 GiB of 4 KiB pages, about 2^33 of the 2^56 sequences).
uint64_t UnreadSequenceGap(const Geometry& geometry);

// What recovery found, for the engine and its Stats.
struct RecoveryReport {
  uint64_t next_sequence = 1;  // above every record sequence on the device, in a log or not
  uint64_t pages = 0, records = 0;
  uint64_t batches_discarded = 0;  // cut short by a crash or by damage: dropped whole
  uint64_t damaged_pages = 0;      // holes inside logs
  uint64_t unreadable_pages = 0;   // pages the device failed to read (each also a hole)
  uint64_t table_bytes_peak = 0;   // the largest per-shard newest-record table it held
  uint32_t passes = 1;             // over the log, to keep the tables within their budget
  // Starts again from nothing (more passes, or a base set aside); `pages` and `seconds` count
  // every start.
  uint32_t restarts = 0;
  uint64_t segments_skipped = 0;   // free by the segment map: not read
  uint64_t map_pages_damaged = 0;  // map pages that failed to read or verify (their segments read)
  uint64_t segments_summarized = 0;  // read by their summaries (segment_summary.h)
  uint64_t summaries_unused = 0;     // summaries the map named that did not verify: segments read
  // Where it started: kLog, or the checkpoint it read (kCleanClose: nothing else; kBaseCheckpoint:
  // and the log written after it). kNewStore only when no recovery ran.
  RecoveryStart start = RecoveryStart::kNewStore;
  uint64_t base_segments_freed = 0;  // of its segments holding a log, those freed since
  uint64_t checkpoint_pages = 0;  // of the checkpoint it read (current or base)
  uint64_t segments_after_base = 0;  // read (or their summaries) for the log after a base
  std::vector<CheckpointPlace> checkpoint;  // where that checkpoint is, in its order
  uint64_t heads_resumed = 0;  // log heads that went on in their segments (from the checkpoint)
  // Why a checkpoint the map named was not used (the log was read instead); empty when none was
  // named, or it was used.
  std::string checkpoint_unused;
  double seconds = 0;
  // With open_degraded, the pages of logs the device could not read (in page order): their
  // records are missing; compaction leaves their segments as they are (SegmentTable::HoldUnread)
  // and no checkpoint is written, so that a later Open that reads them takes them back.
  std::vector<uint64_t> unread_pages;
  // The records of the batches it dropped, still on the device until compaction frees their
  // segments (which never copies them: segment_scan.h): page reads leave them out.
  SequenceRanges dropped_batch_records;
};

// Reads the segment map, and the checkpoint it names (checkpoint.h) if there is one: when that
// can be used, nothing else is read. Otherwise reads the summaries the map names, then every
// other segment of `device` it does not say is free (the opening
// thread's queue, with chunk buffers for whole segments), and fills the (empty) indexes of
// `shards` and `segments`, which it leaves ready for use (SegmentTable::FinishRecovery; the map
// kept by `segments` then says what recovery found). A map page that cannot be read or verified
// says nothing: its segments are read. Skipping the free ones changes nothing recovery finds
// (kv/FORMAT.md "Recovery"): they hold no log, and the map's floors stand for their pages'
// sequences and generations. kDataLoss when no page of a segment can be read, or for a
// record no nvkv store writes; device errors.
absl::StatusOr<RecoveryReport> RecoverStore(const RecoveryOptions& options,
                                            const StoreShape& shape, storage::Device& device,
                                            SegmentTable& segments,
                                            const ShardSet& shards);

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECOVERY_H_
