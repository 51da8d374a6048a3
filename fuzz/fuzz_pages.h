// Helpers shared by the page-level fuzz targets: the geometry they fuzz in, and the checksum
// fix-up that lets the fuzzer past VerifyPage (it cannot forge XXH3 itself).
#ifndef NVKV_FUZZ_FUZZ_PAGES_H_
#define NVKV_FUZZ_FUZZ_PAGES_H_

#include <xxhash.h>

#include <cstdint>
#include <cstring>

#include "kv/page_format.h"

namespace nvkv::fuzz {

inline constexpr uint8_t kStoreId[16] = {'f', 'u', 'z', 'z', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

inline uint64_t FuzzStoreSeed() { return kv::StoreSeed(kStoreId); }

// Gives a page that carries the page magic the checksum VerifyPage expects at `page_number`.
inline void FixChecksum(uint8_t* page, uint32_t page_bytes, uint64_t page_number) {
  uint32_t magic;
  std::memcpy(&magic, page + 8, sizeof(magic));
  if (magic != kv::kPageMagic) return;
  const uint64_t checksum = XXH3_64bits_withSeed(
      page + 8, page_bytes - 8, kv::PageSeed(FuzzStoreSeed(), page_number));
  std::memcpy(page, &checksum, 8);
}

}  // namespace nvkv::fuzz

#endif  // NVKV_FUZZ_FUZZ_PAGES_H_
