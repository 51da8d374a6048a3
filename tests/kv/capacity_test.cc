// What a store accepts, through the engine's interface on a MemDevice with the default layout
// (4 KiB pages, 1 MiB segments, 4 shards of 32 page buffers): every batch up to
// max_batch_bytes(), whatever its records' sizes; live data up to the usable capacity Stats
// reports; and a write that cannot be taken is refused at once, never left waiting. On a
// conventional device and on a zoned one of 1 MiB zones.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kv/engine.h"
#include "kv/key_hash.h"
#include "kv/shard.h"
#include "storage/base/status_macros.h"
#include "storage/mem_device.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::MemDevice;
using storage::MemDeviceOptions;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPayloadBytes = kPageBytes - 40;  // after the page header
constexpr uint32_t kRecordHeaderBytes = 24;

class CapacityTest : public ::testing::TestWithParam<Layout> {};

// A store of `capacity_bytes` in memory, default options otherwise. Zoned: zones of 1 MiB (the
// default segment's size), the two metadata zones among them.
std::shared_ptr<Engine> OpenMemStore(uint64_t capacity_bytes,
                                     const Options& options = Options()) {
  MemDeviceOptions mem;
  mem.lba_bytes = kPageBytes;
  mem.lba_count = capacity_bytes / kPageBytes;
  Options store_options = options;
  if (CapacityTest::GetParam() == Layout::kZoned) {
    constexpr uint64_t kZoneBlocks = (1 << 20) / kPageBytes;
    mem.zones = {.zone_count = mem.lba_count / kZoneBlocks + 1,
                 .zone_blocks = kZoneBlocks,
                 .capacity_blocks = kZoneBlocks};
    mem.lba_count = mem.zones.zone_count * kZoneBlocks;
    store_options.segment_bytes = 0;  // the zone's
  }
  auto device = MemDevice::Create(mem);
  EXPECT_THAT(device, IsOk());
  if (!device.ok()) return nullptr;
  auto engine = Engine::OpenOnDevice(std::move(*device), store_options);
  EXPECT_THAT(engine, IsOk());
  if (!engine.ok()) return nullptr;
  return std::shared_ptr<Engine>(std::move(*engine));
}

// Runs `call` on a thread of its own and waits for it at most `limit`. nullopt when it did not
// return: the thread is abandoned, with what `call` holds (so hold everything by shared_ptr),
// and the rest of the suite runs on.
std::optional<absl::Status> WithinLimit(std::function<absl::Status()> call,
                                        absl::Duration limit) {
  struct State {
    std::function<absl::Status()> call;
    absl::Status status;
    absl::Notification done;
  };
  auto state = std::make_shared<State>();
  state->call = std::move(call);
  std::thread thread([state] {
    state->status = state->call();
    state->done.Notify();
  });
  if (!state->done.WaitForNotificationWithTimeout(limit)) {
    thread.detach();
    return std::nullopt;
  }
  thread.join();
  return state->status;
}

// A batch of puts whose records are `record_bytes` each (header, key and value), as many as
// `max_bytes` allows. The ops view the strings the batch owns.
struct Batch {
  std::vector<std::string> keys, values;
  std::vector<WriteOp> ops;
};
std::shared_ptr<Batch> MakeBatch(const std::string& prefix, uint32_t record_bytes,
                                 uint64_t max_bytes) {
  auto batch = std::make_shared<Batch>();
  const size_t count = max_bytes / record_bytes;
  for (size_t i = 0; i < count; ++i) {
    batch->keys.push_back(absl::StrCat(prefix, "-", 100000 + i));  // all of one length
    batch->values.push_back(
        std::string(record_bytes - kRecordHeaderBytes - batch->keys.back().size(), 'a' + i % 26));
  }
  for (size_t i = 0; i < count; ++i) {
    batch->ops.push_back(WriteOp{false, batch->keys[i], batch->values[i]});
  }
  return batch;
}

// max_batch_bytes() is a promise: a batch of up to that many record bytes is written, however
// badly its records pack. Records are packed whole, so records of just over half a page's
// payload take a page each; the old limit (~105 KB, 26 pages' payload) let such a batch ask for
// 51 pages of the 32 its shard owns, and Write waited for them forever.
TEST_P(CapacityTest, BatchOfMaxBatchBytesIsWrittenHoweverItsRecordsPack) {
  std::shared_ptr<Engine> engine = OpenMemStore(64 << 20);
  ASSERT_NE(engine, nullptr);
  const uint64_t limit = engine->max_batch_bytes();
  // One record per page (the worst), three per page, and two per page.
  for (uint32_t record_bytes : {kPayloadBytes / 2 + 1, 1034u, 2000u}) {
    std::shared_ptr<Batch> batch = MakeBatch(absl::StrCat("r", record_bytes), record_bytes, limit);
    ASSERT_GT(batch->ops.size(), 1u);
    ASSERT_GT((batch->ops.size() + 1) * record_bytes, limit);  // as large as the limit allows
    std::optional<absl::Status> written = WithinLimit(
        [engine, batch] { return engine->Write(batch->ops, /*durable=*/true); },
        absl::Seconds(20));
    ASSERT_TRUE(written.has_value())
        << "a batch of " << batch->ops.size() << " records of " << record_bytes
        << " bytes (limit " << limit << ") did not return within 20 s";
    ASSERT_THAT(*written, IsOk()) << record_bytes;
    for (size_t i = 0; i < batch->ops.size(); ++i) {
      auto got = engine->Get(batch->keys[i]);
      ASSERT_THAT(got, IsOk()) << batch->keys[i];
      EXPECT_EQ(*got, batch->values[i]) << batch->keys[i];
    }
  }
}

// 50 puts of 2,060-byte values (about 104 KB) need 50 pages: more than a shard owns. Write used
// to wait for them forever; it is over the limit now, and refused before anything is written.
TEST_P(CapacityTest, BatchNeedingMorePagesThanAShardOwnsIsRefusedNotLeftWaiting) {
  std::shared_ptr<Engine> engine = OpenMemStore(64 << 20);
  ASSERT_NE(engine, nullptr);
  auto batch = std::make_shared<Batch>();
  for (int i = 0; i < 50; ++i) {
    batch->keys.push_back(absl::StrCat("key", 10 + i));
    batch->values.push_back(std::string(2060, 'v'));
  }
  for (int i = 0; i < 50; ++i) {
    batch->ops.push_back(WriteOp{false, batch->keys[i], batch->values[i]});
  }
  std::optional<absl::Status> written = WithinLimit(
      [engine, batch] { return engine->Write(batch->ops, /*durable=*/true); }, absl::Seconds(20));
  ASSERT_TRUE(written.has_value()) << "Write did not return within 20 s";
  EXPECT_THAT(*written, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(engine->Get("key10"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(engine->Stats().live_keys, 0u);
}


// Puts distinct keys with 4,000-byte values (records of 4,034 bytes, one a page) until the store
// refuses one; returns how many it took and the refusal, and how long the refused put took.
uint64_t FillWithDistinctPuts(Engine& engine, absl::Status* refusal, absl::Duration* refused_in) {
  const std::string value(4000, 'v');
  uint64_t written = 0;
  absl::Status status;
  while (status.ok()) {
    const std::string key = absl::StrCat("key", 1000000 + written);  // 10 bytes
    WriteOp op{false, key, value};
    const absl::Time start = absl::Now();
    status = engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
    *refused_in = absl::Now() - start;
    if (status.ok()) ++written;
    if (written >= 1'000'000) break;  // far more than any store here holds
  }
  *refusal = status;
  return written;
}

// Distinct puts fill a 16 MiB store (15 segments of 1 MiB, 4 shards) up to what Stats says is
// usable, and the put that finds it full is refused at once. It used to wait 2 s for
// compaction, which had nothing to clean (every record is live).
//
// The bound: values of 4,000 bytes make records of 4,034 bytes, one a page (4,056 bytes of
// payload). Puts may fill usable_bytes, every segment but the reserve; the put that fails is
// the one whose shard's head segment is full, while the head of each other shard may still
// have up to a segment unused. So the live bytes reach at least
// (usable_bytes - (shard_count - 1) segments) / page_bytes records of 4,034 bytes.
TEST_P(CapacityTest, DistinctPutsFillTheUsableCapacityThenFailAtOnce) {
  Options options;
  options.segment_bytes = 1 << 20;
  std::shared_ptr<Engine> engine = OpenMemStore(16 << 20, options);
  ASSERT_NE(engine, nullptr);
  const std::string value(4000, 'v');
  absl::Status status;
  absl::Duration failing_put;
  const uint64_t written = FillWithDistinctPuts(*engine, &status, &failing_put);
  ASSERT_LT(written, 4000u) << "16 MiB cannot hold 4,000 pages of records";
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_LT(failing_put, absl::Seconds(1));
  const EngineStats stats = engine->Stats();
  const uint64_t segment_bytes = uint64_t{stats.page_bytes} * stats.pages_per_segment;
  ASSERT_EQ(stats.segments_total, 15u);
  EXPECT_EQ(stats.capacity_bytes, 15 * segment_bytes);
  // Every segment but one per shard and two more: 9 of 15, each but its last page (kept for
  // the free marker) when conventional; a zone whole (a reset frees it).
  const uint64_t log_bytes =
      GetParam() == Layout::kZoned ? segment_bytes : segment_bytes - stats.page_bytes;
  EXPECT_EQ(stats.usable_bytes, (15 - stats.shard_count - 2) * log_bytes);
  const uint32_t record_bytes = kRecordHeaderBytes + 10 + 4000;
  const uint64_t pages_sure =
      (stats.usable_bytes - (stats.shard_count - 1) * log_bytes) / stats.page_bytes;
  EXPECT_EQ(stats.live_bytes, written * record_bytes);
  EXPECT_GE(stats.live_bytes, pages_sure * record_bytes);
  // Everything acknowledged reads back.
  for (uint64_t i = 0; i < written; i += 97) {
    auto got = engine->Get(absl::StrCat("key", 1000000 + i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, value);
  }
}

// `count` keys named after `prefix` that fall in shard `shard` of `shard_count`.
std::vector<std::string> KeysOfShard(const std::string& prefix, uint32_t shard,
                                     uint32_t shard_count, size_t count) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; keys.size() < count; ++i) {
    std::string key = absl::StrCat(prefix, 1000000 + i);
    if (ShardIndexFor(HashKey(key), shard_count) == shard) keys.push_back(std::move(key));
  }
  return keys;
}

// Batches keep the free segments user writes must leave, as single puts do: once one shard's
// puts are refused, a batch to another shard whose log head still has room is refused too. (The
// head's segment may be one compaction took from the reserve; batches used to fill it, and then
// drain what compaction needs, while single puts were refused.)
TEST_P(CapacityTest, BatchesAreRefusedWhereSinglePutsAre) {
  Options options;
  options.shard_count = 2;
  options.background_compaction = false;  // nothing frees a segment meanwhile
  std::shared_ptr<Engine> engine = OpenMemStore(16 << 20, options);
  ASSERT_NE(engine, nullptr);
  const std::string value(1000, 'v');
  const std::vector<std::string> other = KeysOfShard("other", 1, 2, 8);
  WriteOp first{false, other[0], value};
  ASSERT_THAT(engine->Write(std::span<const WriteOp>(&first, 1), true), IsOk());  // a head
  const std::vector<std::string> fill = KeysOfShard("fill", 0, 2, 20000);
  absl::Status status;
  for (size_t i = 0; status.ok() && i < fill.size(); ++i) {
    WriteOp op{false, fill[i], value};
    status = engine->Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
  }
  ASSERT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  WriteOp single{false, other[1], value};
  EXPECT_THAT(engine->Write(std::span<const WriteOp>(&single, 1), true),
              StatusIs(absl::StatusCode::kResourceExhausted));
  std::vector<WriteOp> batch;
  for (size_t i = 2; i < other.size(); ++i) batch.push_back(WriteOp{false, other[i], value});
  EXPECT_THAT(engine->Write(batch, true), StatusIs(absl::StatusCode::kResourceExhausted));
  // Deletes still go in, batched or not, and compaction still finds room to work.
  std::vector<WriteOp> deletes;
  for (size_t i = 0; i < 200; ++i) deletes.push_back(WriteOp{true, fill[i], {}});
  EXPECT_THAT(engine->Write(deletes, true), IsOk());
  EXPECT_THAT(engine->CompactAll(), IsOk());
  EXPECT_THAT(engine->Write(batch, true), IsOk());
}

// A store written by batches alone, overwriting and deleting at random, runs full and back
// without ever wedging: each write returns at once (taken, or refused for room), compaction
// keeps cleaning, and once deletes have made room the batches go in again.
TEST_P(CapacityTest, BatchesAloneFillAndChurnAStoreWithoutWedging) {
  Options options;
  options.shard_count = 2;
  std::shared_ptr<Engine> engine = OpenMemStore(16 << 20, options);
  ASSERT_NE(engine, nullptr);
  struct Model {
    std::vector<std::string> keys;
    std::vector<std::string> values;  // "" for absent
  };
  auto model = std::make_shared<Model>();
  for (int i = 0; i < 12000; ++i) {
    model->keys.push_back(absl::StrCat("churn", 100000 + i));
    model->values.emplace_back();
  }
  std::optional<absl::Status> churned = WithinLimit(
      [engine, model]() -> absl::Status {
        uint64_t rng = 42, refused = 0;
        bool refused_last = false;
        for (int round = 0; round < 1500; ++round) {
          std::vector<WriteOp> ops;
          std::vector<std::pair<size_t, std::string>> applied;
          const bool deleting = refused_last || round % 7 == 0;
          for (int i = 0; i < 16; ++i) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const size_t k = (rng >> 33) % model->keys.size();
            bool dup = false;
            for (const auto& a : applied) dup = dup || a.first == k;
            if (dup) continue;
            std::string v = deleting ? "" : absl::StrCat("v", round, "-", std::string(1500, 'c'));
            applied.emplace_back(k, std::move(v));
          }
          for (const auto& [k, v] : applied) {
            ops.push_back(WriteOp{v.empty(), model->keys[k], v});
          }
          const absl::Status status = engine->Write(ops, /*durable=*/round % 3 == 0);
          if (absl::IsResourceExhausted(status)) {
            if (deleting) return absl::InternalError("a batch of deletes was refused");
            ++refused;
            refused_last = true;
            continue;
          }
          if (!status.ok()) return status;
          refused_last = false;
          for (const auto& [k, v] : applied) model->values[k] = v;
        }
        if (refused == 0) return absl::InternalError("the store never ran full");
        NVKV_RETURN_IF_ERROR(engine->CompactAll());
        return absl::OkStatus();
      },
      absl::Seconds(120));
  ASSERT_TRUE(churned.has_value()) << "a batch write or compaction wedged";
  ASSERT_THAT(*churned, IsOk());
  for (size_t k = 0; k < model->keys.size(); k += 7) {
    absl::StatusOr<std::string> got = engine->Get(model->keys[k]);
    if (model->values[k].empty()) {
      EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kNotFound)) << model->keys[k];
    } else {
      ASSERT_THAT(got, IsOk()) << model->keys[k];
      EXPECT_EQ(*got, model->values[k]);
    }
  }
}

// With the default options a small store still holds most of its capacity: its segments are
// sized to it (Options::segment_bytes), so the segments compaction needs kept free are a
// small part of it. With 1 MiB segments whatever the size, 16 MiB filled to 46% and 8 MiB was
// refused as too small.
TEST_P(CapacityTest, SmallStoreWithDefaultOptionsHoldsMostOfItsCapacity) {
  if (GetParam() == Layout::kZoned) GTEST_SKIP() << "a zone's size is the device's, not sized";
  for (const uint64_t capacity : {uint64_t{8} << 20, uint64_t{16} << 20, uint64_t{64} << 20}) {
    SCOPED_TRACE(absl::StrCat(capacity >> 20, " MiB"));
    std::shared_ptr<Engine> engine = OpenMemStore(capacity);
    if (engine == nullptr) continue;  // OpenMemStore reported why
    absl::Status status;
    absl::Duration failing_put;
    const uint64_t written = FillWithDistinctPuts(*engine, &status, &failing_put);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_LT(failing_put, absl::Seconds(1));
    const EngineStats stats = engine->Stats();
    // 64 segments, 6 of them kept free (4 shards): 89% usable. Records of 4,034 bytes take a
    // 4 KiB page each (98.5% of it), and the put that fails finds its shard's segment full while
    // the other three heads may have up to a segment unused: at least 83% of the capacity.
    EXPECT_GE(static_cast<double>(stats.live_bytes), 0.80 * capacity)
        << written << " records, " << stats.segments_total << " segments of "
        << stats.pages_per_segment << " pages, usable " << stats.usable_bytes;
    EXPECT_GE(stats.usable_bytes, 0.85 * capacity);
    EXPECT_LE(stats.live_bytes, stats.usable_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CapacityTest,
                         ::testing::Values(Layout::kConventional, Layout::kZoned),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace nvkv::kv
