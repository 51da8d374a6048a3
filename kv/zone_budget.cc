#include "kv/zone_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace nvkv::kv {

absl::StatusOr<uint32_t> ZoneBudgetFor(const storage::ZoneModel& zones, uint32_t shards,
                                       const std::string& path) {
  const uint32_t need = shards + kZonesBesidesHeads;
  const uint32_t open = zones.max_open;
  const uint32_t active = zones.max_active;
  if (open == 0 && active == 0) return 2 * shards + 4;
  const uint32_t budget = open == 0 ? active : active == 0 ? open : std::min(open, active);
  if (budget >= need) return budget;
  const char* which = open != 0 && (active == 0 || open < active) ? "open" : "active";
  const uint32_t most_shards = budget > kZonesBesidesHeads ? budget - kZonesBesidesHeads : 0;
  return absl::FailedPreconditionError(absl::StrCat(
      path, ": zoned namespace: it keeps at most ", budget, " zones ", which, "; ", shards,
      shards == 1 ? " shard needs " : " shards need ", need,
      " (one a shard, one for the segment map, one spare)",
      most_shards == 0 ? std::string(": no store fits")
                       : absl::StrCat(": open with at most ", most_shards,
                                      most_shards == 1 ? " shard" : " shards")));
}

}  // namespace nvkv::kv
