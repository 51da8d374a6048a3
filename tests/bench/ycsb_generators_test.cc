// The YCSB generators against the distributions they promise, with fixed seeds.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "bench/ycsb/generators.h"
#include "bench/ycsb/workload.h"

namespace nvkv::ycsb {
namespace {

constexpr uint64_t kSeed = 20240611;
constexpr int kSamples = 1'000'000;

TEST(Fnv64, MatchesYcsbFirstKey) {
  // YCSB's first loaded key with insertorder=hashed is "user6284781860667377211".
  EXPECT_EQ(Fnv64(0), 6284781860667377211ull);
  WorkloadConfig config;
  EXPECT_EQ(KeyName(config, 0), "user6284781860667377211");
  config.ordered_inserts = true;
  config.zero_padding = 5;
  EXPECT_EQ(KeyName(config, 42), "user00042");
}

TEST(Fnv64, IsNonNegativeAsAJavaLong) {
  for (uint64_t i = 0; i < 100000; ++i) EXPECT_LT(Fnv64(i), uint64_t{1} << 63) << i;
}

TEST(Zipfian, TopTwoRanksHaveExactZipfFrequencies) {
  constexpr uint64_t kItems = 1000;
  ZipfianGenerator zipfian(0, kItems - 1);
  Random random(kSeed);
  std::vector<uint64_t> counts(kItems);
  for (int i = 0; i < kSamples; ++i) {
    const uint64_t v = zipfian.Next(random);
    ASSERT_LT(v, kItems);
    ++counts[v];
  }
  const double zetan = Zeta(kItems, 0.99);
  EXPECT_NEAR(counts[0] / double{kSamples}, 1 / zetan, 0.02 / zetan);
  EXPECT_NEAR(counts[1] / double{kSamples}, std::pow(0.5, 0.99) / zetan, 0.02 / zetan);
  // Skew: popularity falls with rank.
  EXPECT_GT(counts[1], counts[10]);
  EXPECT_GT(counts[10], counts[100]);
  EXPECT_GT(counts[100], counts[900]);
}

TEST(Zipfian, GrowingItemCountExtendsZetaIncrementally) {
  ZipfianGenerator grown(0, 99);
  Random random(kSeed);
  (void)grown.Next(random, 500);
  EXPECT_EQ(grown.items(), 500u);
  EXPECT_NEAR(grown.zetan(), Zeta(500, 0.99), 1e-9);
}

TEST(ScrambledZipfian, TopItemFrequencyMatchesTheory) {
  constexpr uint64_t kItems = 1000;
  ScrambledZipfianGenerator zipfian(0, kItems - 1);
  Random random(kSeed);
  std::map<uint64_t, uint64_t> counts;
  for (int i = 0; i < kSamples; ++i) {
    const uint64_t v = zipfian.Next(random);
    ASSERT_LT(v, kItems);
    ++counts[v];
  }
  uint64_t top = 0;
  for (const auto& [value, count] : counts) top = std::max(top, count);
  // Rank 0 of the zipfian over 10^10 items has probability 1 / zeta = 3.78%; the hash folds
  // about 1/1000 of the other ranks' mass onto the same key (+0.1%).
  const double expected = 1 / ScrambledZipfianGenerator::kZetan + 0.96 / kItems;
  EXPECT_NEAR(top / double{kSamples}, expected, 0.1 * expected);
  // Scrambled: the most popular key is not the first one.
  EXPECT_NE(std::max_element(counts.begin(), counts.end(),
                             [](auto& a, auto& b) { return a.second < b.second; })->first, 0u);
}

TEST(ScrambledZipfian, StaysInRangeWithOffset) {
  ScrambledZipfianGenerator zipfian(5000, 5999);
  Random random(kSeed);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = zipfian.Next(random);
    ASSERT_GE(v, 5000u);
    ASSERT_LE(v, 5999u);
  }
}

TEST(SkewedLatest, FavorsTheNewestAcknowledgedKey) {
  AcknowledgedCounter inserts(1000);  // keys 0..999 loaded
  SkewedLatestGenerator latest(&inserts);
  Random random(kSeed);
  std::map<uint64_t, uint64_t> counts;
  for (int i = 0; i < kSamples; ++i) {
    const uint64_t v = latest.Next(random);
    ASSERT_GE(v, 1u);
    ASSERT_LE(v, 999u);
    ++counts[v];
  }
  EXPECT_NEAR(counts[999] / double{kSamples}, 1 / Zeta(999, 0.99), 0.02 / Zeta(999, 0.99));
  EXPECT_GT(counts[999], counts[998]);
  EXPECT_GT(counts[990], counts[500]);
  // After 100 more inserts, the newest is the favourite.
  for (uint64_t k = 0; k < 100; ++k) inserts.Acknowledge(inserts.Next());
  counts.clear();
  for (int i = 0; i < 100000; ++i) ++counts[latest.Next(random)];
  EXPECT_LE(counts.rbegin()->first, 1099u);
  EXPECT_EQ(std::max_element(counts.begin(), counts.end(),
                             [](auto& a, auto& b) { return a.second < b.second; })->first,
            1099u);
}

TEST(AcknowledgedCounter, LimitWaitsForTheGap) {
  AcknowledgedCounter counter(10);
  EXPECT_EQ(counter.last_value(), 9u);
  const uint64_t a = counter.Next(), b = counter.Next(), c = counter.Next();
  counter.Acknowledge(c);
  counter.Acknowledge(b);
  EXPECT_EQ(counter.last_value(), 9u);  // 10 still in progress
  counter.Acknowledge(a);
  EXPECT_EQ(counter.last_value(), 12u);
}

TEST(Uniform, SpreadsEvenly) {
  UniformGenerator uniform(100, 1099);
  Random random(kSeed);
  std::vector<uint64_t> deciles(10);
  for (int i = 0; i < kSamples; ++i) {
    const uint64_t v = uniform.Next(random);
    ASSERT_GE(v, 100u);
    ASSERT_LE(v, 1099u);
    ++deciles[(v - 100) / 100];
  }
  for (uint64_t count : deciles) EXPECT_NEAR(count, kSamples / 10, kSamples / 10 * 0.02);
}

TEST(ScanLength, UniformFromOneToMax) {
  WorkloadConfig config;
  config.record_count = 1000;
  config.insert_count = 1000;
  config.max_scan_length = 100;
  SharedCounters counters(config);
  OperationChooser chooser(config, &counters, kSeed);
  std::vector<uint64_t> counts(101);
  double sum = 0;
  constexpr int kScans = 200000;
  for (int i = 0; i < kScans; ++i) {
    const uint32_t length = chooser.NextScanLength();
    ASSERT_GE(length, 1u);
    ASSERT_LE(length, 100u);
    ++counts[length];
    sum += length;
  }
  EXPECT_NEAR(sum / kScans, 50.5, 0.5);
  for (uint32_t length = 1; length <= 100; ++length) {
    EXPECT_NEAR(counts[length], kScans / 100, kScans / 100 * 0.15) << length;
  }
}

TEST(Discrete, PicksByWeight) {
  DiscreteGenerator choice;
  choice.Add(0, 0.95);
  choice.Add(1, 0.05);
  choice.Add(2, 0);  // never
  Random random(kSeed);
  std::vector<uint64_t> counts(3);
  for (int i = 0; i < kSamples; ++i) ++counts[choice.Next(random)];
  EXPECT_NEAR(counts[1] / double{kSamples}, 0.05, 0.002);
  EXPECT_EQ(counts[2], 0u);
}

TEST(KeyChooser, NeverPicksAKeyBeyondTheAcknowledgedInserts) {
  WorkloadConfig config;
  config.record_count = 100;
  config.insert_count = 100;
  config.operation_count = 1000;  // the zipfian covers 100 + 1000 keys
  config.insert_proportion = 0.5;
  config.request_distribution = KeyDistribution::kZipfian;
  SharedCounters counters(config);
  OperationChooser chooser(config, &counters, kSeed);
  for (int i = 0; i < 100000; ++i) ASSERT_LE(chooser.NextKeyNumber(), 99u);
}

}  // namespace
}  // namespace nvkv::ycsb
