#include "storage/buffer_pool.h"

#include <sys/mman.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "storage/base/align.h"
#include "storage/base/check.h"

namespace nvkv::storage {

absl::StatusOr<std::unique_ptr<BufferPool>> BufferPool::Create(const BufferPoolOptions& options) {
  if (!IsPowerOfTwo(options.buffer_bytes) || options.buffer_bytes < 512 ||
      options.buffer_bytes > kMaxRegisteredBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer pool: buffer_bytes ", options.buffer_bytes,
                     " must be a power of two between 512 and ", kMaxRegisteredBytes));
  }
  if (options.buffer_count == 0 && options.chunk_count == 0) {
    return absl::InvalidArgumentError("buffer pool: no buffers asked for");
  }
  // A chunk is the largest multiple of the page size that fits one registered region:
  // 4 KiB pages -> 127 pages = 508 KiB; 64 KiB pages -> 7 pages = 448 KiB.
  const uint32_t chunk_bytes = AlignDown(kMaxRegisteredBytes, options.buffer_bytes);
  std::unique_ptr<BufferPool> pool(new BufferPool(options, chunk_bytes));
  absl::Status status = pool->Allocate();
  if (!status.ok()) return status;
  return pool;
}

BufferPool::BufferPool(const BufferPoolOptions& options, uint32_t chunk_bytes)
    : options_(options), chunk_bytes_(chunk_bytes) {}

BufferPool::~BufferPool() {
  if (memory_ != nullptr) munmap(memory_, memory_bytes_);
}

absl::Status BufferPool::Allocate() {
  const uint32_t pages_per_region = chunk_bytes_ / options_.buffer_bytes;
  const uint32_t page_regions =
      (options_.buffer_count + pages_per_region - 1) / pages_per_region;
  const uint32_t region_count = options_.chunk_count + page_regions;
  // Regions are laid back to back, each a whole chunk long, so every region starts page-aligned.
  memory_bytes_ = static_cast<size_t>(region_count) * chunk_bytes_;
  void* memory = mmap(nullptr, memory_bytes_, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (memory == MAP_FAILED) {
    memory_bytes_ = 0;
    return absl::ResourceExhaustedError(
        absl::StrCat("buffer pool: cannot map ", region_count * uint64_t{chunk_bytes_},
                     " bytes: ", strerror(errno)));
  }
  memory_ = static_cast<uint8_t*>(memory);
  regions_.reserve(region_count);
  for (uint32_t r = 0; r < region_count; ++r) {
    regions_.push_back(iovec{memory_ + static_cast<size_t>(r) * chunk_bytes_, chunk_bytes_});
  }
  // The last page region may be only partly used; trim its registration to what is handed out.
  if (page_regions > 0) {
    const uint32_t last_pages = options_.buffer_count - (page_regions - 1) * pages_per_region;
    regions_.back().iov_len = static_cast<size_t>(last_pages) * options_.buffer_bytes;
  }
  for (uint32_t c = 0; c < options_.chunk_count; ++c) {
    chunk_data_.push_back(memory_ + static_cast<size_t>(c) * chunk_bytes_);
  }
  for (uint32_t p = 0; p < options_.buffer_count; ++p) {
    const uint32_t region = options_.chunk_count + p / pages_per_region;
    const uint32_t within = p % pages_per_region;
    page_data_.push_back(memory_ + static_cast<size_t>(region) * chunk_bytes_ +
                         static_cast<size_t>(within) * options_.buffer_bytes);
  }
  // Free lists are stacks; push in reverse so slot 0 is handed out first.
  for (uint32_t p = options_.buffer_count; p > 0; --p) free_pages_.push_back(p - 1);
  for (uint32_t c = options_.chunk_count; c > 0; --c) free_chunks_.push_back(c - 1);
  page_in_use_.assign(options_.buffer_count, false);
  chunk_in_use_.assign(options_.chunk_count, false);
  return absl::OkStatus();
}

int32_t BufferPool::RegionOf(const uint8_t* data) const {
  return static_cast<int32_t>((data - memory_) / chunk_bytes_);
}

Buffer BufferPool::GetPage() {
  if (free_pages_.empty()) return Buffer{};
  const uint32_t slot = free_pages_.back();
  free_pages_.pop_back();
  page_in_use_[slot] = true;
  uint8_t* data = page_data_[slot];
  return Buffer{data, options_.buffer_bytes, registered_ ? RegionOf(data) : -1, slot};
}

void BufferPool::PutPage(const Buffer& buffer) {
  NVKV_CHECK(buffer.slot < page_data_.size());
  NVKV_CHECK(page_data_[buffer.slot] == buffer.data);
  NVKV_CHECK(page_in_use_[buffer.slot]);
  page_in_use_[buffer.slot] = false;
  free_pages_.push_back(buffer.slot);
}

Buffer BufferPool::GetChunk() {
  if (free_chunks_.empty()) return Buffer{};
  const uint32_t slot = free_chunks_.back();
  free_chunks_.pop_back();
  chunk_in_use_[slot] = true;
  uint8_t* data = chunk_data_[slot];
  return Buffer{data, chunk_bytes_, registered_ ? RegionOf(data) : -1, slot};
}

void BufferPool::PutChunk(const Buffer& buffer) {
  NVKV_CHECK(buffer.slot < chunk_data_.size());
  NVKV_CHECK(chunk_data_[buffer.slot] == buffer.data);
  NVKV_CHECK(chunk_in_use_[buffer.slot]);
  chunk_in_use_[buffer.slot] = false;
  free_chunks_.push_back(buffer.slot);
}

}  // namespace nvkv::storage
