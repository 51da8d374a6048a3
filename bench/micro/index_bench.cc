// Index micro-benchmarks: Insert and Find throughput of the hash and ordered indexes at 1M keys,
// and memory per key at 1M and 10M keys.
//
// Keys look like YCSB's: "user" + 19 digits of a scrambled counter, 23 bytes, inserted in
// random order; hashes are XXH3_64bits(key), computed up front (the engine computes the hash
// once per operation; here it is outside the timed loop so only the index is measured).
//
//   build/bench/index_bench                         # everything (the 10M-key runs take minutes)
//   build/bench/index_bench --benchmark_filter=Find
//
// Counters: ns_per_insert (Insert benchmarks), bytes_per_key (IndexStats::memory_bytes divided
// by entries; for the ordered index an estimate, see kv/ordered_index.h). Find benchmarks time
// one Find per iteration, so their Time column is ns per Find.
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kv/index.h"

namespace nvkv::kv {
namespace {

constexpr int64_t kOneMillion = 1'000'000;
constexpr int64_t kTenMillion = 10'000'000;

struct KeySet {
  std::vector<std::string> keys;
  std::vector<uint64_t> hashes;
};

// The first `count` keys of one fixed sequence (grown on demand, shared by all benchmarks).
const KeySet& Keys(int64_t count) {
  static KeySet set;
  for (auto i = static_cast<int64_t>(set.keys.size()); i < count; ++i) {
    // An odd multiplier makes the counter -> number map a bijection: distinct, random order.
    const uint64_t scrambled = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15;
    char key[32];
    std::snprintf(key, sizeof(key), "user%019llu",
                  static_cast<unsigned long long>(scrambled % 10'000'000'000'000'000'000ULL));
    set.keys.emplace_back(key);
    set.hashes.push_back(XXH3_64bits(set.keys.back().data(), set.keys.back().size()));
  }
  return set;
}

enum class Kind { kHash, kHashReserved, kOrdered };

std::unique_ptr<Index> MakeIndex(Kind kind, int64_t expected_entries) {
  if (kind == Kind::kOrdered) return NewOrderedIndex();
  std::unique_ptr<Index> index = NewHashIndex();
  if (kind == Kind::kHashReserved) index->Reserve(static_cast<uint64_t>(expected_entries));
  return index;
}

// Inserts keys [0, count) at pages key_number / 32 (32 records per page).
bool Fill(Index* index, const KeySet& keys, int64_t count, benchmark::State& state) {
  for (int64_t i = 0; i < count; ++i) {
    absl::Status status = index->Insert(keys.hashes[i], keys.keys[i], static_cast<uint64_t>(i / 32));
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return false;
    }
  }
  return true;
}

void BM_Insert(benchmark::State& state, Kind kind) {
  const int64_t count = state.range(0);
  const KeySet& keys = Keys(count);
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<Index> index = MakeIndex(kind, count);  // Reserve is not timed
    state.ResumeTiming();
    if (!Fill(index.get(), keys, count, state)) break;
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * count);
  state.counters["ns_per_insert"] = benchmark::Counter(
      static_cast<double>(count),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// One Find per iteration; `hit` looks up inserted keys, otherwise keys that were never inserted.
void BM_Find(benchmark::State& state, Kind kind, bool hit) {
  const int64_t count = state.range(0);
  const KeySet& keys = Keys(2 * count);
  std::unique_ptr<Index> index = MakeIndex(kind, count);
  if (!Fill(index.get(), keys, count, state)) return;
  std::vector<uint64_t> pages;
  pages.reserve(16);
  const int64_t first = hit ? 0 : count;
  int64_t i = 0;
  uint64_t candidates = 0;
  for (auto _ : state) {
    index->Find(keys.hashes[first + i], keys.keys[first + i], &pages);
    candidates += pages.size();
    if (++i == count) i = 0;
  }
  benchmark::DoNotOptimize(candidates);
  state.SetItemsProcessed(state.iterations());
  state.counters["candidates_per_find"] =
      static_cast<double>(candidates) / static_cast<double>(state.iterations());
}

void BM_Memory(benchmark::State& state, Kind kind) {
  const int64_t count = state.range(0);
  const KeySet& keys = Keys(count);
  IndexStats stats;
  for (auto _ : state) {
    std::unique_ptr<Index> index = MakeIndex(kind, count);
    if (!Fill(index.get(), keys, count, state)) break;
    stats = index->stats();
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.counters["bytes_per_key"] =
      static_cast<double>(stats.memory_bytes) / static_cast<double>(stats.entries);
  state.counters["memory_MiB"] = static_cast<double>(stats.memory_bytes) / (1 << 20);
}

BENCHMARK_CAPTURE(BM_Insert, hash, Kind::kHash)->Arg(kOneMillion)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Insert, hash_reserved, Kind::kHashReserved)
    ->Arg(kOneMillion)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Insert, ordered, Kind::kOrdered)
    ->Arg(kOneMillion)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Find, hash_hit, Kind::kHash, true)->Arg(kOneMillion);
BENCHMARK_CAPTURE(BM_Find, hash_miss, Kind::kHash, false)->Arg(kOneMillion);
BENCHMARK_CAPTURE(BM_Find, ordered_hit, Kind::kOrdered, true)->Arg(kOneMillion);
BENCHMARK_CAPTURE(BM_Find, ordered_miss, Kind::kOrdered, false)->Arg(kOneMillion);

BENCHMARK_CAPTURE(BM_Memory, hash, Kind::kHash)
    ->Arg(kOneMillion)
    ->Arg(kTenMillion)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Memory, hash_reserved, Kind::kHashReserved)
    ->Arg(kOneMillion)
    ->Arg(kTenMillion)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Memory, ordered, Kind::kOrdered)
    ->Arg(kOneMillion)
    ->Arg(kTenMillion)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nvkv::kv
