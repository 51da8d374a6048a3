// Engine::Impl: the engine's state and the pieces that share it. Split over several files by
// concern: engine.cc (open, format, close, stats), write_path.cc (appends, group commit waits),
// log_writer.cc (the writer thread), read_path.cc (per-thread read queues, gets, scans),
// recovery.cc and compaction.cc.
//
// Locks, in the order they may be taken (never the reverse):
//   Shard::mu (several only in ascending shard id, by batches)
//   -> SegmentTable's mutex -> writer_mu_ / error_mu_.
// ReadQueueSet's mutex (read_queue.h) is a leaf too, taken with no other engine lock held.
// No lock is held across device I/O, except that a shard's pages are sealed under its lock.
#ifndef NVKV_KV_ENGINE_IMPL_H_
#define NVKV_KV_ENGINE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kv/durable_prefix.h"
#include "kv/engine.h"
#include "kv/index.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "storage/base/check.h"
#include "storage/device.h"

namespace nvkv::kv {

class Shard;
class ReadQueue;
enum class ReadPurpose : uint8_t;  // read_queue.h
class ReadQueueSet;

// One page buffer of a shard's log head: filled under the shard lock, then written by the
// writer thread. Lives for the whole engine; cycles between the shard's free list, the open
// page, the sealed list and the writer.
class Engine;
struct PageSlot {
  storage::Buffer buffer;  // from the writer queue's registered pool
  PageBuilder builder;
  uint64_t page_number = 0;
  uint64_t head_counter = 0;  // position in the head's page order
  uint64_t segment = 0;
  Shard* shard = nullptr;
  Engine::Impl* engine = nullptr;
  storage::IoRequest request;  // the write; `context` points back here
  // Hash mode: (index tag, record offset) of every record in the page, to keep two different
  // keys with the same tag off one page.
  std::vector<std::pair<uint32_t, uint32_t>> tags;
  // Other shards with records on this page (a batch's records all go to its first shard's
  // head): their `unwritten` maps list the page too, until it is written. Set under the locks of
  // the batch; the page is sealed before they are released, so the other shards' readers see
  // bytes that no longer change.
  std::vector<Shard*> foreign;
};

// An assigned run of pages of a head, in head order, until it is durable.
struct LogHead {
  bool has_segment = false;
  uint64_t segment = 0;
  uint64_t generation = 0;
  uint32_t next_page = 0;     // next page index within the segment
  uint64_t next_counter = 1;  // head counter of the next page assigned
  PageSlot* open = nullptr;   // the page being filled, or none
  uint64_t open_since_us = 0;
  DurablePrefix durable;  // the pages assigned, and how far they are durable
  std::vector<PageSlot*> sealed;  // finished pages waiting for the writer
  std::vector<PageSlot*> free_slots;
};

// An entry of Shard::unwritten: a page whose bytes are in a slot, or a page of a large record
// that the writing thread is writing from its own buffer (readers of it wait until it is done).
class UnwrittenPage {
 public:
  static UnwrittenPage InSlot(PageSlot* slot) {
    NVKV_CHECK(slot != nullptr);
    return UnwrittenPage(slot);
  }
  static UnwrittenPage LargeRunInFlight() { return UnwrittenPage(nullptr); }
  bool large_run_in_flight() const { return slot_ == nullptr; }
  PageSlot* slot() const {
    NVKV_CHECK(slot_ != nullptr);
    return slot_;
  }

 private:
  explicit UnwrittenPage(PageSlot* slot) : slot_(slot) {}
  PageSlot* slot_;
};

class Shard {
 public:
  // Whether the index still has `key` at `location` (a page, and in ordered mode a record size:
  // Engine::Impl::EncodeLocation): the one "is the record still live here?" check of compaction
  // and check.
  bool IndexPointsAt(const KeyHash& hash, std::string_view key, uint64_t location) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<uint64_t> candidates;
    index->Find(hash.lo, key, &candidates);
    return std::find(candidates.begin(), candidates.end(), location) != candidates.end();
  }

  uint32_t id = 0;
  absl::Mutex mu;
  std::unique_ptr<Index> index ABSL_GUARDED_BY(mu);
  LogHead head ABSL_GUARDED_BY(mu);
  // Pages the device may not hold yet: in memory (the open page, sealed and in-flight pages,
  // and another shard's sealed pages holding records of this shard's keys, PageSlot::foreign),
  // or a large record's pages being written by another thread.
  absl::flat_hash_map<uint64_t, UnwrittenPage> unwritten ABSL_GUARDED_BY(mu);
  // durable_through() moved, a slot was freed, or a large write finished.
  absl::CondVar changed;
  std::vector<std::unique_ptr<PageSlot>> slots;  // ownership
  std::atomic<bool> wants_writer{false};
  // The head counter of the last page in this shard's log that holds a non-durable user write
  // (0: none since it was last found durable). Raised under mu as such a write is appended,
  // before it is acknowledged; read without the lock by durable writes, which must make it
  // durable too (WaitEarlierNonDurable).
  std::atomic<uint64_t> nondurable_through{0};
};

// Where a key's current record is, as the write path needs it.
struct CurrentRecord {
  bool found = false;
  uint64_t location = 0;  // index value (page, plus record bytes in ordered mode)
  uint32_t record_bytes = 0;
  bool exact_candidates = false;
  std::vector<uint64_t> candidates;  // what Find returned when this was resolved
  // Hash mode: the key was not found on any readable candidate, but a candidate page is damaged
  // and may hold it: `location` is that entry, to be replaced or erased by the write so that a
  // damaged key can be repaired; record_bytes is unknown (0).
  bool damaged = false;
};

class Engine::Impl {
 public:
  Impl(const EngineOptions& options, std::unique_ptr<storage::Device> device);
  ~Impl();

  // --- engine.cc ---
  absl::Status OpenStore(const std::string& path);
  // The steps of OpenStore. What the start of the device holds: each superblock copy decoded
  // (kNotFound when absent), a newer format's refusal, and whether it was never written.
  struct SuperblockProbe {
    absl::StatusOr<Superblock> copies[2] = {absl::NotFoundError(""), absl::NotFoundError("")};
    absl::Status newer_format;
    bool empty = false;
  };
  absl::StatusOr<SuperblockProbe> ProbeSuperblocks();
  // Rewrites copy `which` from the good one (left for the next Open without a page buffer).
  absl::Status RepairSuperblock(const Superblock& good, uint32_t which);
  // Formats a device holding no store, if the options and what it holds allow.
  absl::StatusOr<Superblock> FormatStore(const std::string& path, const SuperblockProbe& probe);
  // Takes the store's geometry, when it fits this device.
  absl::Status AdoptGeometry(const std::string& path, const Superblock& superblock);
  // Shards, recovery (unless just formatted), the writer's and compaction's queues and threads.
  absl::Status StartEngine(bool formatted_now);
  absl::Status Close();
  EngineStats Stats();
  absl::Status CheckOpen() const;

  // --- write_path.cc ---
  absl::Status Write(std::span<const WriteOp> ops, bool durable);
  absl::Status Flush();
  // Appends a copy of a record (compaction): same sequence. `location` is the index value the
  // key must still have; returns false if it moved on (the record died meanwhile).
  absl::StatusOr<bool> Relocate(const RecordHeader& header, std::string_view key,
                                std::string_view value, const KeyHash& hash, uint64_t old_page,
                                uint64_t* counter_out, Shard** shard_out);
  absl::Status WaitDurable(Shard& shard, uint64_t counter);
  // Makes durable every non-durable write that any shard acknowledged before now: a durable
  // write calls it once its own pages are durable, since options.h promises that a later
  // durable write makes earlier non-durable ones durable, whatever their shards.
  absl::Status WaitEarlierNonDurable();

  // --- log_writer.cc ---
  void WriterLoop();
  void WakeWriter();
  static void OnPageWritten(storage::IoRequest* request);
  static void OnFlushDone(storage::IoRequest* request);

  // --- read_path.cc ---
  absl::Status GetAsync(std::string_view key, GetCallback callback);
  // Starts a read for GetAsync (kAsync) or for Get and MultiGet (kSync, whose callbacks run
  // wherever the read finishes); read_queue.h ReadPurpose.
  absl::Status StartRead(std::string_view key, GetCallback callback, ReadPurpose purpose);
  absl::Status ReapInternally(ReadQueue& queue);
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete);
  uint32_t pending_reads();
  absl::StatusOr<std::string> Get(std::string_view key);
  void MultiGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string>>* values);
  absl::Status Scan(std::string_view start, std::string_view end, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out);
  absl::StatusOr<ReadQueue*> ThisThreadQueue();
  // Finds `key`'s current record among the index candidates, reading pages as needed with this
  // thread's queue. Used by the write path (hash mode) to confirm identity.
  absl::StatusOr<CurrentRecord> ResolveCurrent(std::string_view key, const KeyHash& hash);

  // --- recovery.cc ---
  absl::Status Recover();

  // --- compaction.cc ---
  void CompactionLoop();
  // Asks the compaction thread to run CompactAllNow and waits for its outcome.
  absl::Status CompactAll();
  // REQUIRES: on the compaction thread, the only issuer of compaction_queue_.
  absl::Status CompactAllNow();
  // Cleans one victim (kCompacting): copies its live records to the heads, then frees it, or
  // retains it when records it could not read (damaged pages) are still indexed.
  absl::Status CleanSegment(uint64_t segment);
  // How many index entries point into each of `segments`, in one walk of the index (O(index):
  // for segments compaction could not empty only).
  absl::flat_hash_map<uint64_t, uint64_t> IndexEntriesIn(const std::vector<uint64_t>& segments);
  // Returns retained segments that no index entry points into any more to compaction.
  void RecheckRetained();

  // --- shared helpers ---
  Shard& ShardFor(const KeyHash& hash) {
    return *shards_[((hash.hi >> 32) * shards_.size()) >> 32];
  }
  uint64_t EncodeLocation(uint64_t page, uint32_t record_bytes) const {
    return ordered_ ? page | (uint64_t{record_bytes} << 40) : page;
  }
  static uint64_t PageOf(uint64_t location) { return location & ((uint64_t{1} << 40) - 1); }
  uint32_t BytesOf(uint64_t location) const {
    return ordered_ ? static_cast<uint32_t>(location >> 40) : 0;
  }
  uint64_t LbaOf(uint64_t page) const { return page * blocks_per_page_; }
  // The index tag of a key. Two different keys with equal tags never share a page, in either
  // index mode, so that a store may be reopened in hash mode whichever mode wrote it.
  static uint32_t TagOf(const KeyHash& hash) { return Index::Tag(hash.lo); }
  void WakeCompaction();
  void SetBroken(const absl::Status& status);
  // Largest batch, in record bytes. A batch's records all go to one head, after what its open
  // page holds, into fresh pages that must all be reserved at once (ReserveForBatch): so few
  // bytes that, however they pack (Geometry::BatchBytesWithinPages), the fresh pages fit both
  // one segment and the page buffers the shard owns. With the defaults (1 MiB segments, 32
  // buffers) that is 16 pages' payload, 64,896 bytes.
  uint64_t max_batch_bytes() const {
    return std::min<uint64_t>(geometry_.max_batch_bytes(),
                              geometry_.BatchBytesWithinPages(options_.page_buffers_per_shard));
  }
  absl::Status broken_status();
  // A queue on the device for one thread's I/O (recovery, writer, compaction, readers, check).
  // What its backend gave up (no registered buffers, no io_uring: a low RLIMIT_MEMLOCK) joins
  // queue_notes_, which Stats shows with the device's notes.
  absl::StatusOr<std::unique_ptr<storage::Device>> OpenQueue(
      const storage::QueueOptions& options);
  // Why waiting for the writer thread (durability, a free page buffer) is pointless: the sticky
  // failure, or kFailedPrecondition once the writer has exited; OK while it serves.
  absl::Status WriterStatus();

  const EngineOptions options_;
  const bool ordered_;
  std::unique_ptr<storage::Device> base_device_;  // as opened; holds the device lock
  std::unique_ptr<storage::Device> device_;       // the opening thread's queue: recovery
  storage::DeviceInfo device_info_;
  Geometry geometry_;
  uint64_t store_seed_ = 0;
  uint32_t blocks_per_page_ = 1;
  std::unique_ptr<SegmentTable> segments_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> next_sequence_{1};

  // The writer thread and its queue.
  std::unique_ptr<storage::Device> writer_queue_;
  std::thread writer_thread_;
  absl::Mutex writer_mu_;
  absl::CondVar writer_cv_;
  bool writer_wake_ ABSL_GUARDED_BY(writer_mu_) = false;
  // Close stops the threads in this order: `stopping_` first (compaction finishes the segment it
  // is cleaning and exits; CompactAll refuses), then, once the compaction thread has been
  // joined, `writer_stopping_` (the writer writes what is left and exits). Compaction copies
  // records and waits for them to be durable, which only the writer can do, so the writer serves
  // until compaction has stopped.
  std::atomic<bool> stopping_{false};
  std::atomic<bool> writer_stopping_{false};
  // Set by the writer thread as it exits (closing, or its queue broke): from then on no page
  // becomes durable and no page buffer comes back, so nobody may wait for either.
  std::atomic<bool> writer_exited_{false};
  std::atomic<uint64_t> flush_epoch_{1};  // bumped at each flush submission
  storage::IoRequest flush_request_;
  bool flush_in_flight_ = false;  // writer thread only
  uint64_t flush_request_epoch_ = 0;

  // Compaction. Only the compaction thread uses compaction_queue_: its ring is SINGLE_ISSUER,
  // so CompactAll calls are handed to that thread (numbered requests, answered in order).
  std::unique_ptr<storage::Device> compaction_queue_;
  std::thread compaction_thread_;
  absl::Mutex compaction_mu_;
  absl::CondVar compaction_cv_;
  bool compaction_wake_ ABSL_GUARDED_BY(compaction_mu_) = false;
  bool compaction_idle_ ABSL_GUARDED_BY(compaction_mu_) = true;
  uint64_t compact_all_requested_ ABSL_GUARDED_BY(compaction_mu_) = 0;
  uint64_t compact_all_done_ ABSL_GUARDED_BY(compaction_mu_) = 0;  // requests answered
  absl::Status compact_all_status_ ABSL_GUARDED_BY(compaction_mu_);  // the last run's outcome
  absl::CondVar compact_all_cv_;  // compact_all_done_ moved
  // Held by the compaction thread while it cleans segments; Check and ForEachLive (inspect.cc)
  // hold it to read a log that compaction is not rearranging. Taken before any shard lock.
  absl::Mutex compact_all_mu_;

  // Per-thread read queues, found through a thread_local cache (read_path.cc) that shares the
  // set, so a thread outliving the engine never touches the engine itself.
  const std::shared_ptr<ReadQueueSet> read_queues_;

  absl::Mutex queue_notes_mu_;
  std::vector<std::string> queue_notes_ ABSL_GUARDED_BY(queue_notes_mu_);  // each once

  // Sticky failure: once a write's durability is unknown, writes are refused.
  std::atomic<bool> broken_{false};
  absl::Mutex error_mu_;
  absl::Status error_ ABSL_GUARDED_BY(error_mu_);
  std::atomic<bool> closed_{false};

  // Counters.
  std::atomic<uint64_t> puts_{0}, deletes_{0}, gets_{0}, batches_{0};
  std::atomic<uint64_t> user_bytes_{0}, device_bytes_{0}, compaction_bytes_{0};
  std::atomic<uint64_t> pages_written_{0}, page_reads_{0}, flushes_{0}, fua_writes_{0};
  std::atomic<uint64_t> verify_reads_{0}, segments_cleaned_{0}, compaction_damaged_pages_{0};
  std::atomic<uint64_t> unreadable_pages_{0};
  uint64_t recovery_pages_ = 0, recovery_records_ = 0, recovery_batches_discarded_ = 0;
  // The records of the batches recovery dropped, still on the device until compaction frees
  // their segments (which never copies them: segment_scan.h). Written by Open only.
  SequenceRanges dropped_batch_records_;
  uint64_t recovery_damaged_pages_ = 0;
  double recovery_seconds_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ENGINE_IMPL_H_
