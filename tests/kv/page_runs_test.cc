// PageRunWriter: consecutive pages go as one write command of up to its buffer's size, a page
// that does not follow starts another, every page lands at its own place, and after a failed
// write nothing more is written.
#include "kv/page_runs.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "storage/buffer_pool.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

constexpr uint32_t kPageBytes = 4096;

StoreShape ShapeOf4KiBPages() {
  StoreShape shape;
  shape.geometry.page_bytes = kPageBytes;
  shape.blocks_per_page = kPageBytes / 512;  // a 512-byte-block device
  return shape;
}

std::unique_ptr<storage::MemDevice> MakeDevice(std::vector<uint16_t> placement_ids = {}) {
  storage::MemDeviceOptions options;
  options.placement_ids = std::move(placement_ids);
  options.lba_bytes = 512;
  options.lba_count = 8192;  // 4 MiB: 1024 pages
  options.buffers.buffer_count = 4;
  options.buffers.chunk_count = 2;
  auto device = storage::MemDevice::Create(options);
  EXPECT_THAT(device, IsOk());
  return std::move(*device);
}

// Page `page` as written by the test: every byte says which page it is.
void FillAs(uint8_t* at, uint64_t page) {
  std::memset(at, static_cast<int>(page % 251), kPageBytes);
}

bool HoldsPage(storage::Device& device, const StoreShape& shape, uint64_t page) {
  const storage::BufferLease buffer = storage::BufferLease::Page(device.buffers());
  if (!storage::ReadBlocks(device, shape.LbaOf(page), shape.blocks_per_page, *buffer).ok()) {
    return false;
  }
  for (uint32_t i = 0; i < kPageBytes; ++i) {
    if (buffer->data[i] != page % 251) return false;
  }
  return true;
}

TEST(PageRunWriterTest, ConsecutivePagesGoAsOneCommandAndAGapStartsAnother) {
  auto device = MakeDevice();
  const StoreShape shape = ShapeOf4KiBPages();
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device->buffers());
  ASSERT_TRUE(chunk.valid());
  const std::vector<uint64_t> pages = {10, 11, 12, 40, 41, 7};
  {
    PageRunWriter out(*device, shape, *chunk, /*fua=*/false, /*placement=*/0);
    for (uint64_t page : pages) FillAs(out.Room(page), page);
    EXPECT_THAT(out.Finish(), IsOk());
  }
  EXPECT_EQ(device->stats().requests_enqueued, 3u);  // 10-12, 40-41, 7
  for (uint64_t page : pages) EXPECT_TRUE(HoldsPage(*device, shape, page)) << page;
  EXPECT_FALSE(HoldsPage(*device, shape, 13));
}

// Every command of a writer names its placement handle (on a device with FDP, by identifier).
TEST(PageRunWriterTest, EveryRunNamesTheWritersPlacement) {
  auto device = MakeDevice({5, 8});
  const StoreShape shape = ShapeOf4KiBPages();
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device->buffers());
  ASSERT_TRUE(chunk.valid());
  {
    PageRunWriter out(*device, shape, *chunk, /*fua=*/false, /*placement=*/1);
    for (uint64_t page : {10, 11, 40}) FillAs(out.Room(page), page);
    EXPECT_THAT(out.Finish(), IsOk());
  }
  {
    PageRunWriter out(*device, shape, *chunk, /*fua=*/false, /*placement=*/0);
    FillAs(out.Room(12), 12);
    EXPECT_THAT(out.Finish(), IsOk());
  }
  const storage::MemStorage& storage = *device->storage();
  for (uint64_t page : {10, 11, 40}) {
    for (uint32_t b = 0; b < shape.blocks_per_page; ++b) {
      EXPECT_EQ(storage.PlacementOf(shape.LbaOf(page) + b), std::optional<uint16_t>(8)) << page;
    }
  }
  EXPECT_EQ(storage.PlacementOf(shape.LbaOf(12)), std::optional<uint16_t>(5));
  EXPECT_EQ(storage.BlocksPlacedWith(8), 3u * shape.blocks_per_page);
}

TEST(PageRunWriterTest, AFullBufferIsWrittenBeforeMorePagesGather) {
  auto device = MakeDevice();
  const StoreShape shape = ShapeOf4KiBPages();
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device->buffers());
  ASSERT_TRUE(chunk.valid());
  const uint64_t per_chunk = chunk->bytes / kPageBytes;
  const uint64_t count = per_chunk * 2 + 3;
  {
    PageRunWriter out(*device, shape, *chunk, /*fua=*/false, /*placement=*/0);
    for (uint64_t page = 100; page < 100 + count; ++page) FillAs(out.Room(page), page);
    EXPECT_THAT(out.Finish(), IsOk());
  }
  EXPECT_EQ(device->stats().requests_enqueued, 3u);
  for (uint64_t page = 100; page < 100 + count; ++page) {
    EXPECT_TRUE(HoldsPage(*device, shape, page)) << page;
  }
}

TEST(PageRunWriterTest, OnePageBufferWritesAPageACommand) {
  auto device = MakeDevice();
  const StoreShape shape = ShapeOf4KiBPages();
  const storage::BufferLease page_buffer = storage::BufferLease::Page(device->buffers());
  ASSERT_TRUE(page_buffer.valid());
  {
    PageRunWriter out(*device, shape, *page_buffer, /*fua=*/true, /*placement=*/0);
    for (uint64_t page = 20; page < 24; ++page) FillAs(out.Room(page), page);
    EXPECT_THAT(out.Finish(), IsOk());
  }
  EXPECT_EQ(device->stats().requests_enqueued, 4u);
  for (uint64_t page = 20; page < 24; ++page) EXPECT_TRUE(HoldsPage(*device, shape, page));
}

TEST(PageRunWriterTest, AfterAFailedWriteNothingMoreIsWritten) {
  auto inner = MakeDevice();
  storage::MemDevice& mem = *inner;
  auto device = storage::FaultDevice::Create(std::move(inner), storage::FaultDeviceOptions{});
  ASSERT_THAT(device, IsOk());
  ASSERT_THAT((*device)->FailOperation({.nth = 1, .filter = storage::OpFilter::kWrite}), IsOk());
  const StoreShape shape = ShapeOf4KiBPages();
  const storage::BufferLease chunk = storage::BufferLease::Chunk((*device)->buffers());
  ASSERT_TRUE(chunk.valid());
  PageRunWriter out(**device, shape, *chunk, /*fua=*/false, /*placement=*/0);
  FillAs(out.Room(5), 5);
  FillAs(out.Room(9), 9);  // writes page 5, which fails
  EXPECT_FALSE(out.ok());
  FillAs(out.Room(30), 30);
  EXPECT_FALSE(out.Finish().ok());
  EXPECT_EQ(mem.stats().requests_enqueued, 0u);  // the failed write never reached it
  EXPECT_FALSE(HoldsPage(**device, shape, 9));
  EXPECT_FALSE(HoldsPage(**device, shape, 30));
}

}  // namespace
}  // namespace nvkv::kv
