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
  const uint64_t room = geometry_.pages_per_segment - used_;
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
  if (used_ < geometry_.pages_per_segment && missing_ < geometry_.pages_per_segment - used_) {
    return std::nullopt;  // room for a page it holds: no move yet
  }
  if (missing_ > 0) return std::nullopt;  // only a failed write leaves it so: the store failed
  return Move{superblock_, 1 - current_};
}

void MapZoneLog::Moved() {
  current_ = 1 - current_;
  used_ = 1;
  holds_.assign(holds_.size(), false);
  missing_ = holds_.size();
}

}  // namespace nvkv::kv
