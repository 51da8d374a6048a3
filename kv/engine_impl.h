// Engine::Impl: wires the engine's parts together (kv/README.md). Its functions are split over
// several files by concern: engine.cc (open, start, close), engine_stats.cc (Stats),
// inspect.cc (Check, ForEachLive). The parts with state of their own are classes: StoreOpener
// (store_open.h), Shard (shard.h), ReadPath (read_path.h), WritePath (write_path.h),
// HeadAppender (head_append.h), LogWriter (log_writer.h), Compactor (compactor.h), CheckpointKeeper
// (checkpoint_keeper.h), SegmentTable, StickyError.
//
// Locks, in the order they may be taken (never the reverse):
//   CheckpointKeeper's mutex -> Compactor's cleaning mutex -> append_gate_ -> Shard::mu (several
//   only in ascending shard id, by batches)
//   -> SegmentTable's mutex (-> SegmentContents', FreeSegments' and SegmentMap's mutexes, the
//   map's under FreeSegments' too), LogWriter's mutex, StickyError's mutex (leaves).
// ReadQueueSet's mutex (read_queue.h) and Checkpointer's are leaves too, taken with no other
// engine lock held.
// No lock is held across device I/O, except that a shard's pages are sealed under its lock.
#ifndef NVKV_KV_ENGINE_IMPL_H_
#define NVKV_KV_ENGINE_IMPL_H_

#include <algorithm>
#include <array>
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
#include "kv/engine.h"
#include "kv/checkpoint_keeper.h"
#include "kv/compactor.h"
#include "kv/head_append.h"
#include "kv/index.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/log_writer.h"
#include "kv/page_format.h"
#include "kv/read_path.h"
#include "kv/recovery.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/sticky_error.h"
#include "kv/store_shape.h"
#include "kv/write_path.h"
#include "storage/base/check.h"
#include "storage/device.h"

namespace nvkv::kv {

// What a queue of the engine's is for; Stats::queues counts each kind apart.
enum class QueueKind : uint8_t {
  kReads,        // the per-thread read queues
  kLogWrites,    // the log writer's
  kCompaction,   // the compactor's
  kOpen,         // superblocks, format and recovery
  kCheckpoints,  // a checkpoint's, while running or at Close
  kCheck,        // Check's
};
inline constexpr size_t kQueueKinds = 6;

class Engine::Impl final {
 public:
  Impl(const Options& options, const EngineSeams& seams, std::unique_ptr<storage::Device> device);
  ~Impl();

  // --- engine.cc ---
  // The store at `path` opened (StoreOpener, store_open.h) and the engine started over it.
  absl::Status OpenStore(const std::string& path);
  // Shards, recovery (unless just formatted), the writer's and compaction's queues and threads,
  // over the store of `superblock` (on zones, the segment map's zones start with it).
  absl::Status StartEngine(bool formatted_now, const Superblock& superblock);
  // Zoned, before anything is written: free segments whose zones the device took out of service
  // are retired (readers too); and unless read-only, the zones of free segments that hold data
  // are reset (a head starts there afresh) and active zones no head goes on with are finished.
  absl::Status SettleZones();
  // Zoned, a writer's Open: the map written where recovery found it (its zone first filled up to
  // a page boundary where a cut tore an append), then the other metadata zone's superblock copy
  // written again if it does not decode (metadata_zones.h).
  absl::Status WriteMapOnZones(const Superblock& superblock);
  absl::Status Close();
  EngineStats Stats();
  absl::Status CheckOpen() const;
  // CheckOpen, and kFailedPrecondition on a store opened read-only.
  absl::Status CheckWritable() const;
  absl::Status CompactAll();
  // Engine::Checkpoint: with compaction paused, holds writes back (append_gate_) while it makes
  // every write durable and takes a checkpoint into memory, then writes it with writes going
  // on; the map names it as the base of recovery.
  absl::Status Checkpoint();

  // --- inspect.cc ---
  absl::StatusOr<CheckReport> Check(const ProgressCallback& progress);
  absl::Status ForEachLive(
      const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
      const ProgressCallback& progress);

  // --- reads and writes (read_path.h, write_path.h) ---
  // Made once the engine started; no writes on a store opened read-only (CheckWritable).
  ReadPath& reads() { return *reads_; }
  WritePath& writes() { return *writes_; }
  // Every write acknowledged so far durable (a read-only store has none).
  absl::Status Flush() { return read_only_ ? absl::OkStatus() : writer_->WaitAllDurable(); }

  // --- shared helpers ---
  // Largest batch, in record bytes. A batch's records all go to one head, after what its open
  // page holds, into fresh pages that must all be reserved at once (ReserveForBatch): so few
  // bytes that, however they pack (Geometry::BatchBytesWithinPages), the fresh pages fit both
  // one segment and the page buffers the shard owns. With the defaults (1 MiB segments, 32
  // buffers) that is 16 pages' payload, 64,896 bytes.
  uint64_t max_batch_bytes() const {
    const Geometry& g = shape_.geometry;
    return std::min<uint64_t>(g.max_batch_bytes(),
                              g.BatchBytesWithinPages(options_.page_buffers_per_shard));
  }
  // A queue on the device for one thread's I/O of `kind`, whose calls and completions it adds
  // to that kind's counts (Stats::queues). What its backend gave up (no registered buffers, no
  // io_uring: a low RLIMIT_MEMLOCK) joins queue_notes_, which Stats shows with the device's notes.
  absl::StatusOr<std::unique_ptr<storage::Device>> OpenQueue(
      QueueKind kind, const storage::QueueOptions& options);
  const StoreShape& shape() const { return shape_; }
  IndexMode index_mode() const {
    return shape_.ordered ? IndexMode::kOrdered : IndexMode::kHash;
  }
  const ShardSet& shards() const { return shards_; }
  const storage::DeviceInfo& device_info() const { return device_info_; }
  SegmentTable& segments() { return *segments_; }
  // Writes that changed the index so far (Check compares them before and after).
  uint64_t index_writes() const { return writes_ != nullptr ? writes_->index_writes() : 0; }

 private:
  // The steps of StartEngine: recovery of a store that holds data (recovery_), the log writer
  // with its queue and the heads' page buffers (and the HeadAppender over them), the compactor
  // with its queue.
  absl::Status Recover();
  absl::Status StartWriter();
  absl::Status StartCompactor();
  // The read path (the writer, if any, started first); the write path (everything it appends
  // through started first).
  void StartReads();
  void StartWrites();
  // The checkpoint keeper (its thread not started yet), and where the log stands against the
  // checkpoint recovery started from.
  void StartCheckpoints();

  const Options options_;
  const EngineSeams seams_;
  // Opened for reading only (options_.read_only, or a device opened so): no writer, compactor
  // or head appender exists, and nothing is written to the device.
  const bool read_only_;
  // What each kind of queue asked of the device (Stats::queues): before every queue, which
  // adds to them until it is destroyed.
  std::array<storage::SharedIoCounts, kQueueKinds> queue_counts_;
  std::unique_ptr<storage::Device> base_device_;  // as opened; holds the device lock
  // The opening thread's queue, with room for recovery's reads: StoreOpener hands it over with
  // the superblocks read, recovery uses it, and StartEngine closes it once it is done (its
  // buffers are 4 MiB of pinned memory).
  std::unique_ptr<storage::Device> open_queue_;
  // The device's facts (as StoreOpener leaves them: a grow may extend a store file).
  storage::DeviceInfo device_info_;
  // options_.durable_writes as chosen for this device (never kAuto).
  const DurableWrites durable_writes_;
  // The store's shape: its geometry, seed and blocks per page from the superblock; its index
  // mode options_.index_mode, or the one the store records. OpenStore sets it before anything
  // uses it.
  StoreShape shape_;
  // The segment map (segment_map.h), kept by segments_, written by the writer (by Open before).
  std::unique_ptr<SegmentMap> segment_map_;
  // A zoned store's place table (zone_places.h), which shape_.places points at.
  std::unique_ptr<ZonePlaces> zone_places_;
  // A zoned store's writer: the zones it may keep active (zone_budget.h); 0 otherwise.
  uint32_t zone_budget_ = 0;
  std::unique_ptr<SegmentTable> segments_;
  ShardSet shards_;
  std::atomic<uint64_t> next_sequence_{1};

  // Sticky failure: once a write's durability is unknown, writes are refused.
  StickyError error_;
  WriteCounters write_counters_;
  std::unique_ptr<LogWriter> writer_;  // the log writer thread and its queue
  std::unique_ptr<HeadAppender> appender_;  // appends to the heads, for writes and compaction
  // Close stops the compactor first (it finishes the segment it is cleaning and exits;
  // CompactAll refuses), then the writer (which writes what is left). Compaction copies records
  // and waits for them to be durable, which only the writer can do, so the writer serves until
  // compaction has stopped.

  std::unique_ptr<Compactor> compactor_;
  // Appends hold it shared (AppendWrite), a checkpoint while running exclusively: while it is
  // held so, no write is between taking its sequence and updating the index.
  absl::Mutex append_gate_;
  // Checkpoints while running and at Close (checkpoint_keeper.h); stopped first by Close. None
  // for a reader.
  std::unique_ptr<CheckpointKeeper> checkpoints_;

  // What recovery found at Open (written by Open only); dropped_batch_records tells page reads
  // which records on the device belong to no applied batch. Declared before the parts that read
  // it, so that they are destroyed first.
  RecoveryReport recovery_;
  // Gets, scans and the per-thread queues (null until the engine started).
  std::unique_ptr<ReadPath> reads_;
  // Puts, deletes and batches (null until the engine started, and for a reader).
  std::unique_ptr<WritePath> writes_;

  absl::Mutex queue_notes_mu_;
  std::vector<std::string> queue_notes_ ABSL_GUARDED_BY(queue_notes_mu_);  // each once

  std::atomic<bool> closed_{false};

  // Whether this engine may write checkpoints (at Close and while running): not after an Open
  // that went on without pages it could not read, as a checkpoint would stand for the log
  // without their records and the next Open would never read them again.
  // Nor on zones, yet (issue 40).
  bool WritesCheckpoints() const {
    return recovery_.unread_pages.empty() && !shape_.geometry.zoned();
  }
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ENGINE_IMPL_H_
