// KeyHash: the identity of a key inside the engine.
#ifndef NVKV_KV_KEY_HASH_H_
#define NVKV_KV_KEY_HASH_H_

#include <cstdint>
#include <string_view>
#include <utility>

namespace nvkv::kv {

// The identity of a key: XXH3-128 of its bytes. `lo` feeds the index, `hi` picks the shard, and
// recovery uses both to tell keys apart without holding their bytes; the segment table's key
// filters use both.
struct KeyHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const KeyHash&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const KeyHash& k) {
    return H::combine(std::move(h), k.lo, k.hi);
  }
};
KeyHash HashKey(std::string_view key);

}  // namespace nvkv::kv

#endif  // NVKV_KV_KEY_HASH_H_
