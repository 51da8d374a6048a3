// FaultDevice, part 2: durability and power cuts. Which writes a flush or FUA makes durable,
// what a cut keeps, drops or tears (checked byte for byte against its report and a reference
// model), refusal after the cut, reboot over the same storage, and a file as the inner device.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "storage/base/check.h"
#include "storage/base/split_mix64.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/block_pattern.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::AsyncIo;
using ::nvkv::testing::IsOk;
using ::nvkv::testing::Pattern;
using ::nvkv::testing::ReadBack;
using ::nvkv::testing::StatusIs;
using ::nvkv::testing::WritePattern;

constexpr uint32_t kLbaBytes = 4096;
constexpr uint32_t kSectorBytes = 512;
constexpr uint32_t kSectorsPerLba = kLbaBytes / kSectorBytes;
const std::vector<uint8_t> kZeroBlock(kLbaBytes, 0);

MemDeviceOptions MemOptions() {
  MemDeviceOptions options;
  options.lba_bytes = kLbaBytes;
  options.lba_count = 64;
  options.queue_depth = 4;
  options.buffers.buffer_count = 16;
  options.buffers.chunk_count = 4;
  return options;
}

FaultDeviceOptions Weights(uint32_t keep, uint32_t drop, uint32_t tear, uint64_t seed = 1) {
  return FaultDeviceOptions{.seed = seed, .keep_weight = keep, .drop_weight = drop,
                            .tear_weight = tear};
}
const FaultDeviceOptions kDropAll = Weights(0, 1, 0);
const FaultDeviceOptions kKeepAll = Weights(1, 0, 0);
const FaultDeviceOptions kTearAll = Weights(0, 0, 1);

struct Rig {
  std::shared_ptr<MemStorage> storage;
  std::unique_ptr<FaultDevice> device;
};

Rig MakeRig(const FaultDeviceOptions& options, const MemDeviceOptions& mem = MemOptions()) {
  auto inner = MemDevice::Create(mem);
  NVKV_CHECK(inner.ok());
  Rig rig;
  rig.storage = (*inner)->storage();
  auto device = FaultDevice::Create(std::move(*inner), options);
  NVKV_CHECK(device.ok());
  rig.device = std::move(*device);
  return rig;
}

CutReport MustCut(FaultDevice& device) {
  auto report = device.CutPower();
  NVKV_CHECK(report.ok());
  NVKV_CHECK(report->status.ok());
  return *report;
}

// --- What becomes durable. ---

TEST(FaultDevicePowerCutTest, FlushMakesCompletedWritesSurviveCut) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(WritePattern(*rig.device, 0, 2, 1), IsOk());
  ASSERT_THAT(FlushDevice(*rig.device), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 2, 1, 2), IsOk());
  const CutReport report = MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(0, 2), Pattern(2 * kLbaBytes, 1));
  EXPECT_EQ(rig.storage->CopyOut(2, 1), kZeroBlock);
  ASSERT_EQ(report.writes.size(), 1u);  // only the write after the flush was at risk
  EXPECT_EQ(report.writes[0].lba, 2u);
  EXPECT_EQ(report.writes_dropped, 1u);
}

TEST(FaultDevicePowerCutTest, FuaWriteSurvivesCut) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(WritePattern(*rig.device, 3, 1, 1, /*fua=*/true), IsOk());
  const CutReport report = MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(3, 1), Pattern(kLbaBytes, 1));
  EXPECT_TRUE(report.writes.empty());
}

TEST(FaultDevicePowerCutTest, WriteInFlightWhenFlushIsSubmittedIsNotCoveredByIt) {
  Rig rig = MakeRig(kDropAll);
  AsyncIo write(*rig.device, IoOp::kWrite, 4, 1, 1);
  AsyncIo flush(*rig.device, IoOp::kFlush, 0, 0);
  ASSERT_THAT(write.Enqueue(), IsOk());
  ASSERT_THAT(rig.device->Submit(), IsOk());
  ASSERT_THAT(flush.Enqueue(), IsOk());  // the write has not completed (not reaped) yet
  ASSERT_THAT(rig.device->Reap(2), IsOk());
  ASSERT_THAT(write.status(), IsOk());
  ASSERT_THAT(flush.status(), IsOk());
  const CutReport report = MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(4, 1), kZeroBlock);
  ASSERT_EQ(report.writes.size(), 1u);
  EXPECT_TRUE(report.writes[0].completed);  // completed, yet after the flush was submitted
}

struct FlushOnDone {
  AsyncIo* flush = nullptr;
};

void EnqueueFlushOnDone(IoRequest* request) {
  auto* follow = static_cast<FlushOnDone*>(request->context);
  NVKV_CHECK(follow->flush->Enqueue().ok());
}

TEST(FaultDevicePowerCutTest, FlushFromACallbackCoversEveryWriteOfThatReap) {
  Rig rig = MakeRig(kDropAll);
  AsyncIo flush(*rig.device, IoOp::kFlush, 0, 0);
  FlushOnDone follow{&flush};
  AsyncIo second(*rig.device, IoOp::kWrite, 1, 1, 2);
  IoRequest first_request;  // the first write, with a callback that enqueues the flush
  first_request.op = IoOp::kWrite;
  first_request.lba = 2;
  first_request.lba_count = 1;
  first_request.buffer = rig.device->buffers().GetPage();
  nvkv::testing::FillPattern(first_request.buffer.data, kLbaBytes, 3);
  first_request.on_done = EnqueueFlushOnDone;
  first_request.context = &follow;
  ASSERT_THAT(rig.device->Enqueue(&first_request), IsOk());
  ASSERT_THAT(second.Enqueue(), IsOk());
  ASSERT_THAT(rig.device->Reap(2), IsOk());  // both harvested, then the callback flushes
  ASSERT_THAT(rig.device->Reap(1), IsOk());
  ASSERT_TRUE(flush.done());
  ASSERT_THAT(flush.status(), IsOk());
  const CutReport report = MustCut(*rig.device);
  EXPECT_TRUE(report.writes.empty());
  EXPECT_EQ(rig.storage->CopyOut(2, 1), Pattern(kLbaBytes, 3));
  EXPECT_EQ(rig.storage->CopyOut(1, 1), Pattern(kLbaBytes, 2));  // its callback ran after
}

TEST(FaultDevicePowerCutTest, FailedFlushMakesNothingDurable) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(WritePattern(*rig.device, 5, 1, 1), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.filter = OpFilter::kFlush}), IsOk());
  ASSERT_FALSE(FlushDevice(*rig.device).ok());
  MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(5, 1), kZeroBlock);
}

TEST(FaultDevicePowerCutTest, InnerWithoutVolatileCacheMakesCompletedWritesDurable) {
  MemDeviceOptions mem = MemOptions();
  mem.volatile_write_cache = false;
  Rig rig = MakeRig(kDropAll, mem);
  ASSERT_THAT(WritePattern(*rig.device, 6, 1, 1), IsOk());
  const CutReport report = MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(6, 1), Pattern(kLbaBytes, 1));
  EXPECT_TRUE(report.writes.empty());
}

TEST(FaultDevicePowerCutTest, StatsCountUnflushedAndDurableWrites) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 1, 1, 2), IsOk());
  EXPECT_EQ(rig.device->fault_stats().unflushed_writes, 2u);
  ASSERT_THAT(FlushDevice(*rig.device), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 2, 1, 3, /*fua=*/true), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 3, 1, 4), IsOk());
  const FaultStats stats = rig.device->fault_stats();
  EXPECT_EQ(stats.unflushed_writes, 1u);
  EXPECT_EQ(stats.durable_writes, 3u);
  EXPECT_EQ(stats.operations, 5u);
  EXPECT_EQ(stats.flushes, 1u);
  EXPECT_TRUE(stats.powered);
}

// --- What a cut does to unflushed writes. ---

TEST(FaultDevicePowerCutTest, InFlightWriteAtCutIsAnUnflushedWrite) {
  Rig rig = MakeRig(kKeepAll);
  AsyncIo write(*rig.device, IoOp::kWrite, 7, 1, 1, /*fua=*/true);  // FUA, but not completed
  ASSERT_THAT(write.Enqueue(), IsOk());
  const CutReport report = MustCut(*rig.device);
  ASSERT_EQ(report.writes.size(), 1u);
  EXPECT_FALSE(report.writes[0].completed);
  EXPECT_EQ(report.writes[0].fate, WriteFate::kKept);
  EXPECT_EQ(rig.storage->CopyOut(7, 1), Pattern(kLbaBytes, 1));
  ASSERT_THAT(rig.device->Reap(1), IsOk());
}

TEST(FaultDevicePowerCutTest, TornWriteAtCutKeepsAProperSubsetOfSectorsWithinABlock) {
  Rig rig = MakeRig(kTearAll);
  ASSERT_THAT(WritePattern(*rig.device, 8, 1, 1), IsOk());
  const CutReport report = MustCut(*rig.device);
  ASSERT_EQ(report.writes.size(), 1u);
  EXPECT_EQ(report.writes[0].fate, WriteFate::kTorn);
  const std::vector<bool>& kept = report.writes[0].sectors_kept;
  ASSERT_EQ(kept.size(), kSectorsPerLba);  // 512-byte sectors inside one 4 KiB block
  const std::vector<uint8_t> now = rig.storage->CopyOut(8, 1);
  const std::vector<uint8_t> written = Pattern(kLbaBytes, 1);
  int kept_count = 0;
  for (uint32_t s = 0; s < kSectorsPerLba; ++s) {
    for (uint32_t b = s * kSectorBytes; b < (s + 1) * kSectorBytes; ++b) {
      ASSERT_EQ(now[b], kept[s] ? written[b] : 0) << "sector " << s << " byte " << b;
    }
    kept_count += kept[s] ? 1 : 0;
  }
  EXPECT_GT(kept_count, 0);
  EXPECT_LT(kept_count, static_cast<int>(kSectorsPerLba));
  EXPECT_EQ(report.writes_torn, 1u);
}

TEST(FaultDevicePowerCutTest, SectorOfAWholeBlockTearsWholeBlocks) {
  FaultDeviceOptions options = kTearAll;
  options.sector_bytes = kLbaBytes;
  Rig rig = MakeRig(options);
  ASSERT_THAT(WritePattern(*rig.device, 10, 4, 1), IsOk());
  const CutReport report = MustCut(*rig.device);
  const std::vector<bool>& kept = report.writes.at(0).sectors_kept;
  ASSERT_EQ(kept.size(), 4u);
  const std::vector<uint8_t> written = Pattern(4 * kLbaBytes, 1);
  for (uint32_t block = 0; block < 4; ++block) {
    const std::vector<uint8_t> want =
        kept[block] ? std::vector<uint8_t>(written.begin() + block * kLbaBytes,
                                           written.begin() + (block + 1) * kLbaBytes)
                    : kZeroBlock;
    EXPECT_EQ(rig.storage->CopyOut(10 + block, 1), want) << "block " << block;
  }
}

TEST(FaultDevicePowerCutTest, OneSectorWriteIsNeverTorn) {
  MemDeviceOptions mem = MemOptions();
  mem.lba_bytes = 512;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Rig rig = MakeRig(Weights(0, 0, 1, seed), mem);
    ASSERT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());
    const CutReport report = MustCut(*rig.device);
    EXPECT_NE(report.writes.at(0).fate, WriteFate::kTorn);
  }
}

TEST(FaultDevicePowerCutTest, OverlappingWritesRollBackNewestFirst) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(WritePattern(*rig.device, 12, 2, 1), IsOk());  // A, durable
  ASSERT_THAT(FlushDevice(*rig.device), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 12, 2, 2), IsOk());  // B over A
  ASSERT_THAT(WritePattern(*rig.device, 13, 2, 3), IsOk());  // C over half of B
  MustCut(*rig.device);
  EXPECT_EQ(rig.storage->CopyOut(12, 2), Pattern(2 * kLbaBytes, 1));
  EXPECT_EQ(rig.storage->CopyOut(14, 1), kZeroBlock);
}

TEST(FaultDevicePowerCutTest, DurableNewerWriteShieldsItsSectorsFromAnOlderDrop) {
  Rig rig = MakeRig(kDropAll);
  auto second = rig.device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  AsyncIo older(*rig.device, IoOp::kWrite, 16, 2, 1);
  ASSERT_THAT(older.Enqueue(), IsOk());  // stays in flight on the first queue
  ASSERT_THAT(WritePattern(**second, 17, 1, 2), IsOk());  // over its second block
  ASSERT_THAT(FlushDevice(**second), IsOk());             // newer write now durable
  const CutReport report = MustCut(*rig.device);
  ASSERT_EQ(report.writes.size(), 1u);
  EXPECT_EQ(rig.storage->CopyOut(16, 1), kZeroBlock);  // the older write's own block reverts
  EXPECT_EQ(rig.storage->CopyOut(17, 1), Pattern(kLbaBytes, 2));
  ASSERT_THAT(rig.device->Reap(1), IsOk());
}

// One seeded run: a durable baseline, then ten writes (overlapping, of 1-3 blocks, the last
// three still in flight), then a cut. Returns the report and the first 16 blocks afterwards.
struct SeededRun {
  struct Planned {
    uint64_t lba;
    uint32_t lba_count;
    uint64_t pattern;
  };
  std::vector<Planned> writes;
  CutReport report;
  std::vector<uint8_t> image;
};

SeededRun RunSeeded(uint64_t seed) {
  constexpr uint32_t kBlocks = 16;
  constexpr uint64_t kBaseline = 1000;
  Rig rig = MakeRig(Weights(1, 1, 1, seed));
  NVKV_CHECK(WritePattern(*rig.device, 0, kBlocks, kBaseline).ok());
  NVKV_CHECK(FlushDevice(*rig.device).ok());
  SeededRun run;
  SplitMix64 plan(seed ^ 0x5eed);
  std::vector<std::unique_ptr<AsyncIo>> in_flight;
  for (uint64_t i = 1; i <= 10; ++i) {
    const uint32_t count = 1 + static_cast<uint32_t>(plan.Below(3));
    const uint64_t lba = plan.Below(kBlocks - count + 1);
    run.writes.push_back({lba, count, i});
    if (i <= 7) {
      NVKV_CHECK(WritePattern(*rig.device, lba, count, i).ok());
    } else {
      in_flight.push_back(std::make_unique<AsyncIo>(*rig.device, IoOp::kWrite, lba, count, i));
      NVKV_CHECK(in_flight.back()->Enqueue().ok());
    }
  }
  run.report = MustCut(*rig.device);
  NVKV_CHECK(rig.device->Reap(3).ok());
  run.image = rig.storage->CopyOut(0, kBlocks);
  return run;
}

// The reference model: each sector holds the newest write that kept it, else the baseline.
std::vector<uint8_t> ExpectedImage(const SeededRun& run) {
  std::vector<uint8_t> image = Pattern(16 * kLbaBytes, 1000);
  for (size_t i = 0; i < run.writes.size(); ++i) {
    const SeededRun::Planned& write = run.writes[i];
    const std::vector<uint8_t> data = Pattern(write.lba_count * kLbaBytes, write.pattern);
    const std::vector<bool>& kept = run.report.writes[i].sectors_kept;
    for (uint32_t s = 0; s < kept.size(); ++s) {
      if (!kept[s]) continue;
      std::copy(data.begin() + s * kSectorBytes, data.begin() + (s + 1) * kSectorBytes,
                image.begin() + write.lba * kLbaBytes + s * kSectorBytes);
    }
  }
  return image;
}

TEST(FaultDevicePowerCutTest, CutOutcomeMatchesItsReportForEverySeed) {
  uint64_t kept = 0, dropped = 0, torn = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const SeededRun run = RunSeeded(seed);
    ASSERT_EQ(run.report.writes.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(run.report.writes[i].lba, run.writes[i].lba);
      EXPECT_EQ(run.report.writes[i].completed, i < 7);
    }
    EXPECT_EQ(run.image, ExpectedImage(run));
    kept += run.report.writes_kept;
    dropped += run.report.writes_dropped;
    torn += run.report.writes_torn;
  }
  // Equal weights over 400 writes: every fate shows up.
  EXPECT_GT(kept, 0u);
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(torn, 0u);
}

TEST(FaultDevicePowerCutTest, SameSeedReproducesTheSameCut) {
  SCOPED_TRACE("seed 7, then seed 8");
  const SeededRun first = RunSeeded(7);
  const SeededRun again = RunSeeded(7);
  ASSERT_EQ(first.report.writes.size(), again.report.writes.size());
  for (size_t i = 0; i < first.report.writes.size(); ++i) {
    EXPECT_EQ(first.report.writes[i].fate, again.report.writes[i].fate) << "write " << i;
    EXPECT_EQ(first.report.writes[i].sectors_kept, again.report.writes[i].sectors_kept);
  }
  EXPECT_EQ(first.image, again.image);
  EXPECT_NE(first.image, RunSeeded(8).image);  // and the seed does matter
}

// --- After the cut. ---

TEST(FaultDevicePowerCutTest, IoAfterCutIsRefused) {
  Rig rig = MakeRig(kDropAll);
  MustCut(*rig.device);
  AsyncIo read(*rig.device, IoOp::kRead, 0, 1);
  EXPECT_THAT(read.Enqueue(), StatusIs(absl::StatusCode::kFailedPrecondition, "power cut"));
  EXPECT_THAT(rig.device->Submit(), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The blocking helpers return at once rather than retrying (kUnavailable would loop).
  EXPECT_THAT(ReadBack(*rig.device, 0, 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(rig.device->CutPower(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(rig.device->fault_stats().powered);
  EXPECT_EQ(rig.device->fault_stats().operations, 0u);
}

TEST(FaultDevicePowerCutTest, RequestsInFlightAtCutCompleteWithUnavailable) {
  Rig rig = MakeRig(kDropAll);
  AsyncIo read(*rig.device, IoOp::kRead, 0, 1);
  AsyncIo write(*rig.device, IoOp::kWrite, 1, 1, 1);
  ASSERT_THAT(read.Enqueue(), IsOk());
  ASSERT_THAT(write.Enqueue(), IsOk());
  MustCut(*rig.device);
  EXPECT_EQ(rig.device->in_flight(), 2u);
  auto reaped = rig.device->Reap(2);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 2u);
  EXPECT_THAT(read.status(), StatusIs(absl::StatusCode::kUnavailable, "power cut"));
  EXPECT_THAT(write.status(), StatusIs(absl::StatusCode::kUnavailable, "power cut"));
  EXPECT_EQ(rig.device->in_flight(), 0u);
}

TEST(FaultDevicePowerCutTest, CutAfterOperationsCutsRightAfterTheKthOperation) {
  Rig rig = MakeRig(kKeepAll);
  ASSERT_THAT(rig.device->SetCutAfterOperations(3), IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());
  EXPECT_THAT(ReadBack(*rig.device, 0, 1), IsOk());
  // The 3rd is accepted and carried out, then power fails before it completes.
  EXPECT_THAT(WritePattern(*rig.device, 1, 1, 2),
              StatusIs(absl::StatusCode::kUnavailable, "power cut"));
  EXPECT_THAT(WritePattern(*rig.device, 2, 1, 3),
              StatusIs(absl::StatusCode::kFailedPrecondition, "power cut"));
  const std::optional<CutReport> report = rig.device->last_cut();
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->operation, 3u);
  ASSERT_EQ(report->writes.size(), 2u);
  EXPECT_TRUE(report->writes[0].completed);
  EXPECT_FALSE(report->writes[1].completed);
  EXPECT_EQ(rig.storage->CopyOut(1, 1), Pattern(kLbaBytes, 2));  // kept, by the weights
}

TEST(FaultDevicePowerCutTest, CutAfterOperationsCanCountOnlyFlushes) {
  Rig rig = MakeRig(kDropAll);
  ASSERT_THAT(rig.device->SetCutAfterOperations(1, OpFilter::kFlush), IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 1, 1, 2), IsOk());
  EXPECT_THAT(FlushDevice(*rig.device), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(rig.device->last_cut()->operation, 3u);
  // The flush never completed, so it made nothing durable.
  EXPECT_EQ(rig.storage->CopyOut(0, 2), std::vector<uint8_t>(2 * kLbaBytes, 0));
}

TEST(FaultDevicePowerCutTest, CutOnOneQueueStopsTheWholeFamily) {
  Rig rig = MakeRig(kDropAll);
  auto second = rig.device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  auto* second_fault = static_cast<FaultDevice*>(second->get());
  MustCut(*second_fault);
  EXPECT_THAT(WritePattern(*rig.device, 0, 1, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, "power cut"));
  EXPECT_FALSE(rig.device->fault_stats().powered);
}

// The crash-test flow of fault_device.h, on a log of blocks: block i is written then flushed;
// after the reboot every block whose flush succeeded must be intact.
TEST(FaultDevicePowerCutTest, RebootOverTheSameStorageSeesTheDurablePrefix) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const MemDeviceOptions mem = MemOptions();
    auto first = MemDevice::Create(mem);
    ASSERT_THAT(first, IsOk());
    std::shared_ptr<MemStorage> storage = (*first)->storage();
    uint64_t acked = 0;  // blocks whose write and flush both succeeded
    {
      auto device = FaultDevice::Create(std::move(*first), {.seed = seed});
      ASSERT_THAT(device, IsOk());
      ASSERT_THAT((*device)->SetCutAfterOperations(1 + seed % 40), IsOk());
      for (uint64_t block = 0; block < 32; ++block) {
        if (!WritePattern(**device, block, 1, block + 1).ok()) break;
        if (!FlushDevice(**device).ok()) break;
        acked = block + 1;
      }
      ASSERT_FALSE((*device)->fault_stats().powered);
    }
    auto rebooted = MemDevice::Open(storage, mem);
    ASSERT_THAT(rebooted, IsOk());
    for (uint64_t block = 0; block < acked; ++block) {
      auto data = ReadBack(**rebooted, block, 1);
      ASSERT_THAT(data, IsOk());
      EXPECT_EQ(*data, Pattern(kLbaBytes, block + 1)) << "block " << block;
    }
  }
}

TEST(FaultDevicePowerCutTest, WorksOverAFileDevice) {
  nvkv::testing::TempDir dir;
  DeviceOptions file_options;
  file_options.create_bytes = 1 << 20;
  file_options.ring.queue_depth = 4;
  file_options.buffers.buffer_count = 8;
  file_options.buffers.chunk_count = 1;
  const std::string path = dir.File("store");
  uint32_t lba_bytes = 0;
  {
    auto file = OpenDevice(path, file_options);
    ASSERT_THAT(file, IsOk());
    lba_bytes = (*file)->info().lba_bytes;
    auto device = FaultDevice::Create(std::move(*file), kDropAll);
    ASSERT_THAT(device, IsOk());
    ASSERT_THAT(WritePattern(**device, 0, 1, 1), IsOk());
    ASSERT_THAT(FlushDevice(**device), IsOk());
    ASSERT_THAT(WritePattern(**device, 1, 1, 2), IsOk());
    ASSERT_THAT((*device)->FailOperation({.filter = OpFilter::kWrite}), IsOk());
    EXPECT_FALSE(WritePattern(**device, 2, 1, 3).ok());
    auto report = (*device)->CutPower();
    ASSERT_THAT(report, IsOk());
    EXPECT_THAT(report->status, IsOk());
  }  // the file's lock goes with the device
  auto reopened = OpenDevice(path, file_options);
  ASSERT_THAT(reopened, IsOk());
  auto data = ReadBack(**reopened, 0, 3);
  ASSERT_THAT(data, IsOk());
  std::vector<uint8_t> expected(3 * lba_bytes, 0);
  const std::vector<uint8_t> durable = Pattern(lba_bytes, 1);
  std::copy(durable.begin(), durable.end(), expected.begin());
  EXPECT_EQ(*data, expected);
}

TEST(FaultDevicePowerCutTest, QueuesOnTwoThreadsKeepTheirFlushedWrites) {
  Rig rig = MakeRig(kDropAll);
  auto second = rig.device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  auto run = [](Device* queue, uint64_t first_lba) {
    for (uint64_t lba = first_lba; lba < first_lba + 16; ++lba) {
      NVKV_CHECK(WritePattern(*queue, lba, 1, lba + 1).ok());
      NVKV_CHECK(FlushDevice(*queue).ok());
    }
  };
  std::thread a(run, rig.device.get(), 0);
  std::thread b(run, second->get(), 32);
  a.join();
  b.join();
  ASSERT_THAT(WritePattern(*rig.device, 0, 1, 99), IsOk());  // unflushed: must revert
  MustCut(*rig.device);
  for (uint64_t lba : {0, 1, 15, 32, 47}) {
    EXPECT_EQ(rig.storage->CopyOut(lba, 1), Pattern(kLbaBytes, lba + 1)) << "LBA " << lba;
  }
}

}  // namespace
}  // namespace nvkv::storage
