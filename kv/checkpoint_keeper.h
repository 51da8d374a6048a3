// CheckpointKeeper: the life of the checkpoints a running engine writes (checkpoint.h, kv/README.md
// "A checkpoint"): the thread that finds one due (Checkpointer), one asked for
// (Engine::Checkpoint), the one Close writes, whether the one kept still stands for the log as
// it is, and what they cost. The segments a checkpoint lies in are held segments of the
// SegmentTable (their states and the free list are one, and a full store may take the kept ones
// back): the keeper has it hold them, keep a written checkpoint's and release the kept ones.
// Recovery makes the checkpoint it read the kept one (RecoveryBase::Keep).
//
// One checkpoint at a time: the keeper's lock is held while one is taken and written (lock
// order: first of the engine's locks, engine_impl.h).
#ifndef NVKV_KV_CHECKPOINT_KEEPER_H_
#define NVKV_KV_CHECKPOINT_KEEPER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kv/checkpoint.h"
#include "kv/checkpointer.h"
#include "kv/compactor.h"
#include "kv/head_append.h"
#include "kv/log_writer.h"
#include "kv/recovery.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

class CheckpointKeeper {
 public:
  // What a checkpoint reads, pauses and waits on of the engine it keeps them for.
  struct EngineParts {
    const StoreShape& shape;
    SegmentTable& segments;
    const ShardSet& shards;
    HeadAppender& appender;
    LogWriter& writer;
    Compactor& compactor;
    absl::Mutex& append_gate;  // held exclusively while a checkpoint is taken
    const std::atomic<uint64_t>& next_sequence;
    const SequenceRanges& dropped;  // the records of batches recovery dropped
    // The device's write cache may lose a write it completed: a checkpoint's pages are flushed
    // before the writer's map write names it the base.
    bool volatile_write_cache = false;
    // OK while a checkpoint may be written: not after a write failed, nor once Close began,
    // nor after an Open that went on without pages it could not read.
    std::function<absl::Status()> may_write;
    // A queue with chunk buffers, for a checkpoint's writes.
    std::function<absl::StatusOr<std::unique_ptr<storage::Device>>()> open_queue;
  };

  // `when` says when the thread writes one (checkpointer.h; log_ratio 0: never).
  CheckpointKeeper(const EngineParts& engine, const Checkpointer::Options& when);
  ~CheckpointKeeper();  // StopThread()
  CheckpointKeeper(const CheckpointKeeper&) = delete;
  CheckpointKeeper& operator=(const CheckpointKeeper&) = delete;

  // Where the engine starts, before anything is written: where `recovery` started (the
  // checkpoint it read, the log it read beyond it; after a clean Close the kept checkpoint
  // stands for the log as it is).
  void StartFrom(const RecoveryReport& recovery);
  // Starts the thread, once the writer and compaction run. kResourceExhausted when the system
  // will not start it.
  absl::Status StartThread() { return checkpointer_->Start(); }
  // Stops the thread, and waits for a checkpoint under way (the thread's or one asked for) to
  // finish; may_write must refuse any later one. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // A checkpoint now (Engine::Checkpoint, the caller having made every earlier write durable):
  // with compaction paused, writes are held back while it is taken into memory, then written
  // with writes going on; the map names it the base of recovery. Returns its pages.
  // kResourceExhausted without room for it; may_write's refusal; device errors.
  absl::StatusOr<uint64_t> Checkpoint() ABSL_LOCKS_EXCLUDED(mu_);

  // Close, after Stop, every write durable and the writer stopped: marks the kept checkpoint
  // current when nothing was written since it, or writes a new one (and the map pages that name
  // it).
  // kResourceExhausted when the free segments cannot hold it; device errors. Either way the
  // next Open reads the log then.
  absl::Status WriteAtClose() ABSL_LOCKS_EXCLUDED(mu_);

  // The kept checkpoint's segments are free again (the map says so once written): Close leaves
  // the heads' segments without writing a checkpoint, so none stands for the log.
  void ReleaseKept() { engine_.segments.ReleaseKept(); }

  // For Stats.
  uint64_t written() const { return checkpointer_->written(); }
  uint64_t failed() const { return checkpointer_->failed(); }
  double seconds() const { return static_cast<double>(nanos_.load()) * 1e-9; }
  double writes_held_seconds() const { return static_cast<double>(held_nanos_.load()) * 1e-9; }

 private:
  // A checkpoint taken into memory, and the counters KeptIsCurrent compares as they were then.
  struct Taken {
    TakenCheckpoint checkpoint;
    uint64_t head_counters = 0;
    uint64_t segment_changes = 0;
  };
  absl::StatusOr<uint64_t> CheckpointLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The map pages that changed, written through `queue` without the writer (not started, or
  // stopped at Close).
  absl::Status WriteMapNow(storage::Device& queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a checkpoint of the engine as it is, into `room` first. Nothing else may append
  // meanwhile.
  absl::StatusOr<Taken> TakeNow(TakenCheckpoint room = {});
  // Writes `taken` through `queue`, leaving `keep_free` segments free, and has the table keep
  // its segments with map mark `mark` (SegmentTable::KeepHeld); returns its pages; `*tickets`
  // (when not null) gets the map changes that name it. Writes may go on meanwhile; compaction
  // must stay paused.
  absl::StatusOr<uint64_t> WriteThrough(storage::Device& queue, Taken& taken, MapState mark,
                                        uint64_t keep_free,
                                        std::vector<SegmentMap::Ticket>* tickets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the kept checkpoint still stands for the log as it is: no head assigned a page
  // since (records, summaries, compaction's copies all go through them), and no segment was
  // taken or freed.
  bool KeptIsCurrent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineParts engine_;
  std::unique_ptr<Checkpointer> checkpointer_;
  absl::Mutex mu_;
  bool kept_is_current_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t head_counters_at_kept_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t segment_changes_at_kept_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> nanos_{0}, held_nanos_{0};  // Stats::checkpoint_seconds and _held_
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_CHECKPOINT_KEEPER_H_
