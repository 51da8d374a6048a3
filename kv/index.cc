#include "kv/index.h"

#include "kv/hash_index.h"
#include "kv/ordered_index.h"

namespace nvkv::kv {

bool Index::ordered() const { return false; }

void Index::ForEachSaved(
    const std::function<void(std::string_view key, uint64_t word)>& visit) const {
  SaveCursor cursor;
  SaveSome(cursor, [&](std::string_view key, uint64_t word) {
    visit(key, word);
    return true;
  });
}

absl::Status Index::Scan(std::string_view /*start*/, bool /*exclusive*/, size_t /*limit*/,
                         std::vector<std::pair<std::string, uint64_t>>* out) const {
  out->clear();
  return absl::UnimplementedError(
      "Scan needs the ordered index: the hash index holds no keys (open with the ordered index)");
}

std::unique_ptr<Index> NewHashIndex() { return std::make_unique<HashIndex>(); }

std::unique_ptr<Index> NewOrderedIndex() { return std::make_unique<OrderedIndex>(); }

}  // namespace nvkv::kv
