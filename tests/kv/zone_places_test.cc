// The place table of a zoned store (kv/FORMAT.md "Page identity"): positions that land at their
// own number need no entry; those that land apart are kept as runs, joined when they go on from
// one another, read back for every page, and the same runs come from completions in any order
// as from the pages recovery finds.
#include "kv/zone_places.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kZonePages = 64;
constexpr uint32_t kCapacity = 48;

Geometry Zoned(uint64_t segments = 4) {
  Geometry g;
  g.page_bytes = 4096;
  g.pages_per_segment = kCapacity;
  g.segment_count = segments;
  g.zone_pages = kZonePages;
  return g;
}

// Page number of position `position` of segment `segment`.
uint64_t Page(uint64_t segment, uint32_t position) {
  return Zoned().FirstPageOf(segment) + position;
}

TEST(ZonePlacesTest, PositionsThatLandAtTheirNumbersNeedNoRun) {
  ZonePlaces places(Zoned());
  ASSERT_THAT(places.Landed(Page(1, 0), 3, Page(1, 0)), IsOk());
  ASSERT_THAT(places.Landed(Page(1, 3), 1, Page(1, 3)), IsOk());
  EXPECT_EQ(places.run_count(), 0u);
  EXPECT_EQ(places.PlaceOf(Page(1, 2)), Page(1, 2));
  EXPECT_EQ(places.PlaceOf(5), 5u) << "a metadata zone's page";
  EXPECT_EQ(places.ContiguousFrom(Page(1, 0), 10), 10u);
}

TEST(ZonePlacesTest, PagesThatLandOutOfOrderAreFoundWhereTheyLanded) {
  ZonePlaces places(Zoned());
  // Positions 0, 1, 2 sent together; 0 landed first, then 2, then 1.
  ASSERT_THAT(places.Landed(Page(2, 0), 1, Page(2, 0)), IsOk());
  ASSERT_THAT(places.Landed(Page(2, 2), 1, Page(2, 1)), IsOk());
  ASSERT_THAT(places.Landed(Page(2, 1), 1, Page(2, 2)), IsOk());
  EXPECT_EQ(places.Runs(2), (std::vector<PlaceRun>{{1, 1, 2}, {2, 1, 1}}));
  EXPECT_EQ(places.PlaceOf(Page(2, 0)), Page(2, 0));
  EXPECT_EQ(places.PlaceOf(Page(2, 1)), Page(2, 2));
  EXPECT_EQ(places.PlaceOf(Page(2, 2)), Page(2, 1));
  EXPECT_EQ(places.PlaceOf(Page(2, 3)), Page(2, 3));
  EXPECT_EQ(places.ContiguousFrom(Page(2, 0), 3), 1u) << "position 1 is not at place 1";
  EXPECT_EQ(places.PlaceOf(Page(1, 1)), Page(1, 1)) << "another zone is untouched";
}

TEST(ZonePlacesTest, RunsThatGoOnFromOneAnotherAreJoined) {
  ZonePlaces places(Zoned());
  // A resumed head: positions 5.. land 3 places further on (a torn gap), in three appends, the
  // middle one last.
  ASSERT_THAT(places.Landed(Page(0, 5), 2, Page(0, 8)), IsOk());
  ASSERT_THAT(places.Landed(Page(0, 9), 4, Page(0, 12)), IsOk());
  ASSERT_THAT(places.Landed(Page(0, 7), 2, Page(0, 10)), IsOk());
  EXPECT_EQ(places.Runs(0), (std::vector<PlaceRun>{{5, 8, 8}}));
  EXPECT_EQ(places.PlaceOf(Page(0, 12)), Page(0, 15));
  EXPECT_EQ(places.ContiguousFrom(Page(0, 5), 20), 8u);
  places.Clear(0);
  EXPECT_EQ(places.PlaceOf(Page(0, 12)), Page(0, 12));
  EXPECT_EQ(places.run_count(), 0u);
}

// What a device cannot have done is refused, and nothing recorded: landing outside the zone's
// writable pages, or positions landing twice.
TEST(ZonePlacesTest, ALandingThatCannotBeIsDataLoss) {
  ZonePlaces places(Zoned());
  EXPECT_THAT(places.Landed(Page(1, 0), 2, Page(2, 0)),
              StatusIs(absl::StatusCode::kDataLoss, "outside the writable pages of their zone"));
  EXPECT_THAT(places.Landed(Page(1, kCapacity - 1), 2, Page(1, 3)),
              StatusIs(absl::StatusCode::kDataLoss, "outside"));
  EXPECT_THAT(places.Landed(Page(1, 3), 2, Page(1, kCapacity - 1)),
              StatusIs(absl::StatusCode::kDataLoss, "outside"));
  ASSERT_THAT(places.Landed(Page(1, 4), 3, Page(1, 9)), IsOk());
  EXPECT_THAT(places.Landed(Page(1, 6), 2, Page(1, 20)),
              StatusIs(absl::StatusCode::kDataLoss, "landed twice"));
  EXPECT_THAT(places.Landed(Page(1, 2), 3, Page(1, 20)),
              StatusIs(absl::StatusCode::kDataLoss, "landed twice"));
  EXPECT_EQ(places.Runs(1), (std::vector<PlaceRun>{{4, 3, 9}}));
}

// Appends of 1-4 pages, their completions in a random order: the runs the completions leave are
// the ones recovery rebuilds from the places it finds, and every position reads back.
TEST(ZonePlacesTest, CompletionsInAnyOrderGiveTheRunsRecoveryFinds) {
  std::mt19937_64 random(7);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    // The head's appends: (first position, pages).
    std::vector<std::pair<uint32_t, uint32_t>> appends;
    for (uint32_t position = 0; position < kCapacity;) {
      const uint32_t pages = std::min<uint32_t>(1 + random() % 4, kCapacity - position);
      appends.emplace_back(position, pages);
      position += pages;
    }
    // The device takes them in a shuffled order (within a window of 6), each at its pointer.
    std::vector<size_t> order(appends.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      const size_t j = i + random() % std::min<size_t>(6, order.size() - i);
      std::swap(order[i], order[j]);
    }
    ZonePlaces places(Zoned());
    std::vector<std::pair<uint32_t, uint32_t>> found;  // (position, place)
    uint32_t pointer = 0;
    for (size_t i : order) {
      const auto [position, pages] = appends[i];
      ASSERT_THAT(places.Landed(Page(3, position), pages, Page(3, pointer)), IsOk());
      for (uint32_t k = 0; k < pages; ++k) found.emplace_back(position + k, pointer + k);
      pointer += pages;
    }
    EXPECT_EQ(places.Runs(3), RunsFromPlaces(found));
    for (const auto& [position, place] : found) {
      ASSERT_EQ(places.PlaceOf(Page(3, position)), Page(3, place)) << "position " << position;
    }
    ZonePlaces restored(Zoned());
    restored.Restore(3, RunsFromPlaces(found));
    for (uint32_t position = 0; position < kCapacity; ++position) {
      ASSERT_EQ(restored.PlaceOf(Page(3, position)), places.PlaceOf(Page(3, position)));
    }
  }
}

}  // namespace
}  // namespace nvkv::kv
