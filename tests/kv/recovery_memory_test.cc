// Memory that Open needs to recover a store, per key: what recovery keeps per key while it scans
// the log must stay within a small multiple of the index it builds (also on a zoned namespace).
#include <malloc.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kv/engine.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/sanitizers.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

// 60,000 keys per shard: just past a point where a table that doubles has doubled (a hash map
// with a maximum load of 7/8 holds 57,344 keys in 2^16 slots), where a table growing all at once
// costs the most per key.
constexpr uint64_t kKeys = 240'000;
constexpr size_t kValueBytes = 16;

// YCSB-like 23-byte keys in scrambled order (as bench/micro/engine_bench.cc).
std::string Key(uint64_t i) {
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

// Resets the process's peak resident size (VmHWM) to its current size (Linux 4.0+).
bool ResetPeak() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

// Why this process's peak resident memory cannot be measured here, or null when it can.
const char* WhyPeaksCannotBeMeasured() {
#ifdef NVKV_UNDER_ASAN
  return "resident memory under AddressSanitizer (redzones, quarantine) is not the program's";
#else
  if (!ResetPeak()) return "/proc/self/clear_refs cannot reset the peak (Linux < 4.0)";
  return nullptr;
#endif
}

// How far resident memory rose above where it stood while `body` ran, in bytes. Freed heap is
// handed back to the system first, so memory the body would reuse from earlier allocations is
// counted rather than hidden.
template <typename F>
uint64_t PeakBytesAdded(F body) {
  malloc_trim(0);
  EXPECT_TRUE(ResetPeak());
  const uint64_t before = StatusBytes("VmRSS");
  body();
  const uint64_t peak = StatusBytes("VmHWM");
  return peak > before ? peak - before : 0;
}

// 40 MiB: conventional, or zoned (zones of 1 MiB, the segments' size here).
storage::MemDeviceOptions Device(Layout layout = Layout::kConventional) {
  storage::MemDeviceOptions mem;
  mem.lba_bytes = 4096;
  mem.lba_count = (40 << 20) / mem.lba_bytes;
  mem.volatile_write_cache = false;
  if (layout == Layout::kZoned) SplitIntoWholeZones(&mem, 256);
  return mem;
}

// The memory of recovery from the log, unless the test asks for the clean-close checkpoint;
// `memory_headroom_bytes` stands for a memory cgroup's limit (0: none).
EngineSeams StoreSeams(bool checkpoint = false, uint64_t memory_headroom_bytes = 0) {
  return EngineSeams{.memory_headroom_bytes = memory_headroom_bytes,
                     .checkpoint_at_close = checkpoint};
}

Options StoreOptions() {
  Options options;
  options.shard_count = 4;
  options.segment_bytes = 1 << 20;
  options.background_compaction = false;
  return options;
}

// Writes `ops` in batches of 256 keys.
void WriteAll(Engine& engine, uint64_t begin, uint64_t end, char version) {
  const std::string value(kValueBytes, version);
  std::vector<std::string> keys;
  std::vector<WriteOp> ops;
  for (uint64_t i = begin; i < end; i += keys.size()) {
    keys.clear();
    ops.clear();
    for (uint64_t j = i; j < end && keys.size() < 256; ++j) keys.push_back(Key(j));
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
    ASSERT_THAT(engine.Write(ops, /*durable=*/false), IsOk());
  }
}

// Writes keys [0, count), writes a checkpoint (Engine::Checkpoint, as the engine does while it
// runs), overwrites the first quarter and makes it durable; returns the storage as a crash then
// would leave it.
std::shared_ptr<storage::MemStorage> CrashedAfterACheckpoint(uint64_t count, IndexMode mode) {
  auto device = storage::MemDevice::Create(Device());
  EXPECT_THAT(device, IsOk());
  if (!device.ok()) return nullptr;
  std::shared_ptr<storage::MemStorage> bytes = (*device)->storage();
  Options options = StoreOptions();
  options.index_mode = mode;
  auto engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams());
  EXPECT_THAT(engine, IsOk());
  if (!engine.ok()) return nullptr;
  WriteAll(**engine, 0, count, 'a');
  EXPECT_THAT((*engine)->Checkpoint(), IsOk());
  WriteAll(**engine, 0, count / 4, 'b');
  EXPECT_THAT((*engine)->Flush(), IsOk());
  return CopyOf(*bytes);
}

// Writes keys [0, count) and overwrites the first quarter, in batches; returns the storage.
std::shared_ptr<storage::MemStorage> StoreWith(uint64_t count, bool checkpoint = false,
                                               Layout layout = Layout::kConventional) {
  auto device = storage::MemDevice::Create(Device(layout));
  EXPECT_THAT(device, IsOk());
  if (!device.ok()) return nullptr;
  std::shared_ptr<storage::MemStorage> bytes = (*device)->storage();
  auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(), StoreSeams(checkpoint));
  EXPECT_THAT(engine, IsOk());
  if (!engine.ok()) return nullptr;
  for (const auto& [end, version] : {std::pair{count, 'a'}, std::pair{count / 4, 'b'}}) {
    const std::string value(kValueBytes, version);
    std::vector<std::string> keys;
    std::vector<WriteOp> ops;
    for (uint64_t i = 0; i < end; i += keys.size()) {
      keys.clear();
      ops.clear();
      for (uint64_t j = i; j < end && keys.size() < 256; ++j) keys.push_back(Key(j));
      for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
      absl::Status written = (*engine)->Write(ops, /*durable=*/false);
      EXPECT_THAT(written, IsOk());
      if (!written.ok()) return nullptr;
    }
  }
  EXPECT_THAT((*engine)->Close(), IsOk());
  return bytes;
}

// Peak memory Open adds on `bytes` in one pass over the log (its tables whole: a budget for
// them that any fits), and the live keys and index bytes it ended with.
uint64_t PeakOfOpen(const std::shared_ptr<storage::MemStorage>& bytes, EngineStats* stats,
                    IndexMode mode = IndexMode::kHash, Layout layout = Layout::kConventional) {
  return PeakBytesAdded([&] {
    auto device = storage::MemDevice::Open(bytes, Device(layout));
    ASSERT_THAT(device, IsOk());
    Options options = StoreOptions();
    options.index_mode = mode;
    options.recovery_memory_bytes = uint64_t{1} << 30;
    auto engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams());
    ASSERT_THAT(engine, IsOk());
    *stats = (*engine)->Stats();
    ASSERT_EQ(stats->recovery_passes, 1u);
    EXPECT_THAT((*engine)->Close(), IsOk());
  });
}

class RecoveryMemoryLayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(RecoveryMemoryLayoutTest, RecoveryNeedsLittleMoreMemoryPerKeyThanTheIndex) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  const Layout layout = GetParam();
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0, /*checkpoint=*/false, layout);
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys, /*checkpoint=*/false, layout);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(full, nullptr);
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    EngineStats stats;
    // Once first, unmeasured: heap fragments left by loading the store (which malloc_trim cannot
    // return) would otherwise be reused by the measured Open and hide part of its memory.
    PeakOfOpen(full, &stats, mode, layout);
    // The same geometry without keys: what Open costs whatever the store holds (queues, buffers,
    // threads; recovery reads every segment either way).
    // Each is the least of three Opens: what else the process does meanwhile (threads starting,
    // their heap arenas) only ever adds to a peak, by up to a megabyte on a loaded machine.
    uint64_t fixed = UINT64_MAX, peak = UINT64_MAX;
    for (int run = 0; run < 3; ++run) {
      fixed = std::min(fixed, PeakOfOpen(empty, &stats, mode, layout));
      ASSERT_EQ(stats.live_keys, 0u);
      peak = std::min(peak, PeakOfOpen(full, &stats, mode, layout));
    }
    ASSERT_EQ(stats.live_keys, kKeys);
    const double per_key = static_cast<double>(peak > fixed ? peak - fixed : 0) / kKeys;
    std::printf("%s %s: open %.1f MiB fixed, %.1f bytes per key of peak memory (index %.1f), "
                "one pass in %.2f s\n",
                LayoutName(layout), mode == IndexMode::kHash ? "hash" : "ordered",
                fixed / 1048576.0, per_key,
                stats.index_bytes_per_key, stats.recovery_seconds);
    // The index takes about 9 bytes per key (hash) or 75 (ordered). Recovery keeps a 24-byte entry per key in
    // sub-tables that grow one at a time (kv/newest_records.h), 70-88% full (27-34 bytes per key),
    // beside the index (hash mode builds it one shard at a time, freeing that shard's table after
    // it; ordered mode as it reads): at most the index and 34 bytes per key at the peak, plus
    // what the allocator rounds. (Hash mode with a
    // flat_hash_map per shard of the 128-bit hash to a 16-byte record, 32-byte slots in a table
    // just doubled, was at 89 bytes per key; with a std::string per key in one table for all
    // shards and the index built beside it, 191 bytes per key at 200,000 keys. Ordered mode with
    // a map of each key's bytes and newest record, the index built after it: 290 bytes per key
    // at 1M keys, index 75.)
    // Ordered mode's index also grows its hash table while recovery reads, the old and the new
    // slot arrays side by side for a moment: up to 10 more.
    EXPECT_LE(per_key, stats.index_bytes_per_key + (mode == IndexMode::kHash ? 38.0 : 48.0));
    // Recovery's own table is part of that peak, and says so.
    EXPECT_GT(stats.recovery_table_bytes, 0u);
    EXPECT_LE(stats.recovery_table_bytes, peak - fixed);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RecoveryMemoryLayoutTest,
                         ::testing::Values(Layout::kConventional, Layout::kZoned),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

// Stats say how large recovery's table of newest records grew for one shard: 24 bytes per key of
// the shard at 50-100% load (kv/newest_records.h), in both modes (ordered mode's index holds the
// keys, and it is built as recovery reads).
TEST(RecoveryMemoryTest, StatsGiveRecoverysLargestTable) {
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys);
  ASSERT_NE(full, nullptr);
  const uint64_t keys_per_shard = kKeys / StoreOptions().shard_count;
  EngineStats stats;
  PeakOfOpen(full, &stats, IndexMode::kHash);
  ASSERT_EQ(stats.live_keys, kKeys);
  EXPECT_GE(stats.recovery_table_bytes, 24 * keys_per_shard * 9 / 10);  // shards are not equal
  EXPECT_LE(stats.recovery_table_bytes, 2 * 24 * keys_per_shard * 11 / 10);
  const uint64_t hashed = stats.recovery_table_bytes;
  PeakOfOpen(full, &stats, IndexMode::kOrdered);
  ASSERT_EQ(stats.live_keys, kKeys);
  EXPECT_EQ(stats.recovery_table_bytes, hashed);  // the same keys' sequences, no key bytes
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0);
  ASSERT_NE(empty, nullptr);
  PeakOfOpen(empty, &stats, IndexMode::kHash);
  EXPECT_LT(stats.recovery_table_bytes, 4096u);
}

// Opens `bytes` from its clean-close checkpoint: how far resident memory rose at the peak of
// Open, and how much the opened engine still holds (its indexes and segment table).
struct OpenMemory {
  uint64_t peak = 0, kept = 0;
};
OpenMemory OpenMeasured(const std::shared_ptr<storage::MemStorage>& bytes,
                        const Options& options, EngineStats* stats,
                        const EngineSeams& seams = StoreSeams()) {
  OpenMemory memory;
  malloc_trim(0);
  EXPECT_TRUE(ResetPeak());
  const uint64_t before = StatusBytes("VmRSS");
  auto device = storage::MemDevice::Open(bytes, Device());
  EXPECT_THAT(device, IsOk());
  if (!device.ok()) return memory;
  auto engine = Engine::OpenOnDevice(std::move(*device), options, seams);
  EXPECT_THAT(engine, IsOk());
  if (!engine.ok()) return memory;
  const uint64_t peak = StatusBytes("VmHWM"), after = StatusBytes("VmRSS");
  memory.peak = peak > before ? peak - before : 0;
  memory.kept = after > before ? after - before : 0;
  *stats = (*engine)->Stats();
  // With a checkpoint at Close, writes it again for the next Open.
  EXPECT_THAT((*engine)->Close(), IsOk());
  return memory;
}
// What the keys cost an Open with `options`: its peak and what it keeps of `full`, less those
// of `empty`, each the least of three Opens (after one unmeasured Open of `full`, as above).
// `stats` are the last Open of `full`'s.
struct KeysCost {
  double peak = 0, kept = 0;
};
KeysCost WhatTheKeysCost(const std::shared_ptr<storage::MemStorage>& empty,
                         const std::shared_ptr<storage::MemStorage>& full,
                         const Options& options, EngineStats* stats,
                         const EngineSeams& seams = StoreSeams()) {
  OpenMeasured(full, options, stats, seams);
  OpenMemory fixed{UINT64_MAX, UINT64_MAX}, keys{UINT64_MAX, UINT64_MAX};
  for (int run = 0; run < 3; ++run) {
    const OpenMemory e = OpenMeasured(empty, options, stats, seams);
    fixed = {std::min(fixed.peak, e.peak), std::min(fixed.kept, e.kept)};
    const OpenMemory f = OpenMeasured(full, options, stats, seams);
    keys = {std::min(keys.peak, f.peak), std::min(keys.kept, f.kept)};
  }
  return {static_cast<double>(keys.peak > fixed.peak ? keys.peak - fixed.peak : 0),
          static_cast<double>(keys.kept > fixed.kept ? keys.kept - fixed.kept : 0)};
}

// An Open from the checkpoint holds no table of every key beside what it builds: it reads the
// checkpoint a chunk at a time straight into the indexes and the segment table, so its peak is
// at most a tenth above what the opened engine keeps (issue: peak memory of Open at most the
// index plus 10%).
TEST(RecoveryMemoryTest, AnOpenFromTheCheckpointPeaksLittleAboveWhatItBuilds) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0, /*checkpoint=*/true);
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys, /*checkpoint=*/true);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(full, nullptr);
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    Options options = StoreOptions();
    options.index_mode = mode;
    EngineStats stats;
    const KeysCost cost =
        WhatTheKeysCost(empty, full, options, &stats, StoreSeams(/*checkpoint=*/true));
    ASSERT_EQ(stats.recovery_start, RecoveryStart::kCleanClose);
    // (The checkpoint keeps the index as it was: a few blind overwrites' stale entries too.)
    ASSERT_GE(stats.live_keys + stats.stale_entries, kKeys);
    std::printf("%s: open from the checkpoint: %.1f bytes per key at the peak, %.1f kept "
                "(index %.1f)\n",
                mode == IndexMode::kHash ? "hash" : "ordered", cost.peak / kKeys,
                cost.kept / kKeys, stats.index_bytes_per_key);
    EXPECT_GE(cost.kept, static_cast<double>(stats.index_bytes));
    EXPECT_LE(cost.peak, cost.kept * 1.10);
  }
}

// After a crash there is no checkpoint: recovery reads the log and keeps the newest record of
// every key beside the index (index + 38 bytes a key above). Under a budget for those tables
// (Options::recovery_memory_bytes) it reads the log in passes, and its peak is at most a tenth
// above what the opened engine keeps (issue: peak memory of Open at most the index plus 10%),
// the price being a read of the log per pass.
TEST(RecoveryMemoryTest, AnOpenFromTheLogWithinATableBudgetPeaksLittleAboveWhatItBuilds) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0);
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(full, nullptr);
  Options options = StoreOptions();
  options.index_mode = IndexMode::kHash;
  // A byte a key: a twentieth of what the engine keeps per key.
  options.recovery_memory_bytes = kKeys;
  EngineStats stats;
  const KeysCost cost = WhatTheKeysCost(empty, full, options, &stats);
  ASSERT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
  ASSERT_EQ(stats.live_keys, kKeys);
  std::printf("hash: open from the log within %llu bytes of tables: %u passes, %.1f bytes per "
              "key at the peak, %.1f kept (index %.1f)\n",
              static_cast<unsigned long long>(options.recovery_memory_bytes),
              stats.recovery_passes, cost.peak / kKeys, cost.kept / kKeys,
              stats.index_bytes_per_key);
  EXPECT_GT(stats.recovery_passes, 1u);
  EXPECT_LE(stats.recovery_table_bytes * options.shard_count, options.recovery_memory_bytes);
  EXPECT_GE(cost.kept, static_cast<double>(stats.index_bytes));
  EXPECT_LE(cost.peak, cost.kept * 1.10);
}

// A store with no checkpoint to start from (closed without one, cut before the engine wrote its
// first while running, or whose base was set aside) is recovered from the log, whose every key
// the tables hold: each pass more reads the whole log again. By default (no
// Options::recovery_memory_bytes) the tables may take what the process's memory limits leave,
// so such an Open is one pass where memory allows, and peaks above what the opened engine keeps
// by its tables alone. (Before, the default budget was the share of an empty index, 256 KiB:
// a log of millions of keys was read up to 64 times.)
TEST(RecoveryMemoryTest, AnOpenFromTheLogWithNoCheckpointIsOnePassWhereMemoryAllows) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0);
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(full, nullptr);
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    Options options = StoreOptions();
    options.index_mode = mode;
    EngineStats stats;
    const KeysCost cost = WhatTheKeysCost(empty, full, options, &stats);
    ASSERT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
    ASSERT_NE(stats.recovery_start, RecoveryStart::kBaseCheckpoint);
    ASSERT_EQ(stats.live_keys, kKeys);
    const double tables = static_cast<double>(stats.recovery_table_bytes) * options.shard_count;
    std::printf("%s: open from the log, no checkpoint, default budget: %u passes in %.2f s, "
                "%.1f bytes per key at the peak, %.1f kept (index %.1f), tables %.1f\n",
                mode == IndexMode::kHash ? "hash" : "ordered", stats.recovery_passes,
                stats.recovery_seconds, cost.peak / kKeys, cost.kept / kKeys,
                stats.index_bytes_per_key, tables / kKeys);
    EXPECT_EQ(stats.recovery_passes, 1u);
    EXPECT_GE(cost.kept, static_cast<double>(stats.index_bytes));
    EXPECT_LE(cost.peak, cost.kept * 1.10 + tables);
  }
}

// The process may take only so much more memory (a memory cgroup's limit, which kills rather
// than refuses; EngineSeams::memory_headroom_bytes stands for it here): an Open from the log
// keeps its tables, the index it builds and the segments' key filters together within it,
// reading the log in more passes where the tables would not fit beside the rest. (Before, the
// tables alone took up to half of it, whatever the index and filters needed: the 10M-key crash
// Open of bench/crash_open.sh was killed under a 200 MB cgroup.)
TEST(RecoveryMemoryTest, AnOpenFromTheLogKeepsWithinTheMemoryTheProcessMayTake) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  std::shared_ptr<storage::MemStorage> empty = StoreWith(0);
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(full, nullptr);
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    Options options = StoreOptions();
    options.index_mode = mode;
    EngineStats stats;
    // What the opened engine keeps of the keys (the index and the key filters), unbounded.
    const KeysCost unbounded = WhatTheKeysCost(empty, full, options, &stats);
    ASSERT_EQ(stats.recovery_passes, 1u);
    // Room for that and half of what one pass takes beside it at its peak.
    const uint64_t headroom =
        static_cast<uint64_t>(unbounded.kept + (unbounded.peak - unbounded.kept) / 2);
    const KeysCost cost =
        WhatTheKeysCost(empty, full, options, &stats, StoreSeams(/*checkpoint=*/false, headroom));
    ASSERT_EQ(stats.live_keys, kKeys);
    std::printf("%s: open from the log within %.1f MiB: %u passes, peak %.1f MiB (one pass: "
                "%.1f), kept %.1f\n",
                mode == IndexMode::kHash ? "hash" : "ordered", headroom / 1048576.0,
                stats.recovery_passes, cost.peak / 1048576.0, unbounded.peak / 1048576.0,
                cost.kept / 1048576.0);
    EXPECT_GT(unbounded.peak, static_cast<double>(headroom));
    EXPECT_GT(stats.recovery_passes, 1u);
    EXPECT_LE(cost.peak, static_cast<double>(headroom));
  }
}

// Where the index and the key filters alone would not fit in what the process may take, the
// Open fails at once saying so, and the store opens as before once there is memory.
TEST(RecoveryMemoryTest, AnOpenThatCannotFitItsIndexFailsSayingSo) {
  std::shared_ptr<storage::MemStorage> full = StoreWith(kKeys);
  ASSERT_NE(full, nullptr);
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    Options options = StoreOptions();
    options.index_mode = mode;
    // The hash index alone takes about 9 bytes a key.
    auto device = storage::MemDevice::Open(CopyOf(*full), Device());
    ASSERT_THAT(device, IsOk());
    auto refused = Engine::OpenOnDevice(std::move(*device), options,
                                        StoreSeams(/*checkpoint=*/false, kKeys * 6));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(refused.status().message()),
                ::testing::HasSubstr("give it more memory to open this store"));
    device = storage::MemDevice::Open(CopyOf(*full), Device());
    ASSERT_THAT(device, IsOk());
    auto engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams());
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().live_keys, kKeys);
    EXPECT_THAT((*engine)->Close(), IsOk());
  }
}

// After a crash the map names the checkpoint the engine wrote while running: recovery reads it
// and the log written since, whose tables it keeps within a tenth of the index it loaded, by
// default (no Options::recovery_memory_bytes): its peak is at most a tenth above what the opened
// engine keeps (issue: peak memory of Open at most the index plus 10%).
TEST(RecoveryMemoryTest, AnOpenAfterACrashPeaksLittleAboveWhatItBuilds) {
  if (const char* why = WhyPeaksCannotBeMeasured()) GTEST_SKIP() << why;
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    const std::shared_ptr<storage::MemStorage> empty = CrashedAfterACheckpoint(0, mode);
    const std::shared_ptr<storage::MemStorage> full = CrashedAfterACheckpoint(kKeys, mode);
    ASSERT_NE(empty, nullptr);
    ASSERT_NE(full, nullptr);
    Options options = StoreOptions();
    options.index_mode = mode;
    EngineStats stats;
    // Each Open of a copy as the crash left it (an Open and its Close change the store); the
    // least of three, less an empty store's.
    OpenMeasured(CopyOf(*full), options, &stats);
    OpenMemory fixed{UINT64_MAX, UINT64_MAX}, keys{UINT64_MAX, UINT64_MAX};
    for (int run = 0; run < 3; ++run) {
      const OpenMemory e = OpenMeasured(CopyOf(*empty), options, &stats);
      fixed = {std::min(fixed.peak, e.peak), std::min(fixed.kept, e.kept)};
      const OpenMemory f = OpenMeasured(CopyOf(*full), options, &stats);
      keys = {std::min(keys.peak, f.peak), std::min(keys.kept, f.kept)};
    }
    const double peak = static_cast<double>(keys.peak > fixed.peak ? keys.peak - fixed.peak : 0);
    const double kept = static_cast<double>(keys.kept > fixed.kept ? keys.kept - fixed.kept : 0);
    ASSERT_EQ(stats.recovery_start, RecoveryStart::kBaseCheckpoint)
        << stats.recovery_checkpoint_unused_why;
    // (Overwrites over the base are taken as blind ones: a key whose tag another key's entry
    // shares counts that one as stale.)
    ASSERT_GE(stats.live_keys + stats.stale_entries, kKeys);
    std::printf("%s: open after a crash from the checkpoint and the log after it: %u passes, "
                "%.1f bytes per key at the peak, %.1f kept (index %.1f)\n",
                mode == IndexMode::kHash ? "hash" : "ordered", stats.recovery_passes,
                peak / kKeys, kept / kKeys, stats.index_bytes_per_key);
    EXPECT_GE(kept, static_cast<double>(stats.index_bytes));
    EXPECT_LE(peak, kept * 1.10);
  }
}

}  // namespace
}  // namespace nvkv::kv
