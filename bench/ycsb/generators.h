// Random number generators of the YCSB core workload: which key an operation touches, which
// operation comes next, how long a scan or a field is. Each follows the generator of the same
// name in YCSB's site.ycsb.generator package, so that a workload here draws keys with the same
// distribution YCSB would:
//
//   ZipfianGenerator           Gray et al., "Quickly generating billion-record synthetic
//                              databases" (SIGMOD '94): ranks 0 and 1 exact, the rest by a
//                              closed-form approximation; zeta(n) grows incrementally when the
//                              item count grows.
//   ScrambledZipfianGenerator  a zipfian draw over 10^10 items (zeta precomputed, as YCSB does
//                              for the constant 0.99), hashed with FNV-64 and taken modulo the
//                              item count, so popular keys are spread over the key space.
//   SkewedLatestGenerator      max - zipfian(max): the newest inserted keys are the most popular.
//   UniformGenerator, DiscreteGenerator, CounterGenerator, AcknowledgedCounter.
//
// Thread contract: Random and the generators are used by one thread at a time (each client
// thread has its own copies); CounterGenerator and AcknowledgedCounter are shared by all client
// threads and safe for concurrent use.
#ifndef NVKV_BENCH_YCSB_GENERATORS_H_
#define NVKV_BENCH_YCSB_GENERATORS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace nvkv::ycsb {

// YCSB's Utils.fnvhash64: FNV-1a over the 8 bytes of `value`, low byte first, then the absolute
// value as a signed 64-bit number (Java's Math.abs, which leaves INT64_MIN as it is).
uint64_t Fnv64(uint64_t value);

// xoshiro256** seeded through SplitMix64: fast, and good enough for any workload here.
class Random {
 public:
  explicit Random(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; bias below 2^-64 * bound).
  uint64_t Below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * bound) >> 64);
  }

 private:
  uint64_t state_[4];
};

// zeta(n, theta) = sum_{i=1..n} 1 / i^theta, continued from `from` items whose sum is `sum`.
double Zeta(uint64_t from, uint64_t n, double theta, double sum);
inline double Zeta(uint64_t n, double theta) { return Zeta(0, n, theta, 0); }

class ZipfianGenerator {
 public:
  static constexpr double kDefaultTheta = 0.99;  // YCSB's ZIPFIAN_CONSTANT

  // Items min..max inclusive; rank 0 (the most popular) is `min`. Computes zeta(n) (O(n)).
  ZipfianGenerator(uint64_t min, uint64_t max, double theta = kDefaultTheta);
  // The same with zeta(n) given (ScrambledZipfianGenerator's precomputed constant).
  ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan);

  // A value in [min, min + items - 1].
  uint64_t Next(Random& random) { return Next(random, items_); }
  // A value in [min, min + item_count - 1]: when item_count grew since the last call, zeta is
  // extended incrementally, as YCSB's nextLong(itemcount) does (a smaller count is used as is,
  // with zeta left alone: YCSB's allowitemcountdecrease=false).
  uint64_t Next(Random& random, uint64_t item_count);

  uint64_t items() const { return items_; }
  double zetan() const { return zetan_; }
  double theta() const { return theta_; }

 private:
  void SetEta();

  uint64_t base_;
  uint64_t items_;
  double theta_;
  double zeta2theta_;
  double alpha_;
  double zetan_;
  double eta_;
  uint64_t count_for_zeta_;
  double half_pow_theta_;  // 0.5^theta: the draw below 1 + this is rank 1
};

class ScrambledZipfianGenerator {
 public:
  static constexpr uint64_t kItemCount = 10'000'000'000ull;  // YCSB's ITEM_COUNT
  static constexpr double kZetan = 26.46902820178302;        // zeta(10^10 + 1, 0.99), YCSB's

  // Items min..max inclusive.
  ScrambledZipfianGenerator(uint64_t min, uint64_t max,
                            double theta = ZipfianGenerator::kDefaultTheta);
  uint64_t Next(Random& random) {
    return min_ + Fnv64(zipfian_.Next(random)) % item_count_;
  }

 private:
  uint64_t min_;
  uint64_t item_count_;
  ZipfianGenerator zipfian_;
};

class UniformGenerator {
 public:
  UniformGenerator(uint64_t min, uint64_t max) : min_(min), span_(max - min + 1) {}
  uint64_t Next(Random& random) { return min_ + random.Below(span_); }

 private:
  uint64_t min_;
  uint64_t span_;
};

// Hands out min, min + 1, ... to any number of threads.
class CounterGenerator {
 public:
  explicit CounterGenerator(uint64_t start) : next_(start) {}
  uint64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> next_;
};

// YCSB's AcknowledgedCounterGenerator: hands out insert key numbers and tells the highest one
// below which every key number has been acknowledged (its insert finished), so that readers
// never pick a key still being inserted.
class AcknowledgedCounter {
 public:
  // The first key number handed out is `start`; last_value() is start - 1 until it is acked.
  explicit AcknowledgedCounter(uint64_t start) : next_(start), limit_(start - 1) {}
  uint64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }
  void Acknowledge(uint64_t value);
  uint64_t last_value() const { return limit_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> next_;
  std::atomic<uint64_t> limit_;
  std::mutex mu_;
  std::set<uint64_t> acked_above_limit_;  // guarded by mu_
};

// YCSB's SkewedLatestGenerator: max - zipfian(max), where max is the highest acknowledged insert
// key number: the most recent keys are the most popular. Yields values in [1, max] (YCSB's
// generator never picks key 0 either).
class SkewedLatestGenerator {
 public:
  // `basis` is borrowed and outlives the generator.
  explicit SkewedLatestGenerator(const AcknowledgedCounter* basis);
  uint64_t Next(Random& random);

 private:
  const AcknowledgedCounter* basis_;
  ZipfianGenerator zipfian_;
};

// Picks one of several outcomes with fixed weights (weights need not add up to 1).
class DiscreteGenerator {
 public:
  void Add(int value, double weight);
  bool empty() const { return total_ == 0; }
  int Next(Random& random) const;

 private:
  std::vector<std::pair<int, double>> choices_;
  double total_ = 0;
};

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_GENERATORS_H_
