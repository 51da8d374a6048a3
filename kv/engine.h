// Engine: the log-structured store under nvkv::DB. Records are appended into fixed-size pages
// (kv/page_format.h) at one log head per shard; an in-memory index per shard maps keys to the
// page holding their newest record; compaction cleans segments; Open rebuilds the index from
// the log.
//
// Thread contract: every method may be called from any number of threads at once. There is no
// engine-wide lock on the read or write path: keys are spread over shards by hash and each shard
// has its own mutex, index and log head. Each thread that reads (or writes asynchronously) gets its
// own io_uring queue the first time, and releases it when it exits (kv/read_queue.h). Page writes
// go through one writer thread that batches them across shards (group commit); compaction runs on
// its own thread.
//
// Durability: a write made with durable=true has reached stable media when Write returns OK, or
// when WriteAsync's callback runs with OK (its page and every earlier page of its log head were
// written with FUA, or written and then flushed). A write made with durable=false is in memory when
// Write returns; it reaches the device within `max_write_delay_us` or at the next Flush(), and is
// durable once a later durable write or Flush() returns, and at the latest within 2 x
// `max_write_delay_us` plus the device's write and flush time (the writer sends a timed flush;
// kv/log_writer.cc).
#ifndef NVKV_KV_ENGINE_H_
#define NVKV_KV_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nvkv/check_report.h"
#include "nvkv/options.h"
#include "nvkv/stats.h"
#include "storage/device.h"

namespace nvkv::kv {

// The public value types (nvkv/options.h, nvkv/stats.h, nvkv/check_report.h) are the engine's
// too: defined once, where users see them (tests/check_layering.sh allows kv/ these headers
// only).
// Memory per key: the index's (IndexMode), plus 2.5-8 bytes per put record on the device, live
// or not yet cleaned, for compaction's key filters (kv/segment_contents.h).
using ::nvkv::Backend;
using ::nvkv::CheckReport;
using ::nvkv::CompactionPolicy;
using ::nvkv::DurableWrites;
using ::nvkv::IndexMode;
using ::nvkv::Options;
using ::nvkv::ProgressCallback;
using ::nvkv::RecoveryStart;

// The payload (absl::Status::GetPayload) of Open's refusals that force_format overrides: the
// device holds data that is not a store, or a store whose superblocks are both damaged. Other
// errors of the same codes (a device in use, a media error) do not carry it.
inline constexpr char kFormatRefusedPayload[] = "nvkv/format-refused";

// What no user sets: tests (and checks) reach through these states that the defaults reach only
// slowly or by chance. The engine otherwise reads the public Options (nvkv/options.h) as given.
// Options::segment_bytes that sizes segments to the store: 1 MiB, or less for a store under
// 64 MiB, so that it has at least 64 segments (down to 16 pages).
inline constexpr uint32_t kAutoSegmentBytes = 0;

struct EngineSeams {
  // How much more memory the process may take as Open starts (RecoveryOptions::
  // table_budget_ceiling_bytes). 0: what its memory limits and the machine's available memory
  // leave (kv/memory_headroom.h).
  uint64_t memory_headroom_bytes = 0;
  // Recovery reads every segment, whatever the segment map says (kv/FORMAT.md "Recovery"): the
  // state it rebuilds is the same, only slower.
  bool recovery_reads_all = false;
  // Sealed segments get summaries (segment_summary.h) when they have at least this many pages.
  // A summary takes at least a page: in the small segments of a small store (which opens in
  // milliseconds anyway) that is more space than the summary saves time. Tests set 0.
  uint32_t summary_min_segment_pages = 128;
  // A clean Close writes a checkpoint of the indexes, the segment table and the log heads'
  // places (checkpoint.h), which the next Open reads instead of the log; the heads go on in
  // their segments. Off, Close makes the heads leave their segments with summaries instead, and
  // the next Open reads those.
  bool checkpoint_at_close = true;
  // Called on the compactor's thread each time background compaction has picked a victim,
  // before it waits to clean it (a checkpoint may be taken in between). Borrowed: it outlives
  // the engine.
  const std::function<void(uint64_t segment)>* victim_picked = nullptr;
};

// One Put or Delete of a Write call. Views must stay valid for the call.
struct WriteOp {
  bool is_delete = false;
  std::string_view key;
  std::string_view value;  // ignored for deletes
};

// The engine's stats are the public ones (nvkv/stats.h), filled by Engine::Stats.
using EngineStats = ::nvkv::Stats;

// Outcome of one asynchronous read.
using GetCallback = std::function<void(absl::StatusOr<std::string> value)>;
// Outcome of one asynchronous write.
using WriteCallback = std::function<void(absl::Status status)>;

class Engine {
 public:
  // Opens (or formats) the store at `path`. Errors: kNotFound (missing and !create_if_missing),
  // kAlreadyExists (error_if_exists), kFailedPrecondition (in use by another opener; data that
  // is not an nvkv store without force_format; newer format), kDataLoss (both superblocks
  // damaged), kInvalidArgument (bad options), plus device errors.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      const Options& options,
                                                      const EngineSeams& seams = {});
  // Opens (or formats) the store on an already open device (a MemDevice or FaultDevice in tests,
  // or a device opened with special options). The engine owns it from then on.
  static absl::StatusOr<std::unique_ptr<Engine>> OpenOnDevice(
      std::unique_ptr<storage::Device> device, const Options& options,
      const EngineSeams& seams = {});
  // What the device at `path` is, without opening a store there: its geometry and, on a zoned
  // namespace, its zone model and how many zones are in each state. Opens it for reading with a
  // shared claim (kFailedPrecondition while a store is open there for writing), and accepts a
  // zoned device, which Open refuses.
  static absl::StatusOr<::nvkv::DeviceStats> InspectDevice(const std::string& path);
  // Closes cleanly: flushes, stops the background threads. Errors are dropped; call Close()
  // first to see them.
  ~Engine();

  // Applies `ops` atomically: after any crash all of them are visible or none. With one op this
  // is a plain Put or Delete. Errors: kInvalidArgument (key empty or over 1024 bytes, value over
  // max_value_bytes(), batch over max_batch_bytes()), kResourceExhausted (store full, or the
  // index cannot grow for a new key; nothing is written), kFailedPrecondition (an earlier write
  // failed; reopen), kDataLoss/kInternal (device).
  absl::Status Write(std::span<const WriteOp> ops, bool durable);

  // Write, but returns once the records are applied (visible to every later read), without
  // waiting for durability: `done` runs on this thread inside a later Poll() once the write is
  // as durable as `durable` asks (at once for durable=false), with OK, or with the error that
  // made durability unknown (the store then refuses writes). Two writes from one thread apply
  // in call order. A write whose key must be found on the device first (hash mode: a delete,
  // or an overwrite the cache does not know) reads it before returning, and a store that is
  // full or out of page buffers makes the call wait as Write would. Errors as Write's, plus
  // kUnavailable when this thread has write_queue_depth writes pending (Poll first); on error
  // nothing is written and `done` never runs.
  absl::Status WriteAsync(std::span<const WriteOp> ops, bool durable, WriteCallback done);

  // The value of `key`, kNotFound when absent, kDataLoss when its page is damaged.
  absl::StatusOr<std::string> Get(std::string_view key);

  // Reads many keys, all reads in flight before waiting. (*values)[i] answers keys[i].
  void MultiGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string>>* values);

  // Starts a read of `key`; `callback` runs on this thread inside a later Poll(), never inside
  // GetAsync itself (also when the value is found in memory), so callers can rely on one
  // contract. kUnavailable when this thread already has read_queue_depth reads in flight.
  absl::Status GetAsync(std::string_view key, GetCallback callback);
  // Drives this thread's reads and asynchronous writes: waits until at least `min_complete` of
  // them have finished (0: never blocks) and runs their callbacks. Returns how many ran.
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete);
  // Reads started on this thread whose callbacks have not run.
  uint32_t pending_reads();
  // Asynchronous writes started on this thread whose callbacks have not run.
  uint32_t pending_writes();

  // Makes every write made so far durable.
  absl::Status Flush();

  // Cleans, now (blocking), every segment whose cleaning reclaims space: one holding at least a
  // page of dead records, or so little that it repacks into fewer pages.
  absl::Status CompactAll();

  // Writes a checkpoint now (blocking; writes wait while it is taken), as the engine does on its
  // own (Options::checkpoint_log_ratio): recovery after a crash reads it and the log written
  // after it. Every write made so far is durable when it returns OK. kResourceExhausted when
  // the free segments cannot hold it; device errors.
  absl::Status Checkpoint();

  // Ordered mode only (else kFailedPrecondition): up to `limit` key/value pairs with
  // start <= key < end (end empty: no upper bound), in key order.
  absl::Status Scan(std::string_view start, std::string_view end, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out);

  EngineStats Stats();

  // Reads every segment of the device and checks every page, record and index entry (see
  // CheckReport). Slow: reads the whole store. Runs beside normal traffic, but compaction waits
  // until it is done, and the index cross-check is skipped (a note says so) when writes ran
  // meanwhile. An OK status with problems in the report means the check ran and found damage.
  // Errors: kFailedPrecondition after Close(); errors opening the check's own device queue. A
  // segment that cannot be read is a problem in the report, not an error.
  absl::StatusOr<CheckReport> Check(const ProgressCallback& progress = nullptr);

  // Calls `visit` with every live key and value, segment by segment in log order (any index
  // mode): each key no write touches during the walk exactly once; a key written meanwhile with
  // its old value, its new one, both or neither (a record is visited when the index still
  // points at it as its segment is read, and records still in memory are not). Compaction
  // waits until the walk is done, so `visit` must not call CompactAll, Check or ForEachLive.
  // Stops early and returns the status when `visit` returns one that is not OK. Errors:
  // kFailedPrecondition after Close(); device errors (a segment that cannot be read stops the
  // walk).
  absl::Status ForEachLive(
      const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
      const ProgressCallback& progress = nullptr);

  // Flushes, stops the background threads, and refuses further calls with kFailedPrecondition.
  absl::Status Close();

  uint32_t max_value_bytes() const;
  uint64_t max_batch_bytes() const;
  // The index mode this Open chose (kHash or kOrdered: Options::index_mode, or the store's).
  IndexMode index_mode() const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ENGINE_H_
