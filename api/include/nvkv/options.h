// Options that control an nvkv store, given to nvkv::DB::Open, and the options of single writes.
//
// DB::Open reads Options once; an open DB cannot change them. Each field says:
//   Default:  its value in a default-constructed Options;
//   Unit:     bytes, microseconds, ... when it is a quantity;
//   Scope:    "per Open"  the field may differ from one Open of a store to the next;
//             "at format" the field is used only when Open formats a new store; an existing store
//                         keeps the value it was formatted with and the field is ignored
//                         (DB::GetStats() reports the value in force).
// Out-of-range values make Open fail with kInvalidArgument.
#ifndef NVKV_OPTIONS_H_
#define NVKV_OPTIONS_H_

#include <cstdint>

namespace nvkv {

// How keys are indexed in memory. A store records the mode it was formatted with, which Open
// uses unless asked for the other: the index is rebuilt at every Open (from the clean-close
// checkpoint when it was written in the same mode, else from the log), so a store may be
// reopened with the other mode.
enum class IndexMode : uint8_t {
  // A hash table of ~8-10 bytes per key that holds no key bytes. Point reads and writes only:
  // DB::NewIterator() and DB::Scan() fail with kFailedPrecondition. An overwrite of a key that
  // is neither in the record cache nor on a page still in memory reads nothing: it leaves the
  // key's old index entry behind, 8 more bytes until compaction erases it (Stats::stale_entries).
  // A delete reads the key's pages to erase every entry it has.
  kHash,
  // Holds every key, in a B-tree and a hash table: more memory (the key itself plus about 50
  // bytes), exact point lookups without a page read, ordered iteration (DB::NewIterator) and
  // range scans (DB::Scan).
  kOrdered,
  // The mode the store was formatted with (kHash for a new store).
  kAsFormatted,
};

// Which segment compaction cleans next.
enum class CompactionPolicy : uint8_t {
  kCostBenefit,  // (1 - u) * age / (1 + u) as in LFS: prefers old, mostly dead segments
  kGreedy,       // the segment with the fewest live bytes
};

// How a durable write gets past the device's volatile write cache (a device without one needs
// neither: a completed write is durable). NVMe orders nothing among commands in flight, so either
// way a write counts as durable only once every earlier page of its log is too.
enum class DurableWrites : uint8_t {
  // Chosen by backend (Stats::durable_writes says which): kFua on every backend today, the
  // faster of the two where measured (bench/README.md, "Durable writes: FUA or flush").
  kAuto,
  // Each page a durable write waits on is written with FUA (NVMe Force Unit Access; RWF_DSYNC
  // on files): one command per page, no flush.
  kFua,
  // Pages are written without FUA; one flush then covers every page that completed before it,
  // so durable writes arriving while a flush is in flight share the next one (group commit).
  kFlush,
};

// How the store reaches the device or file named by the path given to DB::Open.
enum class Backend : uint8_t {
  // An NVMe generic character device (/dev/ngXnY) uses kNvmePassthrough; anything else
  // (regular file, block device) uses kDirectFile.
  kAuto,
  // NVMe commands through io_uring (IORING_OP_URING_CMD) on /dev/ngXnY; needs Linux 6.1+ and
  // read-write access to the character device.
  kNvmePassthrough,
  // O_DIRECT reads and writes through io_uring on a regular file or block device. Where io_uring
  // is unavailable (e.g. disabled by sysctl) Open falls back to kSyncFile when
  // allow_sync_fallback is set, and says so in Stats::device.notes.
  kDirectFile,
  // O_DIRECT pread/pwrite on a regular file or block device, one system call per page.
  kSyncFile,
};

struct Options {
  // -------------------------------------------------------------------------------------------
  // Behaviour

  // Create (and format) the store when the path does not exist. A regular file is created with
  // capacity_bytes; an existing empty device or file is formatted.
  // Default: true. Scope: per Open.
  bool create_if_missing = true;

  // Fail Open with kAlreadyExists when the path already holds an nvkv store.
  // Default: false. Scope: per Open.
  bool error_if_exists = false;

  // Format the path even when it holds data that is not an nvkv store (otherwise Open fails
  // with kFailedPrecondition rather than overwrite it).
  // Default: false. Scope: per Open.
  bool force_format = false;

  // Open the store for reading only. Open then takes a shared lock, so that several read-only
  // openers (in this and other processes: `nvkv-cli get`, `scan`, `check`, `stats`) may have
  // the store at once, but none beside a writer; it opens the device O_RDONLY (a file the user
  // may only read, or on a read-only file system, opens) and writes nothing, not at Open and
  // not at Close: it formats nothing (no store: kNotFound), leaves a damaged superblock copy as
  // it is (Check reports it; the next writer repairs it), runs no compaction and writes no checkpoint. Put, Delete, Write, their async
  // forms and CompactAll fail with kFailedPrecondition; Flush succeeds (nothing is unwritten).
  // A store that was not closed (a crash) is recovered in memory, as a writer would, each time.
  // Default: false. Scope: per Open.
  bool read_only = false;

  // What Open does when the device fails to read pages of the log (an I/O or media error that
  // persists when the page is read again alone). By default it fails (kUnavailable, naming the
  // pages): such a read may work later (a transient error, a controller reset, a path that
  // comes back), and nothing is lost by waiting. With open_degraded it opens without the
  // records of those pages, as it does past a damaged page, and counts them in
  // Stats::unreadable_pages; keys whose newest record was there read as their older value or as
  // absent, and a batch with a record there is not applied. So that those records may still come
  // back whole at a later Open that reads them: the store hands out sequences above anything
  // they could hold (a later write of one of their keys wins over them), compaction leaves their
  // segments as they are, and no checkpoint is written (DB::Checkpoint fails with
  // kFailedPrecondition; Close leaves the next Open to read the log). A damaged page (one that
  // reads but fails its checksum) never fails Open: its records are lost either way.
  // Default: false. Scope: per Open.
  bool open_degraded = false;

  // One process at a time may write a store: Open takes an exclusive lock on the device
  // (on an NVMe namespace, on both its nodes, and on a block device an O_EXCL claim too), or
  // with read_only a shared one, and waits up to this long when another holder keeps it off. A
  // process killed with the store open (kill -9, a crash) holds it until the kernel has torn
  // down its I/O queues, some 100 ms after it died; the lock's release is the sign that none of
  // its writes can still land. After the wait, Open fails with kFailedPrecondition ("in use by
  // another opener ... waited N ms").
  // 0: fail at once.
  // Default: 1000. Unit: milliseconds. Scope: per Open.
  uint32_t lock_wait_ms = 1000;

  // Size of the store file Open creates when the path is a missing regular file. An existing
  // file keeps its size (unless grow_store); a block device or NVMe namespace is used whole.
  // Default: 1 GiB. Unit: bytes. Scope: at format, and at an Open with grow_store.
  uint64_t capacity_bytes = uint64_t{1} << 30;

  // Grow the store at Open, keeping every key: a store file smaller than capacity_bytes is first
  // extended to it (the new part allocated and written with zeros), and then the store takes
  // every whole segment its file or device holds beyond its own (a file extended by other
  // means, a block device or namespace made larger). The superblocks record the new size, and
  // later Opens use it without this option. A store never shrinks: a capacity_bytes below the
  // file's size changes nothing. It is safe against a crash at any point: an Open after it
  // finds the store at its old size or at its new one, with all its data. Takes about a second
  // per GiB added to a file (the zeros), and a few page writes. Not with read_only.
  // Default: false (a store keeps the size it was formatted with). Scope: per Open.
  bool grow_store = false;

  // See IndexMode. A new store records kHash or kOrdered as given (kAsFormatted: kHash);
  // DB::GetStats().index_mode says which mode an Open chose.
  // Default: IndexMode::kAsFormatted. Scope: per Open; recorded at format.
  IndexMode index_mode = IndexMode::kAsFormatted;

  // A write made with WriteOptions::durable == false reaches the device at the latest this long
  // after it returned (or at the next Flush()), and is durable (flushed from a volatile write
  // cache too) within 2 x max_write_delay_us plus the device's write and flush time, whether or
  // not anyone waits for a durable write (when a flush takes longer than max_write_delay_us, add
  // one more flush time). Bounds what such writes can lose in a crash. The flushes this takes are
  // rate-limited: at most one in flight, each covering every page written before it, so a steady
  // non-durable load costs about one flush per max_write_delay_us, not one per page.
  // Default: 2000. Unit: microseconds. Scope: per Open.
  uint32_t max_write_delay_us = 2000;

  // See DurableWrites.
  // Default: DurableWrites::kAuto. Scope: per Open.
  DurableWrites durable_writes = DurableWrites::kAuto;

  // Clean segments on a background thread as space runs low. When false, only
  // DB::CompactAll() reclaims space, and writes fail with kResourceExhausted once the store is
  // full of live and dead records.
  // Default: true. Scope: per Open.
  bool background_compaction = true;

  // See CompactionPolicy.
  // Default: CompactionPolicy::kCostBenefit. Scope: per Open.
  CompactionPolicy compaction_policy = CompactionPolicy::kCostBenefit;

  // -------------------------------------------------------------------------------------------
  // Performance: layout of the store and memory

  // Size of a page, the unit of every write and read. A record larger than a page spans pages.
  // Power of two, 4096..65536, and a multiple of the device's logical block size.
  // Default: 4096. Unit: bytes. Scope: at format.
  uint32_t page_bytes = 4096;

  // Size of a segment, the unit compaction cleans. Also bounds record sizes: a value may take
  // at most a quarter of a segment (and 1 MiB), a WriteBatch at most half of one, in pages'
  // payload (see DB::max_value_bytes(), DB::max_batch_bytes()). Compaction keeps shard_count + 2
  // segments free (Stats::usable_bytes), so on a small store smaller segments leave more of it
  // usable. 0: sized to the store: 1 MiB, halved while the store would have fewer than 64
  // segments, down to 16 pages (a 16 MiB store gets 256 KiB segments: values up to ~64 KiB).
  // Otherwise a multiple of page_bytes, 16 pages to 8 MiB. On a zoned namespace a segment is a
  // zone's writable part, whatever its size: 0, or exactly that.
  // Default: 0 (1 MiB on stores of 64 MiB or more). Unit: bytes. Scope: at format.
  uint32_t segment_bytes = 0;

  // Keys are spread over this many shards by hash; each has its own lock, index and log head,
  // so more shards let more threads write at once. 1..64.
  // Default: 4. Scope: per Open.
  uint32_t shard_count = 4;

  // Pages each shard may have unwritten or in flight; the memory they take is allocated at
  // Open (page_bytes * page_buffers_per_shard * shard_count). Writers wait when it runs out.
  // A WriteBatch takes its pages at once from one shard's buffers, so this also bounds
  // DB::max_batch_bytes() (to half this many pages' payload). 8..1024.
  // Default: 32. Unit: pages. Scope: per Open.
  uint32_t page_buffers_per_shard = 32;

  // Reads in flight at most per reading thread: DB::GetAsync returns kUnavailable beyond it.
  // Default: 64. Scope: per Open.
  uint32_t read_queue_depth = 64;

  // Asynchronous writes pending at most per thread (started, callback not yet run):
  // DB::PutAsync, DeleteAsync and WriteAsync return kUnavailable beyond it. 1..65536.
  // Default: 64. Scope: per Open.
  uint32_t write_queue_depth = 64;

  // Memory for the record cache: the values of recently read and written keys, so that a Get
  // of a cached key reads no page and, in hash mode, a Put or Delete of one needs no page read
  // to find its current record. Counts everything the cache holds (keys, values, its own
  // bookkeeping); split evenly over the shards. Scan-resistant (S3-FIFO): a scan or a load
  // passes through without evicting keys that are read again. A value larger than a tenth of a
  // shard's share is not cached. A cached value is always the key's latest acknowledged one;
  // it keeps answering even if the media damages its page meanwhile (a read of the page would
  // fail with kDataLoss), until it is evicted or the store reopened. 0 turns the cache off.
  // Default: 32 MiB. Unit: bytes. Scope: per Open.
  uint64_t cache_bytes = uint64_t{32} << 20;

  // The most memory Open may use, beside the index it builds, to rebuild the index from the log
  // after a crash (its tables of the newest record of every key, about 30 bytes a key): a log
  // whose tables would take more is read in several passes, each for a share of the keys, which
  // reads the summaries and segments again each time (Stats::recovery_passes). Open after a
  // clean Close reads its checkpoint and needs none. 0: over a checkpoint recovery starts from
  // (the last one the engine wrote while running), a sixteenth of the index it holds, or 256 KiB
  // when that is more, so that Open's peak memory stays within the index plus a tenth of it;
  // without one (none written yet, one that could not be used, checkpoint_log_ratio 0) the
  // tables hold every key of the log and may take what memory allows, so that the log is read
  // once wherever it can be; and in both cases the tables, the index and the key filters
  // together within the memory the process may still take when Open starts, under its memory
  // cgroup's limit, RLIMIT_AS, RLIMIT_DATA and the machine's available memory (a process past a
  // cgroup's limit, or the machine's, is killed, not refused an allocation): where not even the
  // most passes fit, Open fails with kResourceExhausted saying how much it needs. A larger
  // budget takes fewer passes.
  // Default: 0. Unit: bytes. Scope: per Open.
  uint64_t recovery_memory_bytes = 0;

  // While it runs, the engine writes a checkpoint of the index (as Close does, see DB::Close)
  // once the log written since the last one reaches checkpoint_log_ratio times that
  // checkpoint's size, and at least checkpoint_min_log_bytes: Open after a crash then reads that
  // checkpoint and only the log written after it, within recovery_memory_bytes' share above. A
  // checkpoint writes about the index's size (10-20 bytes a key in hash mode); writes wait
  // only while it is taken into memory, where it stays while it is written (that much memory
  // more for that long). The ratio bounds what checkpoints add to the device's writes (a
  // ratio-th of the log's) and, with the minimum, how much log a crash leaves to read.
  // 0: never while running (Open after a crash reads the log written since the last clean
  // Close). 0..1024. See also DB::Checkpoint.
  // Default: 8. Scope: per Open.
  uint32_t checkpoint_log_ratio = 8;
  // Default: 64 MiB. Unit: bytes of log. Scope: per Open.
  uint64_t checkpoint_min_log_bytes = uint64_t{64} << 20;

  // -------------------------------------------------------------------------------------------
  // Performance: device and io_uring

  // See Backend.
  // Default: Backend::kAuto. Scope: per Open.
  Backend backend = Backend::kAuto;

  // Fall back to pread/pwrite (Backend::kSyncFile) when io_uring is unavailable, instead of
  // failing Open. Files and block devices only.
  // Default: true. Scope: per Open.
  bool allow_sync_fallback = true;

  // Ask the kernel for IORING_SETUP_SINGLE_ISSUER with DEFER_TASKRUN (COOP_TASKRUN when the
  // kernel refuses): completions are processed only when nvkv reaps them. Each queue is only
  // ever used by one thread, so this is safe; turn it off only to compare.
  // Default: true. Scope: per Open.
  bool single_issuer = true;

  // Register each ring's file descriptor (saves a file lookup per io_uring_enter).
  // Default: true. Scope: per Open.
  bool register_ring_fd = true;

  // Register the device's file descriptor (IOSQE_FIXED_FILE: saves a reference per request).
  // Default: true. Scope: per Open.
  bool register_file = true;

  // Register the page buffers with the kernel (fixed buffers: no page pinning per request).
  // Counts against RLIMIT_MEMLOCK; the queue falls back to unregistered buffers when refused.
  // Default: true. Scope: per Open.
  bool fixed_buffers = true;

  // A kernel thread polls each submission queue, so submitting needs no system call, at the
  // cost of a CPU spinning while I/O is in progress.
  // Default: false. Scope: per Open.
  bool sqpoll = false;

  // With sqpoll: how long the kernel thread spins idle before it sleeps.
  // Default: 1000. Unit: milliseconds. Scope: per Open.
  uint32_t sqpoll_idle_ms = 1000;

  // Busy-poll completions from the device instead of taking interrupts. Needs NVMe poll queues
  // (nvme.poll_queues=N); not usable on regular files, whose flushes it cannot poll.
  // Default: false. Scope: per Open.
  bool iopoll = false;
};

// Options of one Put, Delete or Write.
struct WriteOptions {
  // true: the write is on stable media when the call returns OK (its page, and every earlier
  //   page of the same log, were written with FUA or written and then flushed). A crash or power
  //   loss after that loses nothing of it. For DB::PutAsync, DeleteAsync and WriteAsync: when
  //   its callback runs with OK (the same promise, made later).
  // false: the write is in memory when the call returns OK, and visible to readers at once. It
  //   reaches the device within Options::max_write_delay_us or at the next DB::Flush(), and is
  //   durable once a later durable write or DB::Flush() has returned OK, and at the latest
  //   within 2 x Options::max_write_delay_us plus the device's write and flush time (see
  //   there). A crash or power loss before then may lose it; each lost Write loses all of its
  //   batch, never part of it. Which of several non-durable writes survive is not specified: do
  //   not assume that a write surviving implies every earlier non-durable write survived.
  // Default: true.
  bool durable = true;
};

}  // namespace nvkv

#endif  // NVKV_OPTIONS_H_
