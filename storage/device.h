// The storage seam: a Device moves whole logical blocks between registered memory and a device,
// asynchronously. Everything above storage/ (the engine, benchmarks, tests) talks to devices only
// through this header.
//
// Backends: NVMe passthrough on /dev/ngXnY (nvme_device.h), O_DIRECT files and block devices on
// io_uring (direct_file_device.h), a pread/pwrite fallback where io_uring is unavailable
// (sync_file_device.h), memory (mem_device.h) and the fault-injecting wrapper (fault_device.h).
//
// Thread contract: one Device object is one submission queue. All of Enqueue, Submit and Reap on
// it are called from one thread at a time (the issuing thread; with SINGLE_ISSUER rings, always
// the same thread, the first one that submits). A thread that wants its own queue on the same
// device calls OpenQueue(), which may be called from any thread holding the original.
//
// Request life cycle:
//   caller fills an IoRequest -> Enqueue (validated, queued, no system call)
//   -> Submit (every queued request reaches the kernel in one system call)
//   -> Reap (harvests every completion available at once, then runs the callbacks).
// The request is owned by the caller and must stay alive and untouched from Enqueue until its
// callback has run. Callbacks run on the issuing thread inside Reap, after the reap loop; they
// may Enqueue new requests (those go out with the next Submit).
#ifndef NVKV_STORAGE_DEVICE_H_
#define NVKV_STORAGE_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "storage/buffer_pool.h"
#include "storage/zones.h"

namespace nvkv::storage {

enum class IoOp : uint8_t {
  kRead = 0,
  kWrite = 1,
  kFlush = 2,  // makes every write completed before it durable (NVMe Flush, fdatasync)
  // Completes once the eventfd `event_fd` has been signalled (it reads and so resets the
  // eventfd's count into `event_count`): lets a thread that blocks in Reap for its I/O be woken
  // by another thread too. io_uring queues only (kUnimplemented elsewhere: those complete every
  // other request inside Reap, so their callers wait for the event themselves). A request of
  // this kind still in flight when its queue is destroyed must be signalled first, or the
  // destructor waits for it.
  kWaitEvent = 3,
  // Zoned devices only (info().zones; zones.h), where `lba` is a zone's first block.
  kZoneAppend = 4,  // writes lba_count blocks at the zone's write pointer: see appended_lba
  kZoneReset = 5,   // empties the zone
  kZoneFinish = 6,  // makes the zone full where its write pointer stands
  // Reads the zone report (zones.h) of the zones from this one on into `buffer`, lba_count
  // blocks long: as many zones as fit, or as there are.
  kZoneReport = 7,
};

// Whether `op` is one of the zoned devices' own.
inline bool IsZoneOp(IoOp op) {
  return op == IoOp::kZoneAppend || op == IoOp::kZoneReset || op == IoOp::kZoneFinish ||
         op == IoOp::kZoneReport;
}

// One asynchronous device operation. Caller-owned; see the life cycle above.
struct IoRequest {
  // --- Set by the caller before Enqueue. ---
  IoOp op = IoOp::kRead;
  // Write and zone append only: the write is durable when it completes (NVMe FUA, RWF_DSYNC on
  // files).
  bool fua = false;
  uint64_t lba = 0;        // first logical block; ignored for kFlush
  uint32_t lba_count = 0;  // number of logical blocks (not zero-based); ignored for kFlush
  // Write and zone append: where the device should place the data, as an index into
  // info().placement_ids (data written through one handle shares erase blocks only with data
  // written through the same handle). Ignored by a device without placement handles; 0, the
  // first handle, is also where a device puts writes that name none.
  uint8_t placement = 0;
  // Memory the device reads from or writes into; must come from this device's buffer pool when
  // fixed buffers are used (buffer.buf_index >= 0), and hold lba_count * lba_bytes bytes.
  Buffer buffer;
  // Called once, on the issuing thread, after the request completed (status is final).
  void (*on_done)(IoRequest* request) = nullptr;
  void* context = nullptr;  // free for the caller (e.g. the object that owns this request)
  int event_fd = -1;        // kWaitEvent only: an eventfd
  uint64_t event_count = 0;  // kWaitEvent only: what the read took from it

  // --- Set by the device before on_done runs. ---
  absl::Status status;
  // kZoneAppend that succeeded: the first block the device wrote (appends in flight together
  // land in any order).
  uint64_t appended_lba = 0;

  // --- Backend bookkeeping; callers do not touch. ---
  uint32_t parts_pending = 0;  // SQEs of this request still in flight
  IoRequest* next_done = nullptr;
};

enum class DeviceKind : uint8_t {
  kNvmePassthrough,  // /dev/ngXnY through IORING_OP_URING_CMD
  kDirectFile,       // regular file or block device, O_DIRECT on io_uring
  kSyncFile,         // regular file or block device, pread/pwrite (no io_uring available)
  kMemory,           // RAM, for tests
};

const char* DeviceKindName(DeviceKind kind);

// Which io_uring features a queue ended up with (what was asked, minus what the kernel refused).
struct RingFeatures {
  uint32_t queue_depth = 0;        // requests in flight at most
  uint32_t sq_entries = 0;         // submission ring size
  bool sqe128_cqe32 = false;       // big SQEs/CQEs (required by NVMe passthrough)
  bool single_issuer = false;      // IORING_SETUP_SINGLE_ISSUER
  bool defer_taskrun = false;      // IORING_SETUP_DEFER_TASKRUN
  bool coop_taskrun = false;       // IORING_SETUP_COOP_TASKRUN (used when DEFER is refused)
  bool registered_ring_fd = false; // io_uring_register_ring_fd
  bool registered_file = false;    // device fd in the fixed file table (IOSQE_FIXED_FILE)
  bool fixed_buffers = false;      // buffer pool registered (READ/WRITE_FIXED, URING_CMD_FIXED)
  bool sqpoll = false;             // kernel thread polls the SQ
  bool iopoll = false;             // completions polled from the device (needs poll queues)
};

struct DeviceInfo {
  DeviceKind kind = DeviceKind::kMemory;
  std::string path;
  uint32_t lba_bytes = 0;             // logical block size
  uint64_t lba_count = 0;             // capacity in logical blocks
  uint32_t max_transfer_bytes = 0;    // largest single command; larger requests are split
  uint32_t memory_alignment = 0;      // buffers must be aligned to this many bytes
  bool volatile_write_cache = false;  // writes need a flush (or FUA) to be durable
  bool block_device = false;
  // A regular file that this open created (DeviceOptions::create_bytes): the opener removes it
  // again when it fails to make a store of it (RemoveCreatedFile).
  bool created = false;
  bool zoned = false;                 // zoned namespace or block device (see ZonedAccess)
  ZoneModel zones;                    // its zones, when a backend knows them (zone ops need it)
  // NVMe Flexible Data Placement: the placement identifiers a write may name (IoRequest::
  // placement indexes them), in the order the namespace's Reclaim Unit Handle Status lists them.
  // Empty without FDP (not supported, or not enabled for the namespace).
  std::vector<uint16_t> placement_ids;
  bool read_only = false;             // DeviceOptions::read_only: writes and flushes refused
  uint32_t nsid = 0;                  // NVMe namespace id, 0 elsewhere
  RingFeatures ring;
  std::vector<std::string> notes;     // fallbacks taken at open, one sentence each

  uint64_t capacity_bytes() const { return lba_count * lba_bytes; }
};

// Counters of one queue. Monotonic; read on the issuing thread.
struct IoStats {
  uint64_t requests_enqueued = 0;
  uint64_t requests_completed = 0;
  uint64_t requests_failed = 0;
  uint64_t submit_calls = 0;       // Submit() calls that pushed at least one request
  uint64_t enter_syscalls = 0;     // io_uring_enter (or pread/pwrite) system calls made
  uint64_t reap_calls = 0;         // Reap() calls that harvested at least one completion
  uint64_t completions_reaped = 0; // CQEs harvested
  uint64_t max_completions_per_reap = 0;
};

// What the queues of one kind asked of the kernel, added up across them and readable from any
// thread (Device::ShareCountsWith): e.g. every per-thread read queue of a store. A "call" is a
// system call (io_uring_enter, pread, pwrite, fdatasync); on the memory and fault devices, which
// make none, a Submit that pushed requests stands for one.
struct SharedIoCounts {
  std::atomic<uint64_t> requests_completed{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> submitting_calls{0};  // calls that pushed at least one request
  std::atomic<uint64_t> requests_submitted{0};  // pushed by those calls

  void CountCall(uint32_t requests_pushed) {
    calls.fetch_add(1, std::memory_order_relaxed);
    if (requests_pushed == 0) return;
    submitting_calls.fetch_add(1, std::memory_order_relaxed);
    requests_submitted.fetch_add(requests_pushed, std::memory_order_relaxed);
  }
  void CountCompleted(uint32_t requests) {
    if (requests > 0) requests_completed.fetch_add(requests, std::memory_order_relaxed);
  }
};

// What a further queue on an open device may choose for itself.
struct QueueOptions {
  uint32_t queue_depth = 64;
  BufferPoolOptions buffers;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // The memory this queue reads into and writes from. Owned by the device.
  virtual BufferPool& buffers() = 0;

  // Validates and queues `request`. Errors (nothing is queued on error):
  //   kInvalidArgument   misaligned buffer, zero or too-short length, unknown op
  //   kOutOfRange        blocks beyond the device's capacity
  //   kUnavailable       queue full: `queue_depth` requests in flight; Reap, then retry
  //   kFailedPrecondition the queue is broken (a previous submit failed)
  virtual absl::Status Enqueue(IoRequest* request) = 0;

  // Pushes every queued request to the device in one system call (none when nothing is queued).
  // Returns the number of requests pushed.
  virtual absl::StatusOr<uint32_t> Submit() = 0;

  // Harvests every completion available, waiting until at least `min_complete` requests have
  // completed (clamped to those in flight; 0 never blocks), then runs their callbacks.
  // Submits anything still queued first. Returns the number of requests completed.
  virtual absl::StatusOr<uint32_t> Reap(uint32_t min_complete) = 0;

  // Requests enqueued whose callbacks have not run yet.
  virtual uint32_t in_flight() const = 0;

  virtual const IoStats& stats() const = 0;

  // From now on this queue also adds its calls and completions to `counts`, which must outlive
  // it (nullptr: stop). Its own stats() go on as before.
  void ShareCountsWith(SharedIoCounts* counts) { shared_counts_ = counts; }

  // Opens another queue (own ring, own buffer pool, same geometry and ring flags) on the same
  // device, for another issuing thread, with its own depth and buffers.
  virtual absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) = 0;

  // Extends the regular file under this device to `bytes` (rounded down to whole blocks),
  // allocated and written with zeros over the new part and made durable, so that queues opened
  // from then on see the larger capacity (this queue's info() says it too; queues opened before
  // keep the old one). A file already that large stays as it is. Errors: kUnimplemented on
  // anything but a regular file; kResourceExhausted when the file system is full (the file may
  // then be left partly extended, with zeros); kFailedPrecondition on a read-only device.
  // Called by the first queue's thread while no other queue of the device is open.
  virtual absl::Status GrowFile(uint64_t bytes) {
    (void)bytes;
    return absl::UnimplementedError(
        absl::StrCat(info().path, ": only a regular file can be grown"));
  }

  // OpenQueue with this queue's own depth and buffer pool shape.
  absl::StatusOr<std::unique_ptr<Device>> OpenSimilarQueue() {
    QueueOptions options;
    options.queue_depth = info().ring.queue_depth;
    options.buffers.buffer_bytes = buffers().page_bytes();
    options.buffers.buffer_count = buffers().page_count();
    options.buffers.chunk_count = buffers().chunk_count();
    return OpenQueue(options);
  }

 protected:
  // Each backend calls these where it makes a call (pushing `requests_pushed`, maybe 0) and
  // where it runs completed requests' callbacks, beside its own stats().
  void CountCall(uint32_t requests_pushed) {
    if (shared_counts_ != nullptr) shared_counts_->CountCall(requests_pushed);
  }
  void CountCompleted(uint32_t requests) {
    if (shared_counts_ != nullptr) shared_counts_->CountCompleted(requests);
  }

 private:
  SharedIoCounts* shared_counts_ = nullptr;
};

enum class Backend : uint8_t {
  kAuto,             // NVMe generic char device -> passthrough; file or block device -> direct
  kNvmePassthrough,
  kDirectFile,
  kSyncFile,
};

struct RingOptions {
  uint32_t queue_depth = 64;     // requests in flight at most per queue (1..4096)
  bool single_issuer = true;     // SINGLE_ISSUER (+ DEFER_TASKRUN, else COOP_TASKRUN)
  bool register_ring_fd = true;  // saves an fdget per io_uring_enter
  bool register_file = true;     // IOSQE_FIXED_FILE
  bool fixed_buffers = true;     // register the buffer pool
  bool sqpoll = false;           // a kernel thread polls the SQ: no syscall per submit
  uint32_t sqpoll_idle_ms = 1000;
  bool iopoll = false;           // busy-poll completions (NVMe poll queues); no flushes on files
};

// Whether an open takes a zoned namespace or zoned block device.
enum class ZonedAccess : uint8_t {
  // Neither: a zoned namespace's generic node is refused with kUnimplemented, a zoned block
  // device with kInvalidArgument naming the namespace's generic node (the block layer has no
  // Zone Append for a program).
  kRefuse,
  // A zoned namespace through its generic node (/dev/ngXnY), the only node nvkv can write zones
  // through; a zoned block device is refused as above. The engine's.
  kGenericNodeOnly,
  // Either, for reports such as `nvkv-cli info` (a block node gives no zone model).
  kAnyNode,
};

struct DeviceOptions {
  Backend backend = Backend::kAuto;
  RingOptions ring;
  BufferPoolOptions buffers;
  // Regular files only: when the file does not exist, create it with this size (0: do not
  // create; a missing file is then kNotFound). An existing file keeps its size.
  uint64_t create_bytes = 0;
  // Write the whole new file once at creation (see file_open.cc ZeroFill for why).
  bool zero_fill_on_create = true;
  // The device must hold at least this many bytes, else kFailedPrecondition ("too small").
  uint64_t min_bytes = 0;
  // Open for reading only: O_RDONLY (a file the user may only read opens), no file is created
  // (create_bytes must be 0), and the device refuses writes and flushes (kFailedPrecondition).
  bool read_only = false;
  // Claim the device (device_lock.h): exclusively (flock, on both nodes of an NVMe namespace,
  // and O_EXCL on a block device), or with read_only a shared lock that other read-only openers
  // share and a writer's exclusive claim excludes. An opener the claim keeps off gets
  // kFailedPrecondition, after waiting up to lock_wait_ms.
  bool lock_device = true;
  uint32_t lock_wait_ms = 1000;
  // Allow falling back to pread/pwrite when io_uring is unavailable (files only).
  bool allow_sync_fallback = true;
  // Which zoned devices open (with info().zoned set; writes must then follow the zone rules).
  ZonedAccess zoned_access = ZonedAccess::kRefuse;
};

// Opens `path` with the backend chosen by `options.backend`.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& path,
                                                   const DeviceOptions& options);

// Removes the file an open created (info.created), once every queue of that device is closed:
// the caller could not make a store of it, and leaves nothing behind. Nothing otherwise.
void RemoveCreatedFile(const DeviceInfo& info);

// Blocking helpers for cold paths (superblocks, tests): enqueue one request, submit, reap until
// it is done. Other requests in flight on the queue complete (and run their callbacks) meanwhile.
absl::Status ReadBlocks(Device& device, uint64_t lba, uint32_t lba_count, const Buffer& buffer);
// `placement`: IoRequest::placement.
absl::Status WriteBlocks(Device& device, uint64_t lba, uint32_t lba_count, const Buffer& buffer,
                         bool fua = false, uint8_t placement = 0);
absl::Status FlushDevice(Device& device);
// Zone `zone` of a zoned device (info().zones) emptied (reset), or made full where its write
// pointer stands (finish: it no longer counts among the device's open and active zones).
absl::Status ResetZone(Device& device, uint64_t zone);
absl::Status FinishZone(Device& device, uint64_t zone);
// Reports `count` zones of a zoned device (info().zones) from zone `first` on (as many as there
// are), a page of the report at a time. kFailedPrecondition without a zone model.
absl::StatusOr<std::vector<ZoneDescriptor>> ReportZones(Device& device, uint64_t first,
                                                        uint64_t count);
// Reports every zone.
absl::StatusOr<std::vector<ZoneDescriptor>> ReportAllZones(Device& device);
// Reports one zone (its state and write pointer now).
absl::StatusOr<ZoneDescriptor> ReportZone(Device& device, uint64_t zone);
// The same through `page`, a page buffer of the caller's (for a caller that may find none free
// in the pool).
absl::StatusOr<ZoneDescriptor> ReportZone(Device& device, uint64_t zone, const Buffer& page);
// Runs `request` (op, lba, lba_count and buffer set; on_done and context are the helper's) to its
// end: the queue's error, else the request's own outcome (and, for a Zone Append, where it
// landed in appended_lba).
absl::Status RunOne(Device& device, IoRequest& request);
// Runs every request of `requests` (op, lba, lba_count and buffer set; on_done and context are
// the helper's), as many in flight at once as the queue takes, and returns when all are done.
// Each request's own outcome is in its `status`; the returned status is the queue's (a failed
// Reap), after which requests may not have run.
absl::Status RunAll(Device& device, std::span<IoRequest> requests);

// Checks the parts of a request every backend checks the same way (length, bounds, alignment,
// no write or flush on a read-only device).
absl::Status ValidateRequest(const DeviceInfo& info, const IoRequest& request);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_DEVICE_H_
