// util/latency_histogram: bucket layout (the header's worked example), percentiles within the
// bucket precision, min/max/mean, Merge and Clear.
#include "util/latency_histogram.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace nvkv::util {
namespace {

TEST(LatencyHistogramTest, BucketsFollowTheWorkedExample) {
  EXPECT_EQ(LatencyHistogram::Index(45000), 663u);
  EXPECT_EQ(LatencyHistogram::Index(44544), 663u);  // [87 << 9, 88 << 9)
  EXPECT_EQ(LatencyHistogram::Index(45055), 663u);
  EXPECT_EQ(LatencyHistogram::Index(44543), 662u);
  EXPECT_EQ(LatencyHistogram::Index(45056), 664u);
  EXPECT_EQ(LatencyHistogram::BucketMiddle(663), 44544u + 256);
}

TEST(LatencyHistogramTest, SmallValuesAreExactAndLargeOnesStayInRange) {
  for (uint64_t ns = 0; ns < 2 * LatencyHistogram::kSub; ++ns) {
    EXPECT_EQ(LatencyHistogram::Index(ns), ns);
    EXPECT_EQ(LatencyHistogram::BucketMiddle(static_cast<uint32_t>(ns)), ns);
  }
  EXPECT_EQ(LatencyHistogram::Index(UINT64_MAX), LatencyHistogram::kBuckets - 1);
  // Every bucket's middle lies in that bucket, so indexes never go backwards.
  for (uint32_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    EXPECT_EQ(LatencyHistogram::Index(LatencyHistogram::BucketMiddle(i)), i) << i;
  }
}

TEST(LatencyHistogramTest, EmptyReportsZeros) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.mean_ns(), 0.0);
  EXPECT_EQ(h.min_ns(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.Percentile(0.5), 0u);
}

TEST(LatencyHistogramTest, PercentilesWithinBucketPrecisionAndMerge) {
  LatencyHistogram a, b;
  for (uint64_t ns = 1; ns <= 100000; ++ns) (ns % 2 ? a : b).Record(ns);
  a.Merge(b);
  EXPECT_EQ(a.count(), 100000u);
  EXPECT_EQ(a.max_ns(), 100000u);
  EXPECT_EQ(a.min_ns(), 1u);
  EXPECT_NEAR(a.Percentile(0.5), 50000, 50000 / 64.0);
  EXPECT_NEAR(a.Percentile(0.99), 99000, 99000 / 64.0);
  EXPECT_NEAR(a.mean_ns(), 50000.5, 0.01);
  EXPECT_EQ(a.Percentile(1.0), 100000u);  // the largest value is known exactly
}

TEST(LatencyHistogramTest, PercentilesStayWithinTheValuesSeen) {
  LatencyHistogram h;
  h.Record(45000);  // alone in a bucket whose middle is 44800
  EXPECT_EQ(h.Percentile(0.5), 45000u);
  h.Record(45010);
  EXPECT_EQ(h.Percentile(0.5), 45000u);  // the middle, clamped to the smallest value
  EXPECT_EQ(h.Percentile(1.0), 45010u);
}

TEST(LatencyHistogramTest, ClearForgetsEverything) {
  LatencyHistogram h;
  h.Record(7);
  h.Record(1 << 20);
  h.Clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.bucket_count(7), 0u);
  h.Record(9);
  EXPECT_EQ(h.min_ns(), 9u);
  EXPECT_EQ(h.max_ns(), 9u);
  EXPECT_EQ(h.bucket_count(9), 1u);
}

}  // namespace
}  // namespace nvkv::util
