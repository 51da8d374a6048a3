#include "storage/fault_zones.h"

#include <algorithm>
#include <cstring>

#include "storage/base/check.h"

namespace nvkv::storage {

namespace {

// Puts the zone's data back as rule "data" says, newest operation first.
void RewindData(const ZoneModel& model, uint64_t zone, std::span<const ZoneOpAtCut> ops,
                uint32_t lba_bytes, uint32_t sector_bytes, std::span<uint8_t> image) {
  const uint64_t sectors_per_lba = lba_bytes / sector_bytes;
  const uint64_t zone_lba = model.StartOf(zone);
  // Sectors (from the zone's start) that hold a newer survivor's data: no older one touches them.
  std::vector<bool> settled(model.zone_blocks * sectors_per_lba, false);
  auto restore = [&](uint64_t sector, const std::vector<uint8_t>& before, uint64_t at) {
    std::memcpy(image.data() + sector * sector_bytes, before.data() + at * sector_bytes,
                sector_bytes);
  };
  for (size_t i = ops.size(); i > 0; --i) {
    const ZoneOpAtCut& op = ops[i - 1];
    const uint64_t first = (op.lba - zone_lba) * sectors_per_lba;
    switch (op.op) {
      case IoOp::kWrite:
      case IoOp::kZoneAppend:
        NVKV_CHECK(op.kept.size() == op.lba_count * sectors_per_lba);
        for (uint64_t s = 0; s < op.kept.size(); ++s) {
          if (settled[first + s]) continue;
          if (op.kept[s]) {
            settled[first + s] = true;
          } else {
            restore(first + s, *op.before, s);
          }
        }
        break;
      case IoOp::kZoneReset:
        if (op.survives) {
          std::fill(settled.begin(), settled.end(), true);  // emptied here: older ones are gone
        } else {
          for (uint64_t s = 0; s < uint64_t{op.lba_count} * sectors_per_lba; ++s) {
            if (!settled[s]) restore(s, *op.before, s);
          }
        }
        break;
      default:
        break;  // a finish changes no data
    }
  }
}

}  // namespace

ZoneAfterCut RewindZone(const ZoneModel& model, uint64_t zone, std::span<const ZoneOpAtCut> ops,
                        uint64_t written_at_cut, bool pointer_stays, uint32_t lba_bytes,
                        uint32_t sector_bytes, std::span<uint8_t> image) {
  NVKV_CHECK(!ops.empty());
  NVKV_CHECK(image.size() == model.zone_blocks * lba_bytes);
  RewindData(model, zone, ops, lba_bytes, sector_bytes, image);
  const uint64_t zone_lba = model.StartOf(zone);
  uint64_t written = ops.front().written_before;
  bool management_lost = false;
  for (const ZoneOpAtCut& op : ops) {
    if (!op.survives) {
      management_lost |= op.op == IoOp::kZoneReset || op.op == IoOp::kZoneFinish;
      continue;
    }
    switch (op.op) {
      case IoOp::kWrite:
      case IoOp::kZoneAppend:
        written = std::max(written, op.lba + op.lba_count - zone_lba);
        break;
      case IoOp::kZoneReset:
        written = 0;
        break;
      case IoOp::kZoneFinish:
        written = model.capacity_blocks;
        break;
      default:
        break;
    }
  }
  if (pointer_stays && !management_lost) written = std::max(written, written_at_cut);
  ZoneAfterCut after;
  after.written = written;
  after.state = written == 0                        ? ZoneState::kEmpty
                : written == model.capacity_blocks ? ZoneState::kFull
                                                   : ZoneState::kClosed;
  return after;
}

}  // namespace nvkv::storage
