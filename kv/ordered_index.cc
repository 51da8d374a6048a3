#include "kv/ordered_index.h"

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace nvkv::kv {
namespace {

// Debian 12's Abseil has its own absl::string_view (not std::string_view).
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Heap bytes a stored key owns beyond its node slot: none when its characters live in the
// string object's small-string buffer.
uint64_t KeyHeapBytes(const std::string& key) {
  const char* object = reinterpret_cast<const char*>(&key);
  const bool inline_buffer = key.data() >= object && key.data() < object + sizeof(key);
  return inline_buffer ? 0 : MallocChunkBytes(key.capacity() + 1);
}

}  // namespace

OrderedIndex::OrderedIndex() : map_(Map::allocator_type(&node_bytes_)) {}

void OrderedIndex::Find(uint64_t /*hash*/, std::string_view key,
                        std::vector<uint64_t>* pages) const {
  pages->clear();
  auto it = map_.find(AbslView(key));
  if (it != map_.end()) pages->push_back(it->second);
}

absl::Status OrderedIndex::Insert(uint64_t /*hash*/, std::string_view key, uint64_t page) {
  auto [it, inserted] = map_.try_emplace(std::string(key), page);
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "ordered index: the %d-byte key already has an entry (page %d); Insert needs a new key",
        key.size(), it->second));
  }
  key_heap_bytes_ += KeyHeapBytes(it->first);
  NoteChange();
  return absl::OkStatus();
}

bool OrderedIndex::Replace(uint64_t /*hash*/, std::string_view key, uint64_t old_page,
                           uint64_t new_page) {
  auto it = map_.find(AbslView(key));
  if (it == map_.end() || it->second != old_page) return false;
  it->second = new_page;
  NoteChange();
  return true;
}

bool OrderedIndex::Erase(uint64_t /*hash*/, std::string_view key, uint64_t page) {
  auto it = map_.find(AbslView(key));
  if (it == map_.end() || it->second != page) return false;
  key_heap_bytes_ -= KeyHeapBytes(it->first);
  map_.erase(it);
  NoteChange();
  return true;
}

IndexStats OrderedIndex::stats() const {
  return IndexStats{.entries = map_.size(), .memory_bytes = node_bytes_ + key_heap_bytes_};
}

void OrderedIndex::ForEachValue(const std::function<void(uint64_t value)>& visit) const {
  for (const auto& [key, value] : map_) visit(value);
}

void OrderedIndex::Reserve(uint64_t /*expected_entries*/) {}

absl::Status OrderedIndex::Scan(std::string_view start, bool exclusive, size_t limit,
                                std::vector<std::pair<std::string, uint64_t>>* out) const {
  out->clear();
  auto it = exclusive ? map_.upper_bound(AbslView(start)) : map_.lower_bound(AbslView(start));
  for (; it != map_.end() && out->size() < limit; ++it) {
    out->emplace_back(it->first, it->second);
  }
  return absl::OkStatus();
}

}  // namespace nvkv::kv
