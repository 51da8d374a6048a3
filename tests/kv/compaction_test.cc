// Compaction through the engine's interface, on a MemDevice, conventional and zoned: a sustained
// overwrite workload at 70% space use, a store whose live data exceeds its space, cleaning beside
// concurrent writers and readers, tombstones across compaction and reopen, and the order in which a
// victim may be freed relative to the writes that made its records dead.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/engine.h"
#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::FaultDevice;
using storage::MemDevice;
using storage::MemDeviceOptions;
using storage::MemStorage;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint32_t kSegmentBytes = kPageBytes * kPagesPerSegment;

// A memory device of `segments` segments of 64 KiB: conventional (plus the two superblock
// pages), or zoned, a zone per segment of 128 KiB of which 64 KiB writable (plus the two
// metadata zones).
MemDeviceOptions MemOptions(uint64_t segments, Layout layout) {
  MemDeviceOptions options;
  options.lba_bytes = 4096;
  options.lba_count = 2 + segments * kPagesPerSegment;
  if (layout == Layout::kZoned) return ZonedMemStoreOptions(segments, kPagesPerSegment);
  return options;
}

Options StoreOptions(IndexMode mode) {
  Options options;
  options.segment_bytes = kSegmentBytes;
  options.shard_count = 2;
  options.index_mode = mode;
  options.compaction_policy = CompactionPolicy::kGreedy;
  // Non-durable writes fill whole pages before they are written: the space the test budgets is
  // not spent on half-empty pages when the machine (or ASan) is slow.
  options.max_write_delay_us = 100000;
  return options;
}

// A store kept in a MemStorage, reopened as often as the test likes.
class MemStore {
 public:
  MemStore(uint64_t segments, Layout layout) : mem_(MemOptions(segments, layout)) {
    auto device = MemDevice::Create(mem_);
    NVKV_CHECK(device.ok());
    storage_ = (*device)->storage();
  }
  absl::StatusOr<std::unique_ptr<Engine>> Open(Options options) {
    auto device = MemDevice::Open(storage_, mem_);
    if (!device.ok()) return device.status();
    if (mem_.zones.zoned()) options.segment_bytes = 0;  // a zone's writable part
    return Engine::OpenOnDevice(std::move(*device), options);
  }
  const MemDeviceOptions& mem() const { return mem_; }
  const std::shared_ptr<MemStorage>& storage() const { return storage_; }

 private:
  MemDeviceOptions mem_;
  std::shared_ptr<MemStorage> storage_;
};

absl::Status Put(Engine& engine, std::string_view key, std::string_view value,
                 bool durable = false) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

absl::Status Delete(Engine& engine, std::string_view key, bool durable = false) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

std::string Key(uint64_t i) {
  char key[24];
  std::snprintf(key, sizeof(key), "key%09llu", static_cast<unsigned long long>(i));
  return key;
}

// "<key>#<version>#" padded to `bytes` with a byte that depends on both: a value that was never
// written cannot pass ParseVersion for its key.
std::string VersionedValue(const std::string& key, uint64_t version, size_t bytes) {
  std::string value = absl::StrCat(key, "#", version, "#");
  const char fill = static_cast<char>('a' + (version * 7 + key.size()) % 26);
  value.resize(std::max(bytes, value.size()), fill);
  return value;
}

// The version a value written by VersionedValue(key, version, bytes) carries, or -1 when the
// value is not exactly such a value.
int64_t ParseVersion(const std::string& key, const std::string& value, size_t bytes) {
  if (value.size() < key.size() + 3 || value.compare(0, key.size(), key) != 0 ||
      value[key.size()] != '#') {
    return -1;
  }
  const size_t end = value.find('#', key.size() + 1);
  if (end == std::string::npos) return -1;
  const int64_t version = std::stoll(value.substr(key.size() + 1, end - key.size() - 1));
  return value == VersionedValue(key, static_cast<uint64_t>(version), bytes) ? version : -1;
}

struct CompactionCase {
  IndexMode mode;
  Layout layout;
};

class CompactionTest : public ::testing::TestWithParam<CompactionCase> {
 protected:
  IndexMode mode() const { return GetParam().mode; }
  Layout layout() const { return GetParam().layout; }
};

// The space budget below assumes that non-durable writes fill whole pages. (The writer once
// sealed every page opened after it read the clock: half the pages held a single record, and a
// store filled at 60% of its capacity.)
TEST_P(CompactionTest, NonDurableWritesFillWholePages) {
  MemStore store(16, layout());
  Options options = StoreOptions(mode());
  options.shard_count = 1;
  options.max_write_delay_us = 1'000'000;
  auto engine = store.Open(options);
  ASSERT_THAT(engine, IsOk());
  // 134-byte records: 30 fit the 4056 payload bytes of a page.
  constexpr uint64_t kRecords = 30 * 100;
  for (uint64_t i = 0; i < kRecords; ++i) {
    ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 1, 98)), IsOk());
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_GE(stats.pages_written, 100u);
  EXPECT_LE(stats.pages_written, 105u) << "pages were written before they were full";
}

// Live data is 70% of the store's capacity and is overwritten five times over in random order:
// compaction keeps up (no write is refused), every key reads its latest value, and the write
// amplification stays within what greedy cleaning at this utilisation allows.
//
// The bound: 64 segments, of which the heads hold 2 and the reserves keep up to 6 free, leave
// ~56 segments for 44.8 segments of live data, so victims are at most ~80% live. Cleaning a
// victim at utilisation u writes u/(1-u) of copies per byte freed: at most 4 at u = 0.8, so each
// user byte costs at most 5 bytes of records; records carry a 24-byte header per 110 user bytes
// (x1.22) and pages a 40-byte header: about 6.2 in all. We assert < 10.
TEST_P(CompactionTest, SustainedOverwriteAtSeventyPercentNeverFillsTheStore) {
  const uint64_t segments = 64;
  MemStore store(segments, layout());
  auto engine = store.Open(StoreOptions(mode()));
  ASSERT_THAT(engine, IsOk());
  const size_t value_bytes = 98;
  const uint32_t record_bytes = 24 + 12 + value_bytes;
  const uint64_t capacity = segments * kSegmentBytes;
  const uint64_t key_count = capacity * 7 / 10 / record_bytes;
  std::vector<uint64_t> version(key_count, 0);
  for (uint64_t i = 0; i < key_count; ++i) {
    ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 0, value_bytes)), IsOk()) << i;
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  EXPECT_NEAR(static_cast<double>((*engine)->Stats().live_bytes),
              static_cast<double>(capacity) * 0.7, capacity * 0.01);
  std::mt19937_64 rng(42);
  const uint64_t overwrites = 5 * key_count;
  for (uint64_t n = 0; n < overwrites; ++n) {
    const uint64_t i = rng() % key_count;
    ++version[i];
    absl::Status status = Put(**engine, Key(i), VersionedValue(Key(i), version[i], value_bytes));
    ASSERT_THAT(status, IsOk()) << "overwrite " << n << " of " << overwrites;
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  for (uint64_t i = 0; i < key_count; ++i) {
    auto got = (*engine)->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << Key(i);
    ASSERT_EQ(ParseVersion(Key(i), *got, value_bytes), static_cast<int64_t>(version[i])) << Key(i);
  }
  const EngineStats stats = (*engine)->Stats();
  EXPECT_GT(stats.segments_cleaned, 0u);
  EXPECT_GT(stats.compaction_bytes_written, 0u);
  EXPECT_EQ(stats.live_keys, key_count);
  EXPECT_GT(stats.write_amplification, 1.0);
  EXPECT_LT(stats.write_amplification, 10.0);
  std::printf("70%% overwrite (%s): %llu keys, %llu puts, %llu segments cleaned, "
              "write amplification %.2f\n",
              GetParam().mode == IndexMode::kHash ? "hash" : "ordered",
              static_cast<unsigned long long>(key_count),
              static_cast<unsigned long long>(stats.puts),
              static_cast<unsigned long long>(stats.segments_cleaned), stats.write_amplification);

  engine->reset();
  engine = store.Open(StoreOptions(mode()));
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().live_keys, key_count);
  for (uint64_t i = 0; i < key_count; i += 7) {
    auto got = (*engine)->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << Key(i);
    ASSERT_EQ(ParseVersion(Key(i), *got, value_bytes), static_cast<int64_t>(version[i])) << Key(i);
  }
}

// More live data than the store holds: puts end with kResourceExhausted; what was acknowledged
// still reads back; deletes still go through, and once compaction has reclaimed what they
// freed, puts succeed again.
TEST_P(CompactionTest, LiveDataBeyondCapacityIsRefusedThenDeletesFreeSpace) {
  const uint64_t segments = 32;
  MemStore store(segments, layout());
  auto engine = store.Open(StoreOptions(mode()));
  ASSERT_THAT(engine, IsOk());
  const size_t value_bytes = 200;
  const uint64_t most = 2 * segments * kSegmentBytes / (24 + 12 + value_bytes);
  uint64_t written = 0;
  absl::Status status;
  const absl::Time start = absl::Now();
  for (; written < most; ++written) {
    status = Put(**engine, Key(written), VersionedValue(Key(written), 1, value_bytes));
    if (!status.ok()) break;
  }
  ASSERT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, "store full"))
      << "after " << written << " puts";
  const absl::Duration fill_time = absl::Now() - start;
  std::printf("store full after %llu puts (%.1f%% of capacity in records), %.2f s\n",
              static_cast<unsigned long long>(written),
              100.0 * written * (24 + 12 + value_bytes) / (segments * kSegmentBytes),
              absl::ToDoubleSeconds(fill_time));
  EXPECT_GT(written * (24 + 12 + value_bytes), segments * kSegmentBytes / 2);

  // Every acknowledged put reads back.
  for (uint64_t i = 0; i < written; ++i) {
    auto got = (*engine)->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << Key(i);
    ASSERT_EQ(ParseVersion(Key(i), *got, value_bytes), 1) << Key(i);
  }
  // A full store is quiet: compaction does not keep rewriting segments that hold no garbage.
  // (The last puts' open pages are written first: the failing put no longer waits for them.)
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const EngineStats before_idle = (*engine)->Stats();
  absl::SleepFor(absl::Milliseconds(300));
  const EngineStats after_idle = (*engine)->Stats();
  EXPECT_EQ(after_idle.device_bytes_written, before_idle.device_bytes_written)
      << "compaction rewrote " << after_idle.segments_cleaned - before_idle.segments_cleaned
      << " segments of a full store that has nothing to reclaim";

  // Deletes still work, durably, and make room.
  for (uint64_t i = 0; i < written; i += 2) {
    ASSERT_THAT(Delete(**engine, Key(i), /*durable=*/i % 64 == 0), IsOk()) << Key(i);
  }
  ASSERT_THAT((*engine)->CompactAll(), IsOk());
  ASSERT_THAT(Put(**engine, "after-deletes", "fits", /*durable=*/true), IsOk());
  for (uint64_t i = 0; i < written; ++i) {
    auto got = (*engine)->Get(Key(i));
    if (i % 2 == 0) {
      ASSERT_THAT(got, StatusIs(absl::StatusCode::kNotFound)) << Key(i);
    } else {
      ASSERT_THAT(got, IsOk()) << Key(i);
    }
  }
  // Part of the freed half takes new keys again. (Not all of it: the tombstones stay, as long as
  // older records of any key remain, and the store is then at ~75% use.)
  for (uint64_t i = 0; i < written / 8; ++i) {
    ASSERT_THAT(Put(**engine, Key(most + i), VersionedValue(Key(most + i), 2, value_bytes)),
                IsOk())
        << i;
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  engine->reset();
  engine = store.Open(StoreOptions(mode()));
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().live_keys, written / 2 + written / 8 + 1);
}

// Two writers overwrite their own halves of a key set with increasing versions, and two readers
// read all of it (Get, MultiGet, GetAsync) while a fifth thread runs CompactAll over and over. A
// reader never sees a version older than one a read it finished before saw for the same key
// (reads of one batch are concurrent, so not among themselves), nor a version
// newer than the writer had started to write, nor a value that was never written; at the end
// every key reads its final version, before and after a reopen.
TEST_P(CompactionTest, CompactionUnderConcurrentOverwritesAndReads) {
  MemStore store(96, layout());
  Options options = StoreOptions(mode());
  options.max_write_delay_us = 500;
  auto opened = store.Open(options);
  ASSERT_THAT(opened, IsOk());
  Engine& engine = **opened;
  constexpr int kWriters = 2;
  constexpr uint64_t kKeys = 1200;
  constexpr size_t kValueBytes = 150;
  // Run for 3 s, longer if needed (a slow sanitizer build on a busy machine) until enough has
  // happened to mean something, but at most 60 s.
  const absl::Duration run_for = absl::Seconds(3);
  const absl::Duration run_at_most = absl::Seconds(60);
  std::vector<std::atomic<int64_t>> started(kKeys);  // newest version a writer began to write
  for (uint64_t i = 0; i < kKeys; ++i) {
    started[i].store(0);
    ASSERT_THAT(Put(engine, Key(i), VersionedValue(Key(i), 0, kValueBytes)), IsOk());
  }
  ASSERT_THAT(engine.Flush(), IsOk());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> compactions{0}, reads_checked{0};
  std::vector<std::string> failures(kWriters + 3);  // each written by its own thread only
  std::atomic<bool> any_failed{false};              // set by a thread after it wrote its failure
  // Sets any_failed when the thread that owns `failure` leaves with one.
  struct FlagFailure {
    const std::string& failure;
    std::atomic<bool>& flag;
    ~FlagFailure() {
      if (!failure.empty()) flag.store(true);
    }
  };

  // `seen` holds, per key, the newest version a read that had finished saw. The reads of one
  // MultiGet or of one round of GetAsync run together, unordered among themselves (a key may be
  // drawn twice, and one of its reads may see a concurrent overwrite that the other does not):
  // each is checked against what was seen before the batch began, then the batch's newest
  // versions are merged in (MergeSeen).
  auto check = [&](std::map<uint64_t, int64_t>& seen, uint64_t i,
                   const absl::StatusOr<std::string>& got, std::string* failure) {
    if (!got.ok()) {
      *failure = absl::StrCat(Key(i), ": ", got.status().ToString());
      return false;
    }
    const int64_t version = ParseVersion(Key(i), *got, kValueBytes);
    const int64_t newest = started[i].load();
    if (version < 0 || version > newest || version < seen[i]) {
      *failure = absl::StrCat(Key(i), ": read version ", version, " after seeing ", seen[i],
                              " (newest started ", newest, "): ", got->substr(0, 40));
      return false;
    }
    seen[i] = version;
    reads_checked.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  // Checks a batch of reads against `seen` as it was before the batch, then keeps the newest.
  auto check_batch = [&](std::map<uint64_t, int64_t>& seen, const std::vector<uint64_t>& ids,
                         const std::vector<absl::StatusOr<std::string>>& values,
                         std::string* failure) {
    const std::map<uint64_t, int64_t> before = seen;
    std::map<uint64_t, int64_t> newest;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::map<uint64_t, int64_t> own = before;
      if (!check(own, ids[k], values[k], failure)) return false;
      newest[ids[k]] = std::max(newest[ids[k]], own[ids[k]]);
    }
    for (const auto& [i, version] : newest) seen[i] = std::max(seen[i], version);
    return true;
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      FlagFailure flag{failures[w], any_failed};
      std::mt19937_64 rng(100 + w);
      while (!stop.load()) {
        const uint64_t i = (rng() % (kKeys / kWriters)) * kWriters + w;  // this writer's keys
        const int64_t version = started[i].load() + 1;
        started[i].store(version);
        absl::Status status =
            Put(engine, Key(i), VersionedValue(Key(i), version, kValueBytes), rng() % 8 == 0);
        if (!status.ok()) {
          failures[w] = absl::StrCat("writer ", w, ": ", status.ToString());
          return;
        }
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(200 + r);
      std::map<uint64_t, int64_t> seen;
      std::string& failure = failures[kWriters + r];
      FlagFailure flag{failure, any_failed};
      while (!stop.load() && failure.empty()) {
        const int how = static_cast<int>(rng() % 3);
        if (how == 0) {
          const uint64_t i = rng() % kKeys;
          if (!check(seen, i, engine.Get(Key(i)), &failure)) return;
        } else if (how == 1) {
          std::vector<uint64_t> ids;
          std::vector<std::string> keys;
          for (int k = 0; k < 16; ++k) {
            ids.push_back(rng() % kKeys);
            keys.push_back(Key(ids.back()));
          }
          std::vector<std::string_view> views(keys.begin(), keys.end());
          std::vector<absl::StatusOr<std::string>> values;
          engine.MultiGet(views, &values);
          if (!check_batch(seen, ids, values, &failure)) return;
        } else {
          std::vector<uint64_t> ids;
          for (int k = 0; k < 8; ++k) ids.push_back(rng() % kKeys);
          std::vector<absl::StatusOr<std::string>> values(ids.size(), absl::UnknownError(""));
          for (size_t k = 0; k < ids.size(); ++k) {
            absl::Status started_read =
                engine.GetAsync(Key(ids[k]), [&values, k](absl::StatusOr<std::string> v) {
                  values[k] = std::move(v);
                });
            if (!started_read.ok()) {
              failure = started_read.ToString();
              return;
            }
          }
          while (engine.pending_reads() > 0) {
            if (!engine.Poll(1).ok()) {
              failure = "Poll failed";
              return;
            }
          }
          if (!check_batch(seen, ids, values, &failure)) return;
        }
      }
    });
  }
  threads.emplace_back([&] {
    FlagFailure flag{failures[kWriters + 2], any_failed};
    while (!stop.load()) {
      absl::Status status = engine.CompactAll();
      if (!status.ok()) {
        failures[kWriters + 2] = absl::StrCat("CompactAll: ", status.ToString());
        return;
      }
      compactions.fetch_add(1);
    }
  });
  const absl::Time start = absl::Now();
  while (!any_failed.load() && absl::Now() - start < run_at_most &&
         (absl::Now() - start < run_for || compactions.load() < 10 ||
          reads_checked.load() < 5000)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
  EXPECT_GT(compactions.load(), 2u);
  EXPECT_GT(reads_checked.load(), 1000u);
  EXPECT_GT(engine.Stats().segments_cleaned, 0u);
  std::printf("%llu CompactAll calls, %llu reads checked, %llu segments cleaned\n",
              static_cast<unsigned long long>(compactions.load()),
              static_cast<unsigned long long>(reads_checked.load()),
              static_cast<unsigned long long>(engine.Stats().segments_cleaned));

  auto check_final = [&](Engine& e) {
    for (uint64_t i = 0; i < kKeys; ++i) {
      auto got = e.Get(Key(i));
      ASSERT_THAT(got, IsOk()) << Key(i);
      ASSERT_EQ(ParseVersion(Key(i), *got, kValueBytes), started[i].load()) << Key(i);
    }
  };
  check_final(engine);
  ASSERT_THAT(engine.Close(), IsOk());
  opened->reset();
  auto reopened = store.Open(options);
  ASSERT_THAT(reopened, IsOk());
  check_final(**reopened);
}

// Deleted keys stay deleted after their tombstones and the puts they hide have been through
// compaction, and after reopening (which rebuilds the index from what compaction left).
TEST_P(CompactionTest, TombstonesDoNotResurrectAfterCompactionAndReopen) {
  MemStore store(48, layout());
  const Options options = StoreOptions(mode());
  constexpr uint64_t kKeys = 3000;
  std::map<uint64_t, int64_t> model;  // key -> version, absent when deleted
  {
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    for (uint64_t i = 0; i < kKeys; ++i) {
      ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 1, 100)), IsOk());
      model[i] = 1;
    }
    ASSERT_THAT((*engine)->Flush(), IsOk());
    // Overwrite a third (so the first segments hold garbage), delete every other key: the
    // tombstones land in later segments than the puts they hide.
    for (uint64_t i = 0; i < kKeys; i += 3) {
      ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 2, 100)), IsOk());
      model[i] = 2;
    }
    for (uint64_t i = 0; i < kKeys; i += 2) {
      ASSERT_THAT(Delete(**engine, Key(i)), IsOk());
      model.erase(i);
    }
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    EXPECT_GT((*engine)->Stats().segments_cleaned, 0u);
  }
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().live_keys, model.size());
    for (uint64_t i = 0; i < kKeys; ++i) {
      auto got = (*engine)->Get(Key(i));
      auto it = model.find(i);
      if (it == model.end()) {
        ASSERT_THAT(got, StatusIs(absl::StatusCode::kNotFound)) << Key(i) << " came back";
      } else {
        ASSERT_THAT(got, IsOk()) << Key(i);
        ASSERT_EQ(ParseVersion(Key(i), *got, 100), it->second) << Key(i);
      }
    }
    // Another cycle: more deletes, compaction, and a reopen in the next round.
    for (uint64_t i = 1 + round; i < kKeys; i += 5) {
      ASSERT_THAT(Delete(**engine, Key(i)), IsOk());
      model.erase(i);
    }
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ASSERT_THAT((*engine)->Flush(), IsOk());
  }
}

// 400 fresh keys written twice: a segment's worth of garbage beside whatever the head holds.
void WriteAndOverwriteFreshKeys(Engine& engine, size_t value_bytes) {
  for (int round = 0; round < 2; ++round) {
    for (uint64_t i = 0; i < 400; ++i) {
      const std::string key = Key(100000 + i);
      ASSERT_THAT(Put(engine, key, VersionedValue(key, round, value_bytes)), IsOk());
    }
  }
}

void ExpectAbsent(Engine& engine, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    EXPECT_THAT(engine.Get(key), StatusIs(absl::StatusCode::kNotFound)) << key << " came back";
  }
}

void ExpectAtVersion(Engine& engine, const std::vector<std::string>& keys, int version,
                     size_t value_bytes) {
  for (const std::string& key : keys) {
    auto got = engine.Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    EXPECT_EQ(ParseVersion(key, *got, value_bytes), version) << key;
  }
}

// The case the tombstone rule exists for: the old puts of deleted keys sit in segments that stay
// (too little of them is dead to be worth cleaning), while the segment of their tombstones is
// cleaned. Dropping the tombstones there would bring the keys back at the next reopen.
TEST_P(CompactionTest, TombstonesOutliveThePutsTheyHide) {
  MemStore store(32, layout());
  Options options = StoreOptions(mode());
  options.shard_count = 1;  // one head: the test decides which records share a segment
  options.background_compaction = false;
  constexpr size_t kValueBytes = 98;  // 134-byte records: 30 a page, 480 a segment
  std::vector<std::string> hidden, cold;
  {
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    // Four segments of cold keys, one record in 24 of them a key that will be deleted: under a
    // page of dead records per segment once deleted.
    for (uint64_t i = 0; i < 4 * 480; ++i) {
      std::vector<std::string>& keys = i % 24 == 0 ? hidden : cold;
      keys.push_back(Key(i));
      ASSERT_THAT(Put(**engine, keys.back(), VersionedValue(keys.back(), 1, kValueBytes)),
                  IsOk());
    }
    ASSERT_THAT((*engine)->Flush(), IsOk());
    for (const std::string& key : hidden) ASSERT_THAT(Delete(**engine, key), IsOk());
    // The tombstones share their segment with garbage: keys written and overwritten at once.
    ASSERT_NO_FATAL_FAILURE(WriteAndOverwriteFreshKeys(**engine, kValueBytes));
    const uint64_t cleaned_before = (*engine)->Stats().segments_cleaned;
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    EXPECT_GT((*engine)->Stats().segments_cleaned, cleaned_before);
    for (const std::string& key : hidden) {
      EXPECT_THAT((*engine)->Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }
  auto engine = store.Open(options);
  ASSERT_THAT(engine, IsOk());
  ExpectAbsent(**engine, hidden);
  ASSERT_NO_FATAL_FAILURE(ExpectAtVersion(**engine, cold, 1, kValueBytes));
  EXPECT_EQ((*engine)->Stats().live_keys, cold.size() + 400);
}

// As TombstonesOutliveThePutsTheyHide, with a reopen between the deletes and the cleaning:
// what compaction knows of the keys in each segment is rebuilt by recovery, and the tombstones
// are kept as long as the cold segments hold the puts they hide.
TEST_P(CompactionTest, TombstonesOutliveThePutsTheyHideAcrossReopen) {
  MemStore store(32, layout());
  Options options = StoreOptions(mode());
  options.shard_count = 1;
  options.background_compaction = false;
  constexpr size_t kValueBytes = 98;  // 134-byte records: 30 a page, 480 a segment
  std::vector<std::string> hidden, cold;
  {
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    for (uint64_t i = 0; i < 4 * 480; ++i) {
      std::vector<std::string>& keys = i % 24 == 0 ? hidden : cold;
      keys.push_back(Key(i));
      ASSERT_THAT(Put(**engine, keys.back(), VersionedValue(keys.back(), 1, kValueBytes)),
                  IsOk());
    }
    ASSERT_THAT((*engine)->Flush(), IsOk());
    for (const std::string& key : hidden) ASSERT_THAT(Delete(**engine, key), IsOk());
    ASSERT_NO_FATAL_FAILURE(WriteAndOverwriteFreshKeys(**engine, kValueBytes));
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  {
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    const uint64_t cleaned_before = (*engine)->Stats().segments_cleaned;
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    EXPECT_GT((*engine)->Stats().segments_cleaned, cleaned_before);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = store.Open(options);
  ASSERT_THAT(engine, IsOk());
  ExpectAbsent(**engine, hidden);
  ASSERT_NO_FATAL_FAILURE(ExpectAtVersion(**engine, cold, 1, kValueBytes));
  EXPECT_EQ((*engine)->Stats().live_keys, cold.size() + 400);
}

// A put that compaction copied to a new segment is a record of that segment: a later delete's
// tombstone is kept while the copy remains, even once the segment first written is gone.
TEST_P(CompactionTest, TombstonesOutliveRelocatedPuts) {
  MemStore store(32, layout());
  Options options = StoreOptions(mode());
  options.shard_count = 1;
  options.background_compaction = false;
  constexpr size_t kValueBytes = 98;  // 134-byte records: 30 a page, 480 a segment
  std::vector<std::string> hidden, cold, overwritten;
  {
    auto engine = store.Open(options);
    ASSERT_THAT(engine, IsOk());
    // One segment: every 24th key will be deleted, half of the others are overwritten at once.
    for (uint64_t i = 0; i < 480; ++i) {
      std::vector<std::string>& keys = i % 24 == 0 ? hidden : i % 2 == 1 ? overwritten : cold;
      keys.push_back(Key(i));
      ASSERT_THAT(Put(**engine, keys.back(), VersionedValue(keys.back(), 1, kValueBytes)),
                  IsOk());
    }
    for (const std::string& key : overwritten) {
      ASSERT_THAT(Put(**engine, key, VersionedValue(key, 2, kValueBytes)), IsOk());
    }
    // Cleaning it copies the cold and the hidden keys to a new segment, which then fills up
    // with keys that stay; only after that are the hidden keys deleted.
    const uint64_t cleaned_before = (*engine)->Stats().segments_cleaned;
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ASSERT_GT((*engine)->Stats().segments_cleaned, cleaned_before);
    for (uint64_t i = 0; i < 480; ++i) {
      cold.push_back(Key(1000 + i));
      ASSERT_THAT(Put(**engine, cold.back(), VersionedValue(cold.back(), 1, kValueBytes)),
                  IsOk());
    }
    for (const std::string& key : hidden) ASSERT_THAT(Delete(**engine, key), IsOk());
    ASSERT_NO_FATAL_FAILURE(WriteAndOverwriteFreshKeys(**engine, kValueBytes));
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    for (const std::string& key : hidden) {
      EXPECT_THAT((*engine)->Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }
  auto engine = store.Open(options);
  ASSERT_THAT(engine, IsOk());
  ExpectAbsent(**engine, hidden);
  ASSERT_NO_FATAL_FAILURE(ExpectAtVersion(**engine, cold, 1, kValueBytes));
  ASSERT_NO_FATAL_FAILURE(ExpectAtVersion(**engine, overwritten, 2, kValueBytes));
  EXPECT_EQ((*engine)->Stats().live_keys, cold.size() + overwritten.size() + 400);
}

// A tombstone may go once no older record of its key can remain outside the segment being
// cleaned. One cold key, older than everything else, must not pin every later tombstone: a
// churn of fresh keys, each put then deleted, writes 20 times the store's capacity and never
// finds the store full. (The tombstone rule was once "keep it while any other segment holds an
// older record of any key": the cold key's segment did, so every tombstone was kept, and the
// store filled with them.)
TEST_P(CompactionTest, OneColdKeyDoesNotPinTombstonesOfLaterKeys) {
  const uint64_t segments = 128;  // 8 MiB
  MemStore store(segments, layout());
  auto engine = store.Open(StoreOptions(mode()));
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "cold", "the oldest record in the store", /*durable=*/true), IsOk());
  // 1000-byte keys: a put (with a 100-byte value) and its tombstone take ~2.2 KB of records.
  const uint64_t capacity = segments * kSegmentBytes;
  const uint64_t pairs = 20 * capacity / (2 * (24 + 1000) + 100);
  std::string key(1000, 'k');
  for (uint64_t i = 0; i < pairs; ++i) {
    std::snprintf(key.data(), 24, "%020llu", static_cast<unsigned long long>(i));
    ASSERT_THAT(Put(**engine, key, VersionedValue(key.substr(0, 20), 1, 100)), IsOk())
        << "pair " << i << " of " << pairs;
    ASSERT_THAT(Delete(**engine, key), IsOk()) << "pair " << i << " of " << pairs;
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  EXPECT_EQ((*engine)->Stats().live_keys, 1u);
  auto cold = (*engine)->Get("cold");
  ASSERT_THAT(cold, IsOk());
  EXPECT_EQ(*cold, "the oldest record in the store");
}

// Compaction frees a victim (a durable free marker on its first page) once the records it must
// keep are copied. Its other records are dead because newer writes replaced them, and those
// newer writes may not be durable yet (made without durable, or still waiting for their flush).
// If power fails then, the newer records are lost with the victim's older ones: a key written
// durably reads back as absent (or as a value older than the one acknowledged).
//
// Here every record of the first segments is overwritten by non-durable writes, background
// compaction frees those segments, and power fails dropping every write not yet durable. Each
// key must then read back its durable value or the newer one, never nothing.
TEST_P(CompactionTest, AVictimIsFreedOnlyOnceTheWritesThatKilledItsRecordsAreDurable) {
  MemStore store(24, layout());
  Options options = StoreOptions(mode());
  options.shard_count = 1;
  options.max_write_delay_us = 60'000'000;  // non-durable pages reach the device only when full
  {
    auto formatted = store.Open(options);
    ASSERT_THAT(formatted, IsOk());
  }
  auto mem = MemDevice::Open(store.storage(), store.mem());
  ASSERT_THAT(mem, IsOk());
  storage::FaultDeviceOptions fault_options;
  fault_options.keep_weight = 0;  // at the cut, every write not yet durable is lost
  fault_options.tear_weight = 0;
  auto fault = FaultDevice::Create(std::move(*mem), fault_options);
  ASSERT_THAT(fault, IsOk());
  FaultDevice* device = fault->get();
  auto engine = Engine::OpenOnDevice(std::move(*fault), options);
  ASSERT_THAT(engine, IsOk());

  // Six segments of keys, durable.
  constexpr size_t kValueBytes = 98;
  const uint64_t keys = 6 * kPagesPerSegment * 30;
  for (uint64_t i = 0; i < keys; ++i) {
    ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 1, kValueBytes)), IsOk());
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  // Every one of them overwritten, not durably; then new keys until compaction has cleaned a
  // segment (it starts once fewer than 5 of the 24 segments are free).
  for (uint64_t i = 0; i < keys; ++i) {
    ASSERT_THAT(Put(**engine, Key(i), VersionedValue(Key(i), 2, kValueBytes)), IsOk());
  }
  uint64_t fresh = keys;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while ((*engine)->Stats().segments_cleaned == 0 && absl::Now() < deadline) {
    for (int n = 0; n < 50; ++n, ++fresh) {
      ASSERT_THAT(Put(**engine, Key(fresh), VersionedValue(Key(fresh), 1, kValueBytes)), IsOk());
    }
  }
  ASSERT_GT((*engine)->Stats().segments_cleaned, 0u);
  auto cut = device->CutPower();
  ASSERT_THAT(cut, IsOk());
  (void)(*engine)->Close();
  engine->reset();

  auto reopened = store.Open(options);
  ASSERT_THAT(reopened, IsOk());
  uint64_t lost = 0;
  for (uint64_t i = 0; i < keys; ++i) {
    auto got = (*reopened)->Get(Key(i));
    if (!got.ok()) {
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound));
      ++lost;
      continue;
    }
    const int64_t version = ParseVersion(Key(i), *got, kValueBytes);
    EXPECT_TRUE(version == 1 || version == 2) << Key(i) << ": " << *got;
  }
  EXPECT_EQ(lost, 0u) << "keys written durably that read back as absent after the power cut";
}

INSTANTIATE_TEST_SUITE_P(Modes, CompactionTest,
                         ::testing::Values(
                             CompactionCase{IndexMode::kHash, Layout::kConventional},
                             CompactionCase{IndexMode::kOrdered, Layout::kConventional},
                             CompactionCase{IndexMode::kHash, Layout::kZoned},
                             CompactionCase{IndexMode::kOrdered, Layout::kZoned}),
                         [](const auto& info) {
                           return std::string(info.param.layout == Layout::kConventional
                                                  ? ""
                                                  : LayoutName(info.param.layout)) +
                                  (info.param.mode == IndexMode::kHash ? "Hash" : "Ordered");
                         });

}  // namespace
}  // namespace nvkv::kv
