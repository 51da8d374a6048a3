#include "tests/testutil/block_pattern.h"

#include <cstring>

#include "storage/base/split_mix64.h"

namespace nvkv::testing {

void FillPattern(uint8_t* data, size_t bytes, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t word = rng.Next();
    std::memcpy(data + i, &word, bytes - i < 8 ? bytes - i : 8);
  }
}

std::vector<uint8_t> Pattern(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> out(bytes);
  FillPattern(out.data(), bytes, seed);
  return out;
}

}  // namespace nvkv::testing
