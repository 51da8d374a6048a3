// The engine through its interface on a file store and on a zoned namespace: basic operations,
// durability across reopen, batches, large values, limits, and the std::map model over long
// random sequences.
#include "kv/engine.h"
#include "tests/kv/engine_ops.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

Options SmallStore(IndexMode mode = IndexMode::kHash) {
  Options options;
  options.capacity_bytes = 64 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  options.index_mode = mode;
  return options;
}

// A mode of the engine tests: the index, the record cache (the default, a tiny one that evicts
// constantly and caches only small values, or none), and the layout.
struct EngineCase {
  IndexMode mode;
  uint64_t cache_bytes;
  Layout layout;
  const char* name;
};

Options SmallStore(const EngineCase& engine_case) {
  Options options = SmallStore(engine_case.mode);
  options.cache_bytes = engine_case.cache_bytes;
  return options;
}

class EngineTest : public ::testing::TestWithParam<EngineCase> {
 protected:
  std::unique_ptr<Engine> OpenStore() {
    auto engine = OpenStore(SmallStore(GetParam()));
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  absl::StatusOr<std::unique_ptr<Engine>> OpenStore(const Options& options) {
    return store_.Open(options);
  }

  nvkv::testing::TempDir dir_;
  TestStore store_{GetParam().layout, dir_.File("store")};
};

TEST_P(EngineTest, PutGetDelete) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("a"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(Put(*engine, "a", "1"), IsOk());
  ASSERT_THAT(Put(*engine, "b", "2"), IsOk());
  EXPECT_EQ(*engine->Get("a"), "1");
  ASSERT_THAT(Put(*engine, "a", "3"), IsOk());
  EXPECT_EQ(*engine->Get("a"), "3");
  ASSERT_THAT(Delete(*engine, "a"), IsOk());
  EXPECT_THAT(engine->Get("a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(*engine->Get("b"), "2");
  ASSERT_THAT(Delete(*engine, "never-there"), IsOk());
  EXPECT_EQ(engine->Stats().live_keys, 1u);
}

TEST_P(EngineTest, DurableWritesSurviveReopen) {
  {
    auto engine = OpenStore();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 500; ++i) {
      ASSERT_THAT(Put(*engine, "key" + std::to_string(i), "value" + std::to_string(i)), IsOk());
    }
    for (int i = 0; i < 500; i += 3) ASSERT_THAT(Delete(*engine, "key" + std::to_string(i)), IsOk());
    ASSERT_THAT(Put(*engine, "key1", "changed"), IsOk());
  }
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 500; ++i) {
    auto value = engine->Get("key" + std::to_string(i));
    if (i % 3 == 0) {
      EXPECT_THAT(value, StatusIs(absl::StatusCode::kNotFound)) << i;
    } else if (i == 1) {
      EXPECT_EQ(*value, "changed");
    } else {
      ASSERT_THAT(value, IsOk()) << i;
      EXPECT_EQ(*value, "value" + std::to_string(i));
    }
  }
  EXPECT_EQ(engine->Stats().live_keys, 333u);
}

TEST_P(EngineTest, NonDurableWritesAreDurableAfterFlush) {
  {
    auto engine = OpenStore();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 1000; ++i) {
      ASSERT_THAT(Put(*engine, "k" + std::to_string(i), std::string(100, 'x'), false), IsOk());
    }
    EXPECT_EQ(*engine->Get("k999"), std::string(100, 'x'));  // visible before it is written
    ASSERT_THAT(engine->Flush(), IsOk());
  }
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().live_keys, 1000u);
}

TEST_P(EngineTest, BatchIsAppliedWhole) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(Put(*engine, "gone", "x"), IsOk());
  std::vector<WriteOp> ops;
  std::vector<std::string> keys, values;  // the ops only view these
  for (int i = 0; i < 50; ++i) {
    keys.push_back("batch" + std::to_string(i));
    values.push_back(keys.back() + "-value");
  }
  for (int i = 0; i < 50; ++i) ops.push_back(WriteOp{false, keys[i], values[i]});
  ops.push_back(WriteOp{true, "gone", {}});
  ops.push_back(WriteOp{false, "batch0", "last-wins"});
  ASSERT_THAT(engine->Write(ops, true), IsOk());
  engine.reset();
  engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(*engine->Get("batch0"), "last-wins");
  for (size_t i = 1; i < keys.size(); ++i) EXPECT_EQ(*engine->Get(keys[i]), values[i]);
  EXPECT_THAT(engine->Get("gone"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(EngineTest, LargeValuesRoundTrip) {
  std::string big;
  {
    auto engine = OpenStore();
    ASSERT_NE(engine, nullptr);
    big.resize(engine->max_value_bytes());  // 16 pages with this store's geometry
    std::mt19937 rng(3);
    for (char& c : big) c = static_cast<char>(rng());
    ASSERT_THAT(Put(*engine, "big", big), IsOk());
    ASSERT_THAT(Put(*engine, "small", "s"), IsOk());
    EXPECT_EQ(*engine->Get("big"), big);
  }
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(*engine->Get("big"), big);
  EXPECT_EQ(*engine->Get("small"), "s");
}

TEST_P(EngineTest, LimitsAreEnforced) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(Put(*engine, "", "v"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Put(*engine, std::string(1025, 'k'), "v"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Put(*engine, "k", std::string(engine->max_value_bytes() + 1, 'v')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Put(*engine, std::string(1024, 'k'), "v"), IsOk());
}

TEST_P(EngineTest, MultiGetAndAsync) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_THAT(Put(*engine, "m" + std::to_string(i), std::to_string(i * i), false), IsOk());
  }
  ASSERT_THAT(engine->Flush(), IsOk());
  std::vector<std::string> keys;
  for (int i = 0; i < 210; ++i) keys.push_back("m" + std::to_string(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> values;
  engine->MultiGet(views, &values);
  ASSERT_EQ(values.size(), 210u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(*values[i], std::to_string(i * i));
  for (int i = 200; i < 210; ++i) EXPECT_THAT(values[i], StatusIs(absl::StatusCode::kNotFound));

  int done = 0;
  for (int i = 0; i < 40; ++i) {
    ASSERT_THAT(engine->GetAsync(keys[i], [&done, i](absl::StatusOr<std::string> v) {
      EXPECT_EQ(*v, std::to_string(i * i));
      ++done;
    }), IsOk());
  }
  EXPECT_EQ(done, 0);  // callbacks only run inside Poll
  while (engine->pending_reads() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_EQ(done, 40);
}

// More large values in flight at once than a read queue has chunk buffers (two): the reads
// beyond wait for a chunk rather than fail.
TEST_P(EngineTest, ManyLargeValuesReadAtOnce) {
  std::vector<std::string> keys, values;
  {
    auto engine = OpenStore();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 24; ++i) {
      keys.push_back("large" + std::to_string(i));
      values.push_back(std::string(9000 + i * 1000, static_cast<char>('a' + i)));
      ASSERT_THAT(Put(*engine, keys.back(), values.back(), false), IsOk());
    }
  }
  auto engine = OpenStore();  // every read goes to the device
  ASSERT_NE(engine, nullptr);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> got;
  engine->MultiGet(views, &got);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_THAT(got[i], IsOk()) << keys[i];
    EXPECT_EQ(*got[i], values[i]) << keys[i];
  }
  int done = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_THAT(engine->GetAsync(keys[i], [&done, &values, i](absl::StatusOr<std::string> v) {
      EXPECT_THAT(v, IsOk()) << i;
      if (v.ok()) {
        EXPECT_EQ(*v, values[i]) << i;
      }
      ++done;
    }), IsOk());
  }
  while (engine->pending_reads() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_EQ(done, static_cast<int>(keys.size()));
}

// CompactAll from this thread, then background cleaning on the compaction thread, then CompactAll
// again: both use the compaction queue, whose SINGLE_ISSUER ring takes one issuing thread.
TEST_P(EngineTest, CompactAllAndBackgroundCleaningTakeTurns) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  const uint64_t capacity = engine->Stats().capacity_bytes;
  std::map<std::string, std::string> model;
  auto overwrite = [&](int round) {
    for (int k = 0; k < 32; ++k) {
      const std::string key = "c" + std::to_string(k);
      model[key] = std::string(6000, static_cast<char>('a' + (round + k) % 26));
      ASSERT_THAT(Put(*engine, key, model[key], false), IsOk()) << "round " << round;
    }
  };
  ASSERT_NO_FATAL_FAILURE(overwrite(0));
  ASSERT_NO_FATAL_FAILURE(overwrite(1));
  ASSERT_THAT(engine->CompactAll(), IsOk());
  const uint64_t cleaned = engine->Stats().segments_cleaned;
  EXPECT_GT(cleaned, 0u);
  // Three times the capacity: without background cleaning the store would fill.
  for (int round = 2; engine->Stats().segments_cleaned == cleaned; ++round) {
    ASSERT_LT(uint64_t(round) * 32 * 6000, 3 * capacity) << "no background cleaning";
    ASSERT_NO_FATAL_FAILURE(overwrite(round));
  }
  ASSERT_THAT(engine->CompactAll(), IsOk());
  for (const auto& [key, value] : model) EXPECT_EQ(*engine->Get(key), value) << key;
}

// db.h promises async callbacks run inside Poll: not inside a Put that checks a key's page, nor
// inside a synchronous Get, although both reap the same per-thread queue.
TEST_P(EngineTest, AsyncCallbacksRunOnlyInsidePoll) {
  {
    auto engine = OpenStore();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 64; ++i) {
      ASSERT_THAT(Put(*engine, "p" + std::to_string(i), std::to_string(i), false), IsOk());
    }
  }
  auto engine = OpenStore();  // every read goes to the device
  ASSERT_NE(engine, nullptr);
  int done = 0;
  for (int i = 0; i < 32; ++i) {
    ASSERT_THAT(engine->GetAsync("p" + std::to_string(i),
                                 [&done](absl::StatusOr<std::string> v) {
                                   EXPECT_THAT(v, IsOk());
                                   ++done;
                                 }),
                IsOk());
  }
  // An overwrite (hash mode reads the key's page first) and synchronous reads.
  ASSERT_THAT(Put(*engine, "p40", "new", true), IsOk());
  EXPECT_EQ(*engine->Get("p41"), "41");
  std::vector<std::string_view> keys = {"p42", "p43"};
  std::vector<absl::StatusOr<std::string>> values;
  engine->MultiGet(keys, &values);
  EXPECT_EQ(*values[1], "43");
  EXPECT_EQ(done, 0) << "async callbacks ran outside Poll";
  while (engine->pending_reads() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_EQ(done, 32);
}

// Of a file (a namespace's node is locked the same way: engine_device_test).
TEST_P(EngineTest, SecondOpenIsRefused) {
  if (GetParam().layout == Layout::kZoned) GTEST_SKIP() << "a memory device has no lock";
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(Engine::Open(dir_.File("store"), SmallStore(GetParam())),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use"));
}

TEST_P(EngineTest, ClosedStoreRefusesCalls) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(engine->Close(), IsOk());
  EXPECT_THAT(Put(*engine, "a", "b"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(engine->Get("a"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_P(EngineTest, MatchesMapModelAcrossReopens) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::map<std::string, std::string> model;
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  for (int step = 0; step < 2500; ++step) {
    const std::string key = "k" + std::to_string(rng() % 300);
    const int action = rng() % 100;
    if (action < 55) {
      std::string value(rng() % 300, static_cast<char>('a' + rng() % 26));
      if (rng() % 50 == 0) value.assign(5000 + rng() % 20000, 'L');  // large
      ASSERT_THAT(Put(*engine, key, value, rng() % 3 == 0), IsOk());
      model[key] = value;
    } else if (action < 70) {
      ASSERT_THAT(Delete(*engine, key), IsOk());
      model.erase(key);
    } else if (action < 75) {
      std::vector<std::string> keys;
      std::vector<std::string> values;
      std::vector<WriteOp> ops;
      for (int i = 0; i < 5; ++i) {
        keys.push_back("k" + std::to_string(rng() % 300));
        values.push_back(std::string(rng() % 100, 'b'));
      }
      for (int i = 0; i < 5; ++i) {
        const bool del = rng() % 4 == 0;
        ops.push_back(WriteOp{del, keys[i], values[i]});
      }
      ASSERT_THAT(engine->Write(ops, true), IsOk());
      for (const WriteOp& op : ops) {
        if (op.is_delete) model.erase(std::string(op.key));
        else model[std::string(op.key)] = std::string(op.value);
      }
    } else if (action < 98) {
      auto value = engine->Get(key);
      auto it = model.find(key);
      if (it == model.end()) {
        ASSERT_THAT(value, StatusIs(absl::StatusCode::kNotFound)) << "step " << step << " " << key;
      } else {
        ASSERT_THAT(value, IsOk()) << "step " << step << " " << key;
        ASSERT_EQ(*value, it->second) << "step " << step << " " << key;
      }
    } else {
      ASSERT_THAT(engine->Flush(), IsOk());
      engine.reset();
      engine = OpenStore();
      ASSERT_NE(engine, nullptr);
    }
  }
  ASSERT_THAT(engine->Flush(), IsOk());
  engine.reset();
  engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  for (const auto& [key, value] : model) {
    auto got = engine->Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    EXPECT_EQ(*got, value) << key;
  }
  EXPECT_EQ(engine->Stats().live_keys, model.size());
}

// A batch goes to the log head of its lowest shard, so records of keys of other shards sit in
// that head's page while it is in memory. Reads and overwrites of those keys must find them
// there (and not read the page's old contents from the device).
TEST_P(EngineTest, KeysOfABatchAreReadableBeforeItsPageIsWritten) {
  Options options = SmallStore(GetParam());
  options.shard_count = 8;
  options.max_write_delay_us = 10'000'000;  // the batch's page stays in memory
  auto engine = OpenStore(options);
  ASSERT_THAT(engine, IsOk());
  std::vector<std::string> keys, values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("batch-key-" + std::to_string(i));
    values.push_back("value-" + std::to_string(i));
  }
  std::vector<WriteOp> ops;
  for (int i = 0; i < 40; ++i) ops.push_back(WriteOp{false, keys[i], values[i]});
  ASSERT_THAT((*engine)->Write(ops, /*durable=*/false), IsOk());
  for (int i = 0; i < 40; ++i) {
    auto got = (*engine)->Get(keys[i]);
    ASSERT_THAT(got, IsOk()) << keys[i];
    EXPECT_EQ(*got, values[i]) << keys[i];
  }
  // Overwrite every key singly (each to its own shard's head), still in memory.
  for (int i = 0; i < 40; ++i) {
    ASSERT_THAT(Put(**engine, keys[i], "again-" + std::to_string(i), /*durable=*/false), IsOk());
  }
  EXPECT_EQ((*engine)->Stats().live_keys, 40u);
  for (int i = 0; i < 40; ++i) {
    auto got = (*engine)->Get(keys[i]);
    ASSERT_THAT(got, IsOk()) << keys[i];
    EXPECT_EQ(*got, "again-" + std::to_string(i)) << keys[i];
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  engine->reset();
  engine = OpenStore(options);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().live_keys, 40u);
  for (int i = 0; i < 40; ++i) {
    auto got = (*engine)->Get(keys[i]);
    ASSERT_THAT(got, IsOk()) << keys[i];
    EXPECT_EQ(*got, "again-" + std::to_string(i)) << keys[i];
  }
}

// A thread's read queue has two chunk buffers for the continuation pages of large values; reads
// (and a large write) beyond that must wait or go slower, not fail.
TEST_P(EngineTest, ManyLargeValuesInFlightOnOneThread) {
  auto engine = OpenStore();
  ASSERT_NE(engine, nullptr);
  std::vector<std::string> keys, values;
  for (int i = 0; i < 8; ++i) {
    keys.push_back("large-" + std::to_string(i));
    values.push_back(std::string(20000 + i, static_cast<char>('A' + i)));
    ASSERT_THAT(Put(*engine, keys.back(), values.back()), IsOk());
  }
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> got;
  engine->MultiGet(views, &got);
  for (int i = 0; i < 8; ++i) {
    ASSERT_THAT(got[i], IsOk()) << keys[i];
    EXPECT_EQ(*got[i], values[i]) << keys[i];
  }
  // Async reads of all of them, and a large write while they are in flight.
  int done = 0;
  for (int i = 0; i < 8; ++i) {
    ASSERT_THAT(engine->GetAsync(keys[i], [&, i](absl::StatusOr<std::string> v) {
      EXPECT_THAT(v, IsOk()) << keys[i];
      if (v.ok()) {
        EXPECT_EQ(*v, values[i]) << keys[i];
      }
      ++done;
    }), IsOk());
  }
  ASSERT_THAT(engine->Poll(0), IsOk());  // starts continuation reads, which hold the chunks
  ASSERT_THAT(Put(*engine, "large-during-reads", std::string(30000, 'w')), IsOk());
  while (engine->pending_reads() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_EQ(done, 8);
  EXPECT_EQ(*engine->Get("large-during-reads"), std::string(30000, 'w'));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, EngineTest,
    ::testing::Values(
        EngineCase{IndexMode::kHash, Options{}.cache_bytes, Layout::kConventional, "Hash"},
        EngineCase{IndexMode::kOrdered, Options{}.cache_bytes, Layout::kConventional, "Ordered"},
        EngineCase{IndexMode::kHash, 16 << 10, Layout::kConventional, "HashTinyCache"},
        EngineCase{IndexMode::kOrdered, 16 << 10, Layout::kConventional, "OrderedTinyCache"},
        EngineCase{IndexMode::kHash, 0, Layout::kConventional, "HashNoCache"},
        EngineCase{IndexMode::kOrdered, 0, Layout::kConventional, "OrderedNoCache"},
        EngineCase{IndexMode::kHash, Options{}.cache_bytes, Layout::kZoned, "ZonedHash"},
        EngineCase{IndexMode::kOrdered, Options{}.cache_bytes, Layout::kZoned, "ZonedOrdered"},
        EngineCase{IndexMode::kHash, 0, Layout::kZoned, "ZonedHashNoCache"},
        EngineCase{IndexMode::kOrdered, 0, Layout::kZoned, "ZonedOrderedNoCache"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nvkv::kv
