// The zone budget of a zoned store: the smaller device limit, and a refusal with the numbers when
// it cannot hold one zone per shard, the map's and a spare.
#include "kv/zone_budget.h"

#include <gtest/gtest.h>

#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

storage::ZoneModel Limits(uint32_t max_open, uint32_t max_active) {
  return storage::ZoneModel{.zone_count = 32, .zone_blocks = 1024, .capacity_blocks = 768,
                            .max_open = max_open, .max_active = max_active};
}

uint32_t BudgetOf(uint32_t max_open, uint32_t max_active, uint32_t shards) {
  absl::StatusOr<uint32_t> budget = ZoneBudgetFor(Limits(max_open, max_active), shards, "ns");
  EXPECT_THAT(budget, IsOk());
  return budget.ok() ? *budget : 0;
}

TEST(ZoneBudgetTest, TheSmallerLimitThatIsSetIsTheBudget) {
  EXPECT_EQ(BudgetOf(14, 14, 4), 14u);
  EXPECT_EQ(BudgetOf(8, 14, 4), 8u);
  EXPECT_EQ(BudgetOf(0, 6, 4), 6u);
  EXPECT_EQ(BudgetOf(6, 0, 4), 6u);
  EXPECT_EQ(BudgetOf(3, 3, 1), 3u) << "the least a store needs";
  EXPECT_EQ(BudgetOf(0, 0, 4), 12u) << "no limits";
}

TEST(ZoneBudgetTest, ALimitBelowTheStoresNeedIsRefusedWithTheNumbers) {
  EXPECT_THAT(ZoneBudgetFor(Limits(2, 3), 2, "/dev/ng0n1"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "/dev/ng0n1: zoned namespace: it keeps at most 2 zones open; 2 shards need 4 "
                       "(one a shard, one for the segment map, one spare): no store fits"));
  EXPECT_THAT(ZoneBudgetFor(Limits(0, 4), 4, "ns"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "at most 4 zones active; 4 shards need 6 (one a shard, one for the segment "
                       "map, one spare): open with at most 2 shards"));
  EXPECT_THAT(ZoneBudgetFor(Limits(3, 3), 2, "ns"),
              StatusIs(absl::StatusCode::kFailedPrecondition, "open with at most 1 shard"));
}

}  // namespace
}  // namespace nvkv::kv
