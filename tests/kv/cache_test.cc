// The engine's record cache (record_cache.h) through the engine: hits read no page, hash-mode
// overwrites of cached keys read nothing, a hit is never stale (overwrites, deletes, batches,
// compaction, reopen), the stats add up, and readers racing writers of the same hot keys never
// see a value older than one they saw before. On a file and on a zoned namespace.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

Options Store(IndexMode mode, uint64_t cache_bytes) {
  Options options;
  options.capacity_bytes = 64 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  options.index_mode = mode;
  options.cache_bytes = cache_bytes;
  return options;
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
}

absl::Status Delete(Engine& engine, std::string_view key) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
}

std::string Key(int i) { return absl::StrCat("key", i); }
std::string Value(int i, int version) { return absl::StrCat("value-", i, "-v", version); }

struct CacheCase {
  IndexMode mode;
  Layout layout;
};

class CacheTest : public ::testing::TestWithParam<CacheCase> {
 protected:
  std::unique_ptr<Engine> Open(uint64_t cache_bytes) {
    auto engine = store_.Open(Store(GetParam().mode, cache_bytes));
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }
  nvkv::testing::TempDir dir_;
  TestStore store_{GetParam().layout, dir_.File("store")};
};

TEST_P(CacheTest, WrittenKeysAreReadFromTheCacheWithoutPageReads) {
  auto engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 200; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 0)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  const EngineStats before = engine->Stats();
  for (int i = 0; i < 200; ++i) ASSERT_EQ(*engine->Get(Key(i)), Value(i, 0));
  const EngineStats after = engine->Stats();
  EXPECT_EQ(after.page_reads, before.page_reads);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 200u);
  EXPECT_EQ(after.cache_entries, 200u);
  EXPECT_GT(after.cache_bytes, 0u);
  EXPECT_LE(after.cache_bytes, after.cache_capacity_bytes);
}

TEST_P(CacheTest, WithoutACacheEveryGetOfAWrittenPageReadsIt) {
  auto engine = Open(0);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 50; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 0)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  // Let the writer hand back every page buffer, so that no page is still in memory.
  engine.reset();
  engine = Open(0);
  ASSERT_NE(engine, nullptr);
  const EngineStats before = engine->Stats();
  for (int i = 0; i < 50; ++i) ASSERT_EQ(*engine->Get(Key(i)), Value(i, 0));
  const EngineStats after = engine->Stats();
  EXPECT_EQ(after.page_reads - before.page_reads, 50u);
  EXPECT_EQ(after.cache_hits, 0u);
  EXPECT_EQ(after.cache_capacity_bytes, 0u);
}

TEST_P(CacheTest, AReadAfterReopenFillsTheCache) {
  {
    auto engine = Open(Options{}.cache_bytes);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 20; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 0)), IsOk());
  }
  auto engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  const uint64_t reads_at_open = engine->Stats().page_reads;
  for (int i = 0; i < 20; ++i) ASSERT_EQ(*engine->Get(Key(i)), Value(i, 0));
  const uint64_t reads_first = engine->Stats().page_reads;
  EXPECT_EQ(reads_first - reads_at_open, 20u);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(*engine->Get(Key(i)), Value(i, 0));
  EXPECT_EQ(engine->Stats().page_reads, reads_first);
}

TEST_P(CacheTest, OverwritesAndDeletesOfCachedKeysReadNoPage) {
  auto engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 100; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 0)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  const EngineStats before = engine->Stats();
  for (int i = 0; i < 100; ++i) {
    ASSERT_THAT(i % 4 == 0 ? Delete(*engine, Key(i)) : Put(*engine, Key(i), Value(i, 1)), IsOk());
  }
  const EngineStats after = engine->Stats();
  EXPECT_EQ(after.verify_reads, before.verify_reads);
  EXPECT_EQ(after.page_reads, before.page_reads);
  for (int i = 0; i < 100; ++i) {
    if (i % 4 == 0) {
      EXPECT_THAT(engine->Get(Key(i)), StatusIs(absl::StatusCode::kNotFound)) << i;
    } else {
      EXPECT_EQ(*engine->Get(Key(i)), Value(i, 1)) << i;
    }
  }
}

TEST_P(CacheTest, HitsFollowBatchesAndCompaction) {
  auto engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 400; ++i) {
    ASSERT_THAT(Put(*engine, Key(i), std::string(600, static_cast<char>('a' + i % 26))), IsOk());
  }
  // A batch overwrites some keys and deletes others.
  std::vector<std::string> keys, values;
  std::vector<WriteOp> ops;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(Key(i));
    values.push_back(Value(i, 1));
  }
  for (int i = 0; i < 20; ++i) ops.push_back(WriteOp{i % 5 == 0, keys[i], values[i]});
  ASSERT_THAT(engine->Write(ops, /*durable=*/true), IsOk());
  // Garbage everywhere, then compaction moves every live record.
  for (int i = 100; i < 400; i += 2) ASSERT_THAT(Delete(*engine, Key(i)), IsOk());
  ASSERT_THAT(engine->CompactAll(), IsOk());
  ASSERT_GT(engine->Stats().segments_cleaned, 0u);
  // Overwrites of cached keys find their moved records through the cache.
  const uint64_t verify_before = engine->Stats().verify_reads;
  for (int i = 101; i < 400; i += 2) ASSERT_THAT(Put(*engine, Key(i), Value(i, 2)), IsOk());
  EXPECT_EQ(engine->Stats().verify_reads, verify_before);
  auto check = [&](Engine& e) {
    for (int i = 0; i < 400; ++i) {
      absl::StatusOr<std::string> got = e.Get(Key(i));
      if (i < 20 && i % 5 == 0) {
        EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound)) << i;
      } else if (i < 20) {
        EXPECT_EQ(*got, Value(i, 1)) << i;
      } else if (i >= 100 && i % 2 == 0) {
        EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound)) << i;
      } else if (i >= 100) {
        EXPECT_EQ(*got, Value(i, 2)) << i;
      } else {
        EXPECT_EQ(*got, std::string(600, static_cast<char>('a' + i % 26))) << i;
      }
    }
  };
  check(*engine);
  engine.reset();
  engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  check(*engine);
}

TEST_P(CacheTest, MultiGetAndGetAsyncServeHitsWithoutPageReads) {
  auto engine = Open(Options{}.cache_bytes);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, 0)), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  const uint64_t reads = engine->Stats().page_reads;
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(Key(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> values;
  engine->MultiGet(views, &values);
  ASSERT_EQ(values.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(*values[i], Value(i, 0));
  bool called = false;
  ASSERT_THAT(engine->GetAsync(Key(3), [&](absl::StatusOr<std::string> value) {
    called = true;
    EXPECT_EQ(*value, Value(3, 0));
  }), IsOk());
  EXPECT_FALSE(called);  // only inside Poll
  ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_TRUE(called);
  EXPECT_EQ(engine->Stats().page_reads, reads);
}

TEST_P(CacheTest, ATinyCacheStaysWithinItsBytesAndStillAnswersRight) {
  const uint64_t capacity = 16 << 10;
  auto engine = Open(capacity);
  ASSERT_NE(engine, nullptr);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 300; ++i) ASSERT_THAT(Put(*engine, Key(i), Value(i, round)), IsOk());
    for (int i = 0; i < 300; ++i) ASSERT_EQ(*engine->Get(Key(i)), Value(i, round)) << i;
  }
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.cache_evictions, 0u);
  EXPECT_LE(stats.cache_bytes, capacity);
  EXPECT_EQ(stats.cache_capacity_bytes, capacity);
}

// Each writer owns some hot keys and writes ever higher versions of them; readers of the same
// keys must never see a key's version go back, and at the end every key reads its last version.
TEST_P(CacheTest, ReadersRacingWritersNeverSeeAnOlderValue) {
  // A cache far smaller than the hot keys' values: writes, reads that fill it, and evictions
  // all race on the same keys.
  auto engine = Open(16 << 10);
  ASSERT_NE(engine, nullptr);
  constexpr int kWriters = 2, kReaders = 2, kKeysPerWriter = 64, kVersions = 60;
  // The version in "value-K-vN" followed by padding, or -1 for anything else.
  auto version_of = [](const std::string& value) {
    const size_t v = value.rfind("-v");
    if (v == std::string::npos) return -1;
    int version = 0;
    size_t i = v + 2;
    for (; i < value.size() && value[i] >= '0' && value[i] <= '9'; ++i) {
      version = version * 10 + (value[i] - '0');
    }
    return i == v + 2 ? -1 : version;
  };
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int version = 0; version < kVersions; ++version) {
        for (int k = 0; k < kKeysPerWriter; ++k) {
          const int key = w * kKeysPerWriter + k;
          const std::string key_bytes = Key(key);
          const std::string value = Value(key, version) + std::string(version % 7 * 50, 'p');
          WriteOp op{false, key_bytes, value};
          if (!engine->Write(std::span<const WriteOp>(&op, 1), version % 3 == 0).ok()) {
            ++failures;
          }
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      std::vector<int> seen(kWriters * kKeysPerWriter, -1);
      while (!done.load()) {
        for (int key = 0; key < kWriters * kKeysPerWriter; ++key) {
          absl::StatusOr<std::string> got = engine->Get(Key(key));
          if (absl::IsNotFound(got.status())) {
            if (seen[key] >= 0) ++failures;  // a key never deleted disappeared
            continue;
          }
          if (!got.ok()) {
            ++failures;
            continue;
          }
          const int version = version_of(*got);
          if (version < 0 || got->compare(0, Value(key, version).size(), Value(key, version)) != 0) {
            ADD_FAILURE() << "key " << key << " read " << got->substr(0, 40);
            ++failures;
            continue;
          }
          if (version < seen[key]) ++failures;
          seen[key] = version;
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(failures.load(), 0);
  for (int key = 0; key < kWriters * kKeysPerWriter; ++key) {
    absl::StatusOr<std::string> got = engine->Get(Key(key));
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->substr(0, Value(key, kVersions - 1).size()), Value(key, kVersions - 1));
  }
}

// A read's completion handled late (GetAsync, then Poll) must not fill the cache from a page that
// was freed and written again since the read began: here compaction moved the key away, its
// segment was freed, and a new write of the key landed on the very page the read had read, so
// that the key's index entry is again the one the read started from.
TEST_P(CacheTest, AReadHandledAfterItsPageWasReusedDoesNotFillTheCache) {
  constexpr uint32_t kPagesPerSegment = 16;
  const storage::MemDeviceOptions mem = GetParam().layout == Layout::kZoned
                                             ? ZonedMemStoreOptions(8, kPagesPerSegment)
                                             : MemStoreOptions(8, kPagesPerSegment);
  absl::StatusOr<std::unique_ptr<storage::MemDevice>> created = storage::MemDevice::Create(mem);
  ASSERT_THAT(created, IsOk());
  const std::shared_ptr<storage::MemStorage> storage = (*created)->storage();
  Options options;
  options.segment_bytes = mem.zones.zoned() ? 0 : kPagesPerSegment * 4096;
  options.shard_count = 1;
  options.page_buffers_per_shard = 16;
  options.index_mode = GetParam().mode;
  options.background_compaction = false;
  const std::string key = "<the-key>";
  // Values of one size (ordered mode's entries hold it), nearly a page each, found in raw bytes.
  const auto value = [](const std::string& tag, int i) {
    std::string v = absl::StrCat("<", tag, "-", 10000 + i, ">");
    v.resize(3900, '.');
    return v;
  };
  const auto page_holds = [&](uint64_t page, const std::string& v) {
    std::vector<uint8_t> bytes(4096);
    storage->Read(page, 1, bytes.data());  // 4 KiB blocks: LBA = page
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())
               .find(v.substr(0, 12)) != std::string_view::npos;
  };
  {
    auto engine = Engine::OpenOnDevice(std::move(*created), options);
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < 3; ++i) ASSERT_THAT(Put(**engine, key, value("old", i)), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  uint64_t page = 0;
  while (page < mem.lba_count && !page_holds(page, value("old", 2))) ++page;
  ASSERT_LT(page, mem.lba_count);
  // Reopened: the cache is empty, so the read goes to the device. The fault device carries a
  // read out when it is queued and completes it at the next Poll.
  absl::StatusOr<std::unique_ptr<storage::Device>> device = storage::MemDevice::Open(storage, mem);
  ASSERT_THAT(device, IsOk());
  auto faulty = storage::FaultDevice::Create(std::move(*device), {});
  ASSERT_THAT(faulty, IsOk());
  auto engine = Engine::OpenOnDevice(std::move(*faulty), options);
  ASSERT_THAT(engine, IsOk());
  std::string read_late;
  ASSERT_THAT((*engine)->GetAsync(key, [&](absl::StatusOr<std::string> got) {
    read_late = got.value_or("?");
  }), IsOk());
  std::string newest;
  for (int i = 0; i < 2000 && (newest.empty() || !page_holds(page, newest)); ++i) {
    if (i % 8 == 0) {
      ASSERT_THAT((*engine)->CompactAll(), IsOk());
    }
    newest = value("new", i);
    ASSERT_THAT(Put(**engine, key, newest), IsOk());
  }
  ASSERT_TRUE(page_holds(page, newest)) << "the key never landed on page " << page << " again";
  ASSERT_THAT((*engine)->Poll(1), IsOk());
  EXPECT_EQ(read_late.substr(0, 12), value("old", 2).substr(0, 12));
  absl::StatusOr<std::string> got = (*engine)->Get(key);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->substr(0, 12), newest.substr(0, 12)) << "the cache took the late read's value";
}

INSTANTIATE_TEST_SUITE_P(Modes, CacheTest,
                         ::testing::Values(CacheCase{IndexMode::kHash, Layout::kConventional},
                                           CacheCase{IndexMode::kOrdered, Layout::kConventional},
                                           CacheCase{IndexMode::kHash, Layout::kZoned},
                                           CacheCase{IndexMode::kOrdered, Layout::kZoned}),
                         [](const auto& info) {
                           return std::string(info.param.layout == Layout::kZoned ? "Zoned" : "") +
                                  (info.param.mode == IndexMode::kHash ? "Hash" : "Ordered");
                         });

}  // namespace
}  // namespace nvkv::kv
