// SegmentContents: a segment whose log ended holds nothing either question counts, the estimate
// of the tombstones cleaning keeps follows the segments that hold their keys, and what Save
// gives, Restore takes back (and refuses what Save never gives).
#include "kv/segment_contents.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv/key_hash.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

Geometry SmallGeometry() {
  Geometry geometry;
  geometry.page_bytes = 4096;
  geometry.pages_per_segment = 16;
  geometry.segment_count = 8;
  return geometry;
}

constexpr bool kPut = false;
constexpr bool kDelete = true;

TEST(SegmentContentsTest, ASegmentWhoseLogEndedIsCountedByNoQuestion) {
  SegmentContents contents(SmallGeometry());
  ASSERT_THAT(contents.Open(0), IsOk());
  ASSERT_THAT(contents.Open(1), IsOk());
  contents.Note(0, HashKey("a"), 10, 100, kPut);
  contents.Note(1, HashKey("b"), 20, 100, kPut);
  contents.Seal(0);
  EXPECT_EQ(contents.MinSequenceExcept(1), 10u);
  EXPECT_EQ(contents.MinSequenceExcept(UINT64_MAX), 10u);
  EXPECT_TRUE(contents.MayHoldOlder(HashKey("a"), 50, 1));
  const uint64_t filters = contents.filter_bytes();

  contents.Clear(0);
  EXPECT_EQ(contents.MinSequenceExcept(1), UINT64_MAX);
  EXPECT_EQ(contents.MinSequenceExcept(UINT64_MAX), 20u);
  EXPECT_FALSE(contents.MayHoldOlder(HashKey("a"), 50, 1));
  EXPECT_LT(contents.filter_bytes(), filters);

  // A log begun again in the segment starts from nothing too.
  ASSERT_THAT(contents.Open(1), IsOk());
  EXPECT_EQ(contents.MinSequenceExcept(UINT64_MAX), UINT64_MAX);
  EXPECT_FALSE(contents.MayHoldOlder(HashKey("b"), 50, 0));
}

TEST(SegmentContentsTest, TombstonesAreKeptWhileAnOlderPutOfTheirKeyMayRemain) {
  SegmentContents contents(SmallGeometry());
  for (uint64_t s = 0; s < 3; ++s) ASSERT_THAT(contents.Open(s), IsOk());
  contents.Note(0, HashKey("deleted"), 5, 100, kPut);   // the put the tombstone hides
  contents.Note(2, HashKey("other"), 1, 100, kPut);     // older than it, another key
  contents.Note(1, HashKey("deleted"), 9, 30, kDelete);
  contents.Note(1, HashKey("newer"), 8, 70, kPut);
  for (uint64_t s = 0; s < 3; ++s) contents.Seal(s);
  const uint64_t victim[] = {1};

  std::vector<SegmentContents::CleaningEstimate> estimate = contents.EstimateCleaning(victim);
  ASSERT_EQ(estimate.size(), 1u);
  EXPECT_EQ(estimate[0].record_bytes, 100);
  EXPECT_EQ(estimate[0].max_sequence, 9u);
  EXPECT_EQ(estimate[0].tombstones_kept, 30) << "segment 0 holds the put it hides";

  // The put's segment is cleaned: the tombstone hides nothing any more, though segment 2 still
  // holds an older record (so the global test alone would keep it).
  contents.Clear(0);
  estimate = contents.EstimateCleaning(victim);
  EXPECT_EQ(estimate[0].tombstones_kept, 0);

  // A segment with only newer records of the key does not keep it either.
  ASSERT_THAT(contents.Open(0), IsOk());
  contents.Note(0, HashKey("deleted"), 20, 100, kPut);
  estimate = contents.EstimateCleaning(victim);
  EXPECT_EQ(estimate[0].tombstones_kept, 0);
}

TEST(SegmentContentsTest, RestoreTakesBackWhatSaveGave) {
  SegmentContents contents(SmallGeometry());
  ASSERT_THAT(contents.Open(3), IsOk());
  for (int i = 0; i < 20; ++i) contents.Note(3, HashKey(std::to_string(i)), 100 + i, 40, kPut);
  for (int i = 0; i < 12; ++i) {
    contents.Note(3, HashKey("gone" + std::to_string(i)), 200 + i, 30, kDelete);
  }
  contents.Seal(3);
  CheckpointSegment saved{};
  std::vector<CheckpointTombstone> tombstones;
  std::vector<uint64_t> filter;
  contents.Save(3, /*filter_left_out=*/false, &saved, &tombstones, &filter);
  EXPECT_EQ(saved.min_sequence, 100u);
  EXPECT_EQ(saved.max_sequence, 211u);
  EXPECT_EQ(saved.record_bytes, 20 * 40 + 12 * 30);
  EXPECT_EQ(saved.tombstone_bytes, 12 * 30);
  EXPECT_EQ(saved.puts, 20u);
  EXPECT_EQ(tombstones.size(), SegmentContents::max_tombstone_samples());
  EXPECT_FALSE(filter.empty());

  SegmentContents again(SmallGeometry());
  ASSERT_THAT(again.Restore(3, saved, tombstones, filter), IsOk());
  again.FinishRecovery();
  CheckpointSegment resaved{};
  std::vector<CheckpointTombstone> retombstones;
  std::vector<uint64_t> refilter;
  again.Save(3, false, &resaved, &retombstones, &refilter);
  EXPECT_EQ(resaved.min_sequence, saved.min_sequence);
  EXPECT_EQ(resaved.record_bytes, saved.record_bytes);
  EXPECT_EQ(resaved.puts, saved.puts);
  EXPECT_EQ(refilter, filter);
  ASSERT_EQ(retombstones.size(), tombstones.size());
  for (size_t i = 0; i < tombstones.size(); ++i) {
    EXPECT_EQ(retombstones[i].hash_lo, tombstones[i].hash_lo) << i;
    EXPECT_EQ(retombstones[i].sequence, tombstones[i].sequence) << i;
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(again.MayHoldOlder(HashKey(std::to_string(i)), 1000, 0)) << i;
  }

  // What Save never gives.
  SegmentContents refusing(SmallGeometry());
  std::vector<uint64_t> three_words(3);
  CheckpointSegment odd = saved;
  odd.filter_words = 3;
  EXPECT_THAT(refusing.Restore(3, odd, tombstones, three_words),
              StatusIs(absl::StatusCode::kDataLoss, "key filter"));
  std::vector<CheckpointTombstone> nine(9);
  CheckpointSegment many = saved;
  many.tombstone_samples = 9;
  EXPECT_THAT(refusing.Restore(3, many, nine, filter),
              StatusIs(absl::StatusCode::kDataLoss, "tombstone samples"));
  CheckpointSegment negative = saved;
  negative.record_bytes = -1;
  EXPECT_THAT(refusing.Restore(3, negative, tombstones, filter),
              StatusIs(absl::StatusCode::kDataLoss, "counts"));
  EXPECT_EQ(refusing.MinSequenceExcept(UINT64_MAX), UINT64_MAX) << "nothing restored";
}

}  // namespace
}  // namespace nvkv::kv
