#include "kv/ordered_index.h"

#include <cstring>
#include <new>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"

namespace nvkv::kv {
namespace {

// Debian 12's Abseil hashes its own absl::string_view (not std::string_view).
size_t HashBytes(std::string_view key) {
  return absl::Hash<absl::string_view>()(absl::string_view(key.data(), key.size()));
}

}  // namespace

size_t OrderedIndex::KeyHashOf::operator()(const Entry* e) const { return HashBytes(e->key()); }
size_t OrderedIndex::KeyHashOf::operator()(std::string_view key) const { return HashBytes(key); }

OrderedIndex::OrderedIndex()
    : tree_(KeyLess(), Tree::allocator_type(&container_bytes_)),
      table_(0, KeyHashOf(), KeyEq(), Table::allocator_type(&container_bytes_)) {}

OrderedIndex::~OrderedIndex() {
  std::vector<Entry*> entries(table_.begin(), table_.end());
  tree_.clear();
  table_.clear();
  for (Entry* entry : entries) DeleteEntry(entry);
}

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

OrderedIndex::Entry* OrderedIndex::FindEntry(std::string_view key) const {
  auto it = table_.find(key);
  return it == table_.end() ? nullptr : *it;
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
  Entry* entry = NewEntry(key, page);
  table_.insert(entry);
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
  auto it = table_.find(key);
  if (it == table_.end() || (*it)->value != page) return false;
  Entry* entry = *it;
  table_.erase(it);
  tree_.erase(entry);
  DeleteEntry(entry);
  if (table_.empty()) table_.clear();  // frees a large table's array: an empty index holds none
  NoteChange();
  return true;
}

IndexStats OrderedIndex::stats() const {
  return IndexStats{.entries = table_.size(), .memory_bytes = container_bytes_ + entry_bytes_};
}

void OrderedIndex::ForEachValue(const std::function<void(uint64_t value)>& visit) const {
  for (const Entry* entry : table_) visit(entry->value);
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
  Entry* entry = NewEntry(key, word);
  table_.insert(entry);
  tree_.insert(tree_.end(), entry);  // keys come in order: the hint is right
  NoteChange();
  return absl::OkStatus();
}

absl::Status OrderedIndex::MakeRoomFor(uint64_t inserts) {
  try {
    table_.reserve(table_.size() + inserts);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "ordered index: cannot grow its hash table past %d keys", table_.size()));
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
