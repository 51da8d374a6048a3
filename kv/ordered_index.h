// OrderedIndex: an Index that holds full keys in a B-tree (absl::btree_map), so Find is exact and
// Scan walks keys in byte-wise order. Selected at open for stores that need range scans.
//
// Thread contract: not thread-safe; callers serialize (the owning shard's mutex).
// Invariant: at most one entry per key; the `hash` arguments are ignored.
//
// memory_bytes is an estimate built from what is actually requested from the allocator:
//   - B-tree nodes, counted by the map's allocator as they are allocated and freed;
//   - key bytes on the heap: a std::string longer than the 15-byte small-string buffer of
//     libstdc++ owns a separate capacity()+1 byte block (shorter keys live inside the node);
// each request rounded up to glibc malloc's chunk size (8-byte header, 16-byte granules, 32-byte
// minimum), which is what the request really costs on Debian. The object itself is not counted.
//
// Cost per key: a node slot is a pair<const std::string, uint64_t> of 40 bytes; a node holds 6
// slots (absl's 256-byte target; internal nodes add 7 child pointers), 2/3 to full, so about 60
// bytes of node per key on random insertion; plus the key's heap block (none up to 15 bytes, 32
// bytes for 16-23-byte keys, 48 for 24-39). Measured by bench/micro/index_bench.cc: 91 bytes per
// 23-byte key at 1M and 10M keys.
//
// Find costs about log2(n) key comparisons, each reading a key's heap block when keys are longer
// than 15 bytes: ~20 cache misses at 1M keys, 1.5-2 us (the hash index: ~50-100 ns).
#ifndef NVKV_KV_ORDERED_INDEX_H_
#define NVKV_KV_ORDERED_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "kv/index.h"

namespace nvkv::kv {

// What glibc malloc really takes for an `n`-byte request: n plus its 8-byte chunk header, rounded
// up to 16 bytes, at least 32 (glibc malloc/malloc.c request2size, 64-bit).
constexpr uint64_t MallocChunkBytes(uint64_t n) {
  const uint64_t chunk = (n + 8 + 15) & ~uint64_t{15};
  return chunk < 32 ? 32 : chunk;
}

// A std::allocator that adds the chunk size of every live allocation to `*bytes` (borrowed: the
// counter must outlive every allocator copy, which the OrderedIndex owning both guarantees).
template <typename T>
class CountingAllocator {
 public:
  using value_type = T;

  explicit CountingAllocator(uint64_t* bytes) : bytes_(bytes) {}
  template <typename U>
  CountingAllocator(const CountingAllocator<U>& other) : bytes_(other.bytes()) {}  // NOLINT

  T* allocate(size_t n) {
    *bytes_ += MallocChunkBytes(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    *bytes_ -= MallocChunkBytes(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }

  uint64_t* bytes() const { return bytes_; }

  template <typename U>
  friend bool operator==(const CountingAllocator& a, const CountingAllocator<U>& b) {
    return a.bytes_ == b.bytes();
  }

 private:
  uint64_t* bytes_;
};

class OrderedIndex final : public Index {
 public:
  OrderedIndex();
  OrderedIndex(const OrderedIndex&) = delete;
  OrderedIndex& operator=(const OrderedIndex&) = delete;

  void Find(uint64_t hash, std::string_view key, std::vector<uint64_t>* pages) const override;
  bool exact() const override { return true; }
  absl::Status Insert(uint64_t hash, std::string_view key, uint64_t page) override;
  absl::Status MakeRoomFor(uint64_t /*inserts*/) override { return absl::OkStatus(); }
  bool Replace(uint64_t hash, std::string_view key, uint64_t old_page,
               uint64_t new_page) override;
  bool Erase(uint64_t hash, std::string_view key, uint64_t page) override;
  IndexStats stats() const override;
  void ForEachValue(const std::function<void(uint64_t value)>& visit) const override;
  // No-op: a B-tree allocates node by node and cannot be pre-sized.
  void Reserve(uint64_t expected_entries) override;

  bool ordered() const override { return true; }
  absl::Status Scan(std::string_view start, bool exclusive, size_t limit,
                    std::vector<std::pair<std::string, uint64_t>>* out) const override;

 private:
  // std::less<std::string> makes absl use its transparent string comparator, so lookups take an
  // absl::string_view without building a std::string.
  using Map = absl::btree_map<std::string, uint64_t, std::less<std::string>,
                              CountingAllocator<std::pair<const std::string, uint64_t>>>;

  // Declared before map_: the map's allocator points at it, and it must outlive the map.
  uint64_t node_bytes_ = 0;
  uint64_t key_heap_bytes_ = 0;  // chunk bytes of keys stored outside the node (see above)
  Map map_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ORDERED_INDEX_H_
