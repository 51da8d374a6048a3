#include "bench/ycsb/generators.h"

#include <cmath>

namespace nvkv::ycsb {
namespace {

constexpr uint64_t kFnvOffsetBasis64 = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime64 = 1099511628211ull;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t Fnv64(uint64_t value) {
  uint64_t hash = kFnvOffsetBasis64;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xff;
    hash *= kFnvPrime64;
    value >>= 8;
  }
  // Java's Math.abs on a long: negate when negative; INT64_MIN stays INT64_MIN.
  const int64_t signed_hash = static_cast<int64_t>(hash);
  return signed_hash < 0 ? uint64_t{0} - hash : hash;
}

Random::Random(uint64_t seed) {
  uint64_t s = seed;
  for (uint64_t& word : state_) word = SplitMix64(&s);
}

uint64_t Random::Next() {
  const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = Rotl(state_[3], 45);
  return result;
}

double Zeta(uint64_t from, uint64_t n, double theta, double sum) {
  for (uint64_t i = from; i < n; ++i) sum += 1.0 / std::pow(static_cast<double>(i + 1), theta);
  return sum;
}

// --- ZipfianGenerator ---

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta)
    : ZipfianGenerator(min, max, theta, Zeta(max - min + 1, theta)) {}

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan)
    : base_(min),
      items_(max - min + 1),
      theta_(theta),
      zeta2theta_(Zeta(2, theta)),
      alpha_(1.0 / (1.0 - theta)),
      zetan_(zetan),
      count_for_zeta_(max - min + 1),
      half_pow_theta_(std::pow(0.5, theta)) {
  SetEta();
}

void ZipfianGenerator::SetEta() {
  eta_ = (1 - std::pow(2.0 / static_cast<double>(items_), 1 - theta_)) /
         (1 - zeta2theta_ / zetan_);
}

uint64_t ZipfianGenerator::Next(Random& random, uint64_t item_count) {
  if (item_count > count_for_zeta_) {
    // The item count grew (inserts in a "latest" workload): extend zeta from where it was.
    zetan_ = Zeta(count_for_zeta_, item_count, theta_, zetan_);
    count_for_zeta_ = item_count;
    items_ = item_count;
    SetEta();
  }
  const double u = random.NextDouble();
  const double uz = u * zetan_;
  if (uz < 1.0) return base_;
  if (uz < 1.0 + half_pow_theta_) return base_ + 1;
  uint64_t rank = static_cast<uint64_t>(static_cast<double>(item_count) *
                                        std::pow(eta_ * u - eta_ + 1, alpha_));
  if (rank >= item_count) rank = item_count - 1;  // rounding at u -> 1
  return base_ + rank;
}

// --- ScrambledZipfianGenerator ---

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t min, uint64_t max, double theta)
    : min_(min),
      item_count_(max - min + 1),
      // YCSB uses its precomputed zeta only for 0.99; any other constant costs a sum over 10^10
      // items there. Here the sum for another constant is taken over the real item count.
      zipfian_(theta == ZipfianGenerator::kDefaultTheta
                   ? ZipfianGenerator(0, kItemCount, theta, kZetan)
                   : ZipfianGenerator(0, max - min, theta)) {}

// --- AcknowledgedCounter ---

void AcknowledgedCounter::Acknowledge(uint64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t limit = limit_.load(std::memory_order_relaxed);
  if (value != limit + 1) {
    acked_above_limit_.insert(value);
    return;
  }
  limit = value;
  while (!acked_above_limit_.empty() && *acked_above_limit_.begin() == limit + 1) {
    acked_above_limit_.erase(acked_above_limit_.begin());
    ++limit;
  }
  limit_.store(limit, std::memory_order_release);
}

// --- SkewedLatestGenerator ---

SkewedLatestGenerator::SkewedLatestGenerator(const AcknowledgedCounter* basis)
    : basis_(basis),
      zipfian_(0, basis->last_value() > 0 ? basis->last_value() - 1 : 0) {}

uint64_t SkewedLatestGenerator::Next(Random& random) {
  const uint64_t max = basis_->last_value();
  if (max == 0) return 0;
  return max - zipfian_.Next(random, max);
}

// --- DiscreteGenerator ---

void DiscreteGenerator::Add(int value, double weight) {
  if (weight <= 0) return;
  choices_.emplace_back(value, weight);
  total_ += weight;
}

int DiscreteGenerator::Next(Random& random) const {
  double point = random.NextDouble() * total_;
  for (const auto& [value, weight] : choices_) {
    if (point < weight) return value;
    point -= weight;
  }
  return choices_.back().first;
}

}  // namespace nvkv::ycsb
