// nvkv::DB: an embeddable, persistent map from byte-string keys to byte-string values, stored
// in a log-structured format on a raw NVMe namespace, a block device or a regular file.
//
//   nvkv::Options options;
//   options.capacity_bytes = 256 << 20;
//   absl::StatusOr<std::unique_ptr<nvkv::DB>> db = nvkv::DB::Open(options, "/var/lib/app/store");
//   if (!db.ok()) return db.status();
//   absl::Status s = (*db)->Put("key", "value");
//   absl::StatusOr<std::string> value = (*db)->Get("key");
//
// Keys are 1..kMaxKeyBytes bytes, values 0..max_value_bytes() bytes; both may hold any bytes.
//
// Thread contract: a DB is safe for concurrent use without external locking. Any number of
// threads may call Put, Delete, Write, Get, MultiGet, Scan, NewIterator, Flush, CompactAll,
// Check, ForEachLive and GetStats at once; there is no DB-wide lock (keys are spread over shards
// by hash, each with its own lock). Exceptions:
//   - GetAsync, PutAsync, DeleteAsync, WriteAsync, Poll, PendingReads and PendingWrites act on
//     the calling thread's own queue: a read or write started on a thread completes (runs its
//     callback) only in a Poll on that same thread.
//   - Close() and the destructor must not run concurrently with any other call on the DB, and
//     every Iterator of the DB must be destroyed before the DB is.
// Each thread that reads gets its own io_uring queue (a ring, a file descriptor and registered
// buffers) the first time it reads from a DB, one per DB, and gives it back when it exits, so
// threads may come and go; a DB closed first has released it already.
//
// One writer at a time, or any number of readers: Open takes an exclusive lock on the path, so
// a second Open of the same store (from this or another process) fails with
// kFailedPrecondition until the first DB is closed. On an NVMe namespace the lock covers both
// its nodes (/dev/ngXnY and /dev/nvmeXnY), and a block device is also claimed with O_EXCL,
// which keeps mkfs and mounts off it (and keeps nvkv off a device that is mounted). An Open
// with Options::read_only takes a shared lock instead: read-only DBs of one store may be open
// at once (in any processes), but not beside a writer; they write nothing to the device, and
// their writes fail with kFailedPrecondition.
//
// Errors are returned, never thrown, and nothing aborts on bad input or device errors. Every
// method may also return kFailedPrecondition after Close(). When a write's durability becomes
// unknown (a device write or flush failed), the DB refuses every later write with
// kFailedPrecondition: close it and open the store again, which recovers the durable state.
#ifndef NVKV_DB_H_
#define NVKV_DB_H_

#include <cstddef>
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
#include "nvkv/iterator.h"
#include "nvkv/options.h"
#include "nvkv/stats.h"
#include "nvkv/write_batch.h"

namespace nvkv {

namespace kv {
struct WriteOp;  // the engine's form of a write (db.cc turns batches into it)
}  // namespace kv

class DB {
 public:
  // Longest key, in bytes. Keys must also be non-empty.
  static constexpr size_t kMaxKeyBytes = 1024;

  // Opens the store at `path`: an NVMe generic character device (/dev/ngXnY), a block device or
  // a regular file. Formats it when it holds no store and options.create_if_missing is set; a
  // missing regular file is created with options.capacity_bytes. Then rebuilds the index from
  // the log, which recovers every durable write.
  // On a zoned namespace (NVMe ZNS, through its generic node only) the store's segments are its
  // zones (kv/FORMAT.md "Zoned namespaces"): the log goes by Zone Append, compaction empties a
  // zone by resetting it, and the store keeps within the namespace's open and active zone
  // limits. Open there reads the whole log (summaries and checkpoints are not built on zones
  // yet), and Checkpoint() is refused. Unless nvkv was built with
  // -DNVKV_MUTEX_DEADLOCK_DETECTION=ON (its sanitizer builds are), the process's first Open
  // turns Abseil's mutex deadlock detection off for the whole process, whatever mode was set
  // before (it records every lock taken, at a cost on every operation); a mode set after that
  // Open stays.
  // Errors:
  //   kNotFound            path missing and !create_if_missing
  //   kAlreadyExists       a store is there and error_if_exists
  //   kFailedPrecondition  the store is open elsewhere (by this or another process), still so
  //                        after waiting options.lock_wait_ms; the path holds data that is not
  //                        an nvkv store (see force_format); the store was written by a newer
  //                        nvkv
  //   kNotFound            also: a path under /dev that does not exist (no store file is ever
  //                        created there)
  //   kDataLoss            both superblocks are damaged or unreadable
  //   kUnavailable         pages of the log cannot be read (the message names them): open again
  //                        once the device reads them, or with options.open_degraded to go on
  //                        without their records
  //   kInvalidArgument     an option is out of range; the path is a directory, a FIFO, a socket
  //                        or a character device other than an NVMe generic one; the path is
  //                        a zoned namespace's block node (the message names its generic node);
  //                        on a zoned namespace, a segment_bytes or page_bytes its zones do not
  //                        take
  //   kFailedPrecondition  also: a zoned namespace whose open or active zone limits cannot
  //                        hold a store of options.shard_count shards (the message says how
  //                        many can), whose zones hold too little for the store's metadata or
  //                        are too few, or whose zone model is not the one the store was
  //                        formatted for; a zoned store's superblock on a device without zones
  //                        (and the other way round)
  //   kPermissionDenied, kResourceExhausted (no space to create the file, or a file size limit
  //                        below it; for NVMe passthrough, a locked-memory limit too low for its
  //                        rings: the message says how to raise it; no memory for recovery's
  //                        tables or key filters, no thread for the writer or compaction, under
  //                        an address-space or process limit), kUnimplemented (the kernel
  //                        lacks a required io_uring feature), other device errors (a
  //                        segment none of whose pages the device can read)
  static absl::StatusOr<std::unique_ptr<DB>> Open(const Options& options,
                                                  const std::string& path);

  // What the device (or file) at `path` is, without opening a store there: its geometry and, on
  // a zoned namespace, its zone model and how many zones are in each state (DeviceStats::zones).
  // Works on a device Open refuses (a zoned namespace's block node) and on one that holds no
  // store; writes
  // nothing. Errors: those of Open's for the path itself (kNotFound, kPermissionDenied,
  // kInvalidArgument for a directory, ...), and kFailedPrecondition while a store is open there
  // for writing.
  static absl::StatusOr<DeviceStats> InspectDevice(const std::string& path);

  // The payload (absl::Status::GetPayload, empty value) of exactly those Open errors that
  // options.force_format would override: data that is not an nvkv store (kFailedPrecondition)
  // and both superblocks damaged (kDataLoss). Other errors with those codes, a store in use or
  // a device error, do not carry it.
  static constexpr char kFormatRefusedPayload[] = "nvkv/format-refused";

  // Closes the DB if Close() was not called; errors are dropped (call Close() to see them).
  ~DB();
  DB(const DB&) = delete;
  DB& operator=(const DB&) = delete;

  // ----- Writes. -----
  // All of them: OK means the write is applied and visible to every later read in any thread,
  // and durable as options.durable says (see WriteOptions). Errors:
  //   kInvalidArgument     empty key, key over kMaxKeyBytes, value over max_value_bytes(),
  //                        batch over max_batch_bytes(); nothing is written
  //   kResourceExhausted   the store is full (compaction cannot free enough space); returned
  //                        at once when compaction has nothing to reclaim. Puts may fill
  //                        Stats::usable_bytes: every segment but one per shard and two more,
  //                        kept free so that compaction and deletes can always run (on a
  //                        16 MiB store of 4 shards, with the segments Options sizes to it,
  //                        57 of its 63 segments: 89%), and but those holding the checkpoint
  //                        recovery starts from (Stats::segments_checkpoint). Also when the in-memory index
  //                        cannot grow for a new key (memory refused, or a shard's table of
  //                        2^32 slots full): nothing of the write is applied, and writes that
  //                        add no key (overwrites, deletes) still work
  //   kFailedPrecondition  the DB is closed or was opened read-only, or an earlier write
  //                        failed (see above)
  //   kDataLoss, kInternal, other codes: the device failed; the write may or may not be durable,
  //                        and the DB refuses further writes

  // Sets `key` to `value`, replacing any earlier value.
  absl::Status Put(std::string_view key, std::string_view value,
                   const WriteOptions& options = {});

  // Removes `key`. Deleting a key that is absent is OK; with options.durable it still returns
  // only once the key's absence is durable (it flushes: an earlier delete of the key by any
  // thread may not be durable yet).
  absl::Status Delete(std::string_view key, const WriteOptions& options = {});

  // Applies every entry of `batch` atomically, in order: after any crash all of them are
  // visible or none is. An empty batch is OK and writes nothing.
  absl::Status Write(const WriteBatch& batch, const WriteOptions& options = {});

  // ----- Asynchronous writes. -----
  // PutAsync, DeleteAsync and WriteAsync do what Put, Delete and Write do, but return once the
  // write is applied (visible to every later read, on any thread) without waiting for it to be
  // durable, so that one thread can keep many durable writes in flight and the log writer packs
  // them into shared pages, written and flushed together (group commit). On OK, `done` runs
  // exactly once, on this thread, inside a later Poll() on this thread (never inside the call
  // itself), when the write is as durable as options.durable asks: with durable=true, when it
  // is on stable media exactly as an OK from Put would promise; with durable=false, at the next
  // Poll. Its status is OK, or the error that left the write's durability unknown (a device
  // write or flush failed: the DB then refuses further writes, as for Put). Callbacks that
  // start more writes may see theirs called back in the same Poll.
  // Order: writes from one thread apply in call order (of the same key, the later call's value
  // wins), whether synchronous or not, and reads see them in that order; callbacks of durable
  // writes may run in any order, since durability is per write.
  // Errors returned by the call itself (then `done` never runs): those of Put, Delete and Write,
  // with the same meaning (nothing is written, except that a device error leaves the write's
  // durability unknown, as for Put); kUnavailable when this thread already has
  // Options::write_queue_depth asynchronous writes pending (Poll, then retry; nothing is
  // written); kInvalidArgument for an empty callback.
  // The call may still wait, as Put does, where the write cannot go ahead without it: in
  // IndexMode::kHash, a Delete, or an overwrite of a key the record cache does not hold and
  // whose page is not in memory, may first read the key's page (the read the Put would make);
  // a value too large for one page is written by the call itself (durably, when asked); a full
  // store waits for compaction; a shard whose page buffers are all in flight waits for one
  // (Options::page_buffers_per_shard).
  // REQUIRES: every other thread polls until its PendingWrites() (and PendingReads()) is 0
  // before Close() runs. A thread that exits with writes pending, or that closes the DB itself
  // with writes of its own pending, abandons their callbacks (destroyed without running); the
  // writes themselves are applied, and durable once Close() returns OK.
  absl::Status PutAsync(std::string_view key, std::string_view value,
                        std::function<void(absl::Status)> done, const WriteOptions& options = {});
  absl::Status DeleteAsync(std::string_view key, std::function<void(absl::Status)> done,
                           const WriteOptions& options = {});
  absl::Status WriteAsync(const WriteBatch& batch, std::function<void(absl::Status)> done,
                          const WriteOptions& options = {});

  // Asynchronous writes started on this thread whose callbacks have not run yet.
  uint32_t PendingWrites();

  // ----- Reads. -----
  // Damage. A page the media damaged, or one the device fails to read (an I/O or media error,
  // Stats unreadable_pages), loses only its own records: recovery and compaction skip it and
  // keep everything else (Stats recovery_damaged_pages, and Check() names the page), drops a batch
  // with a record on it whole, and never frees a segment whose damaged pages hold records the
  // index still points at (Stats segments_retained). A key whose record is on a damaged page
  // reads as kDataLoss (or, after a reopen, as its older value or kNotFound), and writing or
  // deleting the key repairs it. A store may be reopened in either index mode whichever wrote it.
  //
  // A read sees every write that returned before it started, durable or not; a value is read
  // atomically (never part of one write and part of another).

  // The value of `key`. Errors: kNotFound when absent (never written or deleted);
  // kInvalidArgument for an empty or too long key; kDataLoss when the page holding it is
  // damaged; kFailedPrecondition after Close(); other codes for device errors.
  absl::StatusOr<std::string> Get(std::string_view key);

  // Reads many keys at once, with all device reads in flight together. Result i answers keys[i]
  // exactly as Get(keys[i]) would (kNotFound, kInvalidArgument, ...).
  std::vector<absl::StatusOr<std::string>> MultiGet(std::span<const std::string_view> keys);

  // Starts reading `key` on this thread's read queue and returns at once. A read that needs the
  // device is queued, not yet sent: the next Poll() on this thread submits every read queued
  // since, in one system call, before it waits (Poll(0) submits them without waiting), so that
  // reads started together reach the device together. On OK, `done` runs exactly once with what
  // Get(key) would return, on this thread, inside a later Poll() on this thread (never inside
  // GetAsync itself, even when the value is in memory). On error `done` never runs. Errors:
  // kInvalidArgument (bad key), kUnavailable (this thread already has
  // Options::read_queue_depth reads in flight: Poll, then retry), kFailedPrecondition after
  // Close().
  // REQUIRES: the thread polls until PendingReads() is 0 before Close(). A thread that exits
  // with reads pending abandons them: their `done` callbacks are destroyed without running, and
  // the thread's queue is released once the device has finished them.
  absl::Status GetAsync(std::string_view key,
                        std::function<void(absl::StatusOr<std::string>)> done);

  // Drives this thread's asynchronous reads and writes: submits the reads GetAsync queued, then
  // waits until at least `min_complete` callbacks have run, reads' and writes' together (0:
  // never waits; more than PendingReads() + PendingWrites(): waits for all), runs every
  // callback that is due on this thread, and returns how many ran. While only reads are pending,
  // each wait asks the kernel to wake the thread once as many reads completed as callbacks are
  // still wanted (at most the reads in flight): Poll(8) at a depth of 32 costs one wake-up per
  // eight reads. With asynchronous writes pending it wakes at each read's completion and as
  // soon as a write becomes durable. Errors come from the read queue itself (a failed read
  // or write is reported to its callback instead).
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete);

  // Reads started by GetAsync on this thread whose callbacks have not run yet.
  uint32_t PendingReads();

  // ----- Ordered access (IndexMode::kOrdered only). -----

  // An iterator over the whole store; see nvkv/iterator.h for its consistency. Unpositioned:
  // call Seek or SeekToFirst. With IndexMode::kHash the iterator is never valid and its
  // status() is kFailedPrecondition. The DB must outlive it.
  std::unique_ptr<Iterator> NewIterator();

  // Replaces *out with the pairs with start <= key < end (empty `end`: no upper bound) in key
  // order, at most `limit` of them. Like an Iterator, each pair is read atomically but the
  // result is not a point-in-time snapshot. Errors: kFailedPrecondition with IndexMode::kHash
  // or after Close(); device errors (*out is then unspecified).
  absl::Status Scan(std::string_view start, std::string_view end, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out);

  // ----- Maintenance. -----

  // Makes every write that returned before this call durable, including non-durable ones (on a
  // read-only DB there are none: OK). Errors: as for writes (a failed flush leaves durability
  // unknown and stops later writes).
  absl::Status Flush();

  // Writes a checkpoint of the index now, as the engine does on its own while it runs
  // (Options::checkpoint_log_ratio) and at Close: once it returns OK, Open after a crash reads
  // that checkpoint and only the log written after it. Makes every earlier write durable first
  // (as Flush), also when it then fails for want of room or for a store that writes none;
  // writes wait while it is taken into memory, not while it is written (they do not become
  // durable by it). Errors: kFailedPrecondition after Close() or on a read-only DB (nothing is
  // made durable: there is nothing to), from inside a ForEachLive visitor (nothing either), or
  // after an Open that went on without pages it could not read (Options::open_degraded), or on
  // a zoned namespace (not built there yet);
  // kResourceExhausted when the free segments cannot hold it (the last one stays in use);
  // device errors (a failed flush: as for Flush).
  absl::Status Checkpoint();

  // Cleans every segment that holds dead records, now; returns when done. Background
  // compaction makes this unnecessary in normal operation. Errors: kFailedPrecondition after
  // Close() or on a read-only DB, device errors.
  absl::Status CompactAll();

  // Reads every page of the store: checks both superblocks, every page's checksum, the records
  // of every segment's log, and the index against the log (every live record is read back
  // through Get's path and compared, and every index entry must lead to a live record). Reads
  // the whole device: slow on big stores. Runs beside other calls, but background compaction
  // waits until it is done, and the index cross-check is skipped (a note says so) when writes
  // ran meanwhile. Returns the report even when it lists problems: an OK status means the check
  // ran, report.ok() that it found nothing wrong. Errors: kFailedPrecondition after Close() or
  // from inside a ForEachLive visitor; device errors that stop the check (a segment that cannot
  // be read is a problem in the report, not an error).
  absl::StatusOr<CheckReport> Check(const ProgressCallback& progress = nullptr);

  // Calls `visit` once with every live key and its value, in any index mode: segment by segment
  // in the order of the log, not in key order. Each pair is read atomically. Not a snapshot: a
  // key that no write touches during the walk is visited exactly once, but a key written
  // meanwhile (by `visit` too) may be visited with its old value, its new one, both, or not at
  // all. Background compaction waits until the walk is done. `visit` may read and
  // write the DB, but must not call CompactAll, Checkpoint, Check or ForEachLive (they fail with
  // kFailedPrecondition inside it). The views passed to `visit` are valid only during the call.
  // Returns the first error `visit` returns (the walk stops there). Errors: kFailedPrecondition
  // after Close() or when the DB refuses writes after a failed device write (pages not yet
  // written cannot be read back); device errors.
  absl::Status ForEachLive(
      const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
      const ProgressCallback& progress = nullptr);

  // Counters and configuration in force. After Close(): as they were when Close() began.
  Stats GetStats();

  // Flushes every write, stops the background threads, writes a checkpoint of the index and of
  // where each log head stands (so that the next Open reads that instead of the log, and goes
  // on writing in the same segments: kv/FORMAT.md "Checkpoint"), and releases the path (another
  // Open may then succeed).
  // Every later call fails with kFailedPrecondition, including a second Close(). An error means
  // the last writes may not be durable. (A checkpoint that cannot be written, for want of free
  // space or by a device error, is no error: every write is durable before it, and the next
  // Open reads the log instead, the segments being filled whole, as after a crash.)
  // REQUIRES: no other call on this DB is in progress.
  absl::Status Close();

  // ----- Limits of this store (they follow from its segment size; fixed while open). -----

  // Largest value, in bytes: 1 MiB, or a quarter of a segment's payload if smaller.
  uint32_t max_value_bytes() const;
  // Largest WriteBatch, in log bytes (compare WriteBatch::ApproximateSize()). Every batch up to
  // it is written, whatever the sizes of its entries, as long as each fits one page: a value
  // over a page's payload (4,056 bytes with its key per 4 KiB page) goes in a batch of its own,
  // and in a batch of two or more entries it is kInvalidArgument (nothing written). A batch's
  // entries go to consecutive pages of one log, packed whole (an entry never straddles two
  // pages), and all those pages are taken at once, from one segment and from the page buffers
  // of one shard (Options::page_buffers_per_shard). Entries of just over half a page take a
  // page each, so the limit is half of the smaller of the two, in pages' payload (4,056 bytes
  // per 4 KiB page): 16 pages' payload, 64,896 bytes, with the default options. One exception,
  // in either index mode: two keys whose 32-bit index tags collide cannot share a page; if that
  // takes a batch near the limit past what a shard holds, Write fails with kInvalidArgument
  // (nothing is written).
  uint64_t max_batch_bytes() const;

 private:
  struct Rep;
  explicit DB(std::unique_ptr<Rep> rep);
  // The entries of `batch` as the engine's ops (views into the batch), each checked.
  absl::Status BatchOps(const WriteBatch& batch, std::vector<kv::WriteOp>* ops) const;

  std::unique_ptr<Rep> rep_;
};

}  // namespace nvkv

#endif  // NVKV_DB_H_
