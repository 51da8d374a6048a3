// A zoned segment read whole (SegmentBuffer): its pages are handed out by position, wherever
// their appends landed (kv/FORMAT.md "Page identity"), so that the scan recovery, compaction and
// check share finds the log in the order the head wrote it; a position no page claims reads as
// never written (a lost append: a hole), or unreadable when some place of the zone could not be
// read; a position two pages claim is a hole; and the places found are the place table's runs.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kv/page_format.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "kv/store_shape.h"
#include "kv/zone_places.h"
#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

constexpr uint32_t kPageBytes = 4096;
constexpr uint64_t kZoneBlocks = 16;
constexpr uint32_t kCapacity = 12;
constexpr uint64_t kZones = 6;
constexpr uint64_t kGeneration = 3;
constexpr uint64_t kBase = 100;  // head_sequence of position 0

StoreShape ZonedShape() {
  StoreShape shape;
  shape.geometry.page_bytes = kPageBytes;
  shape.geometry.pages_per_segment = kCapacity;
  shape.geometry.segment_count = kZones - kMetadataZones;
  shape.geometry.zone_pages = kZoneBlocks;
  shape.seed = 77;
  return shape;
}

std::unique_ptr<storage::MemDevice> ZonedDevice() {
  storage::MemDeviceOptions options;
  options.lba_bytes = kPageBytes;
  options.lba_count = kZones * kZoneBlocks;
  options.buffers.buffer_count = 4;
  options.buffers.chunk_count = 4;
  options.zones = {.zone_count = kZones, .zone_blocks = kZoneBlocks, .capacity_blocks = kCapacity};
  auto device = storage::MemDevice::Create(options);
  NVKV_CHECK(device.ok());
  return std::move(*device);
}

// The log page of position `position` of segment 0: one put of "k<position>", sealed as every
// page of its zone is.
std::vector<uint8_t> LogPage(uint32_t position) {
  const StoreShape shape = ZonedShape();
  std::vector<uint8_t> page(kPageBytes);
  PageBuilder builder;
  builder.Start(page.data(), shape.geometry, PageType::kData, kGeneration, position,
                kBase + position);
  const std::string key = "k" + std::to_string(position);
  RecordHeader header{};
  header.type = static_cast<uint8_t>(RecordType::kPut);
  header.key_bytes = static_cast<uint16_t>(key.size());
  header.value_bytes = 1;
  header.sequence = 10 + position;
  NVKV_CHECK(builder.AddRecord(header, key, "v") != 0);
  builder.Finish(shape.seed, shape.geometry.FirstPageOf(0) + position);
  return page;
}

// Appends pages to segment 0's zone in the order given (-1: a page of zeros, an append a cut
// lost while its place was counted).
void AppendInOrder(storage::MemStorage& storage, const std::vector<int>& positions) {
  const uint64_t zone_start = ZonedShape().geometry.FirstPageOf(0);
  for (int position : positions) {
    const std::vector<uint8_t> page =
        position < 0 ? std::vector<uint8_t>(kPageBytes, 0) : LogPage(position);
    ASSERT_THAT(storage.Append(zone_start, 1, page.data()), IsOk());
  }
}

struct Scanned {
  SegmentScanResult result;
  std::vector<uint64_t> record_pages;  // ScannedRecord::page_number, in log order
};
Scanned Scan(const SegmentBuffer& buffer) {
  Scanned scanned;
  scanned.result = ScanSegment(ZonedShape().geometry, ZonedShape().seed, 0,
                               [&](uint32_t i) { return buffer.page(i); }, false,
                               [&](const ScannedRecord& record) {
                                 scanned.record_pages.push_back(record.page_number);
                               });
  return scanned;
}

uint64_t Page(uint32_t position) { return ZonedShape().geometry.FirstPageOf(0) + position; }

TEST(ZonedSegmentReadTest, PagesComeByPositionWhereverTheyLanded) {
  std::unique_ptr<storage::MemDevice> device = ZonedDevice();
  AppendInOrder(*device->storage(), {0, 2, 1, 3, -1, 5});
  auto buffer = SegmentBuffer::Make(*device, ZonedShape());
  ASSERT_THAT(buffer, IsOk());
  ASSERT_THAT((*buffer)->Read(0), IsOk());
  const Scanned scanned = Scan(**buffer);
  EXPECT_TRUE(scanned.result.in_use);
  EXPECT_EQ(scanned.result.generation, kGeneration);
  EXPECT_EQ(scanned.result.log_pages, 6u);
  ASSERT_EQ(scanned.result.holes.size(), 1u);
  EXPECT_EQ(scanned.result.holes[0].first_page, 4u) << "the lost append's position";
  EXPECT_EQ(scanned.record_pages,
            (std::vector<uint64_t>{Page(0), Page(1), Page(2), Page(3), Page(5)}))
      << "records are named by position, in the order the head wrote them";
  EXPECT_EQ((*buffer)->PlaceRuns(), (std::vector<PlaceRun>{{1, 1, 2}, {2, 1, 1}}));
}

TEST(ZonedSegmentReadTest, APositionTwoPagesClaimIsAHole) {
  std::unique_ptr<storage::MemDevice> device = ZonedDevice();
  AppendInOrder(*device->storage(), {0, 1, 1, 2});
  auto buffer = SegmentBuffer::Make(*device, ZonedShape());
  ASSERT_THAT(buffer, IsOk());
  ASSERT_THAT((*buffer)->Read(0), IsOk());
  const Scanned scanned = Scan(**buffer);
  ASSERT_EQ(scanned.result.holes.size(), 1u);
  EXPECT_EQ(scanned.result.holes[0].first_page, 1u);
  EXPECT_EQ(scanned.record_pages, (std::vector<uint64_t>{Page(0), Page(2)}));
  EXPECT_EQ((*buffer)->PlaceRuns(), (std::vector<PlaceRun>{{2, 1, 3}}));
}

TEST(ZonedSegmentReadTest, AMissingPositionIsUnreadableWhenAPlaceCouldNotBeRead) {
  std::unique_ptr<storage::MemDevice> inner = ZonedDevice();
  AppendInOrder(*inner->storage(), {0, 2, 1, 3});
  auto device = storage::FaultDevice::Create(std::move(inner), {.seed = 1});
  ASSERT_THAT(device, IsOk());
  // Place 1 (position 2) cannot be read.
  ASSERT_THAT((*device)->FailReadsOf(Page(1), 1, storage::FaultError::kMediaError), IsOk());
  auto buffer = SegmentBuffer::Make(**device, ZonedShape());
  ASSERT_THAT(buffer, IsOk());
  absl::StatusOr<uint32_t> failed = (*buffer)->Read(0);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(*failed, 1u);
  EXPECT_EQ((*buffer)->page(2), nullptr) << "the page it may have been";
  EXPECT_NE((*buffer)->page(1), nullptr);
  const Scanned scanned = Scan(**buffer);
  EXPECT_EQ(scanned.record_pages, (std::vector<uint64_t>{Page(0), Page(1), Page(3)}));
}

}  // namespace
}  // namespace nvkv::kv
