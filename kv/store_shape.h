// A store's shape: what every part of the engine needs to know of the store it works on, fixed
// once Open has read the superblock (or formatted). One value, handed to each part whole, so that
// the page-to-block arithmetic and what the index keeps of a record's place each live here once.
#ifndef NVKV_KV_STORE_SHAPE_H_
#define NVKV_KV_STORE_SHAPE_H_

#include <cstdint>

#include "kv/location.h"
#include "kv/page_format.h"

namespace nvkv::kv {

struct StoreShape {
  Geometry geometry;
  uint64_t seed = 0;             // the pages' checksum seed (StoreSeed of the store's id)
  uint32_t blocks_per_page = 1;  // device blocks in a page
  bool ordered = false;          // the index mode: ordered, else hash

  // The first device block of a page.
  uint64_t LbaOf(uint64_t page) const { return page * blocks_per_page; }
  // What the index keeps of a record's place (location.h): the ordered index its page and size,
  // the hash index its page only.
  Location IndexedAt(uint64_t page, uint32_t record_bytes) const {
    return Location::Indexed(page, record_bytes, /*index_keeps_size=*/ordered);
  }
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_STORE_SHAPE_H_
