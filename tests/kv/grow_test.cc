// Growing a store (Options::grow_store, kv/FORMAT.md "Growing a store"): a store file is
// extended to capacity_bytes and the store takes the new segments, keeping every key and its
// checkpoint; without the option a store keeps its size; and a power cut at any point of a grow
// leaves the store whole, at its old size or its new one.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/engine_ops.h"
#include "tests/kv/mem_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr int kKeys = 2000;

std::string Key(int i) { return absl::StrCat("key-", i); }
std::string Value(int i) { return absl::StrCat("value ", i, std::string(100 + i % 300, 'v')); }

// Every segment gets a summary (the segments are small).
constexpr EngineSeams kSeams{.summary_min_segment_pages = 0};

Options Store(IndexMode mode = IndexMode::kAsFormatted) {
  Options options;
  options.capacity_bytes = 16 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  options.index_mode = mode;
  return options;
}

Options Grow(uint64_t capacity_bytes) {
  Options options = Store();
  options.create_if_missing = false;
  options.grow_store = true;
  options.capacity_bytes = capacity_bytes;
  return options;
}

void ExpectEveryKey(Engine& engine) {
  for (int i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::string> got = engine.Get(Key(i));
    ASSERT_THAT(got, IsOk()) << Key(i);
    ASSERT_EQ(*got, Value(i)) << Key(i);
  }
}

void ExpectCheckClean(Engine& engine) {
  absl::StatusOr<CheckReport> report = engine.Check();
  ASSERT_THAT(report, IsOk());
  for (const std::string& problem : report->problems) ADD_FAILURE() << problem;
}

class GrowTest : public ::testing::TestWithParam<IndexMode> {
 protected:
  // A 16 MiB store file with kKeys keys, closed.
  void SetUp() override {
    auto engine = Engine::Open(path_, Store(GetParam()), kSeams);
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < kKeys; ++i) ASSERT_THAT(Put(**engine, Key(i), Value(i), false), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
    segments_before_ = 0;
    auto reopened = Engine::Open(path_, Store(), kSeams);
    ASSERT_THAT(reopened, IsOk());
    segments_before_ = (*reopened)->Stats().segments_total;
  }

  std::unique_ptr<Engine> Open(const Options& options, const EngineSeams& seams = kSeams) {
    auto engine = Engine::Open(path_, options, seams);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  nvkv::testing::TempDir dir_;
  std::string path_ = dir_.File("store");
  uint64_t segments_before_ = 0;
};

// Grown from 16 to 64 MiB: every key is there (from the checkpoint of the last Close when its
// key filters fit the larger store, else from the log), the new room takes more than the old
// store held, and the size stays.
TEST_P(GrowTest, AStoreFileGrowsToCapacityKeepingEveryKey) {
  auto engine = Open(Grow(64 << 20));
  ASSERT_NE(engine, nullptr);
  const EngineStats grown = engine->Stats();
  EXPECT_GT(grown.segments_total, 3 * segments_before_);
  EXPECT_EQ(grown.device.capacity_bytes, uint64_t{64} << 20);
  EXPECT_GE(grown.segments_free, grown.segments_total - segments_before_);
  ExpectEveryKey(*engine);
  // 24 MiB more of values: more than the whole store held before.
  const std::string big(60000, 'b');
  for (int i = 0; i < 420; ++i) {
    ASSERT_THAT(Put(*engine, absl::StrCat("big-", i), big, false), IsOk()) << i;
  }
  ExpectCheckClean(*engine);
  ASSERT_THAT(engine->Close(), IsOk());
  engine = Open(Store());  // no grow_store: the store keeps its new size
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().segments_total, grown.segments_total);
  ExpectEveryKey(*engine);
  EXPECT_EQ(*engine->Get("big-419"), big);
  ExpectCheckClean(*engine);
}

// Without grow_store a store keeps the size it was formatted with, whatever its file's; with it,
// a file extended by other means is taken whole, and a capacity below the file's size changes
// nothing (a store never shrinks).
TEST_P(GrowTest, OnlyGrowStoreGrowsAndNeverShrinks) {
  ASSERT_EQ(truncate(path_.c_str(), 48 << 20), 0);
  auto engine = Open(Store());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().segments_total, segments_before_);
  engine.reset();
  engine = Open(Grow(1 << 20));  // below the file's size: the file as it is
  ASSERT_NE(engine, nullptr);
  const uint64_t grown = engine->Stats().segments_total;
  EXPECT_GT(grown, 2 * segments_before_);
  ExpectEveryKey(*engine);
  engine.reset();
  engine = Open(Grow(1 << 20));  // nothing more to take
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().segments_total, grown);
  ExpectEveryKey(*engine);
  ExpectCheckClean(*engine);
}

// A store closed without a checkpoint (its segments summarized) grows the same: recovery reads
// the summaries at their places, with the map at its new one.
TEST_P(GrowTest, AStoreWithoutACheckpointGrowsToo) {
  {
    EngineSeams no_checkpoint = kSeams;
    no_checkpoint.checkpoint_at_close = false;
    auto engine = Open(Store(), no_checkpoint);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < kKeys; i += 3) ASSERT_THAT(Put(*engine, Key(i), Value(i), true), IsOk());
    ASSERT_THAT(engine->Close(), IsOk());
  }
  auto engine = Open(Grow(32 << 20));
  ASSERT_NE(engine, nullptr);
  EXPECT_GT(engine->Stats().segments_total, segments_before_);
  EXPECT_NE(engine->Stats().recovery_start, RecoveryStart::kCleanClose);
  ExpectEveryKey(*engine);
  ExpectCheckClean(*engine);
}

TEST(GrowOptionsTest, AReaderCannotGrow) {
  nvkv::testing::TempDir dir;
  Options options = Store();
  options.read_only = true;
  options.grow_store = true;
  EXPECT_THAT(Engine::Open(dir.File("store"), options, kSeams),
              StatusIs(absl::StatusCode::kInvalidArgument, "grow_store"));
}

INSTANTIATE_TEST_SUITE_P(BothIndexModes, GrowTest,
                         ::testing::Values(IndexMode::kHash, IndexMode::kOrdered),
                         [](const ::testing::TestParamInfo<IndexMode>& info) {
                           return info.param == IndexMode::kHash ? "Hash" : "Ordered";
                         });

// Power cuts during a grow, on a device larger than the store (a store of 63 segments copied onto
// a device of 4x its size): the cut comes after 1, 2, ... device operations of the growing Open,
// and the writes not yet durable are kept, dropped or torn. Then an Open without grow_store
// finds the store at its old size or its new one, with every key and a clean check, and an Open
// with grow_store grows it the rest of the way.
TEST(GrowCrashTest, APowerCutWhileGrowingLeavesTheStoreWholeAtOneSize) {
  constexpr uint64_t kSegments = 63;
  constexpr uint32_t kPagesPerSegment = 64;
  storage::MemDeviceOptions small = MemStoreOptions(kSegments, kPagesPerSegment);
  auto created = storage::MemDevice::Create(small);
  ASSERT_THAT(created, IsOk());
  std::shared_ptr<storage::MemStorage> small_storage = (*created)->storage();
  {
    auto engine = Engine::OpenOnDevice(std::move(*created), Store(), kSeams);
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < kKeys; ++i) ASSERT_THAT(Put(**engine, Key(i), Value(i), false), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  storage::MemDeviceOptions large = small;
  large.lba_count = small.lba_count * 4;
  const std::vector<uint8_t> image = small_storage->CopyOut(0, small_storage->lba_count());
  int grown_runs = 0, old_size_runs = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    auto storage = storage::MemStorage::Create(large.lba_bytes, large.lba_count);
    ASSERT_THAT(storage, IsOk());
    (*storage)->Write(0, small_storage->lba_count(), image.data());
    {
      auto inner = storage::MemDevice::Open(*storage, large);
      ASSERT_THAT(inner, IsOk());
      auto device = storage::FaultDevice::Create(std::move(*inner), {.seed = seed});
      ASSERT_THAT(device, IsOk());
      storage::FaultDevice* fault = device->get();
      ASSERT_THAT(fault->SetCutAfterOperations(1 + seed % 20), IsOk());
      Options grow = Store();
      grow.create_if_missing = false;
      grow.grow_store = true;
      auto engine = Engine::OpenOnDevice(std::move(*device), grow, kSeams);
      if (engine.ok()) (void)(*engine)->Close();  // the cut came after the grow, or not at all
    }
    auto rebooted = storage::MemDevice::Open(*storage, large);
    ASSERT_THAT(rebooted, IsOk());
    Options plain = Store();
    plain.create_if_missing = false;
    auto engine = Engine::OpenOnDevice(std::move(*rebooted), plain, kSeams);
    ASSERT_THAT(engine, IsOk());
    const uint64_t segments = (*engine)->Stats().segments_total;
    EXPECT_TRUE(segments == kSegments || segments > 3 * kSegments) << segments;
    (segments == kSegments ? old_size_runs : grown_runs) += 1;
    ExpectEveryKey(**engine);
    ExpectCheckClean(**engine);
    ASSERT_THAT((*engine)->Close(), IsOk());
    engine->reset();
    auto again = storage::MemDevice::Open(*storage, large);
    ASSERT_THAT(again, IsOk());
    Options grow = Store();
    grow.create_if_missing = false;
    grow.grow_store = true;
    auto regrown = Engine::OpenOnDevice(std::move(*again), grow, kSeams);
    ASSERT_THAT(regrown, IsOk());
    EXPECT_GT((*regrown)->Stats().segments_total, 3 * kSegments);
    ExpectEveryKey(**regrown);
    ExpectCheckClean(**regrown);
  }
  // The cuts fell both before the new superblock and after it.
  EXPECT_GT(old_size_runs, 0);
  EXPECT_GT(grown_runs, 0);
}

}  // namespace
}  // namespace nvkv::kv
