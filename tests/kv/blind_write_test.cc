// Blind overwrites in hash mode (kv/README.md "Blind overwrites", key_entries.h): an overwrite
// of a key that is neither cached nor on a page in memory reads nothing and leaves the key's
// older entry stale. Every reader of the index must still see only the current record: Get,
// MultiGet, deletes (which must erase the stale entries too, or the old value would come back),
// compaction (which settles stale entries and must never copy a stale record over a current
// one), Check and ForEachLive, and recovery. On a file and on a zoned namespace.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "tests/kv/engine_ops.h"
#include "kv/page_format.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

// No cache, so that no overwrite finds its key's place there.
Options Store(uint64_t capacity_bytes = 64 << 20) {
  Options options;
  options.capacity_bytes = capacity_bytes;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  options.index_mode = IndexMode::kHash;
  options.cache_bytes = 0;
  return options;
}

std::string Key(int i) { return absl::StrCat("key", i); }
std::string Value(int i, int version) {
  return absl::StrCat("value-", i, "-v", version, std::string(100 + i % 50, 'x'));
}

class BlindWriteTest : public ::testing::TestWithParam<Layout> {
 protected:
  std::unique_ptr<Engine> Open(const Options& options = Store()) {
    auto engine = store_.Open(options);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }
  // Writes version 0 of keys [0, n) and reopens, so that no page of them is in memory.
  std::unique_ptr<Engine> Loaded(int n, const Options& options = Store()) {
    auto engine = Open(options);
    if (engine == nullptr) return nullptr;
    for (int i = 0; i < n; ++i) EXPECT_THAT(Put(*engine, Key(i), Value(i, 0), false), IsOk());
    EXPECT_THAT(engine->Close(), IsOk());
    engine.reset();
    return Open(options);
  }
  void ExpectValues(Engine& engine, const std::map<int, int>& versions) {
    for (const auto& [i, version] : versions) {
      absl::StatusOr<std::string> value = engine.Get(Key(i));
      if (version < 0) {
        EXPECT_THAT(value, StatusIs(absl::StatusCode::kNotFound)) << Key(i);
      } else {
        ASSERT_THAT(value, IsOk()) << Key(i);
        EXPECT_EQ(*value, Value(i, version)) << Key(i);
      }
    }
  }
  void ExpectCheckClean(Engine& engine) {
    absl::StatusOr<CheckReport> report = engine.Check();
    ASSERT_THAT(report, IsOk());
    for (const std::string& problem : report->problems) ADD_FAILURE() << problem;
  }
  // Values and Check now, and values again after a clean reopen (recovery rebuilds one entry
  // per key). Leaves `engine` open on the reopened store.
  void ExpectValuesAcrossReopen(std::unique_ptr<Engine>& engine, const Options& options,
                                const std::map<int, int>& versions) {
    ExpectValues(*engine, versions);
    ExpectCheckClean(*engine);
    ASSERT_THAT(engine->Close(), IsOk());
    engine = Open(options);
    ASSERT_NE(engine, nullptr);
    ExpectValues(*engine, versions);
  }
  nvkv::testing::TempDir dir_;
  TestStore store_{GetParam(), dir_.File("store")};
};

// Fails before blind writes: every one of these overwrites read its key's page first.
TEST_P(BlindWriteTest, UniformOverwritesOfUncachedKeysReadNoPage) {
  constexpr int kKeys = 2000;
  auto engine = Loaded(kKeys);
  ASSERT_NE(engine, nullptr);
  std::vector<int> order(kKeys);
  for (int i = 0; i < kKeys; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const EngineStats before = engine->Stats();
  for (int i : order) ASSERT_THAT(Put(*engine, Key(i), Value(i, 1)), IsOk());
  const EngineStats after = engine->Stats();
  EXPECT_LE(after.verify_reads - before.verify_reads, kKeys / 20);
  EXPECT_LE(after.page_reads - before.page_reads, kKeys / 20);
  EXPECT_GE(after.blind_writes - before.blind_writes, kKeys * 9 / 10);
  std::map<int, int> versions;
  for (int i = 0; i < kKeys; ++i) versions[i] = 1;
  ExpectValues(*engine, versions);
}

// The pages a delete reads to find its key are the writes' (key_check_page_reads), apart from
// the gets': a benchmark's pages per get leaves them out (they were counted as the gets' once).
TEST_P(BlindWriteTest, KeyChecksPageReadsAreCountedApartFromTheGets) {
  constexpr int kKeys = 200;
  auto engine = Loaded(kKeys);
  ASSERT_NE(engine, nullptr);
  const EngineStats before = engine->Stats();
  for (int i = 0; i < kKeys; i += 2) ASSERT_THAT(Delete(*engine, Key(i)), IsOk());
  const EngineStats deleted = engine->Stats();
  const uint64_t checks = deleted.key_check_page_reads - before.key_check_page_reads;
  EXPECT_EQ(deleted.verify_reads - before.verify_reads, uint64_t{kKeys / 2});
  EXPECT_GE(checks, uint64_t{kKeys / 2});  // each delete read its key's page at least
  EXPECT_EQ(deleted.page_reads - before.page_reads, checks);
  for (int i = 1; i < kKeys; i += 2) ASSERT_THAT(engine->Get(Key(i)), IsOk());
  const EngineStats read = engine->Stats();
  EXPECT_EQ(read.key_check_page_reads, deleted.key_check_page_reads);
  EXPECT_GE(read.page_reads - deleted.page_reads, uint64_t{kKeys / 2});
}

TEST_P(BlindWriteTest, GetsSeeTheNewestOfManyBlindOverwrites) {
  constexpr int kKeys = 300;
  auto engine = Loaded(kKeys);
  ASSERT_NE(engine, nullptr);
  std::map<int, int> versions;
  for (int version = 1; version <= 4; ++version) {
    for (int i = 0; i < kKeys; i += version) {
      ASSERT_THAT(Put(*engine, Key(i), Value(i, version)), IsOk());
      versions[i] = version;
    }
    // Written pages leave memory as the writer finishes them: later overwrites go blind.
    ASSERT_THAT(engine->Flush(), IsOk());
  }
  for (int i = 0; i < kKeys; ++i) versions.emplace(i, 0);
  ExpectValues(*engine, versions);
  EXPECT_GT(engine->Stats().blind_writes, 0u);
  // MultiGet walks the same candidates.
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(Key(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> values;
  engine->MultiGet(views, &values);
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_THAT(values[i], IsOk());
    EXPECT_EQ(*values[i], Value(i, versions[i]));
  }
}

// Fails without the delete erasing the key's stale entries: the older value comes back.
TEST_P(BlindWriteTest, DeleteAfterBlindOverwritesErasesEveryEntryOfTheKey) {
  constexpr int kKeys = 100;
  auto engine = Loaded(kKeys);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < kKeys; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 1)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  for (int i = 0; i < kKeys; i += 2) ASSERT_THAT(Put(*engine, Key(i), Value(i, 2)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  const uint64_t blind = engine->Stats().blind_writes;
  EXPECT_GE(blind, uint64_t{kKeys});
  std::map<int, int> versions;
  for (int i = 0; i < kKeys; ++i) {
    if (i % 3 == 0) {
      ASSERT_THAT(Delete(*engine, Key(i)), IsOk());
      versions[i] = -1;
    } else {
      versions[i] = i % 2 == 0 ? 2 : 1;
    }
  }
  ExpectValuesAcrossReopen(engine, Store(), versions);
  ExpectCheckClean(*engine);
}

TEST_P(BlindWriteTest, CheckAndForEachLiveSeeOnlyCurrentRecords) {
  constexpr int kKeys = 200;
  auto engine = Loaded(kKeys);
  ASSERT_NE(engine, nullptr);
  // Two rounds: a key's stale entries point into the same segment as its current one too.
  for (int version = 1; version <= 2; ++version) {
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_THAT(Put(*engine, Key(i), Value(i, version), false), IsOk());
    }
    ASSERT_THAT(engine->Flush(), IsOk());
  }
  // The old entries are still there, stale.
  EXPECT_EQ(engine->Stats().live_keys, uint64_t{kKeys});
  EXPECT_EQ(engine->Stats().stale_entries, uint64_t{2 * kKeys});
  ExpectCheckClean(*engine);
  std::map<std::string, std::string> seen;
  ASSERT_THAT(engine->ForEachLive([&](std::string_view key, std::string_view value) {
    EXPECT_TRUE(seen.emplace(std::string(key), std::string(value)).second)
        << "visited twice: " << key;
    return absl::OkStatus();
  }),
              IsOk());
  ASSERT_EQ(seen.size(), size_t{kKeys});
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(seen[Key(i)], Value(i, 2));
}

TEST_P(BlindWriteTest, CompactionSettlesStaleEntriesAndCopiesOnlyCurrentRecords) {
  constexpr int kKeys = 400;
  Options options = Store();
  options.background_compaction = false;
  auto engine = Loaded(kKeys, options);
  ASSERT_NE(engine, nullptr);
  std::map<int, int> versions;
  for (int i = 0; i < kKeys; ++i) versions[i] = 0;
  for (int version = 1; version <= 3; ++version) {
    for (int i = version; i < kKeys; i += 2) {
      ASSERT_THAT(Put(*engine, Key(i), Value(i, version)), IsOk());
      versions[i] = version;
    }
    ASSERT_THAT(engine->Flush(), IsOk());
  }
  EXPECT_GT(engine->Stats().stale_entries, 0u);
  ASSERT_THAT(engine->CompactAll(), IsOk());
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.stale_entries_settled, 0u);
  // Every stale entry is gone: one entry per key, and live bytes are the live records'.
  EXPECT_EQ(stats.live_keys, uint64_t{kKeys});
  EXPECT_EQ(stats.stale_entries, 0u);
  uint64_t live_bytes = 0;
  for (const auto& [i, version] : versions) {
    live_bytes += RecordBytes(Key(i).size(), Value(i, version).size());
  }
  EXPECT_EQ(stats.live_bytes, live_bytes);
  ExpectValuesAcrossReopen(engine, options, versions);
  EXPECT_EQ(engine->Stats().live_keys, uint64_t{kKeys});
}

// Blind overwrites leave compaction's space accounting an estimate: the store must still find
// the garbage and never fill up with it.
TEST_P(BlindWriteTest, UniformOverwritesOnASmallStoreNeverFillIt) {
  constexpr int kKeys = 3000;  // ~0.5 MB of records in a 4 MiB store
  const Options options = Store(4 << 20);
  auto engine = Loaded(kKeys, options);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(11);
  std::map<int, int> versions;
  for (int i = 0; i < kKeys; ++i) versions[i] = 0;
  for (int n = 0; n < 60'000; ++n) {
    const int i = static_cast<int>(rng() % kKeys);
    const int version = versions[i] + 1;
    ASSERT_THAT(Put(*engine, Key(i), Value(i, version), /*durable=*/n % 64 == 0), IsOk())
        << "overwrite " << n;
    versions[i] = version;
  }
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.blind_writes, 0u);
  EXPECT_GT(stats.stale_entries_settled, 0u);
  ExpectValuesAcrossReopen(engine, options, versions);
}

INSTANTIATE_TEST_SUITE_P(Layouts, BlindWriteTest,
                         ::testing::Values(Layout::kConventional, Layout::kZoned),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace nvkv::kv
