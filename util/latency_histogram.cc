#include "util/latency_histogram.h"

namespace nvkv::util {

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (uint32_t i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
  max_ns_ = std::max(max_ns_, other.max_ns_);
  min_ns_ = std::min(min_ns_, other.min_ns_);
}

uint64_t LatencyHistogram::BucketMiddle(uint32_t index) {
  if (index < 2 * kSub) return index;
  const uint32_t group = index / kSub - 1;
  const uint64_t low = uint64_t{kSub + index % kSub} << group;
  return low + ((uint64_t{1} << group) >> 1);
}

uint64_t LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count_) + 0.999999);
  rank = std::clamp<uint64_t>(rank, 1, count_);
  if (rank == count_) return max_ns_;  // the largest value is known exactly
  uint64_t seen = 0;
  for (uint32_t i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::clamp(BucketMiddle(i), min_ns_, max_ns_);
  }
  return max_ns_;
}

}  // namespace nvkv::util
