// BufferPool: page-aligned memory carved into fixed-size buffers, registered once with a ring.
//
// The memory is split into registered regions ("chunks") of at most kMaxRegisteredBytes each.
// Why not one huge registration: on Linux 6.1 an NVMe passthrough I/O into a registered buffer
// fails with EINVAL when more than 127 pages (PCIe max_segments) lie between the I/O's start and
// the end of its registered buffer. Worked through with 4 KiB pages: 508 KiB = 127 x 4 KiB, so a
// chunk of 508 KiB keeps every I/O inside it within the limit wherever it starts.
//
// Two kinds of buffer are handed out, each from an O(1) free list:
//   - pages: `buffer_bytes` each (default 4 KiB), for point reads and page writes;
//   - chunks: whole registered regions (up to 508 KiB contiguous), for large sequential I/O such
//     as recovery scans and values that span many pages.
//
// Thread contract: not thread-safe; owned by one Device queue and used on its issuing thread.
// Invariant: every Buffer handed out lies wholly inside one registered region whose index is its
// buf_index.
#ifndef NVKV_STORAGE_BUFFER_POOL_H_
#define NVKV_STORAGE_BUFFER_POOL_H_

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace nvkv::storage {

// A borrowed view of pool memory. `buf_index` is the registered region it lies in, or -1 when
// the memory is not registered (then backends use plain, non-fixed I/O).
struct Buffer {
  uint8_t* data = nullptr;
  uint32_t bytes = 0;
  int32_t buf_index = -1;
  uint32_t slot = 0;  // pool bookkeeping: which page or chunk this is

  bool valid() const { return data != nullptr; }
};

inline constexpr uint32_t kMaxRegisteredBytes = 508 * 1024;  // 127 x 4 KiB

struct BufferPoolOptions {
  uint32_t buffer_bytes = 4096;  // size of one page buffer; power of two, 512..kMaxRegisteredBytes
  uint32_t buffer_count = 256;   // page buffers
  uint32_t chunk_count = 4;      // whole-region buffers of chunk_bytes() each
};

class BufferPool {
 public:
  static absl::StatusOr<std::unique_ptr<BufferPool>> Create(const BufferPoolOptions& options);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A free page buffer, or an invalid Buffer when all are in use (back-pressure: release some).
  Buffer GetPage();
  void PutPage(const Buffer& buffer);

  // A free chunk (chunk_bytes() contiguous bytes), or an invalid Buffer when all are in use.
  Buffer GetChunk();
  void PutChunk(const Buffer& buffer);

  uint32_t page_bytes() const { return options_.buffer_bytes; }
  uint32_t chunk_bytes() const { return chunk_bytes_; }
  uint32_t free_pages() const { return static_cast<uint32_t>(free_pages_.size()); }
  uint32_t free_chunks() const { return static_cast<uint32_t>(free_chunks_.size()); }
  uint32_t page_count() const { return options_.buffer_count; }
  uint32_t chunk_count() const { return options_.chunk_count; }

  // The regions to pass to io_uring_register_buffers, in buf_index order.
  std::span<const iovec> regions() const { return regions_; }

  // Marks the pool as registered (buf_index valid for fixed I/O) or not.
  void set_registered(bool registered) { registered_ = registered; }
  bool registered() const { return registered_; }

 private:
  BufferPool(const BufferPoolOptions& options, uint32_t chunk_bytes);
  absl::Status Allocate();
  int32_t RegionOf(const uint8_t* data) const;

  BufferPoolOptions options_;
  uint32_t chunk_bytes_ = 0;
  uint8_t* memory_ = nullptr;  // one mmap; regions_ carve it up
  size_t memory_bytes_ = 0;
  std::vector<iovec> regions_;
  std::vector<uint8_t*> page_data_;   // slot -> address
  std::vector<uint8_t*> chunk_data_;  // slot -> address
  std::vector<uint32_t> free_pages_;  // stack of free slots
  std::vector<uint32_t> free_chunks_;
  std::vector<bool> page_in_use_;
  std::vector<bool> chunk_in_use_;
  bool registered_ = false;
};

// A buffer borrowed from a pool for a scope, given back when the lease ends (or is moved from
// and reassigned). Leases must end before their pool.
class BufferLease {
 public:
  BufferLease() = default;
  // A chunk; invalid when none is free.
  static BufferLease Chunk(BufferPool& pool) { return BufferLease(pool, pool.GetChunk(), true); }
  // A page buffer; invalid when none is free.
  static BufferLease Page(BufferPool& pool) { return BufferLease(pool, pool.GetPage(), false); }
  // A chunk, else a page buffer when no chunk is free; invalid when neither is.
  static BufferLease ChunkOrPage(BufferPool& pool) {
    BufferLease lease = Chunk(pool);
    return lease.valid() ? std::move(lease) : Page(pool);
  }
  BufferLease(BufferLease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)),
        buffer_(std::exchange(other.buffer_, Buffer{})),
        chunk_(other.chunk_) {}
  BufferLease& operator=(BufferLease&& other) noexcept {
    if (this != &other) {
      Release();
      pool_ = std::exchange(other.pool_, nullptr);
      buffer_ = std::exchange(other.buffer_, Buffer{});
      chunk_ = other.chunk_;
    }
    return *this;
  }
  ~BufferLease() { Release(); }

  bool valid() const { return buffer_.valid(); }
  const Buffer& get() const { return buffer_; }
  const Buffer& operator*() const { return buffer_; }
  const Buffer* operator->() const { return &buffer_; }

  // Gives the buffer back now.
  void Release() {
    if (pool_ != nullptr && buffer_.valid()) {
      if (chunk_) {
        pool_->PutChunk(buffer_);
      } else {
        pool_->PutPage(buffer_);
      }
    }
    pool_ = nullptr;
    buffer_ = Buffer{};
  }
  // Never gives the buffer back: a read into it may still be out (a queue that broke), and the
  // kernel may yet write there.
  void Abandon() {
    pool_ = nullptr;
    buffer_ = Buffer{};
  }

 private:
  BufferLease(BufferPool& pool, const Buffer& buffer, bool chunk)
      : pool_(&pool), buffer_(buffer), chunk_(chunk) {}

  BufferPool* pool_ = nullptr;
  Buffer buffer_;
  bool chunk_ = false;
};

// Chunks borrowed together, for reads kept in flight together into them, and given back
// together when the leases end.
class ChunkLeases {
 public:
  ChunkLeases() = default;
  // As many chunks of `pool` as are free, up to `most`.
  static ChunkLeases UpTo(BufferPool& pool, size_t most) {
    ChunkLeases leases;
    while (leases.buffers_.size() < most) {
      BufferLease chunk = BufferLease::Chunk(pool);
      if (!chunk.valid()) break;
      leases.buffers_.push_back(*chunk);
      leases.leases_.push_back(std::move(chunk));
    }
    return leases;
  }

  size_t size() const { return buffers_.size(); }
  bool empty() const { return buffers_.empty(); }
  const Buffer& operator[](size_t i) const { return buffers_[i]; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // Never gives them back (BufferLease::Abandon): reads into them may still be out.
  void Abandon() {
    for (BufferLease& lease : leases_) lease.Abandon();
  }

 private:
  std::vector<BufferLease> leases_;
  std::vector<Buffer> buffers_;  // leases_' buffers, in order
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_BUFFER_POOL_H_
