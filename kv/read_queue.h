// ReadQueue: one reading thread's io_uring queue and the state of its reads in flight.
//
// Thread contract: used only by the thread it belongs to (found through a thread_local cache);
// owned by the engine, which destroys it at close.
#ifndef NVKV_KV_READ_QUEUE_H_
#define NVKV_KV_READ_QUEUE_H_

#include <memory>
#include <string>
#include <vector>

#include "kv/engine_impl.h"
#include "storage/device.h"

namespace nvkv::kv {

class ReadQueue;

// One read in flight: a lookup that may read a candidate page, then the next candidate, then a
// large value's continuation pages.
struct ReadOp {
  Engine::Impl* engine = nullptr;
  ReadQueue* queue = nullptr;
  storage::IoRequest request;
  storage::Buffer page;   // one page, always held
  storage::Buffer chunk;  // held while reading a large value's continuation pages
  std::string key;
  KeyHash hash;
  GetCallback callback;
  std::vector<uint64_t> candidates;  // index candidates still to read
  std::vector<uint64_t> looked_up;   // every location the index gave at the lookup, sorted
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
  uint32_t large_generation = 0;
  uint32_t large_value_bytes = 0;
  uint32_t large_batch_pages = 0;
  // Resolve mode: the write path wants the record's location, not just its value.
  bool resolve = false;
  CurrentRecord* resolved = nullptr;
  bool done = false;
  bool deliver_to_ready = false;  // finishing inside GetAsync: queue the callback for Poll
  bool internal = false;          // a Get's own read: its callback may run outside Poll
  absl::Status resolve_status;
};

class ReadQueue {
 public:
  ReadQueue(Engine::Impl* engine, std::unique_ptr<storage::Device> device, uint32_t depth);

  std::unique_ptr<storage::Device> device;
  std::vector<std::unique_ptr<ReadOp>> ops;
  std::vector<ReadOp*> free_ops;
  // Finished lookups whose callbacks have not run yet (answered from memory or failed early).
  std::vector<std::pair<GetCallback, absl::StatusOr<std::string>>> ready;
  uint64_t finished = 0;  // callbacks run, for Poll's count
  // Set while Get or a write's key check reaps this queue: other reads that finish meanwhile
  // keep their callbacks for the caller's next Poll, as the API promises.
  bool reaping_internally = false;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_READ_QUEUE_H_
