// FaultDevice, part 1: the Device contract passes through, and operation faults (fail the Nth,
// EIO or media error, torn and silent writes) do exactly what they say. Power cuts are in
// fault_device_power_cut_test.cc.
#include "storage/fault_device.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "storage/base/check.h"
#include "storage/mem_device.h"
#include "tests/testutil/block_pattern.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"

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
// What a backend reports for -EIO: absl::ErrnoToStatus(EIO, ...) has code kUnknown.
const absl::StatusCode kEioCode = absl::ErrnoToStatus(EIO, "").code();

MemDeviceOptions MemOptions() {
  MemDeviceOptions options;
  options.lba_bytes = kLbaBytes;
  options.lba_count = 64;
  options.queue_depth = 4;
  options.buffers.buffer_count = 16;
  options.buffers.chunk_count = 4;
  return options;
}

struct Rig {
  std::shared_ptr<MemStorage> storage;
  std::unique_ptr<FaultDevice> device;
};

Rig MakeRig(uint64_t seed = 1) {
  auto mem = MemDevice::Create(MemOptions());
  NVKV_CHECK(mem.ok());
  Rig rig;
  rig.storage = (*mem)->storage();
  FaultDeviceOptions options;
  options.seed = seed;
  auto device = FaultDevice::Create(std::move(*mem), options);
  NVKV_CHECK(device.ok());
  rig.device = std::move(*device);
  return rig;
}

// Sector `s` of a write's range, as the storage holds it now.
std::vector<uint8_t> Sector(const std::vector<uint8_t>& range, uint32_t s) {
  return std::vector<uint8_t>(range.begin() + s * kSectorBytes,
                              range.begin() + (s + 1) * kSectorBytes);
}

// --- The Device contract passes through. ---

TEST(FaultDeviceTest, ReadsAndWritesPassThrough) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 5, 2, 42), IsOk());
  auto read = ReadBack(*rig.device, 5, 2);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, Pattern(2 * kLbaBytes, 42));
  EXPECT_EQ(rig.storage->CopyOut(5, 2), Pattern(2 * kLbaBytes, 42));
  const FaultStats stats = rig.device->fault_stats();
  EXPECT_EQ(stats.operations, 2u);
  EXPECT_EQ(stats.writes, 1u);
  EXPECT_EQ(stats.reads, 1u);
  EXPECT_EQ(stats.faults_injected, 0u);
}

// A write keeps its placement on its way to the inner device, whole or torn.
TEST(FaultDeviceTest, WritesKeepTheirPlacement) {
  MemDeviceOptions mem_options = MemOptions();
  mem_options.placement_ids = {4, 9};
  auto mem = MemDevice::Create(mem_options);
  ASSERT_THAT(mem, IsOk());
  std::shared_ptr<MemStorage> storage = (*mem)->storage();
  auto device = FaultDevice::Create(std::move(*mem), FaultDeviceOptions{});
  ASSERT_THAT(device, IsOk());
  Buffer page = (*device)->buffers().GetPage();
  ASSERT_THAT(WriteBlocks(**device, 3, 1, page, /*fua=*/true, /*placement=*/1), IsOk());
  EXPECT_EQ(storage->PlacementOf(3), std::optional<uint16_t>(9));
  ASSERT_THAT((*device)->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                          .partial = PartialWrite::kPrefix,
                                          .sectors = 3}),
              IsOk());
  EXPECT_THAT(WriteBlocks(**device, 5, 1, page, /*fua=*/true, /*placement=*/1),
              StatusIs(kEioCode));
  EXPECT_EQ(storage->PlacementOf(5), std::optional<uint16_t>(9)) << "its torn part's";
}

TEST(FaultDeviceTest, InfoAndBuffersAreTheInnerDevices) {
  auto mem = MemDevice::Create(MemOptions());
  ASSERT_THAT(mem, IsOk());
  MemDevice* inner = mem->get();
  auto device = FaultDevice::Create(std::move(*mem), FaultDeviceOptions{});
  ASSERT_THAT(device, IsOk());
  EXPECT_EQ(&(*device)->buffers(), &inner->buffers());
  EXPECT_EQ(&(*device)->info(), &inner->info());
}

TEST(FaultDeviceTest, CallbacksRunOnlyInReap) {
  Rig rig = MakeRig();
  AsyncIo write(*rig.device, IoOp::kWrite, 0, 1, 7);
  ASSERT_THAT(write.Enqueue(), IsOk());
  auto pushed = rig.device->Submit();
  ASSERT_THAT(pushed, IsOk());
  EXPECT_EQ(*pushed, 1u);
  EXPECT_FALSE(write.done());
  EXPECT_EQ(rig.device->in_flight(), 1u);
  auto reaped = rig.device->Reap(1);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 1u);
  EXPECT_TRUE(write.done());
  EXPECT_THAT(write.status(), IsOk());
  EXPECT_EQ(rig.device->in_flight(), 0u);
}

TEST(FaultDeviceTest, FullQueueRefusesWithUnavailableAndDoesNotCount) {
  Rig rig = MakeRig();  // inner depth 4
  std::vector<std::unique_ptr<AsyncIo>> reads;
  for (int i = 0; i < 5; ++i) {
    reads.push_back(std::make_unique<AsyncIo>(*rig.device, IoOp::kRead, i, 1));
  }
  for (int i = 0; i < 4; ++i) ASSERT_THAT(reads[i]->Enqueue(), IsOk());
  EXPECT_THAT(reads[4]->Enqueue(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(rig.device->fault_stats().operations, 4u);
  ASSERT_THAT(rig.device->Reap(4), IsOk());
  EXPECT_THAT(reads[4]->Enqueue(), IsOk());
  ASSERT_THAT(rig.device->Reap(1), IsOk());
  EXPECT_TRUE(reads[4]->done());
}

TEST(FaultDeviceTest, InvalidRequestIsRefusedAndDoesNotCount) {
  Rig rig = MakeRig();
  AsyncIo beyond(*rig.device, IoOp::kRead, 64, 1);
  EXPECT_THAT(beyond.Enqueue(), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(rig.device->fault_stats().operations, 0u);
  EXPECT_EQ(rig.device->in_flight(), 0u);
}

// --- Fail the Nth operation. ---

TEST(FaultDeviceTest, FailedReadReportsEioAndDeliversNothing) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 3, 1, 5), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kRead}), IsOk());
  AsyncIo read(*rig.device, IoOp::kRead, 3, 1);
  ASSERT_THAT(read.Enqueue(), IsOk());  // accepted: the error comes with the completion
  ASSERT_THAT(rig.device->Reap(1), IsOk());
  EXPECT_THAT(read.status(), StatusIs(kEioCode, "Input/output error"));
  EXPECT_THAT(read.status(), StatusIs(kEioCode, "read 1 blocks at LBA 3 of mem"));
  EXPECT_EQ(read.Data(kLbaBytes), std::vector<uint8_t>(kLbaBytes, 0xAB));
}

TEST(FaultDeviceTest, FailedReadWithMediaErrorIsUnrecoveredReadError) {
  Rig rig = MakeRig();
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .error = FaultError::kMediaError}), IsOk());
  auto read = ReadBack(*rig.device, 0, 1);
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss, "Unrecovered Read Error"));
}

// A bad sector: every read touching it fails, on every queue, until the device is gone; reads
// beside it and writes to it succeed.
TEST(FaultDeviceTest, UnreadableBlocksFailEveryReadThatTouchesThem) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 0, 16, 7), IsOk());
  ASSERT_THAT(rig.device->FailReadsOf(5, 2, FaultError::kMediaError), IsOk());
  for (int attempt = 0; attempt < 3; ++attempt) {
    EXPECT_THAT(ReadBack(*rig.device, 5, 1), StatusIs(absl::StatusCode::kDataLoss,
                                                     "Unrecovered Read Error"));
    EXPECT_THAT(ReadBack(*rig.device, 0, 16), StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_THAT(ReadBack(*rig.device, 6, 4), StatusIs(absl::StatusCode::kDataLoss));
  }
  EXPECT_THAT(ReadBack(*rig.device, 4, 1), IsOk());
  EXPECT_THAT(ReadBack(*rig.device, 7, 9), IsOk());
  ASSERT_THAT(WritePattern(*rig.device, 5, 1, 9), IsOk());
  QueueOptions queue_options;
  queue_options.queue_depth = 2;
  queue_options.buffers.buffer_count = 2;
  queue_options.buffers.chunk_count = 0;
  auto other = rig.device->OpenQueue(queue_options);
  ASSERT_THAT(other, IsOk());
  EXPECT_THAT(ReadBack(**other, 6, 1), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(rig.device->FailReadsOf(0, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rig.device->FailReadsOf(0, 1, FaultError::kSilent),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A transient read failure: once healed, the blocks read back what they held before.
TEST(FaultDeviceTest, HealedBlocksReadWhatTheyHeld) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 0, 16, 7), IsOk());
  ASSERT_THAT(rig.device->FailReadsOf(5, 2), IsOk());
  EXPECT_FALSE(ReadBack(*rig.device, 0, 16).ok());
  rig.device->HealReads();
  auto read = ReadBack(*rig.device, 0, 16);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, Pattern(16 * kLbaBytes, 7));
}

TEST(FaultDeviceTest, FailedWriteWritesNothing) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 8, 2, 1), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite}), IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 8, 2, 2), StatusIs(kEioCode));
  EXPECT_EQ(rig.storage->CopyOut(8, 2), Pattern(2 * kLbaBytes, 1));
  EXPECT_EQ(rig.device->fault_stats().unflushed_writes, 1u);  // only the first write
}

TEST(FaultDeviceTest, FailedWriteWithMediaErrorIsWriteFault) {
  Rig rig = MakeRig();
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                         .error = FaultError::kMediaError}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 0, 1, 3),
              StatusIs(absl::StatusCode::kDataLoss, "Write Fault"));
  EXPECT_EQ(rig.storage->CopyOut(0, 1), std::vector<uint8_t>(kLbaBytes, 0));
}

TEST(FaultDeviceTest, FailedFlushReportsTheError) {
  Rig rig = MakeRig();
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kFlush}), IsOk());
  EXPECT_THAT(FlushDevice(*rig.device), StatusIs(kEioCode, "flush of mem"));
}

TEST(FaultDeviceTest, NthCountsOnlyMatchingOperationsFromArming) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());  // before arming: not counted
  ASSERT_THAT(rig.device->FailOperation({.nth = 2, .filter = OpFilter::kWrite}), IsOk());
  EXPECT_THAT(ReadBack(*rig.device, 0, 1), IsOk());         // operation 2, a read
  EXPECT_THAT(WritePattern(*rig.device, 1, 1, 2), IsOk());  // operation 3, 1st write
  EXPECT_THAT(ReadBack(*rig.device, 0, 1), IsOk());         // operation 4
  EXPECT_THAT(WritePattern(*rig.device, 2, 1, 3), StatusIs(kEioCode));  // 5, 2nd write
  EXPECT_THAT(WritePattern(*rig.device, 3, 1, 4), IsOk());  // fired once only
  const std::vector<InjectedFault> faults = rig.device->injected_faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].operation, 5u);
  EXPECT_EQ(faults[0].op, IoOp::kWrite);
  EXPECT_EQ(faults[0].lba, 2u);
  EXPECT_EQ(faults[0].code, kEioCode);
  EXPECT_EQ(faults[0].sectors_written, std::vector<bool>(8, false));
}

TEST(FaultDeviceTest, FailedWriteWithPrefixWritesExactlyThePrefix) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 10, 2, 1), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                         .partial = PartialWrite::kPrefix,
                                         .sectors = 3}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 10, 2, 2), StatusIs(kEioCode));
  // 3 sectors of 512 bytes: the first 1536 bytes are new, the other 6656 are old.
  std::vector<uint8_t> expected = Pattern(2 * kLbaBytes, 1);
  const std::vector<uint8_t> attempted = Pattern(2 * kLbaBytes, 2);
  std::copy(attempted.begin(), attempted.begin() + 3 * kSectorBytes, expected.begin());
  EXPECT_EQ(rig.storage->CopyOut(10, 2), expected);
}

TEST(FaultDeviceTest, FailedWriteWithSuffixWritesExactlyTheSuffix) {
  Rig rig = MakeRig();
  ASSERT_THAT(WritePattern(*rig.device, 10, 2, 1), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                         .partial = PartialWrite::kSuffix,
                                         .sectors = 3}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 10, 2, 2), StatusIs(kEioCode));
  // 3 sectors of 512 bytes: the last 1536 bytes are new, the first 6656 are old.
  std::vector<uint8_t> expected = Pattern(2 * kLbaBytes, 1);
  const std::vector<uint8_t> attempted = Pattern(2 * kLbaBytes, 2);
  std::copy(attempted.end() - 3 * kSectorBytes, attempted.end(),
            expected.end() - 3 * kSectorBytes);
  EXPECT_EQ(rig.storage->CopyOut(10, 2), expected);
  std::vector<bool> written(16, false);
  std::fill(written.end() - 3, written.end(), true);
  EXPECT_EQ(rig.device->injected_faults().at(0).sectors_written, written);
}

TEST(FaultDeviceTest, FailedWriteWithRandomSectorsWritesExactlyTheReportedSectors) {
  Rig rig = MakeRig(/*seed=*/1234);
  SCOPED_TRACE("seed 1234");
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                         .error = FaultError::kMediaError,
                                         .partial = PartialWrite::kRandomSectors}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 20, 2, 9), StatusIs(absl::StatusCode::kDataLoss));
  const std::vector<bool> written = rig.device->injected_faults().at(0).sectors_written;
  ASSERT_EQ(written.size(), 16u);
  int count = 0;
  const std::vector<uint8_t> now = rig.storage->CopyOut(20, 2);
  const std::vector<uint8_t> attempted = Pattern(2 * kLbaBytes, 9);
  const std::vector<uint8_t> zeros(kSectorBytes, 0);
  for (uint32_t s = 0; s < 16; ++s) {
    EXPECT_EQ(Sector(now, s), written[s] ? Sector(attempted, s) : zeros) << "sector " << s;
    count += written[s] ? 1 : 0;
  }
  EXPECT_GT(count, 0);   // a tear, not a lost write ...
  EXPECT_LT(count, 16);  // ... nor a whole one
}

TEST(FaultDeviceTest, SameSeedTearsTheSameSectors) {
  std::vector<std::vector<bool>> masks;
  for (int run = 0; run < 2; ++run) {
    Rig rig = MakeRig(/*seed=*/77);
    ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                           .partial = PartialWrite::kRandomSectors}),
                IsOk());
    EXPECT_THAT(WritePattern(*rig.device, 0, 4, 1), StatusIs(kEioCode));
    masks.push_back(rig.device->injected_faults().at(0).sectors_written);
  }
  EXPECT_EQ(masks[0], masks[1]);
}

TEST(FaultDeviceTest, SilentLostWriteReportsSuccessAndWritesNothing) {
  Rig rig = MakeRig();
  ASSERT_THAT(rig.device->FailOperation(
                  {.nth = 1, .filter = OpFilter::kWrite, .error = FaultError::kSilent}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 4, 1, 5), IsOk());
  EXPECT_EQ(rig.storage->CopyOut(4, 1), std::vector<uint8_t>(kLbaBytes, 0));
  EXPECT_EQ(rig.device->injected_faults().at(0).code, absl::StatusCode::kOk);
}

TEST(FaultDeviceTest, SilentTornWriteReportsSuccessAndWritesThePrefix) {
  Rig rig = MakeRig();
  ASSERT_THAT(rig.device->FailOperation({.nth = 1, .filter = OpFilter::kWrite,
                                         .error = FaultError::kSilent,
                                         .partial = PartialWrite::kPrefix,
                                         .sectors = 1}),
              IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 4, 1, 5), IsOk());
  std::vector<uint8_t> expected(kLbaBytes, 0);
  const std::vector<uint8_t> attempted = Pattern(kLbaBytes, 5);
  std::copy(attempted.begin(), attempted.begin() + kSectorBytes, expected.begin());
  EXPECT_EQ(rig.storage->CopyOut(4, 1), expected);
}

TEST(FaultDeviceTest, BadOperationFaultsAreInvalidArgument) {
  Rig rig = MakeRig();
  EXPECT_THAT(rig.device->FailOperation({.nth = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rig.device->FailOperation({.filter = OpFilter::kAny, .error = FaultError::kSilent}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rig.device->FailOperation(
                  {.filter = OpFilter::kRead, .partial = PartialWrite::kPrefix}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rig.device->SetCutAfterOperations(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(FaultDeviceTest, BadOptionsAreInvalidArgument) {
  for (uint32_t sector_bytes : {256u, 1000u, 8192u}) {
    SCOPED_TRACE(sector_bytes);
    auto mem = MemDevice::Create(MemOptions());
    ASSERT_THAT(mem, IsOk());
    EXPECT_THAT(FaultDevice::Create(std::move(*mem), {.sector_bytes = sector_bytes}),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  auto mem = MemDevice::Create(MemOptions());
  ASSERT_THAT(mem, IsOk());
  EXPECT_THAT(FaultDevice::Create(std::move(*mem),
                                  {.keep_weight = 0, .drop_weight = 0, .tear_weight = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- OpenQueue: one family, one fault state. ---

TEST(FaultDeviceTest, OpenQueueSharesFaultsAndCounters) {
  Rig rig = MakeRig();
  auto second = rig.device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  ASSERT_THAT(rig.device->FailOperation({.nth = 2, .filter = OpFilter::kWrite}), IsOk());
  EXPECT_THAT(WritePattern(*rig.device, 0, 1, 1), IsOk());
  EXPECT_THAT(WritePattern(**second, 1, 1, 2), StatusIs(kEioCode));  // the family's 2nd write
  EXPECT_EQ(rig.device->fault_stats().operations, 2u);
  auto* second_fault = static_cast<FaultDevice*>(second->get());
  EXPECT_EQ(second_fault->fault_stats().faults_injected, 1u);
  EXPECT_NE(&(*second)->buffers(), &rig.device->buffers());  // its own inner queue and pool
}

}  // namespace
}  // namespace nvkv::storage
