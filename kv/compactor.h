// The compactor (segment cleaning): a thread that picks a victim segment, waits until its own
// pages are durable, copies its live records to the log heads, waits until the copies are
// durable, then writes a free marker on the victim's first and last pages and returns it to the
// free list. A victim whose damaged pages hold records the index still points at is retained
// instead (never freed while any index entry points into it) and reported in Stats.
//
// A put is live when the index still points at its page (Shard::IndexPointsAt). A delete
// (tombstone) is kept while an older put of its key may still be on the device outside the
// victim: while some other segment in use holds records older than the tombstone and its key
// filter may hold the key (SegmentContents::MayHoldOlder). Live bytes move from the victim to the
// heads as records are copied; write amplification counts the copies.
//
// Thread contract: Start and Stop from the engine's owner thread; Wake, CompactAll and Pause
// from any thread. Only the compactor's thread uses its queue (a SINGLE_ISSUER ring), so
// CompactAll hands its request to that thread and waits for the answer.
#ifndef NVKV_KV_COMPACTOR_H_
#define NVKV_KV_COMPACTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kv/engine.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/log_writer.h"
#include "kv/page_format.h"
#include "kv/segment_scan.h"
#include "kv/sequence_ranges.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "kv/sticky_error.h"
#include "storage/device.h"
#include "storage/zones.h"

namespace nvkv::kv {

class SegmentBuffer;

// What the compactor needs from the write path: HeadAppender (head_append.h) is it.
class RecordMover {
 public:
  // Appends a copy of `record` (a put the index may still point at, or a tombstone) to its
  // key's shard's head, with the same sequence, as a lone record; a large value is written with
  // `queue`. Returns false when the put died meanwhile (overwritten or deleted): then nothing
  // is written.
  virtual absl::StatusOr<bool> Relocate(const ScannedRecord& record, const KeyHash& hash,
                                        storage::Device& queue) = 0;
  // Closes every head's open page and segment, so that CompactAll can clean every segment
  // written so far.
  virtual void SealHeads() = 0;

 protected:
  ~RecordMover() = default;
};

class Compactor {
 public:
  // Records settled per read-ahead (PrefetchForSettling): as many page reads in flight at most,
  // and as many page buffers of the compactor's queue held.
  static constexpr size_t kSettleWindow = 32;

  struct Options {
    bool background = true;  // clean when free segments run low, not only on CompactAll
    CompactionPolicy compaction_policy = CompactionPolicy::kCostBenefit;
    // The records of the batches recovery dropped (RecoveryReport::dropped_batch_records), which
    // are never copied: a victim may hold one whole that recovery found cut (its other pages
    // unread then). Borrowed: outlives the compactor. Null: none.
    const SequenceRanges* dropped_batch_records = nullptr;
    // EngineSeams::victim_picked.
    const std::function<void(uint64_t segment)>* victim_picked = nullptr;
  };
  // Every argument must outlive the compactor. `next_sequence` is the engine's sequence counter
  // (victim age for cost-benefit); `queue` is the compactor's own.
  Compactor(const Options& options, const StoreShape& shape,
            const ShardSet& shards, SegmentTable& segments,
            LogWriter& writer, StickyError& error, WriteCounters& counters, RecordMover& mover,
            const std::atomic<uint64_t>& next_sequence, std::unique_ptr<storage::Device> queue);
  ~Compactor();  // Stop()
  Compactor(const Compactor&) = delete;
  Compactor& operator=(const Compactor&) = delete;

  // kResourceExhausted when the system will not start the thread.
  absl::Status Start();
  // Finishes the segment being cleaned and exits; CompactAll refuses from then on. Idempotent.
  void Stop();
  // Free segments may be running low: look now rather than at the next tick.
  void Wake();

  // Cleans, now, every segment whose cleaning reclaims space (Engine::CompactAll), on the
  // compactor's thread; returns its outcome. kFailedPrecondition once stopping.
  absl::Status CompactAll();

  // While alive, no segment is being cleaned: Check and ForEachLive read logs that cleaning
  // would rearrange. Taken before any shard lock.
  class Pause {
   public:
    explicit Pause(Compactor& compactor) : lock_(&compactor.cleaning_mu_) {}

   private:
    absl::MutexLock lock_;
  };

  uint64_t segments_cleaned() const { return segments_cleaned_.load(); }
  uint64_t zone_resets() const { return zone_resets_.load(); }
  uint64_t copied_bytes() const { return copied_bytes_.load(); }          // record bytes copied
  uint64_t damaged_pages() const { return damaged_pages_.load(); }        // met in victims
  uint64_t unreadable_pages() const { return unreadable_pages_.load(); }  // of those, unreadable
  // Hash mode: stale entries (key_entries.h) erased from victims, and the pages outside the
  // victim read to prove them stale.
  uint64_t stale_entries_settled() const { return stale_entries_settled_.load(); }
  uint64_t settle_page_reads() const { return settle_page_reads_.load(); }

 private:
  void Loop();
  // REQUIRES: on the compactor's thread, holding cleaning_mu_.
  absl::Status CompactAllNow();
  // Cleans one victim (kCompacting): copies its live records to the heads, then frees it, or
  // retains it when records it could not read (damaged pages) are still indexed.
  absl::Status CleanSegment(uint64_t segment);
  // Copies the records of `segment` (read into `victim`) that are still live (puts the index
  // points at as their key's current entry, tombstones that may still hide an older record
  // elsewhere) to the heads.
  absl::Status CopyLiveRecords(uint64_t segment, const SegmentBuffer& victim,
                               const std::vector<ScannedRecord>& records);
  // Hash mode: erases `record`'s key's stale entries that point into `segment` (key_entries.h),
  // reading pages outside the victim from the device where they must prove it. Returns whether
  // `record` itself is still indexed and not proved stale: then it is to be copied.
  bool SettleEntries(uint64_t segment, const SegmentBuffer& victim, const ScannedRecord& record,
                     const KeyHash& hash);
  // A verified data page for settling: from the victim when it is one of its pages, or read
  // ahead by PrefetchForSettling, else read into `read_page_`. Null when it cannot be read.
  const uint8_t* PageForSettling(uint64_t segment, const SegmentBuffer& victim, uint64_t page);
  // Reads, all at once, the first page settling each put of `records` will need from outside
  // the victim (one page read at a time would bound compaction by the device's latency).
  absl::Status PrefetchForSettling(uint64_t segment, const SegmentBuffer& victim,
                                   std::span<const ScannedRecord> records);
  // Whether `bytes`, read from `page`, verify as a data page of this store.
  bool IsDataPage(const uint8_t* bytes, uint64_t page) const;

  // Makes `segment` empty, durably, before anyone reuses it: its zone reset on a zoned store
  // (and its place runs cleared), else free markers. On zones, a zone the device took out of
  // service is not reset (it cannot be): *out_of_service says how (read-only or offline), and
  // the zone is never to be used again.
  absl::Status EmptySegment(uint64_t segment, storage::ZoneState* out_of_service);
  absl::Status WriteFreeMarkers(uint64_t segment);
  // How many index entries point into each of `segments`, in one walk of the index (O(index):
  // for segments compaction could not empty only).
  absl::flat_hash_map<uint64_t, uint64_t> IndexEntriesIn(const std::vector<uint64_t>& segments);
  // Whether an index entry points into `segment` once its records were copied (`collected`:
  // what CollectNewestRecords found of it, read with `unreadable_pages` pages it could not read).
  // By the keys of its records when it read them all, else by a walk of the whole index.
  bool IndexPointsInto(uint64_t segment, const SegmentRecords& collected,
                       uint32_t unreadable_pages);
  // Returns retained segments that no index entry points into any more to compaction.
  void RecheckRetained();

  const Options options_;
  const StoreShape shape_;
  const ShardSet& shards_;
  SegmentTable& segments_;
  LogWriter& writer_;
  StickyError& error_;
  WriteCounters& counters_;
  RecordMover& mover_;
  const std::atomic<uint64_t>& next_sequence_;
  std::unique_ptr<storage::Device> queue_;

  std::thread thread_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;  // the thread's requests; never held with a shard lock
  absl::CondVar wake_cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t compact_all_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t compact_all_done_ ABSL_GUARDED_BY(mu_) = 0;    // requests answered
  absl::Status compact_all_status_ ABSL_GUARDED_BY(mu_);  // the last run's outcome
  absl::CondVar compact_all_cv_;                          // compact_all_done_ moved
  // Held by the thread while it cleans segments, and by Pause.
  absl::Mutex cleaning_mu_;

  std::atomic<uint64_t> segments_cleaned_{0}, copied_bytes_{0}, zone_resets_{0};
  std::atomic<uint64_t> damaged_pages_{0}, unreadable_pages_{0};
  std::atomic<uint64_t> stale_entries_settled_{0}, settle_page_reads_{0};
  storage::Buffer read_page_;  // queue_'s, for PageForSettling; taken on first use
  std::vector<storage::Buffer> prefetch_buffers_;  // queue_'s, up to kSettleWindow
  // The current victim's pages as settling found them (PageForSettling), empty between victims.
  enum class PageCheck : uint8_t { kUnchecked, kData, kUnusable };
  std::vector<PageCheck> victim_pages_;
  // Pages PrefetchForSettling read for the current window: verified data, or null.
  absl::flat_hash_map<uint64_t, const uint8_t*> prefetched_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_COMPACTOR_H_
