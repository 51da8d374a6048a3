// MapZoneLog: where the segment map's pages go on a zoned store (kv/FORMAT.md "The segment
// map's log"): the current metadata zone, the room left in it, which map pages it holds a copy
// of, and when the map must move to the other zone. Bookkeeping only: SegmentMap owns it under
// its lock and asks it where each page write goes; the map's writer does the I/O (a move's
// reset and superblock copy: StartMetadataZone, metadata_zones.h).
//
// The one rule it keeps: the other zone is reset (a move) only while the current one holds a
// copy of every map page, each written and completed. So the room of the current zone is
// shared out so that it always has a place for each page it holds no copy of yet: a page it
// holds already may be appended only while more room remains than pages are missing. And a
// move starts only once no map write is in flight. The zone's last pages are not the map's
// (Geometry::closing_copy_pages): the move appends the zone's closing superblock copy there
// before it resets the other zone, which may hold the only other copy (a first page the media
// damaged); more than one, so that a cut that tore that append leaves room for another.
//
// Thread contract: none of its own (its owner's lock).
#ifndef NVKV_KV_MAP_ZONE_LOG_H_
#define NVKV_KV_MAP_ZONE_LOG_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "kv/page_format.h"

namespace nvkv::kv {

class MapZoneLog {
 public:
  // What a move lays down: `zone` started afresh with its copy of `superblock`. (The packed
  // superblock first, in a struct aligned to 8: its 64-bit fields stay aligned.)
  struct alignas(8) Move {
    Superblock superblock;
    uint32_t zone = 0;
    // The zone left has a page free for its closing superblock copy (else torn appends took
    // them all, or an Open found it full).
    bool closing_copy_room = false;
  };
  // Where the map stands as Open found it.
  struct Found {
    uint32_t current = 0;     // the zone map writes go to
    // Pages of it below its write pointer (its capacity when full), a page an append a cut tore
    // part way counted whole (a writer's Open fills it up: AlignMetadataZone).
    uint64_t pages_used = 1;
    // It holds a copy of every map page (else each page counts as missing, to be written again).
    bool holds_every_page = true;
  };

  // As a format leaves it: zone 0 current, holding its superblock copy alone (copy 0 of
  // `superblock`, the store's). REQUIRES: geometry.zoned(), and room in a zone for its
  // superblock and two copies of the map (Geometry::map_fits_zone).
  MapZoneLog(const Geometry& geometry, const Superblock& superblock);
  // Takes up the map where Open found it.
  void Resume(const Found& found);

  uint32_t current() const { return current_; }
  // The first page of the current zone: where an append of a map page goes, and its seed.
  uint64_t current_first_page() const { return geometry_.MetadataZoneFirstPage(current_); }
  // Whether the current zone holds (or has in flight) a copy of map page `index`.
  bool Holds(uint64_t index) const { return holds_[index]; }
  // Map pages of which the current zone has no copy, written or in flight.
  uint64_t missing() const { return missing_; }
  uint64_t pages_used() const { return used_; }

  // Whether page `index` may be appended to the current zone now.
  bool MayAppend(uint64_t index) const;
  // Takes a place in the current zone for an append of page `index`. REQUIRES: MayAppend.
  void Take(uint64_t index);
  // The append of page `index` failed: the zone may not hold it (its place stays used).
  void Failed(uint64_t index);
  // The writer filled the current zone up to its closing copy's pages (FillMetadataZone): it
  // takes no more map pages, and the map moves before its next write, the zone's closing copy
  // first.
  void FilledUp() { used_ = std::max(used_, map_end()); }
  // The zone a move goes to, once the current one is full: every page below those kept for its
  // closing superblock copy (it then holds a copy of every map page, but after a failed write or
  // an Open that found it so). nullopt while there is room.
  std::optional<Move> MoveTarget() const;
  // The move's zone was reset and holds its superblock copy, durably: it is the current zone
  // now, and holds no map page yet.
  void Moved();

 private:
  // Places in a zone for map pages: all but the first (its superblock copy) and the last ones
  // (its closing copy's), counted from the zone's start like used_.
  uint64_t map_end() const { return geometry_.closing_copy_start(); }

  const Geometry geometry_;
  const Superblock superblock_;
  uint32_t current_;
  uint64_t used_;
  std::vector<bool> holds_;
  uint64_t missing_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_MAP_ZONE_LOG_H_
