// SequenceRanges (kv/sequence_ranges.h): ranges merge when they overlap or touch, and Contains
// agrees with a plain set of the same sequences.
#include "kv/sequence_ranges.h"

#include <gtest/gtest.h>

#include <set>

#include "storage/base/split_mix64.h"

namespace nvkv::kv {
namespace {

TEST(SequenceRangesTest, EmptyHoldsNothing) {
  SequenceRanges ranges;
  EXPECT_TRUE(ranges.empty());
  EXPECT_FALSE(ranges.Contains(0));
  EXPECT_FALSE(ranges.Contains(12345));
}

TEST(SequenceRangesTest, TouchingAndOverlappingRangesMerge) {
  SequenceRanges ranges;
  ranges.Add(10, 19);
  ranges.Add(30, 39);
  EXPECT_EQ(ranges.range_count(), 2u);
  ranges.Add(20, 29);  // touches both
  EXPECT_EQ(ranges.range_count(), 1u);
  ranges.Add(5, 12);  // overlaps the start
  ranges.Add(50, 50);
  EXPECT_EQ(ranges.range_count(), 2u);
  EXPECT_FALSE(ranges.Contains(4));
  EXPECT_TRUE(ranges.Contains(5));
  EXPECT_TRUE(ranges.Contains(39));
  EXPECT_FALSE(ranges.Contains(40));
  EXPECT_FALSE(ranges.Contains(49));
  EXPECT_TRUE(ranges.Contains(50));
  EXPECT_FALSE(ranges.Contains(51));
  ranges.Add(0, 100);  // swallows everything
  EXPECT_EQ(ranges.range_count(), 1u);
  EXPECT_TRUE(ranges.Contains(0));
  EXPECT_TRUE(ranges.Contains(100));
  EXPECT_FALSE(ranges.Contains(101));
}

TEST(SequenceRangesTest, AgreesWithASetOfTheSameSequences) {
  SplitMix64 rng(7);
  for (int round = 0; round < 50; ++round) {
    SequenceRanges ranges, copy;
    std::set<uint64_t> expected;
    for (int i = 0; i < 20; ++i) {
      const uint64_t first = rng.Next() % 300;
      const uint64_t last = first + rng.Next() % 12;
      ranges.Add(first, last);
      for (uint64_t s = first; s <= last; ++s) expected.insert(s);
    }
    copy.AddAll(ranges);
    for (uint64_t s = 0; s < 330; ++s) {
      ASSERT_EQ(ranges.Contains(s), expected.count(s) == 1) << round << " " << s;
      ASSERT_EQ(copy.Contains(s), expected.count(s) == 1) << round << " " << s;
    }
  }
}

}  // namespace
}  // namespace nvkv::kv
