// The open and active zones a zoned store may use (kv/FORMAT.md "Open and active zones"): the
// device keeps at most max_open zones open and max_active open or closed, and every zone nvkv
// writes holds one of them until it is full, finished or reset. A store needs one per shard's
// log head, one for the segment map's current metadata zone, and at least one more, shared by a
// head's zone while its summary is written, a checkpoint's zone and the metadata zone the map
// moves to.
#ifndef NVKV_KV_ZONE_BUDGET_H_
#define NVKV_KV_ZONE_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "storage/zones.h"

namespace nvkv::kv {

// Zones a store keeps besides one per shard: the map's and one spare.
inline constexpr uint32_t kZonesBesidesHeads = 2;

// How many zones a store of `shards` shards may keep active on a device of `zones`: the smaller
// of its limits that are not 0, or 2 x shards + 4 on a device without limits.
// kFailedPrecondition, naming `path` and the numbers, when that is below shards + 2.
absl::StatusOr<uint32_t> ZoneBudgetFor(const storage::ZoneModel& zones, uint32_t shards,
                                       const std::string& path);

}  // namespace nvkv::kv

#endif  // NVKV_KV_ZONE_BUDGET_H_
