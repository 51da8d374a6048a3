// WritePath: the engine's writes, Write and WriteAsync: validation, resolving each key's current
// record, appending under the shard locks (through the HeadAppender), and waiting for durability
// (synchronously, or as marks an asynchronous write's Poll checks). write_path.cc says how a
// write goes, step by step.
//
// Thread contract: thread-safe. Appends hold the engine's append gate shared (a checkpoint holds
// it exclusively), then shard locks in ascending order (engine_impl.h, kv/README.md).
#ifndef NVKV_KV_WRITE_PATH_H_
#define NVKV_KV_WRITE_PATH_H_

#include <atomic>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kv/compactor.h"
#include "kv/engine.h"
#include "kv/head_append.h"
#include "kv/log_writer.h"
#include "kv/read_path.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/sticky_error.h"
#include "kv/store_shape.h"

namespace nvkv::kv {

// What the engine's users wrote, for Stats.
struct UserWriteCounters {
  std::atomic<uint64_t> puts{0}, deletes{0}, batches{0};
  std::atomic<uint64_t> user_bytes{0};    // key and value bytes written
  std::atomic<uint64_t> blind_writes{0};  // hash-mode overwrites written without a read
};

class WritePath {
 public:
  // What the writes use of the engine; every part must outlive the WritePath.
  struct EngineParts {
    const StoreShape& shape;
    const ShardSet& shards;
    SegmentTable& segments;
    HeadAppender& appender;
    LogWriter& writer;
    ReadPath& reads;  // ResolveCurrent, and the thread's queue (large records, async writes)
    Compactor& compactor;
    absl::Mutex& append_gate;  // held shared by every append
    const StickyError& error;
    // Largest batch, in record bytes (Engine::Impl::max_batch_bytes).
    uint64_t max_batch_bytes = 0;
    uint32_t write_queue_depth = 0;  // Options::write_queue_depth
    // Whether compaction cleans in the background: a write that finds the store full waits for
    // it to free a segment.
    bool background_compaction = false;
  };
  explicit WritePath(const EngineParts& engine) : engine_(engine) {}
  WritePath(const WritePath&) = delete;
  WritePath& operator=(const WritePath&) = delete;

  // Engine::Write and Engine::WriteAsync (engine.h says what they promise), once the engine
  // found the store open for writing (Engine::Impl::CheckWritable).
  absl::Status Write(std::span<const WriteOp> ops, bool durable);
  absl::Status WriteAsync(std::span<const WriteOp> ops, bool durable, WriteCallback done);

  const UserWriteCounters& counters() const { return counters_; }
  // Writes that changed the index so far (Check compares them before and after).
  uint64_t index_writes() const {
    return counters_.puts.load() + counters_.deletes.load() + counters_.batches.load();
  }

 private:
  // Where a write's records went: the head that took them and the counter of its last page, or
  // no head when it wrote nothing (no ops, or a delete of an absent key).
  struct AppendedWrite {
    Shard* head_shard = nullptr;
    uint64_t last_counter = 0;
  };
  // Steps 1 and 2 of a write (write_path.cc): validates, resolves and appends.
  absl::StatusOr<AppendedWrite> AppendWrite(std::span<const WriteOp> ops, bool durable);
  // A write found the store full (`status`): gives compaction a chance to free a segment. True
  // when it did (the caller tries again); false when the caller should return `status`: at
  // once when nothing cleans in the background, or when nothing is worth cleaning
  // (SegmentTable::WaitForFree), or on the last attempt.
  bool CompactionFreedRoom(const absl::Status& status, SegmentUse use, int attempt);

  const EngineParts engine_;
  UserWriteCounters counters_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_WRITE_PATH_H_
