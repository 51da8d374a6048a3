#include "kv/ordered_index.h"

#include <cstring>
#include <iterator>
#include <new>

#include "absl/strings/str_format.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
OrderedIndex::OrderedIndex() : tree_(KeyLess(), Tree::allocator_type(&container_bytes_)) {}

OrderedIndex::~OrderedIndex() {
  std::vector<Entry*> entries(tree_.begin(), tree_.end());
  tree_.clear();
  table_.Clear();
  for (Entry* entry : entries) DeleteEntry(entry);
}

void OrderedIndex::AddToTreeThenTable(Entry* entry, Tree::iterator position, bool hint) {
  // The tree first: a node it cannot allocate throws with nothing changed (the entry is freed),
  // and the table's insert cannot fail once room was made for it.
  try {
    if (hint) {
      tree_.insert(position, entry);
    } else {
      tree_.insert(entry);
    }
  } catch (const std::bad_alloc&) {
    DeleteEntry(entry);
    throw;
  }
  table_.Insert(entry);
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
  AddToTreeThenTable(entry, tree_.end(), /*hint=*/false);
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
  // The table keeps its array, even empty: room made for inserts (MakeRoomFor) stays made.
  NoteChange();
  return true;
}

uint64_t OrderedIndex::TableBytes() const {
  const uint64_t bytes = table_.capacity() * decltype(table_)::kSlotBytes;
  return bytes == 0 ? 0 : MallocChunkBytes(bytes);
}

IndexStats OrderedIndex::stats() const {
  return IndexStats{.entries = table_.size(),
                    .memory_bytes = container_bytes_ + entry_bytes_ + TableBytes()};
}

void OrderedIndex::ForEachValue(const std::function<void(uint64_t value)>& visit) const {
  table_.ForEach([&](const Entry* entry) { visit(entry->value); });
}

uint64_t OrderedIndex::EraseIf(const std::function<bool(uint64_t value)>& doomed) {
  std::vector<Entry*> erased;
  for (Entry* entry : tree_) {
    if (doomed(entry->value)) erased.push_back(entry);
  }
  for (Entry* entry : erased) {
    table_.Erase(entry);
    tree_.erase(entry);
    DeleteEntry(entry);
  }
  if (!erased.empty()) NoteChange();
  return erased.size();
}

bool OrderedIndex::SaveSome(SaveCursor& cursor, const SaveVisitor& visit) const {
  auto it = tree_.begin();
  if (!cursor.started) {
    cursor = SaveCursor();
    cursor.started = true;
    cursor.changes = changes();
  } else {
    NVKV_CHECK(cursor.changes == changes());  // (the caller's contract: nothing changed)
    it = tree_.upper_bound(cursor.last_key);
  }
  for (; it != tree_.end(); ++it) {
    if (!visit((*it)->key(), (*it)->value)) {
      cursor.last_key.assign((*it)->key());
      return std::next(it) == tree_.end();
    }
  }
  return true;
}

absl::Status OrderedIndex::RestoreEntry(std::string_view key, uint64_t word) {
  if (const Entry* existing = FindEntry(key)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "ordered index: the %d-byte key is restored twice (page %d)", key.size(),
        existing->value));
  }
  NVKV_RETURN_IF_ERROR(MakeRoomFor(1));
  Entry* entry = NewEntry(key, word);
  AddToTreeThenTable(entry, tree_.end(), /*hint=*/true);  // keys come in order: the hint is right
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

uint64_t OrderedIndex::BytesFor(uint64_t entries) const {
  // A slot and a half of the hash table per entry (it grows by doubling), and the tree's
  // nodes and the entries (with their keys) at their mean so far: not the whole table's bytes,
  // which stay as they were after entries are erased. Under kFewEntries the mean says little
  // (a node holds many): a floor per entry instead.
  constexpr uint64_t kFewEntries = 1024;
  constexpr uint64_t kEntryBytesAtLeast = 48;
  const uint64_t slots = 3 * decltype(table_)::kSlotBytes / 2;
  const uint64_t held = table_.size();
  if (held < kFewEntries) return entries * (kEntryBytesAtLeast + slots);
  return static_cast<uint64_t>(static_cast<double>(container_bytes_ + entry_bytes_) / held *
                               entries) +
         entries * slots;
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
