// The YCSB client: load and run phases over a Store (store.h: nvkv, or a peer), with client
// threads that each keep up to `queue_depth` operations in flight (1 for the peers).
//
// How a client thread works (closed loop, like YCSB's ClientThread, but asynchronous):
//   - it issues operations until `queue_depth` are in flight or its share of the operation
//     count is issued. A read, an update and a read-modify-write start with Store::GetAsync and
//     stay in flight; an insert is a Store::PutAsync that stays in flight until the store calls
//     back (as durable as nvkv.durable asks); a scan is synchronous (Store::Scan);
//   - every nvkv.submitbatch reads (default 0: never) Store::Poll(0) pushes them to the
//     device; then Store::Poll(1) submits what is still queued and waits for at least one
//     completion, read or write (one io_uring_enter); the callbacks only note which slot
//     finished, and the thread finishes those operations after Poll returns: a read checks the
//     record; an update (writeallfields=false, YCSB's default) replaces one field of the record
//     it read and writes it back with Store::PutAsync, as YCSB's RocksDB binding does (with
//     Put), and stays in flight until the write calls back; a read-modify-write does the same
//     and records READ, UPDATE and READ-MODIFY-WRITE. With writeallfields=true an update is a blind PutAsync of a
//     whole new record. The peers do each PutAsync synchronously (store.h), so for them this is
//     YCSB's loop.
// Latency is measured from the issue of an operation to its end on the client thread (a write's
// callback), so time a completed operation waits while the thread is busy counts (as in YCSB).
//
// Durability: run-phase writes use WriteOptions::durable = nvkv.durable (default true). The load
// phase uses nvkv.load.durable (default false, like a bulk loader) and ends with Store::Flush(),
// whose time is part of the load's elapsed time: when the load phase reports, every record is
// durable.
//
// Thread contract: RunPhase is called from one thread and starts its own client threads.
#ifndef NVKV_BENCH_YCSB_RUNNER_H_
#define NVKV_BENCH_YCSB_RUNNER_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "bench/ycsb/workload.h"
#include "bench/ycsb/store.h"
#include "nvkv/db.h"
#include "util/latency_histogram.h"

namespace nvkv::ycsb {

using ::nvkv::util::LatencyHistogram;

struct ClientOptions {
  uint32_t threads = 1;
  uint32_t queue_depth = 1;     // nvkv.queuedepth: operations in flight per client thread
  bool durable = true;          // nvkv.durable: run-phase writes
  bool load_durable = false;    // nvkv.load.durable: load-phase writes
  bool progress = true;         // a status line on stderr every second
  // nvkv.submitbatch: after this many reads started, Store::Poll(0) pushes them to the device at
  // once (like fio's iodepth_batch_submit) instead of with the next waiting Poll(1). 0 (the
  // default): never, so the reads of one refill go out together in the call that then waits;
  // 1 is fio's default, one system call per read.
  uint32_t submit_batch = 0;
  // nvkv.reapbatch: a client with nothing left to issue waits in Store::Poll for this many
  // callbacks (or those in flight, if fewer): one wake-up per batch of completions, like fio's
  // iodepth_batch_complete_min. 1 (the default): each completion is handled at once.
  uint32_t reap_batch = 1;
};

// Counters of the store over a phase (Store::GetStats after minus before; zero for the peers).
struct StoreDelta {
  uint64_t gets = 0, puts = 0;
  // page_reads includes key_check_page_reads: those of writes (hash mode), not of gets.
  uint64_t page_reads = 0, key_check_page_reads = 0;
  uint64_t pages_written = 0, page_write_commands = 0, verify_reads = 0, flushes = 0;
  uint64_t fua_writes = 0;
  uint64_t blind_writes = 0, settle_page_reads = 0;  // hash mode (nvkv/stats.h)
  uint64_t user_bytes_written = 0, device_bytes_written = 0, compaction_bytes_written = 0;
  // Zoned namespaces: zones compaction reset over the phase, and zones holding the store at its
  // end (nvkv/stats.h ZoneStats).
  bool zoned = false;
  uint64_t zone_resets = 0, zones_in_use = 0;
  // Host page bytes written per user byte over the phase (on zones the whole write
  // amplification: the device moves nothing of its own).
  double write_amplification() const {
    return user_bytes_written == 0 ? 0.0
                                   : static_cast<double>(device_bytes_written) /
                                         static_cast<double>(user_bytes_written);
  }
  uint64_t cache_hits = 0, cache_misses = 0;
  uint64_t checkpoints_written = 0;  // while running (Options::checkpoint_log_ratio)
  double checkpoint_seconds = 0, checkpoint_writes_held_seconds = 0;
  // Requests and system calls of the store's queues, by kind (Stats::queues).
  QueueKindCalls queues;
};

// The block device under the store over a phase, from /proc/diskstats (the whole device: on a
// shared machine other processes' I/O is in it too). Absent where the store is not on a block
// device that /proc/diskstats lists.
struct DiskDelta {
  bool valid = false;
  std::string name;                 // e.g. "vda"
  uint64_t reads = 0, writes = 0;   // requests completed (after merging in the block layer)
  uint64_t read_bytes = 0, write_bytes = 0;
  double avg_queue_depth = 0;       // weighted ms doing I/O / elapsed ms (iostat's aqu-sz)
};

struct PhaseResult {
  std::string phase;  // "load" or "run"
  uint32_t threads = 0;
  uint32_t queue_depth = 0;
  bool durable = false;
  double elapsed_s = 0;
  uint64_t operations = 0;  // operations finished (an RMW counts once)
  std::array<LatencyHistogram, kOpTypes> latency;
  std::array<uint64_t, kOpTypes> failures{};
  std::string first_error;
  StoreDelta store;
  DiskDelta disk;
  double cpu_user_s = 0;  // the whole process over the phase (getrusage), engine threads too
  double cpu_sys_s = 0;
  double ops_per_s() const { return elapsed_s > 0 ? operations / elapsed_s : 0; }
};

// Loads records [insertstart, insertstart + insertcount) with `threads` threads.
absl::StatusOr<PhaseResult> RunLoad(Store* db, const WorkloadConfig& config,
                                    const ClientOptions& options, SharedCounters* counters);

// Runs `operationcount` operations of the workload's mix, split over the threads.
absl::StatusOr<PhaseResult> RunTransactions(Store* db, const WorkloadConfig& config,
                                            const ClientOptions& options,
                                            SharedCounters* counters);

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_RUNNER_H_
