// A store's shape: what every part of the engine needs to know of the store it works on, fixed
// once Open has read the superblock (or formatted). One value, handed to each part whole, so that
// the page-to-block arithmetic and what the index keeps of a record's place each live here once.
#ifndef NVKV_KV_STORE_SHAPE_H_
#define NVKV_KV_STORE_SHAPE_H_

#include <cstdint>

#include "kv/location.h"
#include "kv/page_format.h"
#include "kv/zone_places.h"

namespace nvkv::kv {

// Which placement handle (storage IoRequest::placement) each kind of the store's writes names on a
// device with flexible data placement (NVMe FDP), so that data of different lifetimes fills
// different reclaim units and the device moves none of it to reclaim the others' space. The log
// (records, compaction's copies among them, summaries, free markers) dies as compaction cleans
// its segments; the metadata (superblocks, the segment map, checkpoints) is written over in place
// or replaced whole, at its own pace. Both 0 (the device's default) without FDP or with one handle.
struct WritePlacement {
  uint8_t log = 0;
  uint8_t metadata = 0;
};
// The placement of a device with `handle_count` placement handles: the log on the first, the
// metadata on the second.
inline WritePlacement ChooseWritePlacement(size_t handle_count) {
  WritePlacement placement;
  if (handle_count >= 2) placement.metadata = 1;
  return placement;
}

struct StoreShape {
  Geometry geometry;
  uint64_t seed = 0;             // the pages' checksum seed (StoreSeed of the store's id)
  uint32_t blocks_per_page = 1;  // device blocks in a page
  bool ordered = false;          // the index mode: ordered, else hash
  // A zoned store's place table (the engine's, set once it has one; it outlives every part):
  // where the positions of the log landed, recorded by what completes appends (the log writer, a
  // large record's writer) and by recovery. Null on a conventional store.
  ZonePlaces* places = nullptr;
  WritePlacement placement;      // ChooseWritePlacement of the device's handles

  // The first device block of a page, as a write or a read of that very place names it.
  uint64_t LbaOf(uint64_t page) const { return page * blocks_per_page; }
  // The first device block to read page `page` of the log from: on zones, the place its position
  // landed at (zone_places.h); elsewhere LbaOf.
  uint64_t ReadLbaOf(uint64_t page) const {
    return LbaOf(places != nullptr ? places->PlaceOf(page) : page);
  }
  // How many of the `count` pages from `page` on one read takes from ReadLbaOf(page): all of
  // them, but on zones only as many as landed in a row.
  uint32_t ReadablePagesFrom(uint64_t page, uint32_t count) const {
    return places != nullptr ? places->ContiguousFrom(page, count) : count;
  }
  // What the index keeps of a record's place (location.h): the ordered index its page and size,
  // the hash index its page only.
  Location IndexedAt(uint64_t page, uint32_t record_bytes) const {
    return Location::Indexed(page, record_bytes, /*index_keeps_size=*/ordered);
  }
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_STORE_SHAPE_H_
