// Alignment arithmetic for sizes and offsets that must sit on block boundaries.
#ifndef NVKV_STORAGE_BASE_ALIGN_H_
#define NVKV_STORAGE_BASE_ALIGN_H_

#include <cstdint>

namespace nvkv {

// True when `value` is a power of two (zero is not).
constexpr bool IsPowerOfTwo(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

// Rounds `value` up to a multiple of `alignment`, which must be a power of two.
// Example: AlignUp(5000, 4096) == 8192; AlignUp(8192, 4096) == 8192.
constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// Rounds `value` down to a multiple of `alignment`, which must be a power of two.
// Example: AlignDown(5000, 4096) == 4096.
constexpr uint64_t AlignDown(uint64_t value, uint64_t alignment) {
  return value & ~(alignment - 1);
}

constexpr bool IsAligned(uint64_t value, uint64_t alignment) {
  return (value & (alignment - 1)) == 0;
}

static_assert(AlignUp(5000, 4096) == 8192);
static_assert(AlignDown(5000, 4096) == 4096);
static_assert(IsAligned(8192, 512));

}  // namespace nvkv

#endif  // NVKV_STORAGE_BASE_ALIGN_H_
