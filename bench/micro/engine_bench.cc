// Engine micro-benchmarks on a MemDevice (RAM; no device latency): the CPU of one Get with and
// without the record cache, the index memory per key once N small keys are loaded, in hash and
// in ordered mode, and recovery throughput at Open.
//
//   build/bench/engine_bench                                  # 1M and 10M keys: minutes
//   build/bench/engine_bench --benchmark_filter='/1000000/'   # 1M keys only
//
// Keys are YCSB-like, 23 bytes ("user" + 19 digits of a scrambled counter) in random order, with
// 16-byte values: 63-byte records. They are loaded with single non-durable puts from one thread
// (4 shards), then flushed.
//
// Counters:
//   IndexMemory: index_bytes_per_key (EngineStats::index_bytes_per_key: the hash table's slots,
//     or the ordered index's entries, tree nodes and hash table, per live key), index_MiB, and
//     puts_per_s (the load, for scale).
//   Put: CPU of one non-durable overwrite (see BM_Put).
//   Recovery: the store holds the keys plus a quarter of them overwritten; Open rebuilds the
//     index from the log. scanned_MB_per_s is the bytes recovery read and checked (every segment
//     of the device, recovery_pages_scanned) per second of recovery_seconds; records_per_s the
//     records it replayed; open_s the whole Open. open_peak_MiB is how far resident memory rose
//     above where it stood during Open (VmHWM, reset through /proc/self/clear_refs, minus VmRSS
//     before; freed heap handed back with malloc_trim first), open_peak_bytes_per_key that per
//     live key, and index_MiB what the index holds after it. The peak includes Open's fixed
//     cost (queues and their buffers, about 7 MiB with these options: 4 MiB of it recovery's
//     reads in flight), whatever the store holds.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kv/engine.h"
#include "storage/mem_device.h"

namespace nvkv::kv {
namespace {

constexpr int64_t kOneMillion = 1'000'000;
constexpr int64_t kTenMillion = 10'000'000;
constexpr size_t kValueBytes = 16;
constexpr uint64_t kRecordBytes = 24 + 23 + kValueBytes;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Key(uint64_t i) {
  // An odd multiplier makes the counter -> number map a bijection: distinct keys, random order.
  const uint64_t scrambled = (i * 0x9e3779b97f4a7c15) % 10'000'000'000'000'000'000ULL;
  char key[32];
  std::snprintf(key, sizeof(key), "user%019llu", static_cast<unsigned long long>(scrambled));
  return key;
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or 0.
uint64_t StatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) << 10;
  }
  return 0;
}

// Hands freed heap back, resets the peak resident size (VmHWM) to the current one (Linux 4.0+)
// and returns the current one; false in *ok when the peak cannot be reset.
uint64_t StartPeak(bool* ok) {
  malloc_trim(0);
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  *ok = clear_refs.good();
  return StatusBytes("VmRSS");
}

// A memory device with room for `records` records at about 60% space use.
storage::MemDeviceOptions DeviceFor(uint64_t records) {
  storage::MemDeviceOptions mem;
  mem.lba_bytes = 4096;
  mem.lba_count = (records * kRecordBytes * 5 / 3 + (64 << 20)) / mem.lba_bytes;
  mem.volatile_write_cache = false;
  return mem;
}

Options StoreOptions(IndexMode mode) {
  Options options;
  options.index_mode = mode;
  options.shard_count = 4;
  options.segment_bytes = 1 << 20;
  return options;
}

// Puts keys [first, first + count) with values tagged `version`, not durably, then flushes.
bool Load(Engine& engine, uint64_t first, uint64_t count, char version, benchmark::State& state) {
  const std::string value(kValueBytes, version);
  for (uint64_t i = first; i < first + count; ++i) {
    const std::string key = Key(i);
    WriteOp op{false, key, value};
    absl::Status status = engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return false;
    }
  }
  absl::Status flushed = engine.Flush();
  if (!flushed.ok()) state.SkipWithError(flushed.ToString().c_str());
  return flushed.ok();
}

void BM_IndexMemory(benchmark::State& state, IndexMode mode) {
  const uint64_t keys = static_cast<uint64_t>(state.range(0));
  EngineStats stats;
  double load_seconds = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto device = storage::MemDevice::Create(DeviceFor(keys));
    if (!device.ok()) {
      state.SkipWithError(device.status().ToString().c_str());
      return;
    }
    auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(mode));
    if (!engine.ok()) {
      state.SkipWithError(engine.status().ToString().c_str());
      return;
    }
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    if (!Load(**engine, 0, keys, 'a', state)) return;
    load_seconds = SecondsSince(start);
    stats = (*engine)->Stats();
    state.PauseTiming();
    engine->reset();
    state.ResumeTiming();
  }
  state.counters["index_bytes_per_key"] = stats.index_bytes_per_key;
  state.counters["index_MiB"] = static_cast<double>(stats.index_bytes) / (1 << 20);
  state.counters["live_keys"] = static_cast<double>(stats.live_keys);
  state.counters["puts_per_s"] = static_cast<double>(keys) / load_seconds;
}

void BM_Recovery(benchmark::State& state, IndexMode mode) {
  const uint64_t keys = static_cast<uint64_t>(state.range(0));
  const storage::MemDeviceOptions mem = DeviceFor(keys + keys / 4);
  std::shared_ptr<storage::MemStorage> storage;
  {
    auto device = storage::MemDevice::Create(mem);
    if (!device.ok()) {
      state.SkipWithError(device.status().ToString().c_str());
      return;
    }
    storage = (*device)->storage();
    auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(mode));
    if (!engine.ok()) {
      state.SkipWithError(engine.status().ToString().c_str());
      return;
    }
    if (!Load(**engine, 0, keys, 'a', state)) return;
    if (!Load(**engine, 0, keys / 4, 'b', state)) return;
  }
  EngineStats stats;
  double open_seconds = 0;
  uint64_t peak_bytes = UINT64_MAX;
  uint64_t opens = 0;
  bool peak_ok = false;
  for (auto _ : state) {
    state.PauseTiming();
    const uint64_t rss_before = StartPeak(&peak_ok);
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    auto device = storage::MemDevice::Open(storage, mem);
    if (!device.ok()) {
      state.SkipWithError(device.status().ToString().c_str());
      return;
    }
    // No background compaction: it would start cleaning the overwritten keys' segments as soon
    // as the store is open, and the pages it writes into the memory device would count as Open's.
    Options options = StoreOptions(mode);
    options.background_compaction = false;
    auto engine = Engine::OpenOnDevice(std::move(*device), options);
    if (!engine.ok()) {
      state.SkipWithError(engine.status().ToString().c_str());
      return;
    }
    open_seconds = SecondsSince(start);
    stats = (*engine)->Stats();
    state.PauseTiming();
    const uint64_t peak = StatusBytes("VmHWM");
    // The least of the runs after the first: the first Open also makes resident the memory
    // device's pages that the load never wrote (read by recovery for the first time), 100+ MiB
    // that are the device's, not the engine's.
    const uint64_t added = peak > rss_before ? peak - rss_before : 0;
    if (++opens > 1) peak_bytes = std::min(peak_bytes, added);
    engine->reset();  // close (background threads, queues) is not timed
    state.ResumeTiming();
  }
  if (stats.live_keys != keys) state.SkipWithError("recovery lost keys");
  const double scanned_bytes = static_cast<double>(stats.recovery_pages_scanned) * stats.page_bytes;
  state.counters["scanned_MB_per_s"] = scanned_bytes / stats.recovery_seconds / 1e6;
  state.counters["scanned_MB"] = scanned_bytes / 1e6;
  state.counters["records_per_s"] =
      static_cast<double>(stats.recovery_records) / stats.recovery_seconds;
  state.counters["open_s"] = open_seconds;
  if (peak_ok && opens > 1) {
    state.counters["open_peak_MiB"] = static_cast<double>(peak_bytes) / (1 << 20);
    state.counters["open_peak_bytes_per_key"] = static_cast<double>(peak_bytes) / keys;
  }
  state.counters["index_MiB"] = static_cast<double>(stats.index_bytes) / (1 << 20);
}

// A store on a MemDevice with room for `device_records` records, keys [0, keys) put once with
// `value` (not durably) and flushed, and those keys in *loaded; null after SkipWithError.
std::unique_ptr<Engine> LoadedStore(benchmark::State& state, IndexMode mode, uint64_t cache_bytes,
                                    uint64_t keys, const std::string& value,
                                    uint64_t device_records, std::vector<std::string>* loaded) {
  auto device = storage::MemDevice::Create(DeviceFor(device_records));
  if (!device.ok()) {
    state.SkipWithError(device.status().ToString().c_str());
    return nullptr;
  }
  Options options = StoreOptions(mode);
  options.cache_bytes = cache_bytes;
  auto engine = Engine::OpenOnDevice(std::move(*device), options);
  if (!engine.ok()) {
    state.SkipWithError(engine.status().ToString().c_str());
    return nullptr;
  }
  loaded->clear();
  for (uint64_t i = 0; i < keys; ++i) {
    loaded->push_back(Key(i));
    WriteOp op{false, loaded->back(), value};
    if (!(*engine)->Write(std::span<const WriteOp>(&op, 1), /*durable=*/false).ok()) {
      state.SkipWithError("load failed");
      return nullptr;
    }
  }
  if (!(*engine)->Flush().ok()) {
    state.SkipWithError("flush failed");
    return nullptr;
  }
  return std::move(*engine);
}

// One Get's CPU on a MemDevice (no system call, no device wait: what is left is the engine's
// own work): 100,000 keys of 1 KiB values loaded, then Gets of random keys. `hit`: the record
// cache holds them all (and a warm-up pass has read each); `miss`: no cache, so each Get takes
// the index, a page "read" (a copy from RAM), its checks and the record search.
void BM_Get(benchmark::State& state, IndexMode mode, bool cached) {
  constexpr uint64_t kKeys = 100'000;
  const std::string value(1024, 'v');
  std::vector<std::string> keys;
  std::unique_ptr<Engine> engine = LoadedStore(state, mode, cached ? uint64_t{256} << 20 : 0,
                                               kKeys, value, kKeys * 17, &keys);  // 1 KiB values
  if (engine == nullptr) return;
  for (const std::string& key : keys) benchmark::DoNotOptimize(engine->Get(key));
  const EngineStats before = engine->Stats();
  uint64_t next = 0;
  for (auto _ : state) {
    next = (next + 7919) % kKeys;  // a prime stride: every key, in scattered order
    absl::StatusOr<std::string> got = engine->Get(keys[next]);
    benchmark::DoNotOptimize(got);
  }
  const EngineStats after = engine->Stats();
  const double gets = static_cast<double>(after.gets - before.gets);
  state.counters["cache_hit_ratio"] = gets == 0 ? 0 : (after.cache_hits - before.cache_hits) / gets;
  state.counters["page_reads_per_get"] =
      gets == 0 ? 0 : static_cast<double>(after.page_reads - before.page_reads) / gets;
}

// One non-durable Put's CPU on a MemDevice: 100,000 keys of 100-byte values loaded, then
// overwrites of every key in a scattered order, 1M of them (the writer thread and compaction run
// on the other core; the time is the calling thread's). `cached`: the record cache holds every
// key (hash mode: the write finds the key's place there); else hash-mode overwrites are blind.
void BM_Put(benchmark::State& state, IndexMode mode, bool cached) {
  constexpr uint64_t kKeys = 100'000;
  const std::string value(100, 'v');
  std::vector<std::string> keys;
  std::unique_ptr<Engine> engine = LoadedStore(state, mode, cached ? uint64_t{64} << 20 : 0,
                                               kKeys, value, kKeys * 20, &keys);
  if (engine == nullptr) return;
  uint64_t next = 0;
  for (auto _ : state) {
    next = (next + 7919) % kKeys;
    WriteOp op{false, keys[next], value};
    if (!engine->Write(std::span<const WriteOp>(&op, 1), /*durable=*/false).ok()) {
      state.SkipWithError("put failed");
      break;
    }
  }
  const EngineStats stats = engine->Stats();
  state.counters["blind_writes"] = static_cast<double>(stats.blind_writes);
}

BENCHMARK_CAPTURE(BM_Put, hash_cached, IndexMode::kHash, true)
    ->Iterations(1'000'000)
    ->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Put, hash_blind, IndexMode::kHash, false)
    ->Iterations(1'000'000)
    ->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Put, ordered, IndexMode::kOrdered, true)
    ->Iterations(1'000'000)
    ->Unit(benchmark::kNanosecond);

BENCHMARK_CAPTURE(BM_Get, hash_hit, IndexMode::kHash, true)->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Get, hash_miss, IndexMode::kHash, false)->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Get, ordered_hit, IndexMode::kOrdered, true)->Unit(benchmark::kNanosecond);
BENCHMARK_CAPTURE(BM_Get, ordered_miss, IndexMode::kOrdered, false)
    ->Unit(benchmark::kNanosecond);

BENCHMARK_CAPTURE(BM_IndexMemory, hash, IndexMode::kHash)
    ->Arg(kOneMillion)
    ->Arg(kTenMillion)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_IndexMemory, ordered, IndexMode::kOrdered)
    ->Arg(kOneMillion)
    ->Arg(kTenMillion)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Recovery, hash, IndexMode::kHash)
    ->Arg(kOneMillion)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Recovery, ordered, IndexMode::kOrdered)
    ->Arg(kOneMillion)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nvkv::kv
