// ReadQueue and ReadQueueSet (read_queue.h), and how a thread finds its own queue: a
// thread_local list of (engine's set, queue) entries (ReadPath::ThisThreadQueue).
#include "kv/read_queue.h"

#include <utility>

#include "kv/read_path.h"
#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

// This thread's read queues, one per engine it reads from. At thread exit its destructor hands
// each queue back to its engine's set, which destroys it (unless the engine closed first and
// destroyed it then). Reads still in flight are abandoned: the queue waits for the device to
// finish them, and their callbacks are destroyed without running (only a Poll on this thread
// could have run them).
class ThreadQueues {
 public:
  ThreadQueues() = default;
  ThreadQueues(const ThreadQueues&) = delete;
  ThreadQueues& operator=(const ThreadQueues&) = delete;
  ~ThreadQueues();

  ReadQueue* Find(const ReadQueueSet* set) const {
    for (const Entry& entry : entries_) {
      if (entry.set.get() == set) return entry.queue;
    }
    return nullptr;
  }
  void Add(std::shared_ptr<ReadQueueSet> set, ReadQueue* queue) {
    // Entries of closed engines hold nothing but their set: drop them here, so a thread that
    // opens and closes stores one after another keeps only those still open.
    std::erase_if(entries_, [](const Entry& entry) { return entry.set->closed(); });
    entries_.push_back(Entry{std::move(set), queue});
  }

 private:
  struct Entry {
    // Shared with the engine: a set is never freed, and so never mistaken for another
    // engine's, while an entry holds it.
    std::shared_ptr<ReadQueueSet> set;
    ReadQueue* queue = nullptr;
  };
  std::vector<Entry> entries_;
};
thread_local ThreadQueues tls_queues;
// Set once tls_queues is destroyed: a read from a later thread_local destructor is refused
// rather than given a queue nothing would release.
thread_local bool tls_queues_gone = false;

ThreadQueues::~ThreadQueues() {
  tls_queues_gone = true;
  for (Entry& entry : entries_) entry.set->Release(entry.queue);
}

}  // namespace

ReadQueue::ReadQueue(const PageLookup* lookup, std::unique_ptr<storage::Device> queue_device,
                     uint32_t depth, LogWriter* writer)
    : writes(writer), device(std::move(queue_device)) {
  for (uint32_t i = 0; i < depth; ++i) {
    auto op = std::make_unique<ReadOp>();
    op->lookup = lookup;
    op->queue = this;
    op->page = device->buffers().GetPage();
    NVKV_CHECK(op->page.valid());
    free_ops.push_back(op.get());
    ops.push_back(std::move(op));
  }
}

absl::StatusOr<ReadQueue*> ReadPath::ThisThreadQueue() {
  if (ReadQueue* queue = tls_queues.Find(queues_.get())) return queue;
  if (tls_queues_gone) {
    return absl::FailedPreconditionError("no reads on a thread past its thread_local destructors");
  }
  absl::StatusOr<ReadQueue*> queue =
      queues_->Open([this]() -> absl::StatusOr<std::unique_ptr<ReadQueue>> {
        storage::QueueOptions queue_options;
        // Beyond the async reads: a key check may run beside a full set of them, and the write
        // listener's event wait.
        queue_options.queue_depth = engine_.read_queue_depth + 3;
        queue_options.buffers.buffer_bytes = engine_.shape.geometry.page_bytes;
        queue_options.buffers.buffer_count = engine_.read_queue_depth + 2;
        queue_options.buffers.chunk_count = 2;
        absl::StatusOr<std::unique_ptr<storage::Device>> device =
            engine_.open_queue(queue_options);
        if (!device.ok()) return device.status();
        return std::make_unique<ReadQueue>(&lookup_, std::move(*device),
                                           engine_.read_queue_depth, engine_.writer);
      });
  if (!queue.ok()) return queue.status();
  tls_queues.Add(queues_, *queue);
  return *queue;
}

absl::StatusOr<ReadQueue*> ReadQueueSet::Open(
    absl::FunctionRef<absl::StatusOr<std::unique_ptr<ReadQueue>>()> make) {
  absl::MutexLock lock(&mu_);
  // Checked under the lock: Close marks the set closed before the engine drops its device.
  if (closed_) return absl::FailedPreconditionError("the store is closed");
  absl::StatusOr<std::unique_ptr<ReadQueue>> queue = make();
  if (!queue.ok()) return queue.status();
  ReadQueue* raw = queue->get();
  queues_.emplace(raw, std::move(*queue));
  return raw;
}

void ReadQueueSet::Release(ReadQueue* queue) {
  std::unique_ptr<ReadQueue> owned;
  {
    absl::MutexLock lock(&mu_);
    auto it = queues_.find(queue);
    if (it == queues_.end()) return;  // the engine closed first and destroyed it
    owned = std::move(it->second);
    queues_.erase(it);
    // The device (ring, descriptor) goes under the lock, so a concurrent Close does not
    // release the device lock while this descriptor is still open, and so does the write
    // listener, which a concurrent Close would otherwise leave pointing at a freed log writer.
    owned->Shutdown();
  }
  owned.reset();  // ops and abandoned callbacks, outside the lock
}

void ReadQueueSet::Close() {
  absl::flat_hash_map<ReadQueue*, std::unique_ptr<ReadQueue>> queues;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    queues.swap(queues_);
  }
  queues.clear();
}

bool ReadQueueSet::closed() {
  absl::MutexLock lock(&mu_);
  return closed_;
}

size_t ReadQueueSet::size() {
  absl::MutexLock lock(&mu_);
  return queues_.size();
}

}  // namespace nvkv::kv
