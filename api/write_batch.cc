#include "nvkv/write_batch.h"

#include <utility>

namespace nvkv {

WriteBatch::WriteBatch() = default;
WriteBatch::~WriteBatch() = default;
WriteBatch::WriteBatch(const WriteBatch&) = default;
WriteBatch& WriteBatch::operator=(const WriteBatch&) = default;
WriteBatch::WriteBatch(WriteBatch&&) noexcept = default;
WriteBatch& WriteBatch::operator=(WriteBatch&&) noexcept = default;

void WriteBatch::Put(std::string_view key, std::string_view value) {
  entries_.push_back(Entry{.is_delete = false, .key_bytes = key.size(),
                           .value_bytes = value.size()});
  bytes_.append(key);
  bytes_.append(value);
}

void WriteBatch::Delete(std::string_view key) {
  entries_.push_back(Entry{.is_delete = true, .key_bytes = key.size(), .value_bytes = 0});
  bytes_.append(key);
}

void WriteBatch::Clear() {
  entries_.clear();
  bytes_.clear();
}

size_t WriteBatch::Count() const { return entries_.size(); }

size_t WriteBatch::ApproximateSize() const {
  return bytes_.size() + entries_.size() * kEntryOverheadBytes;
}

}  // namespace nvkv
