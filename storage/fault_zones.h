// What a power cut leaves of one zone: the zoned half of FaultDevice's model (fault_device.h,
// rule 7). A pure function of the zone's operations at the cut and their fates, so that
// the rules can be read and tested on their own.
//
// The rules, for the operations on one zone that the cut finds unflushed (and the durable ones
// logged among them), oldest first:
//   - data: each sector of a write or append holds what the newest operation that kept it put
//     there, or else what it held before the oldest operation that did not keep it. A reset
//     that survives empties the zone where it stands (its older writes are gone, whatever their
//     fate); a reset that is lost puts back what the zone held before it. (FaultDevice drops
//     every write to a zone after a lost reset of it: a device cannot keep data it placed
//     after a reset it did not keep.)
//   - write pointer: the end of the last surviving write (any sector kept: a torn write leaves
//     the pointer past its torn data), after the last surviving reset (the zone's start) or
//     finish (the end of its capacity); with no survivor, where it stood before the first
//     operation. With `pointer_stays` (drawn per zone by FaultDevice), and no reset or finish
//     lost, the pointer instead stays where it stood at the cut: the device recorded writes
//     whose data it lost, which then read as zeros below the pointer.
//   - state: empty at the zone's start, full at the end of its capacity, closed between (a
//     power cycle closes every open zone).
#ifndef NVKV_STORAGE_FAULT_ZONES_H_
#define NVKV_STORAGE_FAULT_ZONES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "storage/device.h"
#include "storage/zones.h"

namespace nvkv::storage {

// One operation on the zone, as the fault device logged it.
struct ZoneOpAtCut {
  IoOp op = IoOp::kWrite;  // kWrite, kZoneAppend, kZoneReset or kZoneFinish
  // Write, append: the blocks written. Reset: the zone's start and the blocks it emptied.
  uint64_t lba = 0;
  uint32_t lba_count = 0;
  // Their contents just before it (zeros for a write or append: blocks above a write pointer).
  const std::vector<uint8_t>* before = nullptr;
  uint64_t written_before = 0;  // the zone's blocks written just before it
  // Write, append: one flag per sector, set where its data stays (all for a durable one).
  std::vector<bool> kept;
  bool survives = true;  // reset, finish: it stays done; write, append: some sector kept
};

struct ZoneAfterCut {
  uint64_t written = 0;  // blocks from the zone's start to its write pointer
  ZoneState state = ZoneState::kEmpty;
};

// Rewinds `image`, the zone's blocks (zone_blocks of them) as they are at the cut, by `ops`
// (oldest first, none before the first one's written_before), and says where the write pointer
// and the state end. The image's blocks from `written` on are not meaningful: the caller
// stores zeros there.
ZoneAfterCut RewindZone(const ZoneModel& model, uint64_t zone, std::span<const ZoneOpAtCut> ops,
                        uint64_t written_at_cut, bool pointer_stays, uint32_t lba_bytes,
                        uint32_t sector_bytes, std::span<uint8_t> image);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_FAULT_ZONES_H_
