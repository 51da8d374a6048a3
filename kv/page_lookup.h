// PageLookup: a read's way through the index and the pages, what Get, MultiGet, GetAsync and the
// write path's identity check (kKeyCheck) run on the calling thread's ReadQueue (read_queue.h):
// candidates from the index, pages still in memory, page reads, a large value's continuation
// pages, and a fresh look when the index changed under the reads.
//
// State: none of its own but a counter; a read's state is its ReadOp's, a shard's is the
// shard's (taken under Shard::mu). Thread contract: any thread, each on its own ReadQueue.
#ifndef NVKV_KV_PAGE_LOOKUP_H_
#define NVKV_KV_PAGE_LOOKUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/location.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"

namespace nvkv::kv {

struct ReadOp;

class PageLookup {
 public:
  // Every argument must outlive the lookup. `dropped_batch_records`: the sequences of the
  // batches recovery dropped, whose records on the device page reads leave out. `segments`
  // tells which log each segment holds now (SegmentTable::generation).
  PageLookup(const StoreShape& shape, const ShardSet& shards,
             const SequenceRanges& dropped_batch_records, SegmentTable& segments);

  // Starts `op` (kStarting or kRunning, key and hash set, `op->lookup` this): answers it from
  // memory, or issues its first page read; the queue's reaping drives it on from there.
  void Start(ReadOp* op) const;

  // Pages read, by every lookup (Stats::page_reads), and by writes' key checks alone
  // (ReadPurpose::kKeyCheck, Stats::key_check_page_reads).
  uint64_t page_reads() const { return page_reads_.load(std::memory_order_relaxed); }
  uint64_t key_check_page_reads() const {
    return key_check_page_reads_.load(std::memory_order_relaxed);
  }

 private:
  // Walks the candidates on from `next_candidate`: pages in memory answer at once, the next one
  // on the device is read, and none left is the final miss.
  void Advance(ReadOp* op) const;
  bool AdvanceLocked(Shard& shard, ReadOp* op) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void IssueRead(ReadOp* op) const;
  void NoteKeyCheckHit(ReadOp* op, const Location& location, uint32_t record_bytes) const;
  // The index changed under a read: look again, a bounded number of times.
  void Restart(ReadOp* op, const absl::Status& why) const;
  bool IndexStillHas(const ReadOp* op, uint64_t page_number) const;
  bool IndexUnchanged(const ReadOp* op) const;
  bool IndexUnchangedLocked(Shard& shard, const ReadOp* op) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // A read found `value` on `page_number`, a page of the log of `generation`: it becomes the
  // key's cached value while the index still gives the key what the read started from (else a
  // newer write may be cached already) and the page's segment still holds that log (else it was
  // freed and written again since the read, maybe with the key at that very page).
  void FillCache(const ReadOp* op, uint64_t page_number, uint64_t generation,
                 std::string_view value) const;
  void FinishMiss(ReadOp* op) const;
  // Completions of a candidate's page read and of a large value's continuation pages.
  static void OnPageRead(storage::IoRequest* request);
  static void OnContinuationRead(storage::IoRequest* request);
  void PageRead(ReadOp* op) const;
  void ContinuationRead(ReadOp* op) const;
  // Reads the next batch of a large value's continuation pages.
  void IssueContinuation(ReadOp* op) const;


  const StoreShape shape_;
  const ShardSet& shards_;
  const SequenceRanges& dropped_;
  SegmentTable& segments_;
  mutable std::atomic<uint64_t> page_reads_{0};
  mutable std::atomic<uint64_t> key_check_page_reads_{0};
};

// Ends `op` with `result` (the value, or why there is none) and runs or queues its callback.
void FinishOp(ReadOp* op, absl::StatusOr<std::string> result);

}  // namespace nvkv::kv

#endif  // NVKV_KV_PAGE_LOOKUP_H_
