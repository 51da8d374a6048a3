// ReadPath: the engine's reads. Get, MultiGet, GetAsync and Poll on per-thread queues (one
// ReadQueue per thread that reads or writes asynchronously, found through a thread_local cache
// that shares the set, read_queue.h), ordered scans, and the identity check the write path needs
// in hash mode (ResolveCurrent). How one read finds its record is PageLookup's (page_lookup.h).
//
// Thread contract: thread-safe; each thread reads through its own queue. Poll runs the
// callbacks of the calling thread's reads and asynchronous writes.
#ifndef NVKV_KV_READ_PATH_H_
#define NVKV_KV_READ_PATH_H_

#include <atomic>
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
#include "kv/engine.h"
#include "kv/head_append.h"
#include "kv/key_hash.h"
#include "kv/log_writer.h"
#include "kv/page_lookup.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

class ReadQueue;
class ReadQueueSet;
enum class ReadPurpose : uint8_t;  // read_queue.h

class ReadPath {
 public:
  // What the reads use of the engine; every part must outlive the ReadPath.
  struct EngineParts {
    const StoreShape& shape;
    const ShardSet& shards;
    SegmentTable& segments;
    // The sequences of the batches recovery dropped: page reads leave their records out.
    const SequenceRanges& dropped_batch_records;
    // Asynchronous writes wait on it for durability, in the thread's queue; null for a reader.
    LogWriter* writer = nullptr;
    uint32_t read_queue_depth = 0;  // reads in flight on one thread (Options::read_queue_depth)
    // OK while the store is open (Engine::Impl::CheckOpen).
    std::function<absl::Status()> check_open;
    // A queue on the device for one thread's reads.
    std::function<absl::StatusOr<std::unique_ptr<storage::Device>>(const storage::QueueOptions&)>
        open_queue;
  };
  explicit ReadPath(const EngineParts& engine);
  ~ReadPath();
  ReadPath(const ReadPath&) = delete;
  ReadPath& operator=(const ReadPath&) = delete;

  // The Engine calls of the same names, as engine.h says.
  absl::StatusOr<std::string> Get(std::string_view key);
  void MultiGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string>>* values);
  absl::Status GetAsync(std::string_view key, GetCallback callback);
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete);
  uint32_t pending_reads();
  uint32_t pending_writes();
  absl::Status Scan(std::string_view start, std::string_view end, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out);

  // The calling thread's queue, made at its first use. kFailedPrecondition once Close ran, or
  // on a thread past its thread_local destructors.
  absl::StatusOr<ReadQueue*> ThisThreadQueue();
  // Finds `key`'s current record among the index candidates, reading pages as needed with this
  // thread's queue. Used by the write path (hash mode) to confirm identity.
  // `read_all`: find every entry of the key by reading its candidate pages (a delete, or an
  // overwrite that must not add an entry); else an overwrite may be written blind.
  // Fills *current (reset first, its vectors' capacity reused).
  absl::Status ResolveCurrent(std::string_view key, const KeyHash& hash, bool read_all,
                              CurrentRecord* current);

  // Every thread's queue destroyed; later reads fail (threads that outlive the engine keep
  // nothing of it but the closed set).
  void Close();

  // For Stats.
  uint64_t gets() const { return gets_.load(std::memory_order_relaxed); }
  // Writes' key checks that read pages (hash-mode deletes finding their key).
  uint64_t verify_reads() const { return verify_reads_.load(std::memory_order_relaxed); }
  const PageLookup& lookup() const { return lookup_; }
  size_t queue_count() const;

 private:
  // Starts a read for GetAsync (kAsync) or for Get and MultiGet (kSync, whose callbacks run
  // wherever the read finishes); read_queue.h ReadPurpose.
  absl::Status StartRead(std::string_view key, GetCallback callback, ReadPurpose purpose);
  // Reaps this thread's queue for a synchronous call (Get, MultiGet): only the call's own reads
  // run their callbacks here; async reads that finish meanwhile wait for the caller's Poll.
  absl::Status ReapInternally(ReadQueue& queue);
  // Hash mode, `current->candidates` found: resolves the key from the cache or pages in memory,
  // or as a blind write; false when the candidates must be read (ResolveByReading).
  bool ResolveWithoutReading(Shard& shard, std::string_view key, bool read_all,
                             CurrentRecord* current) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  absl::Status ResolveByReading(std::string_view key, const KeyHash& hash,
                                CurrentRecord* current);

  const EngineParts engine_;
  PageLookup lookup_;
  // Shared with the thread_local cache (read_queue.cc), so that a thread outliving the engine
  // never touches the engine itself.
  const std::shared_ptr<ReadQueueSet> queues_;
  std::atomic<uint64_t> gets_{0};
  std::atomic<uint64_t> verify_reads_{0};
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_READ_PATH_H_
