// Multi-threaded stress on a file store and on a zoned namespace: four threads mix Put, Get,
// Delete, batches, MultiGet and GetAsync, durable and not, over keys of their own and keys they all
// share, while background compaction and an occasional CompactAll run. Each thread checks its own
// keys exactly (only it writes them) and shared keys for well-formed values; after a reopen, every
// thread's own keys hold what it last wrote. Both index modes; on zones, appends complete in a
// shuffled order.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "kv/engine.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

constexpr int kThreads = 4;
constexpr int kOwnKeys = 400;
constexpr int kSharedKeys = 64;
constexpr int kOpsPerThread = 6000;

// The modes under stress: each index mode with the default record cache, and hash mode without
// one, where overwrites are written blind and compaction settles their stale entries; on a file
// and on a zoned namespace.
struct StressMode {
  IndexMode index = IndexMode::kHash;
  bool cache = true;
  Layout layout = Layout::kConventional;
  std::string name() const {
    return absl::StrCat(layout == Layout::kConventional ? "" : LayoutName(layout),
                        index == IndexMode::kHash ? "Hash" : "Ordered", cache ? "" : "NoCache");
  }
};

Options StoreOptions(const StressMode& mode) {
  Options options;
  if (!mode.cache) options.cache_bytes = 0;
  options.capacity_bytes = 64 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 4;
  options.index_mode = mode.index;
  options.max_write_delay_us = 1000;
  options.read_queue_depth = 16;  // so that GetAsync bursts run into kUnavailable now and then
  return options;
}

std::string OwnKey(int thread, int i) { return absl::StrCat("t", thread, "-k", i); }
std::string SharedKey(int i) { return absl::StrCat("shared-", i); }

// "<key>|<writer>|<sequence>|" and a fill that depends on all three, `bytes` long in all.
std::string MakeValue(const std::string& key, int writer, uint64_t sequence, size_t bytes) {
  std::string value = absl::StrCat(key, "|", writer, "|", sequence, "|");
  value.resize(std::max(value.size(), bytes),
               static_cast<char>('a' + (sequence * 31 + writer * 7 + key.size()) % 26));
  return value;
}

// True when `value` is exactly one MakeValue(key, ...) could have produced.
bool WellFormed(const std::string& key, const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits('|', 3));
  if (parts.size() != 4 || parts[0] != key) return false;
  int writer = 0;
  uint64_t sequence = 0;
  if (!absl::SimpleAtoi(parts[1], &writer) || !absl::SimpleAtoi(parts[2], &sequence)) return false;
  return value == MakeValue(key, writer, sequence, value.size());
}

struct ThreadResult {
  std::map<std::string, std::optional<std::string>> own;  // key -> last value (nullopt: deleted)
  std::string failure;
  uint64_t ops = 0;
};

class StressTest : public ::testing::TestWithParam<StressMode> {};

// One thread's workload. Returns at the first inconsistency, described in result->failure.
void RunThread(Engine& engine, int id, uint32_t seed, ThreadResult* result) {
  std::mt19937_64 rng(seed);
  uint64_t sequence = 0;
  auto fail = [&](std::string what) { result->failure = absl::StrCat("thread ", id, ": ", what); };
  auto pick_own = [&] { return OwnKey(id, static_cast<int>(rng() % kOwnKeys)); };
  auto pick_shared = [&] { return SharedKey(static_cast<int>(rng() % kSharedKeys)); };
  auto value_size = [&]() -> size_t {
    if (rng() % 64 == 0) return 5000 + rng() % 15000;  // a large value, over several pages
    return rng() % 300;
  };
  // Checks a read of `key`: own keys exactly, shared keys for form.
  auto check = [&](const std::string& key, const absl::StatusOr<std::string>& got) {
    if (!got.ok() && !absl::IsNotFound(got.status())) {
      fail(absl::StrCat(key, ": ", got.status().ToString()));
      return false;
    }
    auto it = result->own.find(key);
    if (it != result->own.end() || key.rfind(absl::StrCat("t", id, "-"), 0) == 0) {
      const std::optional<std::string> want =
          it == result->own.end() ? std::nullopt : it->second;
      const std::optional<std::string> seen = got.ok() ? std::optional(*got) : std::nullopt;
      if (seen != want) {
        fail(absl::StrCat(key, ": read ", seen ? seen->substr(0, 40) : "<absent>", ", wrote ",
                          want ? want->substr(0, 40) : "<absent>"));
        return false;
      }
      return true;
    }
    if (got.ok() && !WellFormed(key, *got)) {
      fail(absl::StrCat(key, ": read a value never written: ", got->substr(0, 40)));
      return false;
    }
    return true;
  };

  for (int op = 0; op < kOpsPerThread && result->failure.empty(); ++op, ++result->ops) {
    const int action = static_cast<int>(rng() % 100);
    const bool durable = rng() % 4 == 0;
    if (action < 30) {  // put
      const std::string key = rng() % 3 == 0 ? pick_shared() : pick_own();
      const std::string value = MakeValue(key, id, ++sequence, value_size());
      WriteOp write{false, key, value};
      absl::Status status = engine.Write(std::span<const WriteOp>(&write, 1), durable);
      if (!status.ok()) return fail(absl::StrCat("put ", key, ": ", status.ToString()));
      if (key[0] == 't') result->own[key] = value;
    } else if (action < 40) {  // delete
      const std::string key = rng() % 3 == 0 ? pick_shared() : pick_own();
      WriteOp write{true, key, {}};
      absl::Status status = engine.Write(std::span<const WriteOp>(&write, 1), durable);
      if (!status.ok()) return fail(absl::StrCat("delete ", key, ": ", status.ToString()));
      if (key[0] == 't') result->own[key] = std::nullopt;
    } else if (action < 50) {  // batch over own and shared keys, puts and deletes
      std::vector<std::string> keys, values;
      std::vector<WriteOp> ops;
      const int size = 2 + static_cast<int>(rng() % 10);
      for (int i = 0; i < size; ++i) {
        keys.push_back(rng() % 3 == 0 ? pick_shared() : pick_own());
        values.push_back(MakeValue(keys.back(), id, ++sequence, rng() % 200));
      }
      for (int i = 0; i < size; ++i) ops.push_back(WriteOp{rng() % 5 == 0, keys[i], values[i]});
      absl::Status status = engine.Write(ops, durable);
      if (!status.ok()) return fail(absl::StrCat("batch: ", status.ToString()));
      for (const WriteOp& w : ops) {
        if (w.key[0] != 't') continue;
        result->own[std::string(w.key)] =
            w.is_delete ? std::nullopt : std::optional<std::string>(w.value);
      }
    } else if (action < 75) {  // get
      const std::string key = rng() % 3 == 0 ? pick_shared() : pick_own();
      if (!check(key, engine.Get(key))) return;
    } else if (action < 88) {  // MultiGet
      std::vector<std::string> keys;
      for (int i = 0; i < 24; ++i) keys.push_back(rng() % 3 == 0 ? pick_shared() : pick_own());
      std::vector<std::string_view> views(keys.begin(), keys.end());
      std::vector<absl::StatusOr<std::string>> values;
      engine.MultiGet(views, &values);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!check(keys[i], values[i])) return;
      }
    } else if (action < 99) {  // a burst of GetAsync, more than the queue holds at once
      std::vector<std::string> keys;
      for (int i = 0; i < 20; ++i) keys.push_back(rng() % 3 == 0 ? pick_shared() : pick_own());
      std::vector<std::optional<absl::StatusOr<std::string>>> values(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        auto callback = [&values, i](absl::StatusOr<std::string> v) { values[i] = std::move(v); };
        absl::Status started = engine.GetAsync(keys[i], callback);
        while (absl::IsUnavailable(started)) {
          absl::StatusOr<uint32_t> polled = engine.Poll(1);
          if (!polled.ok()) return fail(polled.status().ToString());
          started = engine.GetAsync(keys[i], callback);
        }
        if (!started.ok()) return fail(absl::StrCat("GetAsync: ", started.ToString()));
      }
      while (engine.pending_reads() > 0) {
        absl::StatusOr<uint32_t> polled = engine.Poll(1);
        if (!polled.ok()) return fail(polled.status().ToString());
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!values[i].has_value()) return fail(absl::StrCat(keys[i], ": callback never ran"));
        if (!check(keys[i], *values[i])) return;
      }
    } else if (id == 0) {  // now and then: clean everything, beside the others' traffic
      absl::Status status = engine.CompactAll();
      if (!status.ok()) return fail(absl::StrCat("CompactAll: ", status.ToString()));
    } else {
      absl::Status status = engine.Flush();
      if (!status.ok()) return fail(absl::StrCat("Flush: ", status.ToString()));
    }
  }
}

TEST_P(StressTest, FourThreadsMixedOperationsThenReopen) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  nvkv::testing::TempDir dir;
  TestStore store(GetParam().layout, dir.File("store"));
  std::vector<ThreadResult> results(kThreads);
  {
    auto engine = store.Open(StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back(RunThread, std::ref(**engine), t, seed + t, &results[t]);
    }
    for (std::thread& thread : threads) thread.join();
    const EngineStats stats = (*engine)->Stats();
    std::printf("%s: %llu puts, %llu deletes, %llu batches, %llu gets, %llu segments cleaned, "
                "%llu blind writes, %llu stale entries settled in %.2f s\n",
                GetParam().name().c_str(),
                static_cast<unsigned long long>(stats.puts),
                static_cast<unsigned long long>(stats.deletes),
                static_cast<unsigned long long>(stats.batches),
                static_cast<unsigned long long>(stats.gets),
                static_cast<unsigned long long>(stats.segments_cleaned),
                static_cast<unsigned long long>(stats.blind_writes),
                static_cast<unsigned long long>(stats.stale_entries_settled),
                absl::ToDoubleSeconds(absl::Now() - start));
    for (const ThreadResult& result : results) ASSERT_EQ(result.failure, "");
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = store.Open(StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  uint64_t live_own = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kOwnKeys; ++i) {
      const std::string key = OwnKey(t, i);
      auto it = results[t].own.find(key);
      const bool present = it != results[t].own.end() && it->second.has_value();
      auto got = (*engine)->Get(key);
      if (present) {
        ++live_own;
        ASSERT_THAT(got, IsOk()) << key;
        ASSERT_EQ(*got, *it->second) << key;
      } else {
        ASSERT_THAT(got, ::nvkv::testing::StatusIs(absl::StatusCode::kNotFound)) << key;
      }
    }
  }
  uint64_t live_shared = 0;
  for (int i = 0; i < kSharedKeys; ++i) {
    auto got = (*engine)->Get(SharedKey(i));
    if (got.ok()) {
      ++live_shared;
      EXPECT_TRUE(WellFormed(SharedKey(i), *got)) << SharedKey(i) << ": " << got->substr(0, 40);
    } else {
      EXPECT_THAT(got, ::nvkv::testing::StatusIs(absl::StatusCode::kNotFound));
    }
  }
  EXPECT_EQ((*engine)->Stats().live_keys, live_own + live_shared);
}

// Deleters racing on one key. A delete that saw the key, then found the open page too full for
// its tombstone, seals it and opens a fresh page; if meanwhile another thread deleted the key, it
// retries, finds the key gone and writes nothing, leaving the fresh page empty at the head.
// Flush must still finish (it waits for every page assigned, that one included).
TEST_P(StressTest, FlushFinishesAfterDeletesRacedOnOneKey) {
  nvkv::testing::TempDir dir;
  Options options = StoreOptions(GetParam());
  options.shard_count = 1;
  options.max_write_delay_us = 1'000'000;  // pages stay open until full or flushed
  TestStore store(GetParam().layout, dir.File("store"));
  auto engine = store.Open(options);
  ASSERT_THAT(engine, IsOk());
  constexpr int kDeleters = 3;
  constexpr uint32_t kPayload = 4096 - 40;
  constexpr uint32_t kTombstone = 24 + 9;  // "contended"
  for (int round = 0; round < 300; ++round) {
    // A fresh page (the last Flush sealed the previous one) left with room for one tombstone.
    const std::string value = absl::StrCat("v", round);
    const uint32_t put_bytes = 24 + 9 + static_cast<uint32_t>(value.size());
    const std::string filler(kPayload - (24 + 6) - put_bytes - kTombstone - 10, 'f');
    WriteOp fill{false, "filler", filler};
    WriteOp put{false, "contended", value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&fill, 1), false), IsOk());
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&put, 1), false), IsOk());
    std::atomic<int> ready{0}, errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kDeleters; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < kDeleters) {
        }
        WriteOp del{true, "contended", {}};
        if (!(*engine)->Write(std::span<const WriteOp>(&del, 1), false).ok()) ++errors;
      });
    }
    for (std::thread& thread : threads) thread.join();
    ASSERT_EQ(errors.load(), 0);
    std::atomic<bool> flushed{false};
    std::thread flusher([&] {
      EXPECT_THAT((*engine)->Flush(), IsOk());
      flushed.store(true);
    });
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!flushed.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    if (!flushed.load()) {
      ADD_FAILURE() << "Flush hangs after round " << round;
      std::fflush(stdout);
      std::_Exit(1);  // the flusher cannot be joined; end the test binary here
    }
    flusher.join();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StressTest,
                         ::testing::Values(StressMode{IndexMode::kHash, true},
                                           StressMode{IndexMode::kOrdered, true},
                                           StressMode{IndexMode::kHash, false},
                                           StressMode{IndexMode::kHash, true, Layout::kZoned},
                                           StressMode{IndexMode::kOrdered, true, Layout::kZoned},
                                           StressMode{IndexMode::kHash, false, Layout::kZoned}),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace nvkv::kv
