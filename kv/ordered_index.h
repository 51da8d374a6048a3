// OrderedIndex: an Index that holds full keys, so Find is exact and Scan walks keys in byte-wise
// order. Selected at open for stores that need range scans.
//
// Layout: each key lives in one Entry (its bytes and its value in a single allocation that stays
// put while the key is in the index), reached two ways: a B-tree of Entry pointers in key order
// (absl::btree_set) for Scan, and a hash table of the same pointers (kv/keyed_table.h, hashed by
// key bytes) for Find, Insert, Replace and Erase. A point lookup thus costs a hash of the key
// and one or two cache misses instead of a walk down the B-tree, whose every comparison reads
// another key's bytes (about 20 cache misses at 1M keys).
//
// The engine grows the table ahead of a write (MakeRoomFor) and refuses the write when the
// system has no memory for it: KeyedTable's growth changes nothing when it fails (an Abseil table
// was left broken, its entries no longer found, and compaction would have dropped the records of
// keys the index lost).
//
// Thread contract: not thread-safe; callers serialize (the owning shard's mutex).
// Invariant: at most one entry per key; every entry is in both the tree and the table; the
// `hash` arguments are ignored.
//
// memory_bytes counts what is requested from the allocator: the tree's nodes (counted by their
// allocator as they are allocated and freed), the table's array and each Entry, every request
// rounded up to glibc malloc's chunk size (8-byte header, 16-byte granules, 32-byte minimum),
// which is what it really costs on Debian. The object itself is not counted.
//
// Cost per key: the Entry, 16 bytes plus the key (48 bytes of chunk for 17-32-byte keys); an
// 8-byte pointer in a tree node (a node holds up to 30; about 12 bytes per key on random
// insertion, with the internal nodes); 9 bytes per table slot at a load of 7/16 to 7/8 (10-21
// bytes per key). About 75 bytes per 23-byte key (bench/micro/index_bench.cc).
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

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "kv/index.h"
#include "kv/keyed_table.h"

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
  ~OrderedIndex() override;
  OrderedIndex(const OrderedIndex&) = delete;
  OrderedIndex& operator=(const OrderedIndex&) = delete;

  void Find(uint64_t hash, std::string_view key, std::vector<uint64_t>* pages) const override;
  bool exact() const override { return true; }
  absl::Status Insert(uint64_t hash, std::string_view key, uint64_t page) override;
  // Grows the hash table now, if `inserts` more keys would grow it (kResourceExhausted when that
  // allocation fails, the index unchanged). Tree nodes and entries are small allocations made as
  // keys arrive.
  absl::Status MakeRoomFor(uint64_t inserts) override;
  bool Replace(uint64_t hash, std::string_view key, uint64_t old_page,
               uint64_t new_page) override;
  bool Erase(uint64_t hash, std::string_view key, uint64_t page) override;
  IndexStats stats() const override;
  void ForEachValue(const std::function<void(uint64_t value)>& visit) const override;
  uint64_t EraseIf(const std::function<bool(uint64_t value)>& doomed) override;
  // Visits the keys in order, so that restoring them appends to the tree.
  bool SaveSome(SaveCursor& cursor, const SaveVisitor& visit) const override;
  std::optional<uint64_t> SavedValue(uint64_t word) const override { return word; }
  absl::Status RestoreEntry(std::string_view key, uint64_t word) override;
  // Sizes the hash table for `expected_entries` (a B-tree cannot be pre-sized).
  void Reserve(uint64_t expected_entries) override;
  uint64_t BytesFor(uint64_t entries) const override;

  bool ordered() const override { return true; }
  absl::Status Scan(std::string_view start, bool exclusive, size_t limit,
                    std::vector<std::pair<std::string, uint64_t>>* out) const override;

 private:
  // A key's bytes follow its Entry in the same allocation.
  struct Entry {
    uint64_t value = 0;
    uint32_t key_bytes = 0;
    std::string_view key() const {
      return std::string_view(reinterpret_cast<const char*>(this + 1), key_bytes);
    }
  };
  static uint64_t EntryChunkBytes(size_t key_bytes) {
    return MallocChunkBytes(sizeof(Entry) + key_bytes);
  }
  Entry* NewEntry(std::string_view key, uint64_t value);
  void DeleteEntry(Entry* entry);

  // Byte-wise key order, between entries and plain keys (heterogeneous lookup).
  struct KeyLess {
    using is_transparent = void;
    bool operator()(const Entry* a, const Entry* b) const { return a->key() < b->key(); }
    bool operator()(const Entry* a, std::string_view b) const { return a->key() < b; }
    bool operator()(std::string_view a, const Entry* b) const { return a < b->key(); }
  };
  using Tree = absl::btree_set<Entry*, KeyLess, CountingAllocator<Entry*>>;

  struct KeyOfEntry {
    std::string_view operator()(const Entry* entry) const { return entry->key(); }
  };

  Entry* FindEntry(std::string_view key) const { return table_.Find(key); }
  // Puts a new entry in the tree (at `position` when `hint`), then in the table. REQUIRES: room
  // made in the table. Rethrows the tree's std::bad_alloc with the entry freed, nothing changed.
  void AddToTreeThenTable(Entry* entry, Tree::iterator position, bool hint);
  // The table's array as malloc takes it.
  uint64_t TableBytes() const;

  // Declared before the tree: its allocator points at it, and it must outlive it.
  uint64_t container_bytes_ = 0;  // tree nodes
  uint64_t entry_bytes_ = 0;      // chunk bytes of the entries
  Tree tree_;
  KeyedTable<Entry, KeyOfEntry> table_;  // its array from operator new, not counted above
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ORDERED_INDEX_H_
