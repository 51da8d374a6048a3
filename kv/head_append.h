// HeadAppender: appends records to the shards' log heads. It owns the rules of a head (the open
// page, new pages and segments, a batch's reservation of pages, large records written by the
// calling thread) and of what an appended record does to its shard's index and to the segments'
// live bytes. The write path (write_path.cc) appends users' records through it, and compaction
// moves records through it (it is the compactor's RecordMover).
//
// State: none of its own beyond what it is given at construction; each shard's head, index and
// unwritten pages stay the shard's, under Shard::mu, and the functions below that take a shard
// require its lock unless they say otherwise.
//
// Thread contract: any thread; the caller holds the locks each function names.
#ifndef NVKV_KV_HEAD_APPEND_H_
#define NVKV_KV_HEAD_APPEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/compactor.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/log_writer.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

// Where a key's current record is, as a write needs it (ReadPath::ResolveCurrent finds it).
struct CurrentRecord {
  bool found = false;
  Location location;  // what its index entry holds (StoreShape::IndexedAt)
  uint32_t record_bytes = 0;
  bool exact_candidates = false;
  std::vector<uint64_t> candidates;  // the index values Find returned when this was resolved
  // Hash mode: the key was not found on any readable candidate, but a candidate page is damaged
  // and may hold it: `location` is that entry, to be replaced or erased by the write so that a
  // damaged key can be repaired; record_bytes is unknown (0).
  bool damaged = false;
  // Hash mode, a key check (a delete, or a write near damage, reads every candidate): the key's
  // entries other than its current one, and their records' bytes (0 when unknown); the write
  // erases them. Stale ones (key_entries.h), and damaged candidates besides the one in
  // `location`: like that one, they are taken as the key's.
  std::vector<std::pair<Location, uint32_t>> stale;
  // Hash mode: an overwrite resolved without reading the key's page (a blind write: found is
  // false, and the new entry goes before the key's others). `likely_replaced` is the page of the
  // first candidate, probably the key's current record (SegmentTable::AddLikelyStale).
  bool blind = false;
  uint64_t likely_replaced = 0;

  // True when writing the key adds an index entry rather than changing one (ApplyToIndex): the
  // key has no record, or only a damaged candidate that may not be its own.
  bool AddsIndexEntry(bool is_delete) const { return !is_delete && (!found || damaged); }

  // Back to "not resolved", keeping the vectors' capacity (a thread's writes reuse one).
  void Reset() {
    found = false;
    location = Location{};
    record_bytes = 0;
    exact_candidates = false;
    candidates.clear();
    damaged = false;
    stale.clear();
    blind = false;
    likely_replaced = 0;
  }
};

// A record a batch is about to append, for planning its pages (ReserveForBatch).
struct PlannedRecord {
  std::string_view key;
  KeyHash hash;
  uint32_t bytes;
};

class HeadAppender final : public RecordMover {
 public:
  struct Options {
    bool summaries = false;  // segments get summaries (their place must reach the segment map)
  };
  // Every argument must outlive the appender. `next_sequence` is the engine's sequence counter.
  HeadAppender(const Options& options, const StoreShape& shape,
               const ShardSet& shards, SegmentTable& segments,
               LogWriter& writer, std::atomic<uint64_t>& next_sequence);

  // Takes `count` consecutive sequence numbers for records about to be appended; returns the
  // first.
  uint64_t TakeSequences(uint64_t count) const { return next_sequence_.fetch_add(count); }

  // Finishes the open page, if any, and queues it for the writer.
  void SealOpenPage(Shard& shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Opens a fresh page at the head (a free slot must be there). When the head needs a new
  // segment and none can be taken until the writer did something (a segment announced in the
  // segment map, or on zones a zone token given back: SegmentTable::Allocate), opens nothing and
  // sets *awaiting_writer (the caller waits for the writer, WaitForWriter, and tries again).
  absl::Status OpenNewPage(Shard& shard, SegmentUse use, bool* awaiting_writer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Whether a record of `bytes` for `key` can go into the open page as it is.
  bool FitsOpenPage(const LogHead& head, uint32_t bytes, std::string_view key,
                    const KeyHash& hash) const;

  // Makes the open page one that takes a record of `bytes` for `key`. May wait for a free page
  // buffer, releasing shard.mu meanwhile, so only callers holding no other lock may use it, and
  // they must re-check what they read before.
  absl::Status EnsureOpenRoom(Shard& shard, uint32_t bytes, std::string_view key,
                              const KeyHash& hash, SegmentUse use) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Reserves segment room and page buffers for a batch at the head, so that appending it later,
  // with other shards' locks held, never waits. May wait like EnsureOpenRoom.
  absl::Status ReserveForBatch(Shard& shard, const std::vector<PlannedRecord>& records,
                               SegmentUse use) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Appends one small record to the open page (room already ensured). Returns its page number.
  uint64_t AppendToOpenPage(Shard& shard, const RecordHeader& header, std::string_view key,
                            std::string_view value, const KeyHash& hash) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Who appended a record: a user's write (its value becomes the cached one) or compaction's
  // copy of a record (a cached value stays as it is; only its place changes).
  enum class Change : uint8_t { kUserWrite, kRelocation };

  // Applies a record's effect on `shard`'s index, its record cache and live bytes: the one place
  // the index changes after recovery. `current` is where the key's record was; `new_page` where
  // the new one is and `value` its value (both ignored for deletes). The index has room for an
  // added entry (Index::MakeRoomFor, CurrentRecord::AddsIndexEntry).
  void ApplyToIndex(Shard& shard, std::string_view key, const KeyHash& hash,
                    const CurrentRecord& current, bool is_delete, uint64_t new_page,
                    uint32_t record_bytes, std::string_view value, Change change) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // Appends one large record (a Put whose record exceeds a page) for the key in `shard`,
  // written with `queue`; takes and releases shard.mu itself. A user write (not kCompaction)
  // takes its sequence number here. *lost_race: the index no longer says what `current` saw,
  // and nothing was written. On success *last_counter is the last head counter it used.
  absl::Status AppendLarge(Shard& shard, storage::Device& queue, const RecordHeader& header,
                           std::string_view key, std::string_view value, const KeyHash& hash,
                           const CurrentRecord& current, SegmentUse use, bool fua,
                           bool* lost_race, uint64_t* last_counter) const;

  // The pages every head has assigned since it was made or resumed: the sum of their head
  // counters, which grows with every page a head assigns (data, a large record's, a summary's).
  // Unchanged since Open, with no segment taken or freed (SegmentTable::segment_changes:
  // compaction takes its victims so), means nothing was written to the log since.
  uint64_t HeadCountersSum() const;

  // The store is closing and writes a checkpoint, which keeps the heads where they are (the next
  // Open resumes them): seals every shard's open page and wakes the writer; the heads keep
  // their segments, without summaries.
  void SealOpenPages();

  // RecordMover, for the compactor.
  absl::StatusOr<bool> Relocate(const ScannedRecord& record, const KeyHash& hash,
                                storage::Device& queue) override;
  void SealHeads() override;

 private:
  // Makes sure the head's segment has `pages` unassigned pages, and room for its summary once
  // `summary_bytes` more of it are added, moving to a new segment if not (a batch's pages
  // reserved before never move: LogHead::reserved_pages); *awaiting_writer when it must move and
  // no segment can be taken yet (SegmentTable::Allocate).
  absl::Status EnsureSegmentRoom(Shard& shard, uint32_t pages, uint64_t summary_bytes,
                                 SegmentUse use, bool* awaiting_writer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Whether the head has a segment with `pages` more pages free, beyond the room kept for its
  // summary (segment_summary.h) once `summary_bytes` more of it are added with them.
  bool RoomFor(const LogHead& head, uint32_t pages, uint64_t summary_bytes) const;
  // The head is done with its segment (full, or the store is closing): queues the segment's
  // summary for the writer, when it fits, and seals the segment. The open page is sealed.
  void LeaveSegment(Shard& shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Fresh pages `records` need at the head, appended in order after what the open page holds.
  uint32_t PlanFreshPages(const LogHead& head, const std::vector<PlannedRecord>& records) const;
  // Waits, releasing shard.mu, for the writer to give back a page buffer or announce a segment
  // (or fail).
  absl::Status WaitForWriter(Shard& shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const Options options_;
  const StoreShape shape_;
  const ShardSet& shards_;
  SegmentTable& segments_;
  LogWriter& writer_;
  std::atomic<uint64_t>& next_sequence_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_HEAD_APPEND_H_
