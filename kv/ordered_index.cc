#include "kv/ordered_index.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// Debian 12's Abseil hashes its own absl::string_view (not std::string_view).
size_t HashBytes(std::string_view key) {
  return absl::Hash<absl::string_view>()(absl::string_view(key.data(), key.size()));
}

}  // namespace

OrderedIndex::OrderedIndex() : tree_(KeyLess(), Tree::allocator_type(&container_bytes_)) {}

OrderedIndex::~OrderedIndex() {
  std::vector<Entry*> entries(tree_.begin(), tree_.end());
  tree_.clear();
  table_.Clear();
  for (Entry* entry : entries) DeleteEntry(entry);
}

// --- EntryTable ---

OrderedIndex::Entry* OrderedIndex::EntryTable::Find(std::string_view key) const {
  if (size_ == 0) return nullptr;
  const uint64_t hash = HashBytes(key);
  const uint8_t control = ControlOf(hash);
  for (uint64_t pos = Home(hash);; pos = Next(pos)) {
    const uint8_t c = control_[pos];
    if (c == kEmpty) return nullptr;
    if (c == control && slots_[pos]->key() == key) return slots_[pos];
  }
}

uint64_t OrderedIndex::EntryTable::SlotOf(const Entry* entry) const {
  uint64_t pos = Home(HashBytes(entry->key()));
  while (control_[pos] < kFullBit || slots_[pos] != entry) pos = Next(pos);
  return pos;
}

bool OrderedIndex::EntryTable::MakeRoomFor(uint64_t inserts) {
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

void OrderedIndex::EntryTable::Insert(Entry* entry) {
  NVKV_DCHECK(size_ + erased_ < MaxUsed(capacity_));
  Place(entry, HashBytes(entry->key()));
}

void OrderedIndex::EntryTable::Place(Entry* entry, uint64_t hash) {
  uint64_t pos = Home(hash);
  while (control_[pos] >= kFullBit) pos = Next(pos);
  if (control_[pos] == kErased) --erased_;
  control_[pos] = ControlOf(hash);
  slots_[pos] = entry;
  ++size_;
}

void OrderedIndex::EntryTable::Erase(const Entry* entry) {
  const uint64_t pos = SlotOf(entry);
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

bool OrderedIndex::EntryTable::Rehash(uint64_t capacity) {
  const uint64_t bytes = capacity * (sizeof(Entry*) + 1);
  void* memory = ::operator new(bytes, std::nothrow);
  if (memory == nullptr) return false;
  std::memset(memory, 0, bytes);
  Entry** const old_slots = slots_;
  const uint8_t* const old_control = control_;
  const uint64_t old_capacity = capacity_;
  slots_ = static_cast<Entry**>(memory);
  control_ = reinterpret_cast<uint8_t*>(slots_ + capacity);
  capacity_ = capacity;
  size_ = 0;
  erased_ = 0;
  for (uint64_t i = 0; i < old_capacity; ++i) {
    if (old_control[i] >= kFullBit) Place(old_slots[i], HashBytes(old_slots[i]->key()));
  }
  ::operator delete(old_slots);
  return true;
}

void OrderedIndex::EntryTable::Clear() {
  Free();
  slots_ = nullptr;
  control_ = nullptr;
  capacity_ = size_ = erased_ = 0;
}

void OrderedIndex::EntryTable::Free() { ::operator delete(slots_); }

uint64_t OrderedIndex::EntryTable::memory_bytes() const {
  return capacity_ == 0 ? 0 : MallocChunkBytes(capacity_ * (sizeof(Entry*) + 1));
}

// --- OrderedIndex ---

OrderedIndex::Entry* OrderedIndex::NewEntry(std::string_view key, uint64_t value) {
  void* memory = ::operator new(sizeof(Entry) + key.size());
  Entry* entry = new (memory) Entry;
  entry->value = value;
  entry->key_bytes = static_cast<uint32_t>(key.size());
  std::memcpy(entry + 1, key.data(), key.size());
  entry_bytes_ += EntryChunkBytes(key.size());
  return entry;
}

void OrderedIndex::DeleteEntry(Entry* entry) {
  entry_bytes_ -= EntryChunkBytes(entry->key_bytes);
  entry->~Entry();
  ::operator delete(entry);
}

void OrderedIndex::Find(uint64_t /*hash*/, std::string_view key,
                        std::vector<uint64_t>* pages) const {
  pages->clear();
  if (const Entry* entry = FindEntry(key)) pages->push_back(entry->value);
}

absl::Status OrderedIndex::Insert(uint64_t /*hash*/, std::string_view key, uint64_t page) {
  if (const Entry* existing = FindEntry(key)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "ordered index: the %d-byte key already has an entry (page %d); Insert needs a new key",
        key.size(), existing->value));
  }
  NVKV_RETURN_IF_ERROR(MakeRoomFor(1));
  Entry* entry = NewEntry(key, page);
  table_.Insert(entry);
  tree_.insert(entry);
  NoteChange();
  return absl::OkStatus();
}

bool OrderedIndex::Replace(uint64_t /*hash*/, std::string_view key, uint64_t old_page,
                           uint64_t new_page) {
  Entry* entry = FindEntry(key);
  if (entry == nullptr || entry->value != old_page) return false;
  entry->value = new_page;
  NoteChange();
  return true;
}

bool OrderedIndex::Erase(uint64_t /*hash*/, std::string_view key, uint64_t page) {
  Entry* entry = FindEntry(key);
  if (entry == nullptr || entry->value != page) return false;
  table_.Erase(entry);
  tree_.erase(entry);
  DeleteEntry(entry);
  if (table_.size() == 0) table_.Clear();  // frees a large table's array: an empty index holds none
  NoteChange();
  return true;
}

IndexStats OrderedIndex::stats() const {
  return IndexStats{.entries = table_.size(),
                    .memory_bytes = container_bytes_ + entry_bytes_ + table_.memory_bytes()};
}

void OrderedIndex::ForEachValue(const std::function<void(uint64_t value)>& visit) const {
  table_.ForEach([&](const Entry* entry) { visit(entry->value); });
}

void OrderedIndex::ForEachSaved(
    const std::function<void(std::string_view key, uint64_t word)>& visit) const {
  for (const Entry* entry : tree_) visit(entry->key(), entry->value);
}

absl::Status OrderedIndex::RestoreEntry(std::string_view key, uint64_t word) {
  if (const Entry* existing = FindEntry(key)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "ordered index: the %d-byte key is restored twice (page %d)", key.size(),
        existing->value));
  }
  NVKV_RETURN_IF_ERROR(MakeRoomFor(1));
  Entry* entry = NewEntry(key, word);
  table_.Insert(entry);
  tree_.insert(tree_.end(), entry);  // keys come in order: the hint is right
  NoteChange();
  return absl::OkStatus();
}

absl::Status OrderedIndex::MakeRoomFor(uint64_t inserts) {
  if (!table_.MakeRoomFor(inserts)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "ordered index: no memory to grow its hash table past %d keys", table_.size()));
  }
  return absl::OkStatus();
}

void OrderedIndex::Reserve(uint64_t expected_entries) {
  // Best effort (Index::Reserve): on failure the table keeps its size.
  if (expected_entries > table_.size()) MakeRoomFor(expected_entries - table_.size()).IgnoreError();
}

absl::Status OrderedIndex::Scan(std::string_view start, bool exclusive, size_t limit,
                                std::vector<std::pair<std::string, uint64_t>>* out) const {
  out->clear();
  auto it = exclusive ? tree_.upper_bound(start) : tree_.lower_bound(start);
  for (; it != tree_.end() && out->size() < limit; ++it) {
    out->emplace_back(std::string((*it)->key()), (*it)->value);
  }
  return absl::OkStatus();
}

}  // namespace nvkv::kv
