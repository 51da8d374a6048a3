// Reproducible block contents for device tests: the bytes are a function of a seed, so a test
// can write one pattern and later check exactly which one (or which mix) it reads back.
#ifndef NVKV_TESTS_TESTUTIL_BLOCK_PATTERN_H_
#define NVKV_TESTS_TESTUTIL_BLOCK_PATTERN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nvkv::testing {

// `bytes` bytes of pattern `seed`. Different seeds differ in (almost) every 8-byte word.
std::vector<uint8_t> Pattern(size_t bytes, uint64_t seed);

// Writes pattern `seed` into `data[0, bytes)`.
void FillPattern(uint8_t* data, size_t bytes, uint64_t seed);

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_BLOCK_PATTERN_H_
