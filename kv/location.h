// Where an index entry says a key's current record is: its page and, when the index has room for
// it, the record's size. An ordered index keeps both; a hash index keeps the page only (in 31
// bits, hash_index.h), so its entries have record_bytes 0, "not known". The index holds a
// location as one uint64_t: the page in bits 0..39, the record bytes above.
#ifndef NVKV_KV_LOCATION_H_
#define NVKV_KV_LOCATION_H_

#include <cstdint>

namespace nvkv::kv {

struct Location {
  static constexpr uint32_t kPageBits = 40;

  uint64_t page = 0;
  uint32_t record_bytes = 0;  // 0: not known

  static Location FromIndexValue(uint64_t value) {
    return Location{value & ((uint64_t{1} << kPageBits) - 1),
                    static_cast<uint32_t>(value >> kPageBits)};
  }
  uint64_t index_value() const { return page | (uint64_t{record_bytes} << kPageBits); }
  // What an index keeps of a record's place: its size only when the index has room for it
  // (ordered), else the page alone.
  static Location Indexed(uint64_t page, uint32_t record_bytes, bool index_keeps_size) {
    return Location{page, index_keeps_size ? record_bytes : 0};
  }
  friend bool operator==(const Location&, const Location&) = default;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_LOCATION_H_
