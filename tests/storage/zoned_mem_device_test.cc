// The zoned memory device (MemDevice over a MemStorage made with a ZoneModel) and the zone
// report's format: writes only at the write pointer, Zone Append returning where it landed (in
// any order when a batch completes out of order), reset, finish, the capacity below the zone
// size, the open and active limits, and zone state that outlives the queues like the bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "storage/base/check.h"
#include "storage/device.h"
#include "storage/mem_device.h"
#include "storage/zones.h"
#include "tests/testutil/block_pattern.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::MakeRequest;
using ::nvkv::testing::Pattern;
using ::nvkv::testing::StatusIs;

constexpr uint64_t kZoneBlocks = 16;
constexpr uint64_t kCapacity = 12;  // below the zone size, as on many drives

MemDeviceOptions ZonedOptions(uint32_t max_open = 0, uint32_t max_active = 0) {
  MemDeviceOptions options;
  options.lba_bytes = 4096;
  options.lba_count = 8 * kZoneBlocks;
  options.queue_depth = 16;
  options.buffers.buffer_count = 16;
  options.buffers.chunk_count = 1;
  options.zones = {.zone_count = 8,
                   .zone_blocks = kZoneBlocks,
                   .capacity_blocks = kCapacity,
                   .max_open = max_open,
                   .max_active = max_active,
                   .max_append_blocks = 4};
  return options;
}

std::unique_ptr<MemDevice> MustCreate(const MemDeviceOptions& options) {
  auto device = MemDevice::Create(options);
  NVKV_CHECK(device.ok());
  return std::move(*device);
}

// The zones the device reports, from zone 0.
std::vector<ZoneDescriptor> Report(Device& device) {
  absl::StatusOr<std::vector<ZoneDescriptor>> zones = ReportAllZones(device);
  EXPECT_THAT(zones, IsOk());
  return zones.ok() ? *zones : std::vector<ZoneDescriptor>{};
}

TEST(ZoneReportTest, ParsesWhatItEncodesAndRefusesWhatNoDeviceReports) {
  const std::vector<ZoneDescriptor> zones = {
      {.start = 0, .capacity = 12, .write_pointer = 5, .state = ZoneState::kImplicitlyOpen},
      {.start = 16, .capacity = 12, .write_pointer = 28, .state = ZoneState::kFull},
      {.start = 32, .capacity = 12, .write_pointer = 32, .state = ZoneState::kEmpty}};
  std::vector<uint8_t> bytes(kZoneReportHeaderBytes + 2 * kZoneDescriptorBytes);
  EncodeZoneReport(zones, bytes);  // room for two of the three
  absl::StatusOr<std::vector<ZoneDescriptor>> parsed = ParseZoneReport(bytes);
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, std::vector<ZoneDescriptor>(zones.begin(), zones.begin() + 2));
  EXPECT_EQ(bytes[kZoneReportHeaderBytes + 1], 0x20) << "the state in the high four bits";

  std::vector<uint8_t> overcounted = bytes;
  overcounted[0] = 3;
  EXPECT_THAT(ParseZoneReport(overcounted), StatusIs(absl::StatusCode::kDataLoss, "counts 3"));
  std::vector<uint8_t> bad_state = bytes;
  bad_state[kZoneReportHeaderBytes + 1] = 0x70;
  EXPECT_THAT(ParseZoneReport(bad_state), StatusIs(absl::StatusCode::kDataLoss, "state 7"));
  std::vector<uint8_t> conventional = bytes;
  conventional[kZoneReportHeaderBytes] = 0x1;  // not a sequential-write-required zone
  EXPECT_THAT(ParseZoneReport(conventional), StatusIs(absl::StatusCode::kDataLoss, "type 1"));
  EXPECT_THAT(ParseZoneReport(std::span<const uint8_t>(bytes.data(), 10)),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ZonedMemDeviceTest, ReportsItsZonesEmptyAndRefusesWritesOffTheWritePointer) {
  auto device = MustCreate(ZonedOptions());
  EXPECT_TRUE(device->info().zoned);
  EXPECT_EQ(device->info().zones.zone_count, 8u);
  const std::vector<ZoneDescriptor> zones = Report(*device);
  ASSERT_EQ(zones.size(), 8u);
  for (uint64_t z = 0; z < zones.size(); ++z) {
    EXPECT_EQ(zones[z].start, z * kZoneBlocks);
    EXPECT_EQ(zones[z].write_pointer, z * kZoneBlocks);
    EXPECT_EQ(zones[z].capacity, kCapacity);
    EXPECT_EQ(zones[z].state, ZoneState::kEmpty);
  }
  Buffer page = device->buffers().GetPage();
  IoRequest off = MakeRequest(IoOp::kWrite, kZoneBlocks + 1, 1, page);
  EXPECT_THAT(RunOne(*device, off), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          "Zone Invalid Write"));
  IoRequest at = MakeRequest(IoOp::kWrite, kZoneBlocks, 1, page);
  EXPECT_THAT(RunOne(*device, at), IsOk());
  EXPECT_EQ(Report(*device)[1].write_pointer, kZoneBlocks + 1);
  EXPECT_EQ(Report(*device)[1].state, ZoneState::kImplicitlyOpen);
  // Zone commands name a zone by its first block; appends are at most the device's limit.
  IoRequest mid = MakeRequest(IoOp::kZoneAppend, kZoneBlocks + 1, 1, page);
  EXPECT_THAT(device->Enqueue(&mid), StatusIs(absl::StatusCode::kInvalidArgument, "first block"));
  IoRequest big = MakeRequest(IoOp::kZoneAppend, 0, 5, page);
  EXPECT_THAT(device->Enqueue(&big), StatusIs(absl::StatusCode::kInvalidArgument, "at most 4"));
  device->buffers().PutPage(page);
}

TEST(ZonedMemDeviceTest, AppendsSayWhereTheyLandedInWhateverOrderTheyComplete) {
  MemDeviceOptions options = ZonedOptions();
  options.completion_seed = 7;
  auto device = MustCreate(options);
  Buffer chunk = device->buffers().GetChunk();
  ASSERT_GE(chunk.bytes, 6u * 4096);
  // Six appends of one block each in one batch, each with its own contents.
  std::vector<IoRequest> appends;
  for (uint32_t i = 0; i < 6; ++i) {
    Buffer block{chunk.data + size_t{i} * 4096, 4096, chunk.buf_index};
    std::vector<uint8_t> pattern = Pattern(4096, 100 + i);
    std::memcpy(block.data, pattern.data(), pattern.size());
    appends.push_back(MakeRequest(IoOp::kZoneAppend, 2 * kZoneBlocks, 1, block));
  }
  ASSERT_THAT(RunAll(*device, appends), IsOk());
  std::set<uint64_t> landed;
  bool in_submission_order = true;
  for (uint32_t i = 0; i < appends.size(); ++i) {
    ASSERT_THAT(appends[i].status, IsOk());
    landed.insert(appends[i].appended_lba);
    in_submission_order &= appends[i].appended_lba == 2 * kZoneBlocks + i;
    // Each append's blocks are where it says.
    EXPECT_EQ(device->storage()->CopyOut(appends[i].appended_lba, 1), Pattern(4096, 100 + i))
        << i;
  }
  EXPECT_EQ(landed, (std::set<uint64_t>{32, 33, 34, 35, 36, 37}));
  EXPECT_FALSE(in_submission_order) << "seed 7 shuffles this batch";
  EXPECT_EQ(Report(*device)[2].write_pointer, 2 * kZoneBlocks + 6);
  device->buffers().PutChunk(chunk);
}

TEST(ZonedMemDeviceTest, AZoneFillsToItsCapacityAndResetEmptiesIt) {
  auto device = MustCreate(ZonedOptions());
  Buffer chunk = device->buffers().GetChunk();
  std::memset(chunk.data, 0xab, chunk.bytes);
  for (uint64_t written = 0; written < kCapacity; written += 4) {
    IoRequest append = MakeRequest(IoOp::kZoneAppend, 0, 4, chunk);
    ASSERT_THAT(RunOne(*device, append), IsOk());
    EXPECT_EQ(append.appended_lba, written);
  }
  EXPECT_EQ(Report(*device)[0].state, ZoneState::kFull);
  IoRequest more = MakeRequest(IoOp::kZoneAppend, 0, 1, chunk);
  EXPECT_THAT(RunOne(*device, more),
              StatusIs(absl::StatusCode::kResourceExhausted, "Zone Is Full"));
  // Across the capacity: refused, nothing written; up to it, the zone is full.
  for (const uint32_t blocks : {4u, 4u, 3u}) {
    IoRequest fill = MakeRequest(IoOp::kZoneAppend, kZoneBlocks, blocks, chunk);
    ASSERT_THAT(RunOne(*device, fill), IsOk());
  }
  IoRequest across = MakeRequest(IoOp::kZoneAppend, kZoneBlocks, 2, chunk);
  EXPECT_THAT(RunOne(*device, across),
              StatusIs(absl::StatusCode::kFailedPrecondition, "Zone Boundary Error"));
  EXPECT_EQ(Report(*device)[1].write_pointer, kZoneBlocks + 11);
  EXPECT_EQ(device->storage()->CopyOut(kZoneBlocks + 11, 1), std::vector<uint8_t>(4096, 0))
      << "the refused append wrote nothing";
  IoRequest last = MakeRequest(IoOp::kWrite, kZoneBlocks + 11, 1, chunk);
  ASSERT_THAT(RunOne(*device, last), IsOk());
  EXPECT_EQ(Report(*device)[1].state, ZoneState::kFull);

  IoRequest reset = MakeRequest(IoOp::kZoneReset, 0, 0, Buffer{});
  ASSERT_THAT(RunOne(*device, reset), IsOk());
  EXPECT_EQ(Report(*device)[0],
            (ZoneDescriptor{.start = 0, .capacity = kCapacity, .write_pointer = 0,
                            .state = ZoneState::kEmpty}));
  EXPECT_EQ(device->storage()->CopyOut(0, 1), std::vector<uint8_t>(4096, 0)) << "reset zeroes";
  IoRequest again = MakeRequest(IoOp::kZoneAppend, 0, 2, chunk);
  ASSERT_THAT(RunOne(*device, again), IsOk());
  EXPECT_EQ(again.appended_lba, 0u);

  IoRequest finish = MakeRequest(IoOp::kZoneFinish, 0, 0, Buffer{});
  ASSERT_THAT(RunOne(*device, finish), IsOk());
  EXPECT_EQ(Report(*device)[0].state, ZoneState::kFull);
  EXPECT_EQ(Report(*device)[0].write_pointer, kCapacity);
  IoRequest after = MakeRequest(IoOp::kZoneAppend, 0, 1, chunk);
  EXPECT_THAT(RunOne(*device, after),
              StatusIs(absl::StatusCode::kResourceExhausted, "Zone Is Full"));
  IoRequest at_pointer = MakeRequest(IoOp::kWrite, kCapacity, 1, chunk);
  EXPECT_THAT(RunOne(*device, at_pointer),
              StatusIs(absl::StatusCode::kResourceExhausted, "Zone Is Full"));
  device->buffers().PutChunk(chunk);
}

// A zone the device took out of service, as drives do as their media wear: read-only keeps its
// data readable and refuses every change; offline loses the data, and reads fail too.
TEST(ZonedMemDeviceTest, AZoneTakenOutOfServiceRefusesWritesAndOfflineReads) {
  auto device = MustCreate(ZonedOptions());
  Buffer chunk = device->buffers().GetChunk();
  std::memset(chunk.data, 0xcd, chunk.bytes);
  for (const uint64_t zone_start : {uint64_t{0}, kZoneBlocks}) {
    IoRequest append = MakeRequest(IoOp::kZoneAppend, zone_start, 2, chunk);
    ASSERT_THAT(RunOne(*device, append), IsOk());
  }
  device->storage()->RetireZone(0, ZoneState::kReadOnly);
  device->storage()->RetireZone(1, ZoneState::kOffline);
  EXPECT_EQ(Report(*device)[0].state, ZoneState::kReadOnly);
  EXPECT_EQ(Report(*device)[1].state, ZoneState::kOffline);
  const std::vector<std::pair<IoOp, absl::StatusCode>> refused = {
      {IoOp::kZoneAppend, absl::StatusCode::kFailedPrecondition},
      {IoOp::kZoneReset, absl::StatusCode::kFailedPrecondition},
      {IoOp::kZoneFinish, absl::StatusCode::kFailedPrecondition}};
  for (const auto& [op, code] : refused) {
    IoRequest read_only = MakeRequest(op, 0, op == IoOp::kZoneAppend ? 1 : 0,
                                      op == IoOp::kZoneAppend ? chunk : Buffer{});
    EXPECT_THAT(RunOne(*device, read_only), StatusIs(code, "Zone Is Read Only: zone 0"));
    IoRequest offline = MakeRequest(op, kZoneBlocks, op == IoOp::kZoneAppend ? 1 : 0,
                                    op == IoOp::kZoneAppend ? chunk : Buffer{});
    EXPECT_THAT(RunOne(*device, offline),
                StatusIs(absl::StatusCode::kDataLoss, "Zone Is Offline: zone 1"));
  }
  IoRequest write = MakeRequest(IoOp::kWrite, 2, 1, chunk);
  EXPECT_THAT(RunOne(*device, write),
              StatusIs(absl::StatusCode::kFailedPrecondition, "Zone Is Read Only"));
  std::memset(chunk.data, 0, chunk.bytes);
  IoRequest read = MakeRequest(IoOp::kRead, 0, 2, chunk);
  ASSERT_THAT(RunOne(*device, read), IsOk());
  EXPECT_EQ(chunk.data[0], 0xcd) << "a read-only zone keeps its data";
  IoRequest lost = MakeRequest(IoOp::kRead, kZoneBlocks, 1, chunk);
  EXPECT_THAT(RunOne(*device, lost),
              StatusIs(absl::StatusCode::kDataLoss, "Zone Is Offline: zone 1"));
  device->buffers().PutChunk(chunk);
}

TEST(ZonedMemDeviceTest, TheActiveLimitRefusesAZoneTooManyAndTheOpenLimitClosesTheOldest) {
  auto device = MustCreate(ZonedOptions(/*max_open=*/2, /*max_active=*/3));
  Buffer page = device->buffers().GetPage();
  const auto append = [&](uint64_t zone) {
    IoRequest request = MakeRequest(IoOp::kZoneAppend, zone * kZoneBlocks, 1, page);
    return RunOne(*device, request);
  };
  ASSERT_THAT(append(0), IsOk());
  ASSERT_THAT(append(1), IsOk());
  ASSERT_THAT(append(2), IsOk());  // the open limit: zone 0, opened first, is closed
  std::vector<ZoneDescriptor> zones = Report(*device);
  EXPECT_EQ(zones[0].state, ZoneState::kClosed);
  EXPECT_EQ(zones[1].state, ZoneState::kImplicitlyOpen);
  EXPECT_EQ(zones[2].state, ZoneState::kImplicitlyOpen);
  EXPECT_THAT(append(3), StatusIs(absl::StatusCode::kResourceExhausted, "Too Many Active Zones"));
  EXPECT_EQ(Report(*device)[3].state, ZoneState::kEmpty) << "nothing written";
  // An empty zone finished passes through open: no room for it either.
  IoRequest finish_empty = MakeRequest(IoOp::kZoneFinish, 4 * kZoneBlocks, 0, Buffer{});
  EXPECT_THAT(RunOne(*device, finish_empty),
              StatusIs(absl::StatusCode::kResourceExhausted, "Too Many Active Zones"));
  ASSERT_THAT(append(0), IsOk());  // a closed zone is active already: reopened
  EXPECT_EQ(Report(*device)[0].write_pointer, 2u);
  // Finishing one leaves room for another.
  IoRequest finish = MakeRequest(IoOp::kZoneFinish, 1 * kZoneBlocks, 0, Buffer{});
  ASSERT_THAT(RunOne(*device, finish), IsOk());
  EXPECT_THAT(append(3), IsOk());
  device->buffers().PutPage(page);
}

TEST(ZonedMemDeviceTest, ZonesOutliveTheQueueLikeTheBytes) {
  const MemDeviceOptions options = ZonedOptions();
  std::shared_ptr<MemStorage> storage;
  {
    auto device = MustCreate(options);
    storage = device->storage();
    Buffer page = device->buffers().GetPage();
    IoRequest append = MakeRequest(IoOp::kZoneAppend, 3 * kZoneBlocks, 1, page);
    ASSERT_THAT(RunOne(*device, append), IsOk());
    device->buffers().PutPage(page);
  }
  auto rebooted = MemDevice::Open(storage, options);
  ASSERT_THAT(rebooted, IsOk());
  EXPECT_EQ(Report(**rebooted)[3].write_pointer, 3 * kZoneBlocks + 1);
}

TEST(ZonedMemDeviceTest, ZoneCommandsNeedAZonedDeviceAndAModelThatFits) {
  MemDeviceOptions plain = ZonedOptions();
  plain.zones = {};
  auto device = MustCreate(plain);
  EXPECT_FALSE(device->info().zoned);
  IoRequest reset = MakeRequest(IoOp::kZoneReset, 0, 0, Buffer{});
  EXPECT_THAT(device->Enqueue(&reset), StatusIs(absl::StatusCode::kUnimplemented, "zoned"));
  MemDeviceOptions too_many = ZonedOptions();
  too_many.zones.zone_count = 9;
  EXPECT_THAT(MemDevice::Create(too_many), StatusIs(absl::StatusCode::kInvalidArgument));
  MemDeviceOptions roomy = ZonedOptions();
  roomy.zones.capacity_blocks = kZoneBlocks + 1;
  EXPECT_THAT(MemDevice::Create(roomy), StatusIs(absl::StatusCode::kInvalidArgument));
}

// A report of some zones, from any zone, across as many report pages as it takes (a 4 KiB page
// describes 63 zones).
TEST(ZonedMemDeviceTest, ReportsOfSomeZonesOrAllOfThem) {
  MemDeviceOptions options = ZonedOptions();
  options.zones.zone_count = 100;
  options.lba_count = 100 * kZoneBlocks;
  std::unique_ptr<MemDevice> device = MustCreate(options);
  absl::StatusOr<std::vector<ZoneDescriptor>> some = storage::ReportZones(*device, 3, 2);
  ASSERT_THAT(some, IsOk());
  ASSERT_EQ(some->size(), 2u);
  EXPECT_EQ((*some)[0].start, 3 * kZoneBlocks);
  EXPECT_EQ((*some)[1].start, 4 * kZoneBlocks);
  absl::StatusOr<std::vector<ZoneDescriptor>> tail = storage::ReportZones(*device, 99, 5);
  ASSERT_THAT(tail, IsOk());
  ASSERT_EQ(tail->size(), 1u) << "as many as there are";
  absl::StatusOr<std::vector<ZoneDescriptor>> none = storage::ReportZones(*device, 100, 1);
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
  absl::StatusOr<std::vector<ZoneDescriptor>> all = storage::ReportAllZones(*device);
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 100u);
  for (uint64_t z = 0; z < 100; ++z) EXPECT_EQ((*all)[z].start, z * kZoneBlocks) << z;
  // Without a zone model there is nothing to report.
  std::unique_ptr<MemDevice> plain = MustCreate(MemDeviceOptions{});
  EXPECT_THAT(storage::ReportAllZones(*plain),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no zone model"));
}

// Power cuts on zones: fault_device_zoned_test.cc.
}  // namespace
}  // namespace nvkv::storage
