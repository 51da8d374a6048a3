// LatencyHistogram: an HDR-style log-linear histogram of latencies in nanoseconds, mergeable
// across threads. The one latency histogram of the project: nvkv-ycsb (per operation type and
// thread) and nvkv-iobench (per request) record into it.
//
// Why util/: both benchmarks need it and they link different layers (nvkv-iobench the storage
// library, nvkv-ycsb the public one), so no bench/ library is under both; util/ is below every
// layer and includes nothing of ours (tests/check_layering.sh).
//
// Values below 2 * kSub ns are counted exactly; above that each power of two is split into
// kSub = 64 equal buckets, so a bucket's width is at most 1/64 (1.6%) of its values. Worked
// example: 45,000 ns has its top bit at 2^15, so group g = 15 - 6 = 9 and sub-bucket
// (45000 >> 9) & 63 = 87 & 63 = 23: index (9 + 1) * 64 + 23 = 663, covering
// [87 << 9, 88 << 9) = [44544, 45056) ns. Percentiles report the middle of their bucket.
//
// Thread contract: not synchronized; each thread records into its own and Merge combines them.
#ifndef NVKV_UTIL_LATENCY_HISTOGRAM_H_
#define NVKV_UTIL_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <cstdint>

namespace nvkv::util {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;
  static constexpr uint32_t kSub = 1u << kSubBits;
  static constexpr uint32_t kBuckets = (64 - kSubBits + 1) * kSub;
  static_assert(kBuckets == 3776);

  void Record(uint64_t ns) {
    ++buckets_[Index(ns)];
    ++count_;
    sum_ns_ += ns;
    max_ns_ = std::max(max_ns_, ns);
    min_ns_ = std::min(min_ns_, ns);
  }
  void Merge(const LatencyHistogram& other);
  void Clear() { *this = LatencyHistogram(); }

  uint64_t count() const { return count_; }
  double mean_ns() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_ns_) / count_; }
  uint64_t max_ns() const { return count_ == 0 ? 0 : max_ns_; }
  uint64_t min_ns() const { return count_ == 0 ? 0 : min_ns_; }
  // The value at quantile q in (0, 1]: the middle of the bucket holding the ceil(q * count)-th
  // smallest value, clamped to [min, max]; exactly max for the largest.
  uint64_t Percentile(double q) const;

  // For drawing: bucket i's count and its upper bound in ns.
  uint64_t bucket_count(uint32_t i) const { return buckets_[i]; }
  static uint64_t BucketMiddle(uint32_t index);
  static uint32_t Index(uint64_t ns) {
    if (ns < 2 * kSub) return static_cast<uint32_t>(ns);
    const int top = 63 - __builtin_clzll(ns);
    const int group = top - kSubBits;
    return static_cast<uint32_t>((group + 1) * kSub + ((ns >> group) & (kSub - 1)));
  }

 private:
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t max_ns_ = 0;
  uint64_t min_ns_ = UINT64_MAX;
};

}  // namespace nvkv::util

#endif  // NVKV_UTIL_LATENCY_HISTOGRAM_H_
