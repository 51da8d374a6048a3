// FreeSegments: with a segment map, a head takes only segments whose "in use" mark is on the
// device; held segments are taken only among the ones not announced; closing gives the announced
// ones back. Without a map, any free segment goes to a head.
#include "kv/free_segments.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/segment_map.h"

namespace nvkv::kv {
namespace {

class FreeSegmentsTest : public ::testing::Test {
 protected:
  FreeSegmentsTest() : map_(SmallGeometry(), /*store_seed=*/7), free_(&map_, /*target=*/2) {
    // Highest numbers first, as SegmentTable rebuilds it: heads take 0, 1, 2, ...
    free_.Rebuild({7, 6, 5, 4, 3, 2, 1, 0});
  }

  static Geometry SmallGeometry() {
    Geometry geometry;
    geometry.page_bytes = 4096;
    geometry.pages_per_segment = 16;
    geometry.segment_count = 8;
    return geometry;
  }

  // The map's writer: writes every changed page, with `ok` as the writes' outcome.
  void WriteMap(bool ok) {
    std::vector<uint8_t> page(4096);
    while (std::optional<SegmentMap::PageWrite> write =
               map_.TakeWrite(page.data(), [] { return SegmentMapPageHeader{}; })) {
      map_.Written(*write, ok);
      if (!ok) break;  // the page stays changed: taken again at once
    }
    free_.Written();
  }

  SegmentMap map_;
  FreeSegments free_;
};

TEST_F(FreeSegmentsTest, AHeadTakesOnlySegmentsTheMapOnTheDeviceAnnounces) {
  EXPECT_EQ(free_.NextForHead(), std::nullopt) << "nothing announced yet";
  free_.AnnounceMore();
  EXPECT_EQ(free_.NextForHead(), std::nullopt) << "announced, but the map is not written";
  WriteMap(/*ok=*/false);
  EXPECT_EQ(free_.NextForHead(), std::nullopt) << "the map's write failed";
  WriteMap(/*ok=*/true);
  ASSERT_EQ(free_.NextForHead(), std::optional<uint64_t>(0));
  free_.TakeForHead(0);
  EXPECT_EQ(free_.NextForHead(), std::optional<uint64_t>(1));
  EXPECT_EQ(free_.count(), 7u);
  // One taken: the next pass announces one more, a head takes it once it is written.
  free_.TakeForHead(1);
  EXPECT_EQ(free_.NextForHead(), std::nullopt);
  free_.AnnounceMore();
  WriteMap(/*ok=*/true);
  EXPECT_EQ(free_.NextForHead(), std::optional<uint64_t>(2));
}

TEST_F(FreeSegmentsTest, HeldSegmentsAreNeverAnnouncedOnes) {
  free_.AnnounceMore();
  WriteMap(/*ok=*/true);
  std::vector<uint64_t> taken;
  // 6 not announced, 8 free in all.
  EXPECT_FALSE(free_.TakeUnannounced(7, 0, &taken));
  EXPECT_FALSE(free_.TakeUnannounced(3, 6, &taken)) << "would leave 5 free";
  ASSERT_TRUE(free_.TakeUnannounced(6, 2, &taken));
  EXPECT_EQ(taken, (std::vector<uint64_t>{7, 6, 5, 4, 3, 2}));
  EXPECT_EQ(free_.count(), 2u);
  EXPECT_EQ(free_.NextForHead(), std::optional<uint64_t>(0));
  free_.Add(5);
  EXPECT_EQ(free_.count(), 3u);
}

TEST_F(FreeSegmentsTest, ClosingGivesTheAnnouncedSegmentsBack) {
  free_.AnnounceMore();
  WriteMap(/*ok=*/true);
  free_.AnnounceMore();  // nothing more: two are announced
  free_.Withdraw();
  EXPECT_EQ(free_.NextForHead(), std::nullopt);
  EXPECT_EQ(free_.count(), 8u);
  std::vector<uint64_t> taken;
  EXPECT_TRUE(free_.TakeUnannounced(8, 0, &taken)) << "none is announced any more";
}

TEST(FreeSegmentsWithoutMapTest, AHeadTakesAnyFreeSegment) {
  FreeSegments free(nullptr, 2);
  free.Rebuild({3, 2, 1, 0});
  ASSERT_EQ(free.NextForHead(), std::optional<uint64_t>(0));
  free.TakeForHead(0);
  free.Add(0);
  EXPECT_EQ(free.NextForHead(), std::optional<uint64_t>(0)) << "the last one freed first";
  EXPECT_EQ(free.count(), 4u);
}

}  // namespace
}  // namespace nvkv::kv
