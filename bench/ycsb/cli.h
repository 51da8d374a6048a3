// The nvkv-ycsb command line, invoked as YCSB's bin/ycsb is:
//
//   nvkv-ycsb [-load | -run | -t] -P workloads/workloada [-P more] [-p name=value]...
//             [-threads T] [--db PATH] [--engine nvkv|rocksdb|lmdb] [--keep] [--json]
//             [--svg FILE] [--quiet]
//
// -load runs the load phase only, -run (or YCSB's -t) the transaction phase only; with neither
// both run, load first. -p settings override the -P files whatever their order. Besides the
// core workload's properties (workload.h) it reads:
//   nvkv.queuedepth=N      operations in flight per client thread (default 1: YCSB's
//                          synchronous client; reads, updates and RMWs go through GetAsync)
//   nvkv.submitbatch=N     push started reads to the device with Poll(0) every N reads
//                          (default 0: all at once with the next waiting Poll(1); 1 is fio's
//                          default, one system call per read)
//   nvkv.durable=BOOL      run-phase writes durable when Put returns (default true)
//   nvkv.load.durable=BOOL load-phase writes durable one by one (default false: the load ends
//                          with one Flush, inside its measured time)
//   nvkv.capacity=SIZE     store size (default 3x the records the run can hold, min 256m)
//   nvkv.index=auto|hash|ordered  (auto: ordered when scanproportion > 0, else hash)
//   nvkv.shards=N, nvkv.backend=auto|direct|sync|nvme, nvkv.max_write_delay_us=N,
//   nvkv.durable_writes=auto|fua|flush (Options::durable_writes),
//   nvkv.single_issuer=BOOL (Options::single_issuer: DEFER_TASKRUN rings, default true),
//   nvkv.cache=SIZE        record cache (Options::cache_bytes, default 32m; 0 off); a peer's
//                          cache too (RocksDB's block cache)
//   nvkv.seed=N            (0: from the clock)
//   warmupoperationcount=N N operations of the mix before the run phase, unmeasured (a phase
//                          "warmup" in the report), so that caches start the run warm
//   threadcount=T          same as -threads
// The store at --db (default ./nvkv-ycsb.db) is deleted and created afresh by a load unless
// --keep is given; a block or NVMe device is never deleted, so loading into one needs --keep.
// --engine rocksdb|lmdb drives a peer instead (store.h), in the directory --db, with the same
// generator, request stream and report; a load re-creates that directory only when it holds
// nothing but the peer's own files.
//
// Thread contract: Main runs on the process's main thread.
#ifndef NVKV_BENCH_YCSB_CLI_H_
#define NVKV_BENCH_YCSB_CLI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/ycsb/properties.h"
#include "bench/ycsb/report.h"
#include "bench/ycsb/runner.h"

namespace nvkv::ycsb {

struct CommandLine {
  bool load = true;
  bool run = true;
  std::vector<std::string> workload_files;
  Properties properties;  // the -P files, then the -p settings on top
  Engine engine = Engine::kNvkv;  // --engine
  std::string db_path = "./nvkv-ycsb.db";
  bool keep = false;
  uint32_t threads = 1;
  bool json = false;
  std::string svg_path;
  bool progress = true;
  bool help = false;
  bool version = false;
};

// Parses argv[1..]. kInvalidArgument for a bad flag, kNotFound for a missing -P file.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

struct BenchmarkResult {
  RunDescription run;
  std::vector<PhaseResult> phases;  // load, warmup, run: those that ran, in that order
};

// Opens (and at load, re-creates) the store and runs the phases the command line asks for.
absl::StatusOr<BenchmarkResult> RunBenchmark(const CommandLine& command_line);

// The whole program. Exit status: 0 ok, 1 the run failed, 2 bad usage, 3 the run completed but
// some operations failed (the tables count them).
int Main(int argc, char** argv);

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_CLI_H_
