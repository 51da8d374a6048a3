// Page format micro-benchmarks (kv/page_format.h): building pages, verifying them, walking and
// searching their records, and the XXH3 checksum every page carries.
//
//   build/bench/page_format_bench
//   build/bench/page_format_bench --benchmark_filter=Verify
//
// Records are YCSB-like: 23-byte keys ("user" + 19 digits), values of the size in the benchmark's
// argument. Rates: items_per_second is records per second (Build, Iterate, Find) and
// bytes_per_second page bytes per second (Verify, Checksum).
#include <benchmark/benchmark.h>
#include <xxhash.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>  // as kv/page_format.cc computes it
#endif

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kv/page_format.h"

namespace nvkv::kv {
namespace {

constexpr uint8_t kStoreId[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

Geometry GeometryFor(uint32_t page_bytes) {
  Geometry g;
  g.page_bytes = page_bytes;
  g.pages_per_segment = 64;
  g.segment_count = 16;
  return g;
}

std::string KeyNumber(uint64_t i) {
  // An odd multiplier makes the counter -> number map a bijection: distinct keys, random order.
  const uint64_t scrambled = (i * 0x9e3779b97f4a7c15) % 10'000'000'000'000'000'000ULL;
  char key[32];
  std::snprintf(key, sizeof(key), "user%019llu", static_cast<unsigned long long>(scrambled));
  return key;
}

RecordHeader PutHeader(std::string_view key, std::string_view value, uint64_t sequence) {
  RecordHeader h{};
  h.type = static_cast<uint8_t>(RecordType::kPut);
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.value_bytes = static_cast<uint32_t>(value.size());
  h.sequence = sequence;
  return h;
}

// A full data page of records with `value_bytes`-byte values; `keys` gets the keys in page order.
std::vector<uint8_t> FullPage(const Geometry& g, size_t value_bytes, uint64_t page_number,
                              std::vector<std::string>* keys) {
  std::vector<uint8_t> page(g.page_bytes);
  const std::string value(value_bytes, 'v');
  PageBuilder builder;
  builder.Start(page.data(), g, PageType::kData, 1, g.PageInSegment(page_number), 1);
  for (uint64_t i = 0;; ++i) {
    std::string key = KeyNumber(i);
    if (builder.AddRecord(PutHeader(key, value, i + 1), key, value) == 0) break;
    if (keys != nullptr) keys->push_back(std::move(key));
  }
  builder.Finish(StoreSeed(kStoreId), page_number);
  return page;
}

// One page per iteration: Start, as many AddRecord calls as fit, Finish (header and checksum).
void BM_PageBuild(benchmark::State& state) {
  const Geometry g = GeometryFor(static_cast<uint32_t>(state.range(0)));
  const size_t value_bytes = static_cast<size_t>(state.range(1));
  const std::string value(value_bytes, 'v');
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < g.page_bytes / 24; ++i) keys.push_back(KeyNumber(i));
  std::vector<uint8_t> page(g.page_bytes);
  const uint64_t seed = StoreSeed(kStoreId);
  uint64_t records = 0;
  uint64_t sequence = 1;
  for (auto _ : state) {
    PageBuilder builder;
    builder.Start(page.data(), g, PageType::kData, 1, 3, 1);
    for (const std::string& key : keys) {
      if (builder.AddRecord(PutHeader(key, value, sequence++), key, value) == 0) break;
      ++records;
    }
    builder.Finish(seed, 5);
    benchmark::DoNotOptimize(page.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(records));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * g.page_bytes);
  state.counters["records_per_page"] =
      static_cast<double>(records) / static_cast<double>(state.iterations());
}

// VerifyPage: magic, XXH3-64 over the page (seeded with store and page number), type, bounds.
void BM_VerifyPage(benchmark::State& state) {
  const Geometry g = GeometryFor(static_cast<uint32_t>(state.range(0)));
  const std::vector<uint8_t> page = FullPage(g, 100, 7, nullptr);
  const uint64_t seed = StoreSeed(kStoreId);
  for (auto _ : state) {
    absl::StatusOr<PageHeader> header = VerifyPage(page.data(), g, seed, 7);
    benchmark::DoNotOptimize(header);
    if (!header.ok()) state.SkipWithError("page does not verify");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * g.page_bytes);
}

// RecordIterator over every record of a verified page.
void BM_RecordIteration(benchmark::State& state) {
  const Geometry g = GeometryFor(4096);
  const std::vector<uint8_t> page = FullPage(g, static_cast<size_t>(state.range(0)), 7, nullptr);
  absl::StatusOr<PageHeader> header = VerifyPage(page.data(), g, StoreSeed(kStoreId), 7);
  if (!header.ok()) {
    state.SkipWithError("page does not verify");
    return;
  }
  uint64_t records = 0;
  for (auto _ : state) {
    RecordIterator it(page.data(), *header);
    RecordView record;
    while (it.Next(&record)) {
      benchmark::DoNotOptimize(record.key.data());
      ++records;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(records));
  state.counters["records_per_page"] =
      static_cast<double>(records) / static_cast<double>(state.iterations());
}

// FindRecord of each key of the page in turn (so on average half the page is walked), and of a
// key that is not there (the whole page).
void BM_FindRecord(benchmark::State& state, bool hit) {
  const Geometry g = GeometryFor(4096);
  std::vector<std::string> keys;
  const std::vector<uint8_t> page = FullPage(g, static_cast<size_t>(state.range(0)), 7, &keys);
  absl::StatusOr<PageHeader> header = VerifyPage(page.data(), g, StoreSeed(kStoreId), 7);
  if (!header.ok()) {
    state.SkipWithError("page does not verify");
    return;
  }
  const std::string missing = "user-not-on-this-page!!";
  size_t i = 0;
  for (auto _ : state) {
    absl::StatusOr<RecordView> found =
        FindRecord(page.data(), *header, hit ? std::string_view(keys[i]) : missing);
    benchmark::DoNotOptimize(found);
    if (++i == keys.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["records_per_page"] = static_cast<double>(keys.size());
}

// The checksum alone: XXH3-64 with a seed over a page minus its first 8 bytes, as VerifyPage and
// PageBuilder::Finish compute it.
void BM_Xxh3Page(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> page(bytes);
  for (size_t i = 0; i < bytes; ++i) page[i] = static_cast<uint8_t>(i * 131 + 7);
  uint64_t seed = 1;
  for (auto _ : state) {
    const uint64_t sum = XXH3_64bits_withSeed(page.data() + 8, bytes - 8, seed++);
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

BENCHMARK(BM_PageBuild)
    ->ArgNames({"page", "value"})
    ->Args({4096, 16})
    ->Args({4096, 100})
    ->Args({4096, 1000})
    ->Args({65536, 100});
BENCHMARK(BM_VerifyPage)->ArgName("page")->Arg(4096)->Arg(16384)->Arg(65536);
BENCHMARK(BM_RecordIteration)->ArgName("value")->Arg(16)->Arg(100)->Arg(1000);
BENCHMARK_CAPTURE(BM_FindRecord, hit, true)->ArgName("value")->Arg(16)->Arg(100);
BENCHMARK_CAPTURE(BM_FindRecord, miss, false)->ArgName("value")->Arg(16)->Arg(100);
BENCHMARK(BM_Xxh3Page)->ArgName("bytes")->Arg(4096)->Arg(65536);

}  // namespace
}  // namespace nvkv::kv
