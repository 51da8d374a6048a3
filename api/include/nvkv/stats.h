// Stats: counters and configuration of an open store, from DB::GetStats(). Counters count since
// Open and never go down; "bytes" fields are bytes.
#ifndef NVKV_STATS_H_
#define NVKV_STATS_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nvkv/options.h"

namespace nvkv {

// Where the last Open's recovery started: every Open loads a base (maybe none) and reads the
// log written after it.
enum class RecoveryStart : uint8_t {
  kNewStore,        // this Open formatted the store: nothing to recover
  kCleanClose,      // the checkpoint a clean Close wrote; no log was written after it
  kBaseCheckpoint,  // the last checkpoint, and the log written after it (a crash came since)
  kLog,             // no checkpoint (none, or not usable): the whole log
};

// What the store runs on (the backend Open chose; see Backend).
enum class DeviceKind : uint8_t {
  kNvmePassthrough,  // NVMe generic character device, passthrough commands
  kDirectFile,       // regular file or block device, O_DIRECT on io_uring
  kSyncFile,         // regular file or block device, pread/pwrite
  kMemory,           // RAM (tests)
};

// "nvme-passthrough", "direct-file", "sync-file", "memory".
const char* DeviceKindName(DeviceKind kind);
// "hash", "ordered".
const char* IndexModeName(IndexMode mode);
// "auto", "fua", "flush".
const char* DurableWritesName(DurableWrites method);
// "new_store", "clean_close", "base_checkpoint", "log".
const char* RecoveryStartName(RecoveryStart start);

// The io_uring features a queue ended up with: what Options asked for, minus what the kernel
// refused (a refusal is also described in DeviceStats::notes).
struct RingFeatures {
  uint32_t queue_depth = 0;         // requests in flight at most
  uint32_t sq_entries = 0;          // submission ring size
  bool sqe128_cqe32 = false;        // big SQEs and CQEs (NVMe passthrough needs them)
  bool single_issuer = false;       // IORING_SETUP_SINGLE_ISSUER
  bool defer_taskrun = false;       // IORING_SETUP_DEFER_TASKRUN
  bool coop_taskrun = false;        // IORING_SETUP_COOP_TASKRUN (when DEFER_TASKRUN is refused)
  bool registered_ring_fd = false;  // Options::register_ring_fd in force
  bool registered_file = false;     // Options::register_file in force
  bool fixed_buffers = false;       // Options::fixed_buffers in force
  bool sqpoll = false;              // Options::sqpoll in force
  bool iopoll = false;              // Options::iopoll in force
};

// A zoned namespace's zones (NVMe ZNS): what the device reports of them, and how many are in
// each state when they were last reported.
struct ZoneStats {
  uint64_t zone_count = 0;
  uint64_t zone_bytes = 0;           // from one zone's start to the next's
  uint64_t zone_capacity_bytes = 0;  // what may be written of each (<= zone_bytes)
  uint32_t max_open = 0;             // zones open at once at most; 0: no limit
  uint32_t max_active = 0;           // zones open or closed at once at most; 0: no limit
  uint32_t max_append_bytes = 0;     // the largest Zone Append
  // By state, from a zone report (states_reported; else all 0).
  bool states_reported = false;
  uint64_t empty = 0;
  uint64_t open = 0;    // implicitly or explicitly
  uint64_t closed = 0;
  uint64_t full = 0;
  uint64_t read_only = 0;
  uint64_t offline = 0;
  // A store on the zones (DB::Stats): runs of log pages that landed elsewhere than the places
  // their positions name (appends completed out of order, or after a gap a cut left). Reads find
  // them through an in-memory table of these runs; 0 when every append landed in order.
  uint64_t place_runs = 0;
  uint64_t resets = 0;  // zones compaction emptied (reset) since Open
  // Zones that hold the store now: its segments not free and the two metadata zones (the rest
  // are empty, ready for a head). A zoned device moves no data of its own, so the bytes a store
  // writes are all the device writes: Stats::write_amplification is the whole of it there.
  uint64_t in_use = 0;
  // Zones the store keeps active (open or closed: being written) now, and the most it lets
  // itself keep (the smaller of max_open and max_active, or 2 per shard and 4 more without
  // limits: kv/FORMAT.md "Open and active zones").
  uint32_t active = 0;
  uint32_t active_budget = 0;
  // Segments whose zones the device took out of service (read-only or offline), each once
  // nothing the store needs was left in it: never written again, and not counted as capacity.
  uint64_t retired = 0;
};

// NVMe flexible data placement (FDP): the placement handles a namespace offers, and which of them
// a store's writes name, so that data of different lifetimes fills different reclaim units and the
// device need not move one to reclaim the other's space.
struct PlacementStats {
  // The placement identifiers the namespace lists (its reclaim unit handle status); empty
  // without FDP (not supported, not enabled for the namespace, or not an NVMe namespace).
  std::vector<uint16_t> ids;
  // A store's writes (DB::GetStats, when ids is not empty): the identifier the log's pages name
  // (records, compaction's copies, summaries, free markers) and the one the metadata names
  // (superblocks, the segment map, checkpoints); the same one when the namespace has one.
  uint16_t log_id = 0;
  uint16_t metadata_id = 0;
};

struct DeviceStats {
  DeviceKind kind = DeviceKind::kMemory;
  std::string path;
  uint32_t lba_bytes = 0;             // logical block size
  uint64_t lba_count = 0;             // capacity in logical blocks
  uint64_t capacity_bytes = 0;        // lba_count * lba_bytes
  uint32_t max_transfer_bytes = 0;    // largest single command; larger requests are split
  bool volatile_write_cache = false;  // durable writes need FUA or a flush
  bool block_device = false;
  uint32_t nsid = 0;                  // NVMe namespace id, 0 elsewhere
  // A zoned namespace (or zoned block device). Its zone model is known through the NVMe
  // generic node only (zones.zone_count 0 through a block node).
  bool zoned = false;
  ZoneStats zones;
  PlacementStats placement;
  RingFeatures ring;
  std::vector<std::string> notes;     // fallbacks taken at Open, one sentence each
};

// What one kind of the store's queues asked of the device since Open. A queue is one thread's
// io_uring (on the sync-file backend, its pread/pwrite/fdatasync calls); a call is a system call
// that pushed requests to the device, waited for completions, or both (with Options::sqpoll, a
// submission the polling thread picks up counts as a call too). Requests include the queue's
// waits for wake-up events; requests_submitted counts commands, of which a request larger than
// the device's largest transfer (DeviceStats::max_transfer_bytes) is several.
struct QueueCalls {
  uint64_t requests = 0;            // requests completed
  uint64_t calls = 0;               // system calls made
  uint64_t submitting_calls = 0;    // of those, the calls that pushed requests to the device
  uint64_t requests_submitted = 0;  // requests those calls pushed
  // Requests pushed per call that pushed any: how well submission is batched (1: every request
  // went out in a call of its own). 0 before the first.
  double requests_per_submitting_call() const {
    return submitting_calls == 0 ? 0 : static_cast<double>(requests_submitted) / submitting_calls;
  }
};

// Stats::queues: each kind of queue apart.
struct QueueKindCalls {
  QueueCalls reads;        // every thread's reads: Get, MultiGet, GetAsync, scans, key checks
  QueueCalls log_writes;   // the log writer: pages, segment map and summary pages, flushes
  QueueCalls compaction;   // victims read whole, settling reads, copies and free markers
  QueueCalls open;         // Open: superblocks, format, recovery
  QueueCalls checkpoints;  // checkpoints written while running and at Close
  QueueCalls check;        // DB::Check

  // Every kind with its name, in the order ToString and ToJson give them.
  std::array<std::pair<const char*, const QueueCalls*>, 6> by_name() const {
    return {{{"reads", &reads},
             {"log_writes", &log_writes},
             {"compaction", &compaction},
             {"open", &open},
             {"checkpoints", &checkpoints},
             {"check", &check}}};
  }
};

struct Stats {
  // Keys and memory. Hash mode: live_keys is the index's entries less `stale_entries`, the
  // estimated entries that blind overwrites (below) left behind and neither a delete nor
  // compaction has erased yet (exact unless two keys' hashes share their index tag; 0 after a
  // reopen). Ordered mode: exact, and stale_entries is 0.
  uint64_t live_keys = 0;
  uint64_t stale_entries = 0;
  uint64_t index_bytes = 0;           // memory taken by the in-memory index
  double index_bytes_per_key = 0;
  uint64_t read_queues = 0;  // per-thread read queues open: one per thread alive that has read

  // Operations.
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t gets = 0;
  uint64_t batches = 0;

  // Bytes written and write amplification.
  uint64_t user_bytes_written = 0;        // key + value bytes of acknowledged writes
  uint64_t device_bytes_written = 0;      // page bytes written, compaction included
  uint64_t compaction_bytes_written = 0;
  double write_amplification = 0;         // device_bytes_written / user_bytes_written

  // Device operations.
  uint64_t pages_written = 0;
  // Write commands that carried the log's pages: consecutive pages of a head that the log writer
  // finds together go in one (pages_written / page_write_commands pages each on average); a
  // large value's pages count as one.
  uint64_t page_write_commands = 0;
  // Pages read to answer Get, MultiGet, GetAsync and scans, and for key_check_page_reads.
  uint64_t page_reads = 0;
  // Of page_reads, those that hash-mode writes made to find their key's current record (the
  // hash index holds no keys): pages read per read operation are page_reads minus these, over
  // `gets`.
  uint64_t key_check_page_reads = 0;
  uint64_t flushes = 0;
  uint64_t fua_writes = 0;
  // Hash-mode writes that read their key's pages (key_check_page_reads) to find its current
  // record: deletes, and overwrites that could not be written blind.
  uint64_t verify_reads = 0;
  // Hash mode: overwrites written without reading the key's page (its first candidate was on the
  // device); they leave the key's older entry stale until compaction settles it, erasing
  // `stale_entries_settled` entries with `settle_page_reads` page reads outside its victims.
  uint64_t blind_writes = 0;
  uint64_t stale_entries_settled = 0;
  uint64_t settle_page_reads = 0;

  // The record cache (Options::cache_bytes). A hit is a Get, MultiGet or GetAsync answered
  // from it, or a hash-mode write that found its key's current record there; a miss, a lookup
  // that had to go to the index and the pages.
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t cache_evictions = 0;
  uint64_t cache_bytes = 0;     // held now, bookkeeping included
  uint64_t cache_entries = 0;   // keys held now
  uint64_t cache_capacity_bytes = 0;

  // Space.
  uint64_t capacity_bytes = 0;  // the log's segments, all of them
  // What puts may fill: capacity_bytes minus the segments kept free so that compaction (and
  // deletes) can always run (one per shard and two more), minus those holding the checkpoint
  // recovery starts from (segments_checkpoint), and minus each segment's last page (kept for
  // the marker compaction writes when it frees the segment; not on a zoned namespace, where a
  // reset frees a zone). Puts fail with kResourceExhausted once the live and dead records
  // compaction cannot reclaim reach it; live_bytes stays below it, as records are packed whole
  // into pages and, on a full store, the open segment of each shard but the one that ran out
  // may be partly unused.
  uint64_t usable_bytes = 0;
  uint64_t live_bytes = 0;      // held by live records (headers, keys and values)
  uint64_t segments_total = 0;
  uint64_t segments_free = 0;
  // Holding the checkpoint recovery starts from after a crash (the last one Open read or Close
  // wrote): not free, until a newer checkpoint replaces it. Puts never take its room; deletes
  // and compaction do when no other segment is free (and a crash then reads the log).
  uint64_t segments_checkpoint = 0;
  // Checkpoints written while the store ran (this session: kv/checkpointer.h), and those the
  // engine could not write on its own (no room, a device error).
  uint64_t checkpoints_written = 0;
  uint64_t checkpoints_failed = 0;
  // What the checkpoints written while running took, and of that the time writes waited for
  // them (while each was taken into memory, not while it was written), in seconds.
  double checkpoint_seconds = 0;
  double checkpoint_writes_held_seconds = 0;
  uint64_t segments_cleaned = 0;
  // Damage. A segment compaction cleaned but could not free, because records on its damaged
  // pages are still indexed (they read as kDataLoss until written again), is retained; it is
  // freed once no index entry points into it. Check() names each damaged page.
  uint64_t segments_retained = 0;
  uint64_t compaction_damaged_pages = 0;  // damaged pages met in compaction's victims
  // Pages the device could not read (an I/O or media error) while recovery or compaction read
  // whole segments, since Open: each counts as a damaged page too, and Check() names it.
  uint64_t unreadable_pages = 0;

  // The last Open's recovery.
  uint64_t recovery_pages_scanned = 0;
  // Segments the segment map says are free, which recovery did not read; and map pages it
  // could not read or verify (it read every segment they describe).
  uint64_t recovery_segments_skipped = 0;
  uint64_t recovery_map_pages_damaged = 0;
  // Segments whose summary recovery read instead of the segment; and summaries the map named
  // that it could not use (damaged, or the segment freed since: it read those segments).
  uint64_t recovery_segments_summarized = 0;
  uint64_t recovery_summaries_unused = 0;
  // Where recovery started; 1 in recovery_checkpoints_unused when the store had a checkpoint
  // that could not be used (damaged, or not agreeing with the segment map): the log was read
  // instead (kLog).
  RecoveryStart recovery_start = RecoveryStart::kNewStore;
  // Of the segments that base says hold a log, those compaction freed after it (recovery
  // forgot what it said of them).
  uint64_t recovery_base_segments_freed = 0;
  uint64_t recovery_checkpoints_unused = 0;
  std::string recovery_checkpoint_unused_why;  // why it was not used, in one line
  // Log heads that went on in the segments they were filling at that clean Close (from the
  // checkpoint), instead of taking fresh ones.
  uint64_t recovery_heads_resumed = 0;
  uint64_t recovery_records = 0;
  uint64_t recovery_batches_discarded = 0;  // torn batches dropped whole
  // Damaged pages inside a segment's log that recovery skipped (holes): their records are lost,
  // the records after them are recovered. Check() names them.
  uint64_t recovery_damaged_pages = 0;
  // The largest table of newest records recovery held for one shard beside the index it built:
  // the part of Open's peak memory that is freed when Open returns.
  uint64_t recovery_table_bytes = 0;
  // Passes recovery made over the log: more than one when its tables would not fit the memory
  // it may use (Options::recovery_memory_bytes), each reading the log again for a share of the
  // keys.
  uint32_t recovery_passes = 1;
  // Times recovery started again from nothing: its tables outgrew the memory it may use in the
  // passes planned (more passes then), or the checkpoint it started from could not be used after
  // all. recovery_pages_scanned and recovery_seconds count every start.
  uint32_t recovery_restarts = 0;
  double recovery_seconds = 0;

  // Layout and configuration in force.
  uint32_t page_bytes = 0;
  uint32_t pages_per_segment = 0;
  uint32_t shard_count = 0;
  IndexMode index_mode = IndexMode::kHash;
  // How durable writes reach stable media: kFua or kFlush, as Options::durable_writes chose
  // (never kAuto). Moot when device.volatile_write_cache is false.
  DurableWrites durable_writes = DurableWrites::kFua;
  DeviceStats device;
  // System calls and requests of each kind of queue (I/Os per call: batching of submission).
  QueueKindCalls queues;

  // Several lines of "name: value", for people.
  std::string ToString() const;
  // What the last Open's recovery read, in words: "from the clean-close checkpoint", "from the
  // log", "from the log (its checkpoint was not usable: why)" and so on.
  std::string recovery_source() const;
  // One JSON object with every field above, under the same names ("device", "ring", "queues"
  // and each queue kind nested).
  // Always valid UTF-8: a byte of the path or a note that is not part of well-formed UTF-8 is
  // written \ufffd; numbers that are not finite are written null.
  std::string ToJson() const;
};

}  // namespace nvkv

#endif  // NVKV_STATS_H_
