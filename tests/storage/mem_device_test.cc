// The memory backend through the Device seam: geometry, round trips at both block sizes, the
// asynchronous contract (execution at Submit, callbacks in Reap, back-pressure), shared storage
// across queues, threads and reopens, and the test accessors.
#include "storage/mem_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "storage/base/check.h"
#include "storage/device.h"
#include "tests/testutil/block_pattern.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::Pattern;
using ::nvkv::testing::StatusIs;

MemDeviceOptions SmallOptions(uint32_t lba_bytes = 4096) {
  MemDeviceOptions options;
  options.lba_bytes = lba_bytes;
  options.lba_count = 256;
  options.queue_depth = 4;
  options.buffers.buffer_count = 16;
  options.buffers.chunk_count = 2;
  return options;
}

std::unique_ptr<MemDevice> MustCreate(const MemDeviceOptions& options) {
  auto device = MemDevice::Create(options);
  NVKV_CHECK(device.ok());
  return std::move(*device);
}

std::vector<uint8_t> Bytes(const Buffer& buffer, size_t bytes) {
  return std::vector<uint8_t>(buffer.data, buffer.data + bytes);
}

struct Counter {
  int done = 0;
};

void OnCounted(IoRequest* request) { ++static_cast<Counter*>(request->context)->done; }

IoRequest CountedRequest(IoOp op, uint64_t lba, uint32_t lba_count, Buffer buffer,
                         Counter* counter) {
  IoRequest request;
  request.op = op;
  request.lba = lba;
  request.lba_count = lba_count;
  request.buffer = buffer;
  request.on_done = OnCounted;
  request.context = counter;
  return request;
}

TEST(MemDeviceTest, ReportsConfiguredGeometry) {
  MemDeviceOptions options = SmallOptions(512);
  options.volatile_write_cache = false;
  options.name = "mem-geometry";
  auto device = MustCreate(options);
  const DeviceInfo& info = device->info();
  EXPECT_EQ(info.kind, DeviceKind::kMemory);
  EXPECT_EQ(info.path, "mem-geometry");
  EXPECT_EQ(info.lba_bytes, 512u);
  EXPECT_EQ(info.lba_count, 256u);
  EXPECT_EQ(info.capacity_bytes(), 256u * 512);
  EXPECT_EQ(info.ring.queue_depth, 4u);
  EXPECT_EQ(info.memory_alignment, 512u);
  EXPECT_FALSE(info.volatile_write_cache);
  EXPECT_EQ(device->buffers().GetPage().buf_index, -1);  // nothing to register with
}

TEST(MemDeviceTest, NewStorageReadsAsZeros) {
  auto device = MustCreate(SmallOptions());
  Buffer page = device->buffers().GetPage();
  std::memset(page.data, 0xAB, page.bytes);
  ASSERT_THAT(ReadBlocks(*device, 255, 1, page), IsOk());
  EXPECT_EQ(Bytes(page, 4096), std::vector<uint8_t>(4096, 0));
}

TEST(MemDeviceTest, RoundTripWith512ByteBlocks) {
  auto device = MustCreate(SmallOptions(512));
  Buffer out = device->buffers().GetPage();
  Buffer in = device->buffers().GetPage();
  const std::vector<uint8_t> data = Pattern(4096, 1);
  std::memcpy(out.data, data.data(), data.size());
  ASSERT_THAT(WriteBlocks(*device, 3, 8, out), IsOk());
  ASSERT_THAT(ReadBlocks(*device, 3, 8, in), IsOk());
  EXPECT_EQ(Bytes(in, 4096), data);
  EXPECT_EQ(device->storage()->CopyOut(3, 8), data);
}

TEST(MemDeviceTest, RoundTripWith4096ByteBlocks) {
  auto device = MustCreate(SmallOptions(4096));
  Buffer out = device->buffers().GetChunk();
  Buffer in = device->buffers().GetChunk();
  const std::vector<uint8_t> data = Pattern(16 * 4096, 2);
  std::memcpy(out.data, data.data(), data.size());
  ASSERT_THAT(WriteBlocks(*device, 240, 16, out), IsOk());  // up to the last block
  ASSERT_THAT(ReadBlocks(*device, 240, 16, in), IsOk());
  EXPECT_EQ(Bytes(in, data.size()), data);
}

TEST(MemDeviceTest, WriteReachesStorageAtSubmit) {
  auto device = MustCreate(SmallOptions());
  Buffer out = device->buffers().GetPage();
  std::memset(out.data, 0x5A, out.bytes);
  Counter counter;
  IoRequest write = CountedRequest(IoOp::kWrite, 7, 1, out, &counter);
  ASSERT_THAT(device->Enqueue(&write), IsOk());
  EXPECT_EQ(device->storage()->CopyOut(7, 1), std::vector<uint8_t>(4096, 0));
  auto pushed = device->Submit();
  ASSERT_THAT(pushed, IsOk());
  EXPECT_EQ(*pushed, 1u);
  EXPECT_EQ(device->storage()->CopyOut(7, 1), std::vector<uint8_t>(4096, 0x5A));
}

TEST(MemDeviceTest, CallbacksRunOnlyInReap) {
  auto device = MustCreate(SmallOptions());
  Counter counter;
  IoRequest read = CountedRequest(IoOp::kRead, 0, 1, device->buffers().GetPage(), &counter);
  ASSERT_THAT(device->Enqueue(&read), IsOk());
  ASSERT_THAT(device->Submit(), IsOk());
  EXPECT_EQ(counter.done, 0);
  EXPECT_EQ(device->in_flight(), 1u);
  auto reaped = device->Reap(1);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 1u);
  EXPECT_EQ(counter.done, 1);
  EXPECT_EQ(device->in_flight(), 0u);
  EXPECT_THAT(read.status, IsOk());
}

struct Chain {
  Device* device = nullptr;
  IoRequest* follow_up = nullptr;
  int done = 0;
};

void OnChained(IoRequest* request) {
  auto* chain = static_cast<Chain*>(request->context);
  ++chain->done;
  if (chain->follow_up != nullptr) {
    IoRequest* next = chain->follow_up;
    chain->follow_up = nullptr;
    NVKV_CHECK(chain->device->Enqueue(next).ok());
  }
}

TEST(MemDeviceTest, CallbackMayEnqueueAndItsRequestCompletesInALaterReap) {
  auto device = MustCreate(SmallOptions());
  Chain chain;
  chain.device = device.get();
  IoRequest second;
  second.op = IoOp::kRead;
  second.lba_count = 1;
  second.buffer = device->buffers().GetPage();
  second.on_done = OnChained;
  second.context = &chain;
  IoRequest first = second;
  first.buffer = device->buffers().GetPage();
  chain.follow_up = &second;
  ASSERT_THAT(device->Enqueue(&first), IsOk());
  auto reaped = device->Reap(1);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 1u);
  EXPECT_EQ(chain.done, 1);
  EXPECT_EQ(device->in_flight(), 1u);  // the follow-up, queued by the callback
  reaped = device->Reap(1);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 1u);
  EXPECT_EQ(chain.done, 2);
}

TEST(MemDeviceTest, FullQueueRefusesWithUnavailable) {
  auto device = MustCreate(SmallOptions());  // depth 4
  Counter counter;
  std::vector<IoRequest> requests;
  for (int i = 0; i < 5; ++i) {
    requests.push_back(CountedRequest(IoOp::kRead, i, 1, device->buffers().GetPage(), &counter));
  }
  for (int i = 0; i < 4; ++i) ASSERT_THAT(device->Enqueue(&requests[i]), IsOk());
  EXPECT_THAT(device->Enqueue(&requests[4]), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(device->in_flight(), 4u);
  ASSERT_THAT(device->Reap(4), IsOk());
  EXPECT_EQ(counter.done, 4);
  EXPECT_THAT(device->Enqueue(&requests[4]), IsOk());
  ASSERT_THAT(device->Reap(1), IsOk());
  EXPECT_EQ(counter.done, 5);
}

TEST(MemDeviceTest, IoBeyondCapacityIsOutOfRange) {
  auto device = MustCreate(SmallOptions());
  Buffer page = device->buffers().GetPage();
  EXPECT_THAT(ReadBlocks(*device, 256, 1, page), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(WriteBlocks(*device, 255, 2, device->buffers().GetChunk()),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(MemDeviceTest, ShortMisalignedOrEmptyRequestsAreInvalid) {
  auto device = MustCreate(SmallOptions());
  Buffer page = device->buffers().GetPage();
  EXPECT_THAT(ReadBlocks(*device, 0, 2, page), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadBlocks(*device, 0, 0, page), StatusIs(absl::StatusCode::kInvalidArgument));
  Buffer big = device->buffers().GetChunk();
  big.data += 8;  // still long enough, but not 512-byte aligned
  big.bytes -= 8;
  EXPECT_THAT(ReadBlocks(*device, 0, 1, big), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(device->in_flight(), 0u);
  EXPECT_EQ(device->stats().requests_enqueued, 0u);
}

TEST(MemDeviceTest, FlushAndFuaWriteSucceed) {
  auto device = MustCreate(SmallOptions());
  Buffer page = device->buffers().GetPage();
  EXPECT_THAT(WriteBlocks(*device, 0, 1, page, /*fua=*/true), IsOk());
  EXPECT_THAT(FlushDevice(*device), IsOk());
  EXPECT_EQ(device->stats().requests_completed, 2u);
}

// Flexible data placement as the device sees it: each write names the identifier its request's
// placement indexes, the storage keeps it per block and counts the blocks per identifier.
TEST(MemDeviceTest, WritesNameThePlacementTheirRequestIndexes) {
  MemDeviceOptions options = SmallOptions();
  options.placement_ids = {7, 3};
  auto device = MustCreate(options);
  EXPECT_EQ(device->info().placement_ids, (std::vector<uint16_t>{7, 3}));
  Buffer page = device->buffers().GetChunk();
  ASSERT_THAT(WriteBlocks(*device, 10, 2, page, false, /*placement=*/1), IsOk());
  ASSERT_THAT(WriteBlocks(*device, 12, 1, page, false, /*placement=*/0), IsOk());
  const MemStorage& storage = *device->storage();
  EXPECT_EQ(storage.PlacementOf(10), std::optional<uint16_t>(3));
  EXPECT_EQ(storage.PlacementOf(11), std::optional<uint16_t>(3));
  EXPECT_EQ(storage.PlacementOf(12), std::optional<uint16_t>(7));
  EXPECT_EQ(storage.PlacementOf(13), std::nullopt);
  ASSERT_THAT(WriteBlocks(*device, 11, 1, page, false, /*placement=*/0), IsOk());
  EXPECT_EQ(storage.PlacementOf(11), std::optional<uint16_t>(7)) << "the last write's";
  EXPECT_EQ(storage.BlocksPlacedWith(3), 2u);
  EXPECT_EQ(storage.BlocksPlacedWith(7), 2u);
  EXPECT_EQ(storage.BlocksPlacedWith(5), 0u);
  EXPECT_THAT(WriteBlocks(*device, 0, 1, page, false, /*placement=*/2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(storage.PlacementOf(0), std::nullopt) << "a refused write places nothing";
}

TEST(MemDeviceTest, WithoutPlacementHandlesWritesNameNone) {
  auto device = MustCreate(SmallOptions());
  EXPECT_TRUE(device->info().placement_ids.empty());
  Buffer page = device->buffers().GetPage();
  ASSERT_THAT(WriteBlocks(*device, 4, 1, page, false, /*placement=*/5), IsOk());
  EXPECT_EQ(device->storage()->PlacementOf(4), std::nullopt);
  MemDeviceOptions zoned = SmallOptions();
  zoned.zones.zone_count = 4;
  zoned.zones.zone_blocks = 64;
  zoned.zones.capacity_blocks = 64;
  zoned.placement_ids = {0};
  EXPECT_THAT(MemDevice::Create(zoned), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MemDeviceTest, OpenQueueSharesStorage) {
  auto device = MustCreate(SmallOptions());
  auto second = device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  Buffer out = device->buffers().GetPage();
  std::memset(out.data, 0x11, out.bytes);
  ASSERT_THAT(WriteBlocks(*device, 9, 1, out), IsOk());
  Buffer in = (*second)->buffers().GetPage();
  ASSERT_THAT(ReadBlocks(**second, 9, 1, in), IsOk());
  EXPECT_EQ(Bytes(in, 4096), std::vector<uint8_t>(4096, 0x11));
  EXPECT_NE(&device->buffers(), &(*second)->buffers());  // each queue its own pool
}

TEST(MemDeviceTest, ReopenOverSameStorageSeesItsBytes) {
  const MemDeviceOptions options = SmallOptions();
  std::shared_ptr<MemStorage> storage;
  {
    auto device = MustCreate(options);
    storage = device->storage();
    Buffer out = device->buffers().GetPage();
    std::memset(out.data, 0x77, out.bytes);
    ASSERT_THAT(WriteBlocks(*device, 100, 1, out), IsOk());
  }
  auto reopened = MemDevice::Open(storage, options);
  ASSERT_THAT(reopened, IsOk());
  Buffer in = (*reopened)->buffers().GetPage();
  ASSERT_THAT(ReadBlocks(**reopened, 100, 1, in), IsOk());
  EXPECT_EQ(Bytes(in, 4096), std::vector<uint8_t>(4096, 0x77));
}

TEST(MemDeviceTest, OpenWithOtherGeometryIsInvalidArgument) {
  auto device = MustCreate(SmallOptions(4096));
  EXPECT_THAT(MemDevice::Open(device->storage(), SmallOptions(512)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MemDeviceTest, BadOptionsAreInvalidArgument) {
  MemDeviceOptions options = SmallOptions(1000);
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = SmallOptions(256);
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = SmallOptions();
  options.lba_count = 0;
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = SmallOptions();
  options.queue_depth = 0;
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.queue_depth = 4097;
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = SmallOptions();
  options.memory_alignment = 24;
  EXPECT_THAT(MemDevice::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MemDeviceTest, CorruptFlipsExactlyTheGivenBytes) {
  auto device = MustCreate(SmallOptions());
  MemStorage& storage = *device->storage();
  storage.Corrupt(4096 + 10, 3, 0x01);
  std::vector<uint8_t> expected(4096, 0);
  expected[10] = expected[11] = expected[12] = 0x01;
  EXPECT_EQ(storage.CopyOut(1, 1), expected);
  EXPECT_EQ(storage.CopyOut(0, 1), std::vector<uint8_t>(4096, 0));
}

TEST(MemDeviceTest, QueuesOnTwoThreadsShareStorage) {
  auto device = MustCreate(SmallOptions());
  auto second = device->OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  // Each thread rewrites its own half many times; the storage mutex keeps the copies whole.
  auto run = [](Device* queue, uint64_t first_lba, uint8_t fill) {
    Buffer out = queue->buffers().GetPage();
    for (int round = 0; round < 200; ++round) {
      std::memset(out.data, fill + round % 2, out.bytes);
      for (uint64_t lba = first_lba; lba < first_lba + 8; ++lba) {
        NVKV_CHECK(WriteBlocks(*queue, lba, 1, out).ok());
      }
    }
  };
  std::thread a(run, device.get(), 0, 0x20);
  std::thread b(run, second->get(), 128, 0x40);
  a.join();
  b.join();
  for (uint64_t lba = 0; lba < 8; ++lba) {
    EXPECT_EQ(device->storage()->CopyOut(lba, 1), std::vector<uint8_t>(4096, 0x21));
    EXPECT_EQ(device->storage()->CopyOut(128 + lba, 1), std::vector<uint8_t>(4096, 0x41));
  }
}

}  // namespace
}  // namespace nvkv::storage
