// ReadQueue: one thread's io_uring queue and the state of its reads in flight, and its
// asynchronous writes (async_writes.h), which complete in the same Poll.
// ReadQueueSet: an engine's read queues, one per thread that reads (or writes asynchronously).
//
// Thread contract: a ReadQueue is used only by the thread it belongs to, which finds it through
// a thread_local cache (ReadPath::ThisThreadQueue). Its engine's ReadQueueSet owns it and
// destroys it when the thread exits (the cache's destructor hands it back) or when the engine
// closes, whichever comes first.
#ifndef NVKV_KV_READ_QUEUE_H_
#define NVKV_KV_READ_QUEUE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "kv/async_writes.h"
#include "kv/engine.h"
#include "kv/head_append.h"
#include "kv/page_lookup.h"
#include "storage/device.h"

namespace nvkv::kv {

class ReadQueue;

// Who asked for a read: that decides what it answers and where the answer goes.
enum class ReadPurpose : uint8_t {
  kAsync,     // GetAsync: the value; the callback runs inside the caller's Poll
  kSync,      // Get and MultiGet: the value; the callback runs as soon as the read finishes
  kKeyCheck,  // a hash-mode write: where the key's current record is (`resolved`), no value
};

// Where a read is.
enum class ReadState : uint8_t {
  kFree,      // on the queue's free list
  kStarting,  // inside GetAsync: an answer found now waits in `ready` for Poll
  kRunning,   // looking up, or a device read in flight
  kFinished,  // a key check that has its answer (its op lives on ResolveCurrent's stack)
};

// One read: a lookup that may read a candidate page, then the next candidate, then a large
// value's continuation pages.
struct ReadOp {
  const PageLookup* lookup = nullptr;  // the engine's, which outlives every queue
  ReadQueue* queue = nullptr;
  storage::IoRequest request;
  storage::Buffer page;   // one page, always held
  storage::Buffer chunk;  // held while reading a large value's continuation pages
  std::string key;
  KeyHash hash;
  GetCallback callback;
  // Every location the index gave at the lookup, newest first (index.h): a key's current record
  // is on the first that holds it. `next_candidate` is the next to look at.
  std::vector<uint64_t> candidates;
  std::vector<uint64_t> looked_up;   // the same, sorted
  std::vector<uint64_t> read_pages;  // the candidates' pages read from the device so far
  uint64_t index_changes = 0;        // the index's changes() when the candidates were taken
  // Candidates whose page could not be used (damaged) while the index still pointed there: the
  // key's record may be on one of them. `unreadable_status` says why for the first.
  std::vector<uint64_t> unreadable;
  absl::Status unreadable_status;
  size_t next_candidate = 0;
  int restarts = 0;
  // Large value state.
  std::string value;
  uint64_t large_next_page = 0;
  uint32_t large_pages_left = 0;
  uint64_t large_generation = 0;
  uint32_t large_value_bytes = 0;
  uint32_t large_batch_pages = 0;
  ReadPurpose purpose = ReadPurpose::kAsync;
  ReadState state = ReadState::kFree;
  // kKeyCheck: where the answer goes, and the error that stopped the check, if any.
  CurrentRecord* resolved = nullptr;
  absl::Status key_check_status;
};

class ReadQueue {
 public:
  ReadQueue(const PageLookup* lookup, std::unique_ptr<storage::Device> device, uint32_t depth,
            LogWriter* writer);
  ~ReadQueue() { Shutdown(); }

  // Lets go of the engine's parts: the device goes first (it waits out reads still in flight,
  // whose requests live in `ops`, and the write listener's event wait armed on it, which a
  // signal ends), then the writes stop listening to the log writer. What is left (ops,
  // callbacks) needs nothing of the engine. Idempotent.
  void Shutdown() {
    if (writes.wake_armed()) writes.wake()->Signal();
    device.reset();
    writes.StopListening();
  }

  // Reads in flight on the device (its requests, less the write listener's armed event).
  // REQUIRES: not Shutdown.
  uint32_t reads_in_flight() const { return device->in_flight() - (writes.wake_armed() ? 1 : 0); }

  AsyncWrites writes;
  std::unique_ptr<storage::Device> device;
  std::vector<std::unique_ptr<ReadOp>> ops;
  std::vector<ReadOp*> free_ops;
  // Finished lookups whose callbacks have not run yet (answered from memory or failed early).
  std::vector<std::pair<GetCallback, absl::StatusOr<std::string>>> ready;
  uint64_t finished = 0;  // callbacks run, for Poll's count
  // Above zero while Get, MultiGet or a write's key check reaps this queue (ReapScope): the
  // async reads that finish meanwhile keep their callbacks for the caller's next Poll, as the
  // API promises.
  int internal_reaps = 0;
};

// Marks `queue` as reaped for a synchronous call while it lives.
class ReapScope {
 public:
  explicit ReapScope(ReadQueue& queue) : queue_(queue) { ++queue_.internal_reaps; }
  ~ReapScope() { --queue_.internal_reaps; }
  ReapScope(const ReapScope&) = delete;
  ReapScope& operator=(const ReapScope&) = delete;

 private:
  ReadQueue& queue_;
};

// The read queues of one engine. Shared (std::shared_ptr) by the engine and the thread_local
// caches of the threads that read from it, so that a thread exiting after the engine is gone
// finds the set closed instead of a dangling engine, and an engine closing while one of its
// readers exits waits until that reader's queue is gone: no queue outlives the device it was
// opened on.
//
// Thread contract: every method may be called from any thread. No engine lock is taken under
// mu_ but the log writer's listeners mutex (a queue destroyed under it stops listening); it is
// held while a queue's device is opened or destroyed.
class ReadQueueSet {
 public:
  // Adds a queue made by `make` (called under the lock, only while the set is open) for the
  // calling thread. kFailedPrecondition once the set is closed.
  absl::StatusOr<ReadQueue*> Open(
      absl::FunctionRef<absl::StatusOr<std::unique_ptr<ReadQueue>>()> make);
  // Destroys `queue`, whose thread is exiting; nothing when Close destroyed it already.
  void Release(ReadQueue* queue);
  // Destroys every queue; later Opens fail and later Releases do nothing.
  void Close();
  bool closed();
  size_t size();

 private:
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<ReadQueue*, std::unique_ptr<ReadQueue>> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_READ_QUEUE_H_
