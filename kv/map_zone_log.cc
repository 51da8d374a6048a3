// MapZoneLog (map_zone_log.h).
#include "kv/map_zone_log.h"

#include <algorithm>

#include "storage/base/check.h"

namespace nvkv::kv {

MapZoneLog::MapZoneLog(const Geometry& geometry, const Superblock& superblock)
    : geometry_(geometry),
      superblock_(superblock),
      current_(0),
      used_(1),
      holds_(geometry.map_pages(), true) {
  NVKV_CHECK(geometry.map_fits_zone());
}

void MapZoneLog::Resume(const Found& found) {
  NVKV_CHECK(found.current < kMetadataZones && found.pages_used <= geometry_.pages_per_segment);
  current_ = found.current;
  used_ = std::max<uint64_t>(found.pages_used, 1);
  holds_.assign(holds_.size(), found.holds_every_page);
  missing_ = found.holds_every_page ? 0 : holds_.size();
}

bool MapZoneLog::MayAppend(uint64_t index) const {
  const uint64_t room = map_end() - std::min(used_, map_end());
  return room > 0 && (!holds_[index] || room > missing_);
}

void MapZoneLog::Take(uint64_t index) {
  NVKV_CHECK(MayAppend(index));
  ++used_;
  if (!holds_[index]) {
    holds_[index] = true;
    --missing_;
  }
}

void MapZoneLog::Failed(uint64_t index) {
  if (holds_[index]) {
    // Perhaps another copy of it landed here before; counting it missing only costs room.
    holds_[index] = false;
    ++missing_;
  }
}

std::optional<MapZoneLog::Move> MapZoneLog::MoveTarget() const {
  if (used_ < map_end()) return std::nullopt;  // room for a map page yet
  // Full. It holds every page unless a failed write, or an Open that found it without some and
  // without room for them, left it so: then some page's newest copy is only in the other zone,
  // which the move resets. Safe all the same: a map page with no copy says nothing, and
  // recovery reads every segment it describes, as for a damaged page; the move writes every
  // page again at once.
  return Move{superblock_, 1 - current_,
              /*closing_copy_room=*/used_ < geometry_.pages_per_segment};
}

void MapZoneLog::Moved() {
  current_ = 1 - current_;
  used_ = 1;
  holds_.assign(holds_.size(), false);
  missing_ = holds_.size();
}

}  // namespace nvkv::kv
