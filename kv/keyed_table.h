// KeyedTable: a hash table of pointers to objects that hold their own key (the ordered index's
// entries, the record cache's), found by that key. It owns the pointers' slots, not the objects.
//
// Why not absl::flat_hash_map: the engine grows its tables ahead of a write, or skips what a
// table has no memory for, and Abseil's table (Debian 12's release) records its new capacity
// before it allocates the new array, so a growth that fails with std::bad_alloc leaves it
// probing an array of the old size, broken even for its destructor. KeyedTable allocates first
// (operator new, nothrow) and changes nothing when that fails: MakeRoomFor says false, and once
// it said true the next `inserts` Insert calls allocate nothing.
//
// Layout: open addressing with linear probing over one array of `capacity` slots, each a pointer
// and a control byte (empty, erased, or 7 bits of the key's hash that rule out most other keys
// without reading their bytes). Home slot: the 64-bit hash of the key scaled onto
// [0, capacity) ("fastrange"), so any capacity works. An erased slot becomes empty at once when
// the slot after it is empty (no probe can pass through it then), else a tombstone that probes
// step over until the next rehash. At most 7/8 of the slots are used (entries and tombstones),
// so every probe ends at an empty slot. Growth doubles the capacity; tombstones alone (when at
// least a quarter of the room) are cleared at the same capacity. 9 bytes per slot: 10.3-20.6
// bytes per key between growths.
//
// KeyOf: a functor, std::string_view KeyOf()(const T*), the key the object holds (it must not
// change while the object is in the table).
//
// Thread contract: not thread-safe; the owner serializes.
#ifndef NVKV_KV_KEYED_TABLE_H_
#define NVKV_KV_KEYED_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "storage/base/check.h"

namespace nvkv::kv {

template <typename T, typename KeyOf>
class KeyedTable {
 public:
  // Bytes per slot.
  static constexpr uint64_t kSlotBytes = sizeof(T*) + 1;

  KeyedTable() = default;
  KeyedTable(const KeyedTable&) = delete;
  KeyedTable& operator=(const KeyedTable&) = delete;
  ~KeyedTable() { ::operator delete(slots_); }

  T* Find(std::string_view key) const {
    if (size_ == 0) return nullptr;
    const uint64_t hash = Hash(key);
    const uint8_t control = ControlOf(hash);
    for (uint64_t pos = Home(hash);; pos = Next(pos)) {
      const uint8_t c = control_[pos];
      if (c == kEmpty) return nullptr;
      if (c == control && KeyOf()(slots_[pos]) == key) return slots_[pos];
    }
  }

  // Makes room for `inserts` more objects. False, and the table unchanged, when the system has
  // no memory for a larger array.
  bool MakeRoomFor(uint64_t inserts) {
    if (inserts <= MaxUsed(capacity_) - size_ - erased_) return true;
    const uint64_t needed = size_ + inserts;
    if (needed < size_) return false;  // no table holds that many
    // Tombstones alone are cleared at the same capacity when they are at least a quarter of the
    // room, so that such a rehash follows as many erases; else the table doubles.
    uint64_t capacity = capacity_;
    if (needed > MaxUsed(capacity_) / 4 * 3) {
      capacity = std::max(kMinCapacity, capacity_ * 2);
      while (MaxUsed(capacity) < needed) {
        if (capacity > kMaxCapacity / 2) return false;
        capacity *= 2;
      }
    }
    return Rehash(capacity);
  }

  // REQUIRES: room made for it (MakeRoomFor); no object with the same key in the table.
  void Insert(T* object) {
    NVKV_DCHECK(size_ + erased_ < MaxUsed(capacity_));
    Place(object, Hash(KeyOf()(object)));
  }

  // REQUIRES: `object` is in the table.
  void Erase(const T* object) {
    uint64_t pos = Home(Hash(KeyOf()(object)));
    while (control_[pos] < kFullBit || slots_[pos] != object) pos = Next(pos);
    // No probe passes through `pos` to a later slot when the slot after it is empty.
    if (control_[Next(pos)] == kEmpty) {
      control_[pos] = kEmpty;
    } else {
      control_[pos] = kErased;
      ++erased_;
    }
    slots_[pos] = nullptr;
    --size_;
  }

  // Frees the array (the objects are the owner's).
  void Clear() {
    ::operator delete(slots_);
    slots_ = nullptr;
    control_ = nullptr;
    capacity_ = size_ = erased_ = 0;
  }

  uint64_t size() const { return size_; }
  uint64_t capacity() const { return capacity_; }

  template <typename Visit>
  void ForEach(Visit visit) const {
    for (uint64_t i = 0; i < capacity_; ++i) {
      if (control_[i] >= kFullBit) visit(slots_[i]);
    }
  }

 private:
  static constexpr uint8_t kEmpty = 0;
  static constexpr uint8_t kErased = 1;
  static constexpr uint8_t kFullBit = 0x80;  // a used slot: 0x80 | hash bits 0..6
  static constexpr uint64_t kMinCapacity = 16;
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 58;

  static uint64_t Hash(std::string_view key) {
    // Debian 12's Abseil hashes its own absl::string_view (not std::string_view).
    return absl::Hash<absl::string_view>()(absl::string_view(key.data(), key.size()));
  }
  static uint64_t MaxUsed(uint64_t capacity) { return capacity / 8 * 7 + capacity % 8 * 7 / 8; }
  static uint8_t ControlOf(uint64_t hash) { return kFullBit | (hash & 0x7f); }
  uint64_t Home(uint64_t hash) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * capacity_) >> 64);
  }
  uint64_t Next(uint64_t pos) const { return pos + 1 == capacity_ ? 0 : pos + 1; }

  // Puts `object` in the first free slot from its home. REQUIRES: a free slot.
  void Place(T* object, uint64_t hash) {
    uint64_t pos = Home(hash);
    while (control_[pos] >= kFullBit) pos = Next(pos);
    if (control_[pos] == kErased) --erased_;
    control_[pos] = ControlOf(hash);
    slots_[pos] = object;
    ++size_;
  }

  // Moves every object into a new array of `capacity` slots; false (nothing changed) when the
  // system has no memory for it.
  bool Rehash(uint64_t capacity) {
    const uint64_t bytes = capacity * kSlotBytes;
    void* memory = ::operator new(bytes, std::nothrow);
    if (memory == nullptr) return false;
    std::memset(memory, 0, bytes);
    T** const old_slots = slots_;
    const uint8_t* const old_control = control_;
    const uint64_t old_capacity = capacity_;
    slots_ = static_cast<T**>(memory);
    control_ = reinterpret_cast<uint8_t*>(slots_ + capacity);
    capacity_ = capacity;
    size_ = 0;
    erased_ = 0;
    for (uint64_t i = 0; i < old_capacity; ++i) {
      if (old_control[i] >= kFullBit) Place(old_slots[i], Hash(KeyOf()(old_slots[i])));
    }
    ::operator delete(old_slots);
    return true;
  }

  T** slots_ = nullptr;  // capacity_ pointers, then capacity_ control bytes
  uint8_t* control_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t size_ = 0;
  uint64_t erased_ = 0;  // tombstones
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_KEYED_TABLE_H_
