// SplitMix64 (Steele, Lea, Flood 2014; the generator that seeds xoshiro): small, fast and fully
// specified, so a seed replays the same sequence on every platform and library version. Used
// wherever a test or the fault device needs reproducible randomness; never std::rand or the
// implementation-defined std:: distributions.
#ifndef NVKV_STORAGE_BASE_SPLIT_MIX64_H_
#define NVKV_STORAGE_BASE_SPLIT_MIX64_H_

#include <cstdint>

#include "storage/base/check.h"

namespace nvkv {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound). Modulo bias is below 2^-40 for bounds under 2^24, as used here, and
  // modulo is trivially stable across platforms. REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound) {
    NVKV_CHECK(bound > 0);
    return Next() % bound;
  }

 private:
  uint64_t state_;
};

}  // namespace nvkv

#endif  // NVKV_STORAGE_BASE_SPLIT_MIX64_H_
