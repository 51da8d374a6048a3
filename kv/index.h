// Index: the in-memory map from a key to the page(s) on the device that may hold its record.
//
// The engine is sharded by key hash; each shard owns one Index and calls it under the shard's
// mutex. Thread contract: an Index is not thread-safe; callers serialize every call (const ones
// included) with the owning shard's mutex.
//
// Two implementations, chosen when the store is opened:
//
//   - hash index (NewHashIndex, the default): holds no key bytes, about 9-11 bytes per live key.
//     An entry is a 32-bit tag taken from the key's hash plus a 31-bit page number, so different
//     keys can share a tag: Find returns every page whose tag matches and the caller reads each
//     candidate page to confirm the key (exact() is false). The engine never lets two keys with
//     equal tags share a page (FORMAT.md), so an entry (tag, page) belongs to one key. Page
//     numbers must be below kHashIndexPageLimit (2^31). See kv/hash_index.h.
//   - ordered index (NewOrderedIndex): holds full keys, in a B-tree for Scan (key order) and a
//     hash table for Find, so Find is exact (no device read to confirm identity). About 75
//     bytes per key for 23-byte keys. See kv/ordered_index.h.
//
// The `hash` argument is always the low half of the key's XXH3-128 (KeyHash::lo, key_hash.h),
// computed once per operation by the engine; the high half picks the shard. The hash index uses
// only bits 0..31 (see kv/hash_index.h). The ordered index ignores it.
//
// An entry's value is a Location's index_value() (kv/location.h): the hash index keeps a page
// number only, the ordered index the page and the record's size.
//
// Both implementations allow the engine's whole page range for a key of any length; key length
// limits are the engine's to enforce before calling Insert.
#ifndef NVKV_KV_INDEX_H_
#define NVKV_KV_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace nvkv::kv {

// Page numbers the hash index can store: [0, kHashIndexPageLimit). The engine should refuse at
// open a device whose page count exceeds this when the hash index is selected.
inline constexpr uint64_t kHashIndexPageLimit = uint64_t{1} << 31;

struct IndexStats {
  uint64_t entries = 0;       // live (key, page) entries
  uint64_t memory_bytes = 0;  // hash: table bytes allocated; ordered: estimate (ordered_index.h)
};

class Index {
 public:
  virtual ~Index() = default;

  // Replaces the contents of `pages` with every location that MAY hold `key`.
  //   hash index: the page of every entry whose tag matches, the most recently inserted first:
  //     pages of other keys with the same tag too, which the caller tells apart by reading them.
  //     A key may have several entries (a blind overwrite, kv/README.md "Blind overwrites",
  //     inserts a new one without knowing which older entry is the key's): its current record is
  //     on the first of its entries in this order, and its later entries are stale.
  //   ordered index: at most one page, the key's exact entry.
  // Does not allocate when `pages` already has enough capacity.
  virtual void Find(uint64_t hash, std::string_view key, std::vector<uint64_t>* pages) const = 0;

  // True when Find's candidates are exact (ordered index): no device read is needed to confirm
  // that a candidate holds `key`.
  virtual bool exact() const = 0;

  // Adds an entry mapping `key` to `page`, as the newest of the entries Find returns for it.
  // REQUIRES: ordered index: `key` has no entry yet. Hash index: no entry (tag, `page`) exists
  // yet; older entries of `key` may (a blind overwrite), and become stale.
  // Errors: kInvalidArgument when the hash index cannot store `page` (>= kHashIndexPageLimit);
  // kResourceExhausted when the table cannot grow (allocation failure, or 2^32 slots reached);
  // kAlreadyExists when the ordered index already holds `key`. The index is unchanged on error.
  virtual absl::Status Insert(uint64_t hash, std::string_view key, uint64_t page) = 0;

  // Grows the index now, if it must, so that the next `inserts` Insert calls cannot fail for
  // want of room: the engine calls it before it appends a record whose entry is new, so that a
  // table that cannot grow refuses the write instead of leaving a record without an entry.
  // Errors: kResourceExhausted as Insert; the index is unchanged on error.
  //   hash index: the guarantee holds until the table changes size (nothing shrinks it).
  //   ordered index: grows its hash table ahead as the hash index does; its B-tree allocates a
  //     node as an insert splits one, which cannot be done ahead, and each key's entry is an
  //     allocation of its own: their failure is std::bad_alloc, as for any other small one.
  virtual absl::Status MakeRoomFor(uint64_t inserts) = 0;

  // Changes key's entry at `old_page` to `new_page`; returns whether it did. Changes exactly one
  // entry: for the hash index, the entry with key's tag and page `old_page` (no other key with
  // that tag has a record on that page, FORMAT.md). Returns false without
  // changing anything when there is no such entry, or when the hash index cannot store
  // `new_page` (>= kHashIndexPageLimit).
  virtual bool Replace(uint64_t hash, std::string_view key, uint64_t old_page,
                       uint64_t new_page) = 0;

  // Removes key's entry at `page` (exactly one entry, as for Replace); returns whether one was
  // removed.
  virtual bool Erase(uint64_t hash, std::string_view key, uint64_t page) = 0;

  virtual IndexStats stats() const = 0;

  // How many times Insert, Replace or Erase changed an entry since the index was made: equal
  // values mean that every Find in between returned the same. Lets a reader that remembers it
  // skip asking again whether its key's entries moved.
  uint64_t changes() const { return changes_; }

  // Calls `visit` with the value (a Location's index_value()) of every entry, in no
  // particular order. O(entries); for rare whole-index questions (is any entry left in a
  // segment compaction could not empty?), never on a hot path.
  virtual void ForEachValue(const std::function<void(uint64_t value)>& visit) const = 0;

  // Removes every entry whose value (a Location's index_value()) `doomed` is true of; returns
  // how many it removed. O(entries), for recovery (the entries of a checkpoint that point into
  // segments compaction freed since).
  virtual uint64_t EraseIf(const std::function<bool(uint64_t value)>& doomed) = 0;

  // The checkpoint (kv/checkpoint.h). SaveSome calls `visit` for the entries, with what
  // RestoreEntry needs to put each back, in an order that makes the restored index answer every
  // Find as this one does: the hash index gives its slot word (`key` empty), a tag's entries
  // oldest first; the ordered index gives the key and the entry's value. It goes on from where
  // `cursor` stands (a default one: the first entry) until `visit` returns false (`cursor` then
  // stands after that entry) or no entry is left (returns true), so that a caller may release
  // its lock between calls: the index must not change meanwhile (checked).
  struct SaveCursor {
    bool started = false;
    uint64_t changes = 0;   // changes() when the walk started
    uint64_t position = 0;  // hash index: slots walked
    std::string last_key;   // ordered index: the last key visited
  };
  using SaveVisitor = std::function<bool(std::string_view key, uint64_t word)>;
  virtual bool SaveSome(SaveCursor& cursor, const SaveVisitor& visit) const = 0;
  // Every entry, as SaveSome gives them.
  void ForEachSaved(const std::function<void(std::string_view key, uint64_t word)>& visit) const;
  // The entry's value (a Location's index_value()) that a saved `word` stands for; nullopt for a
  // word ForEachSaved of this kind of index never gives.
  virtual std::optional<uint64_t> SavedValue(uint64_t word) const = 0;
  // Adds an entry ForEachSaved gave, after the ones restored before it. Errors: as Insert.
  virtual absl::Status RestoreEntry(std::string_view key, uint64_t word) = 0;

  // A hint that Insert or Find of `hash` follows soon: the hash index asks the CPU to fetch the
  // slot it will start at, so that a caller with many keys at hand (recovery) overlaps their
  // memory accesses. The ordered index does nothing.
  virtual void Prefetch(uint64_t /*hash*/) const {}

  // Pre-sizes the index for `expected_entries` live entries so that inserting up to that many
  // does not resize (used by recovery, which knows the count from the log). Best effort: if the
  // allocation fails the index keeps its current size and a later Insert reports the error.
  virtual void Reserve(uint64_t expected_entries) = 0;

  // About the bytes this index would take holding `entries` entries, for planning memory
  // (recovery): the hash index's table once Reserve(entries); the ordered index's at the mean
  // cost of the entries it holds (its keys' bytes among it), or a floor per entry while empty.
  virtual uint64_t BytesFor(uint64_t entries) const = 0;

  // A value equal for two hashes exactly when the hash index gives them the same tag (it mixes
  // bits 0..31 of the hash bijectively). The engine keeps two different keys with equal tags off
  // one page, so that a (tag, page) entry can belong to only one key.
  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash); }

  // True for the ordered index: Scan is supported.
  virtual bool ordered() const;

  // Replaces the contents of `out` with up to `limit` (key, page) pairs whose key is >= `start`
  // (> `start` when `exclusive`), in ascending byte-wise key order. kUnimplemented for the hash
  // index, which holds no keys.
  virtual absl::Status Scan(std::string_view start, bool exclusive, size_t limit,
                            std::vector<std::pair<std::string, uint64_t>>* out) const;

 protected:
  // Implementations call it on every change of an entry.
  void NoteChange() { ++changes_; }

 private:
  uint64_t changes_ = 0;
};

// A new, empty hash index (kv/hash_index.h). Allocates nothing until the first Insert/Reserve.
std::unique_ptr<Index> NewHashIndex();

// A new, empty ordered index (kv/ordered_index.h).
std::unique_ptr<Index> NewOrderedIndex();

}  // namespace nvkv::kv

#endif  // NVKV_KV_INDEX_H_
