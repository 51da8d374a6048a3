// The store a YCSB run drives: nvkv (nvkv::DB, with any number of reads in flight per client
// thread) or, for side-by-side comparisons on the same machine with the same request stream,
// RocksDB or LMDB from Debian's packages (librocksdb-dev, liblmdb-dev), built in when CMake finds
// them and never required. The peers answer each read and write synchronously: their clients run
// one operation at a time per thread (queue depth 1), as YCSB's own bindings for them do.
//
// Thread contract: every method but Close from any client thread; GetAsync's and PutAsync's
// callbacks run in a later Poll of the same thread. Close once every client thread is done.
#ifndef NVKV_BENCH_YCSB_STORE_H_
#define NVKV_BENCH_YCSB_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nvkv/db.h"
#include "nvkv/stats.h"

namespace nvkv::ycsb {

using ReadCallback = std::function<void(absl::StatusOr<std::string>)>;
using WriteCallback = std::function<void(absl::Status)>;

class Store {
 public:
  virtual ~Store() = default;
  // Durable when it returns, if `durable` (each store's own way: nvkv's group commit, RocksDB's
  // WAL sync, LMDB's sync of its map).
  virtual absl::Status Put(std::string_view key, std::string_view value, bool durable) = 0;
  // Put, with its outcome (as durable as asked) given to `callback` in a later Poll.
  virtual absl::Status PutAsync(std::string_view key, std::string_view value, bool durable,
                                WriteCallback callback) = 0;
  virtual absl::Status GetAsync(std::string_view key, ReadCallback callback) = 0;
  // Runs the callbacks of finished reads and writes of this thread, after waiting for
  // `min_complete`.
  virtual absl::StatusOr<uint32_t> Poll(uint32_t min_complete) = 0;
  // Up to `limit` records from `start` on, in key order.
  virtual absl::Status Scan(std::string_view start, size_t limit,
                            std::vector<std::pair<std::string, std::string>>* out) = 0;
  // Makes every write so far durable.
  virtual absl::Status Flush() = 0;
  // nvkv's counters; the peers report none (all zero).
  virtual Stats GetStats() = 0;
  virtual absl::Status Close() = 0;
};

// Which store; "nvkv", "rocksdb" or "lmdb" on the command line (--engine).
enum class Engine { kNvkv, kRocksDb, kLmdb };
absl::StatusOr<Engine> ParseEngine(std::string_view name);
const char* EngineName(Engine engine);
// Whether this build can drive `engine` (the peers need their libraries at build time).
bool EngineBuiltIn(Engine engine);

// nvkv at `path` (a file or a device).
absl::StatusOr<std::unique_ptr<Store>> OpenNvkvStore(const Options& options,
                                                      const std::string& path);

// A peer in the directory `dir` (created when missing). `cache_bytes` is its cache (RocksDB's
// block cache; LMDB has none of its own and reads through the page cache, which a memory limit
// bounds), `capacity_bytes` the most it may hold (LMDB's map size).
struct PeerOptions {
  uint64_t cache_bytes = 0;
  uint64_t capacity_bytes = 0;
};
absl::StatusOr<std::unique_ptr<Store>> OpenPeerStore(Engine engine, const PeerOptions& options,
                                                      const std::string& dir);

// For peers: a read or write is done when GetAsync or PutAsync returns; its callback waits for
// the next Poll of the thread, as the Store contract says.
class SynchronousCompletions {
 public:
  void AddRead(ReadCallback callback, absl::StatusOr<std::string> result);
  void AddWrite(WriteCallback callback, absl::Status status);
  uint32_t RunReady();

 private:
  struct Ready {
    ReadCallback read;  // with `result`, or
    WriteCallback write;  // with `status`
    absl::StatusOr<std::string> result;
    absl::Status status;
  };
  struct Queues {
    std::vector<Ready> ready, running;
  };
  static Queues& ThisThread();
};

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_STORE_H_
