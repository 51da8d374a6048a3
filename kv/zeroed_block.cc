#include "kv/zeroed_block.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace nvkv::kv {
namespace {

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

}  // namespace

ZeroedBlock& ZeroedBlock::operator=(ZeroedBlock&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(mapped_, other.mapped_);
  return *this;
}

ZeroedBlock ZeroedBlock::Allocate(uint64_t bytes, Pages pages) {
  ZeroedBlock block;
  if (bytes == 0) return block;
  if (bytes < kMapBytes) {
    block.data_ = std::calloc(bytes, 1);
  } else {
    // A block of 2 MiB or more is mapped with 2 MiB to spare, and what lies before the first
    // 2 MiB boundary and after the block is given back: huge pages only fill aligned 2 MiB
    // ranges of a mapping. A smaller one is mapped as it is: the system places mappings side by
    // side and merges those of the same advice, so that small tables share huge pages.
    const uint64_t padded = bytes >= kHugePageBytes ? bytes + kHugePageBytes : bytes;
    void* mapped =
        mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return block;
    const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
    uintptr_t aligned = start;
    if (padded > bytes) {
      aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
      if (aligned > start) munmap(mapped, aligned - start);
      const uintptr_t end = start + padded, block_end = (aligned + bytes + 4095) & ~uintptr_t{4095};
      if (end > block_end) munmap(reinterpret_cast<void*>(block_end), end - block_end);
    }
    block.data_ = reinterpret_cast<void*>(aligned);
    // Small pages said explicitly: a system that gives huge pages unasked would otherwise make
    // a block filled from the front resident 2 MiB at a time.
    madvise(block.data_, bytes, pages == Pages::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    block.mapped_ = true;
  }
  if (block.data_ != nullptr) block.bytes_ = bytes;
  return block;
}

void ZeroedBlock::Populate(uint64_t from, uint64_t count) {
  if (!mapped_ || from >= bytes_) return;
  const uint64_t start = from & ~uint64_t{4095};
  const uint64_t end = std::min(bytes_, from + count);
#ifdef MADV_POPULATE_WRITE
  madvise(static_cast<uint8_t*>(data_) + start, end - start, MADV_POPULATE_WRITE);
#endif
}

void ZeroedBlock::Free() {
  if (data_ == nullptr) return;
  if (mapped_) {
    munmap(data_, bytes_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = false;
}

}  // namespace nvkv::kv
