// HashIndex: the default Index. An open-addressing multimap from a 32-bit hash tag to page
// numbers, holding no key bytes: one uint64_t per entry, about 9-11 bytes per live key.
//
// Thread contract: not thread-safe; callers serialize (the owning shard's mutex).
//
// Entry (one uint64_t slot; an empty slot is 0):
//
//   bits 63..32  tag: Mix32(hash bits 0..31)
//   bit  31      1 = occupied (so no occupied entry is 0, even tag 0 with page 0)
//   bits 30..0   page number, < kHashIndexPageLimit = 2^31
//
// Which hash bits: only bits 0..31 of the XXH3 hash. The engine picks the shard from the top
// bits, so within a shard those are nearly constant and must not choose slots; bits 32..55 are
// dropped to keep the entry at 8 bytes. Mix32 (MurmurHash3's fmix32) is a bijection on 32 bits:
// it adds and removes no tag collisions, and it spreads even a low-entropy hash (a caller's
// sequential test hashes) over the table. Two keys share a tag only when their hashes agree in
// bits 0..31; with n keys in a shard a Find meets n / 2^32 false candidates on average (0.2% at
// 10M keys), each costing the caller one page read to rule out.
//
// Home slot: home(tag) = (tag * capacity) >> 32 ("fastrange"): derived from the stored tag
// alone, so the table resizes without the keys, and any capacity works (not only powers of
// two), which lets it grow by 1.3x instead of 2x.
//
// Probing: linear probing, with entries kept in (home, tag) order, which is tag order because
// home() is monotone in the tag ("Robin Hood" order with the tag as tie-break; Amble & Knuth's
// ordered hash table). Invariants, cyclically (the table wraps from the last slot to slot 0):
//   1. Every slot from an entry's home to the entry's slot is occupied.
//   2. Along a run of occupied slots, entries are sorted by (home, tag). Entries with equal tags
//      are adjacent, in the order they were inserted: Place puts a new entry after its equals,
//      Replace changes an entry in its slot, RemoveAt's shift and Rehash keep the order. Find
//      returns them newest first, which is what a key with several entries needs (index.h).
//   3. entries <= capacity * 9/10, so at least one slot is empty and every probe ends.
// Find visits only the slots from the tag's home to the end of the tag's group, stopping at the
// first entry with a later home or a larger tag: at load 0.9 that is 5.5 slots on average (one
// or two 64-byte cache lines), hits and misses alike, where plain linear probing would scan a
// miss to the end of the cluster (~50 slots at load 0.9). Insert puts the entry in order and
// shifts the rest of the run one slot right; Erase backward-shifts the following entries that
// are away from their home one slot left, leaving no tombstones.
//
// Why not bucketized cuckoo: its second bucket must also be derived from the 32 stored tag bits
// (partial-key cuckoo: bucket XOR hash(tag)), which needs a power-of-two capacity and so 2x
// growth (8.4-17 bytes per key at a 0.95 maximum load, swinging with n; 3x the old table during
// a resize), and a multimap Find must read both buckets, two cache lines, every time. Linear
// probing reads one line in most lookups, grows by 1.3x and has no insertion failure to handle.
//
// Load and growth: maximum load 0.9; on reaching it the capacity grows by 1.3x (load 0.69 after
// a resize). Bytes per live key = 8 / load: 8.9 right before a resize, 11.6 right after;
// Reserve(n) sizes the table to n / 0.9 (8.9 bytes per key at n). A resize briefly holds both
// tables (about 2.3x the old table). The table never shrinks on Erase.
#ifndef NVKV_KV_HASH_INDEX_H_
#define NVKV_KV_HASH_INDEX_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kv/index.h"
#include "kv/zeroed_block.h"

namespace nvkv::kv {

class HashIndex final : public Index {
 public:
  // Slots: home() maps a 32-bit tag onto [0, capacity), so more than 2^32 slots would leave the
  // rest unreachable. 2^32 slots hold up to 3.8 billion entries (32 GiB).
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 32;
  static constexpr uint64_t kMinCapacity = 16;
  // Maximum load kMaxLoadNumerator / kMaxLoadDenominator = 0.9.
  static constexpr uint64_t kMaxLoadNumerator = 9;
  static constexpr uint64_t kMaxLoadDenominator = 10;
  // Growth factor kGrowthNumerator / kGrowthDenominator = 1.3.
  static constexpr uint64_t kGrowthNumerator = 13;
  static constexpr uint64_t kGrowthDenominator = 10;

  HashIndex() = default;
  HashIndex(const HashIndex&) = delete;
  HashIndex& operator=(const HashIndex&) = delete;

  void Find(uint64_t hash, std::string_view key, std::vector<uint64_t>* pages) const override;
  bool exact() const override { return false; }
  absl::Status Insert(uint64_t hash, std::string_view key, uint64_t page) override;
  absl::Status MakeRoomFor(uint64_t inserts) override;
  bool Replace(uint64_t hash, std::string_view key, uint64_t old_page,
               uint64_t new_page) override;
  bool Erase(uint64_t hash, std::string_view key, uint64_t page) override;
  IndexStats stats() const override;
  void ForEachValue(const std::function<void(uint64_t value)>& visit) const override;
  uint64_t EraseIf(const std::function<bool(uint64_t value)>& doomed) override;
  bool SaveSome(SaveCursor& cursor, const SaveVisitor& visit) const override;
  std::optional<uint64_t> SavedValue(uint64_t word) const override;
  absl::Status RestoreEntry(std::string_view key, uint64_t word) override;
  void Reserve(uint64_t expected_entries) override;
  uint64_t BytesFor(uint64_t entries) const override;
  void Prefetch(uint64_t hash) const override;

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kNotFound = ~uint64_t{0};

  uint64_t Home(uint32_t tag) const { return (uint64_t{tag} * capacity_) >> 32; }
  // How far slot `pos` lies past the home of the entry in it (cyclically).
  uint64_t Distance(uint64_t entry, uint64_t pos) const;
  uint64_t Next(uint64_t pos) const { return pos + 1 == capacity_ ? 0 : pos + 1; }

  // The slot of one entry equal to (tag, page), or kNotFound.
  uint64_t Locate(uint32_t tag, uint64_t page) const;
  // Places `entry` in order; returns its slot. REQUIRES: size_ < MaxEntries(capacity_).
  uint64_t Place(uint64_t entry);
  // Places `entry` in slot `pos` + 1 when that is its place in order without moving anything:
  // the entry in slot `pos` ends its run, `entry` sorts after it, and `entry`'s home is in that
  // run or is slot `pos` + 1. Returns whether it did. REQUIRES: as Place.
  bool PlaceRightAfter(uint64_t pos, uint64_t entry);
  // Empties slot `pos` and backward-shifts the entries after it.
  void RemoveAt(uint64_t pos);
  // Moves every entry into a new table of `capacity` slots. The index is unchanged on error.
  absl::Status Rehash(uint64_t capacity);

  ZeroedBlock table_;           // the slots' memory (empty when capacity_ is 0)
  uint64_t* slots_ = nullptr;  // capacity_ slots: table_'s
  uint64_t capacity_ = 0;
  uint64_t size_ = 0;  // occupied slots
  // The slot of the entry RestoreEntry placed last: saved entries come in order, so the next
  // one mostly goes right after it (PlaceRightAfter checks). A guess, checked before use.
  uint64_t restored_at_ = kNotFound;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_HASH_INDEX_H_
