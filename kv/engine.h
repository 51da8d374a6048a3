// Engine: the log-structured store under nvkv::DB. Records are appended into fixed-size pages
// (kv/page_format.h) at one log head per shard; an in-memory index per shard maps keys to the
// page holding their newest record; compaction cleans segments; Open rebuilds the index from
// the log.
//
// Thread contract: every method may be called from any number of threads at once. There is no
// engine-wide lock on the read or write path: keys are spread over shards by hash and each shard
// has its own mutex, index and log head. Each thread that reads gets its own io_uring queue the
// first time it reads, and releases it when it exits (kv/read_queue.h). Page writes go through
// one writer thread that batches them across shards (group commit); compaction runs on its own
// thread.
//
// Durability: a write made with durable=true has reached stable media when Write returns OK
// (its page and every earlier page of its log head were written with FUA, or written and then
// flushed). A write made with durable=false is in memory when Write returns; it reaches the
// device within `max_write_delay_us` or at the next Flush(), and is durable once a later durable
// write or Flush() returns, and at the latest within 2 x `max_write_delay_us` plus the device's
// write and flush time (the writer sends a timed flush; kv/log_writer.cc).
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
#include "storage/device.h"

namespace nvkv::kv {

// Memory per key: the index's (below), plus 2.5-8 bytes per put record on the device, live or
// not yet cleaned, for compaction's key filters (kv/segment_table.h).
enum class IndexMode : uint8_t {
  kHash,     // ~8-10 bytes of memory per key, no key bytes held; no ordered scans
  kOrdered,  // a B-tree holding every key; ordered iteration and range scans
};

enum class VictimPolicy : uint8_t {
  kCostBenefit,  // (1 - u) * age / (1 + u), as in LFS
  kGreedy,       // fewest live bytes
};

// The payload (absl::Status::GetPayload) of Open's refusals that force_format overrides: the
// device holds data that is not a store, or a store whose superblocks are both damaged. Other
// errors of the same codes (a device in use, a media error) do not carry it.
inline constexpr char kFormatRefusedPayload[] = "nvkv/format-refused";

struct EngineOptions {
  storage::DeviceOptions device;    // backend, ring flags, lock; create_bytes is set from capacity
  bool create_if_missing = true;    // format an empty device or create a missing file
  bool error_if_exists = false;     // fail when a store is already there
  bool force_format = false;        // format even over data that is not an nvkv store
  uint64_t capacity_bytes = 1ull << 30;  // size of a store file created by Open
  uint32_t page_bytes = 4096;       // format only: power of two, 4096..65536, multiple of LBA
  // Format only: a multiple of page_bytes, 16 pages to 8 MiB, or kAutoSegmentBytes: 1 MiB, or
  // less for a store under 64 MiB, so that it has at least 64 segments (down to 16 pages).
  static constexpr uint32_t kAutoSegmentBytes = 0;
  uint32_t segment_bytes = kAutoSegmentBytes;
  uint32_t shard_count = 4;         // 1..64
  IndexMode index_mode = IndexMode::kHash;
  uint32_t max_write_delay_us = 2000;  // non-durable writes reach the device within this (and
                                       // are durable within twice it plus device time)
  uint32_t page_buffers_per_shard = 32;  // pages a shard may have unwritten or in flight
  bool background_compaction = true;
  VictimPolicy victim_policy = VictimPolicy::kCostBenefit;
  uint32_t read_queue_depth = 64;   // reads in flight per reading thread
};

// One Put or Delete of a Write call. Views must stay valid for the call.
struct WriteOp {
  bool is_delete = false;
  std::string_view key;
  std::string_view value;  // ignored for deletes
};

struct EngineStats {
  uint64_t live_keys = 0;
  uint64_t index_bytes = 0;
  double index_bytes_per_key = 0;
  uint64_t puts = 0, deletes = 0, gets = 0, batches = 0;
  uint64_t user_bytes_written = 0;     // key + value bytes of acknowledged writes
  uint64_t device_bytes_written = 0;   // page bytes written, including compaction
  uint64_t compaction_bytes_written = 0;
  double write_amplification = 0;      // device_bytes_written / user_bytes_written
  uint64_t pages_written = 0, page_reads = 0, flushes = 0, fua_writes = 0;
  uint64_t verify_reads = 0;           // reads a hash-mode overwrite needed to confirm its key
  uint64_t segments_total = 0, segments_free = 0, segments_cleaned = 0;
  uint64_t capacity_bytes = 0, live_bytes = 0;
  uint64_t usable_bytes = 0;            // what user puts may fill (SegmentTable::usable_bytes)
  uint64_t recovery_pages_scanned = 0, recovery_records = 0;
  uint64_t recovery_batches_discarded = 0;
  uint64_t recovery_damaged_pages = 0;  // pages inside logs that recovery skipped (holes)
  // The largest table of newest records recovery held for one shard beside the indexes
  // (kv/recovery.h): the part of Open's peak memory that goes away after it.
  uint64_t recovery_table_bytes = 0;
  uint64_t segments_retained = 0;   // cleaned but kept: records on damaged pages still indexed
  uint64_t compaction_damaged_pages = 0;  // damaged pages compaction met in its victims
  // Pages the device failed to read (EIO, media error) in recovery and compaction since Open;
  // each is also a damaged page (a hole) there.
  uint64_t unreadable_pages = 0;
  double recovery_seconds = 0;
  uint64_t read_queues = 0;    // per-thread read queues open (one per reading thread alive)
  storage::DeviceInfo device;  // backend, LBA size, ring features in force, notes
  uint32_t page_bytes = 0, pages_per_segment = 0, shard_count = 0;
  IndexMode index_mode = IndexMode::kHash;
};

// What Check() found: nvkv/db.h's CheckReport says what each field counts (api/db.cc copies
// them one to one). `problems` lists each damaged page or inconsistent index entry in one line
// that says where ("segment 3 page 17 (page 787, LBA 0x313): checksum mismatch ...").
struct CheckReport {
  uint64_t segments_scanned = 0, pages_scanned = 0, records = 0;
  uint64_t pages_valid = 0;        // sound superblocks, and the pages of every log's valid part
  uint64_t live_keys_checked = 0;  // live records read back through the read path
  uint64_t segments_in_use = 0;    // segments holding a log (the rest are free)
  uint64_t torn_tails = 0;         // logs ending at a damaged page, nothing of theirs after it
  uint64_t pages_in_holes = 0;     // damaged pages inside a log (each one is in a problem)
  uint64_t pages_stale = 0;        // verify but belong to no log: older generations, free marks
  uint64_t pages_unwritten = 0;    // never written (all zero bytes)
  uint64_t pages_unreadable = 0;   // damaged pages outside every log, torn tails included
  std::vector<std::string> problems;  // at most kMaxProblems, then one line counting the rest
  std::vector<std::string> notes;     // informational (e.g. writes ran during the check)
  static constexpr size_t kMaxProblems = 1000;
  bool ok() const { return problems.empty(); }
};

// Check and ForEachLive call it after each segment: (segments done, segments in the store).
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

// Outcome of one asynchronous read.
using GetCallback = std::function<void(absl::StatusOr<std::string> value)>;

class Engine {
 public:
  // Opens (or formats) the store at `path`. Errors: kNotFound (missing and !create_if_missing),
  // kAlreadyExists (error_if_exists), kFailedPrecondition (in use by another opener; data that
  // is not an nvkv store without force_format; newer format), kDataLoss (both superblocks
  // damaged), kInvalidArgument (bad options), plus device errors.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& path,
                                                      const EngineOptions& options);
  // Opens (or formats) the store on an already open device (a MemDevice or FaultDevice in tests,
  // or a device opened with special options). The engine owns it from then on.
  static absl::StatusOr<std::unique_ptr<Engine>> OpenOnDevice(
      std::unique_ptr<storage::Device> device, const EngineOptions& options);
  // Closes cleanly: flushes, stops the background threads. Errors are dropped; call Close()
  // first to see them.
  ~Engine();

  // Applies `ops` atomically: after any crash all of them are visible or none. With one op this
  // is a plain Put or Delete. Errors: kInvalidArgument (key empty or over 1024 bytes, value over
  // max_value_bytes(), batch over max_batch_bytes()), kResourceExhausted (store full, or the
  // index cannot grow for a new key; nothing is written), kFailedPrecondition (an earlier write
  // failed; reopen), kDataLoss/kInternal (device).
  absl::Status Write(std::span<const WriteOp> ops, bool durable);

  // The value of `key`, kNotFound when absent, kDataLoss when its page is damaged.
  absl::StatusOr<std::string> Get(std::string_view key);

  // Reads many keys, all reads in flight before waiting. (*values)[i] answers keys[i].
  void MultiGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string>>* values);

  // Starts a read of `key`; `callback` runs on this thread inside a later Poll(), never inside
  // GetAsync itself (also when the value is found in memory), so callers can rely on one
  // contract. kUnavailable when this thread already has read_queue_depth reads in flight.
  absl::Status GetAsync(std::string_view key, GetCallback callback);
  // Drives this thread's reads: waits until at least `min_complete` of them have finished (0:
  // never blocks) and runs their callbacks. Returns how many finished.
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete);
  // Reads started on this thread whose callbacks have not run.
  uint32_t pending_reads();

  // Makes every write made so far durable.
  absl::Status Flush();

  // Cleans, now (blocking), every segment whose cleaning reclaims space: one holding at least a
  // page of dead records, or so little that it repacks into fewer pages.
  absl::Status CompactAll();

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

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ENGINE_H_
