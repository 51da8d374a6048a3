// The metadata zones of a zoned store: a format lays down both superblock copies, and Open finds
// them and the newest copy of each map page in either zone, which zone is current, and whether
// it holds every page (kv/FORMAT.md "Zoned namespaces").
#include "kv/metadata_zones.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::MakeRequest;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kPageBytes = 4096;
constexpr uint64_t kZoneBlocks = 16;
constexpr uint64_t kCapacity = 12;
constexpr uint8_t kStoreId[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A zoned memory device of `zones` zones of 16 blocks (12 writable), 4 KiB blocks and pages.
std::unique_ptr<storage::MemDevice> ZonedDevice(uint64_t zones) {
  storage::MemDeviceOptions options;
  options.lba_bytes = kPageBytes;
  options.lba_count = zones * kZoneBlocks;
  options.buffers.buffer_count = 8;
  options.buffers.chunk_count = 2;
  options.zones = {.zone_count = zones, .zone_blocks = kZoneBlocks, .capacity_blocks = kCapacity};
  auto device = storage::MemDevice::Create(options);
  NVKV_CHECK(device.ok());
  return std::move(*device);
}

Superblock StoreSuperblock(uint64_t zones) {
  Superblock sb{};
  sb.format_version = kZonedFormatVersion;
  sb.index_mode = kSuperblockIndexHash;
  sb.page_bytes = kPageBytes;
  sb.lba_bytes = kPageBytes;
  sb.layout = kSuperblockLayoutZoned;
  sb.zone_blocks = kZoneBlocks;
  sb.capacity_blocks = kCapacity;
  sb.pages_per_segment = kCapacity;
  sb.segment_count = zones - kMetadataZones;
  std::memcpy(sb.store_id, kStoreId, 16);
  return sb;
}

class MetadataZonesTest : public ::testing::Test {
 protected:
  explicit MetadataZonesTest(uint64_t zones = 8)
      : device_(ZonedDevice(zones)),
        superblock_(StoreSuperblock(zones)),
        geometry_(GeometryOf(superblock_)),
        seed_(StoreSeed(kStoreId)) {
    page_ = device_->buffers().GetPage();
    chunk_ = device_->buffers().GetChunk();
    NVKV_CHECK(page_.valid() && chunk_.valid());
  }
  ~MetadataZonesTest() override {
    device_->buffers().PutPage(page_);
    device_->buffers().PutChunk(chunk_);
  }

  // Appends map page `index` with write count `count` to metadata zone `zone`; its floors carry
  // the count too (sequence_floor = 10 x count), so a visit says which copy it was given.
  void AppendMapPage(uint32_t zone, uint32_t index, uint64_t count) {
    std::vector<SegmentMapEntry> entries(MapEntriesPerPage(kPageBytes));
    entries[0].state = static_cast<uint8_t>(MapState::kInUse);
    SegmentMapPageHeader floors{};
    floors.sequence_floor = 10 * count;
    EncodeMapPage(page_.data, geometry_, seed_, geometry_.MetadataZoneFirstPage(zone), index,
                  floors, entries.data(), 1, count);
    AppendPage(zone);
  }
  // Appends the bytes in page_ to metadata zone `zone` as they are; the page it landed at.
  uint64_t AppendPage(uint32_t zone) {
    storage::IoRequest append = MakeRequest(storage::IoOp::kZoneAppend,
                                            device_->info().zones.StartOf(zone), 1, page_);
    EXPECT_THAT(storage::RunOne(*device_, append), IsOk());
    return append.appended_lba;
  }

  ZoneSuperblocks Superblocks() {
    absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(*device_, chunk_);
    EXPECT_THAT(found, IsOk());
    return found.ok() ? *found : ZoneSuperblocks{};
  }

  // Reads the map; `visited` gets each index's floors' sequence_floor.
  MetadataZonesRead ReadMap(std::map<uint64_t, uint64_t>* visited) {
    const ZoneSuperblocks found = Superblocks();
    absl::StatusOr<MetadataZonesRead> read = ReadMetadataZones(
        *device_, geometry_, seed_, 1, found.zones, chunk_,
        [&](uint64_t index, const SegmentMapPageHeader& floors, const SegmentMapEntry*,
            uint64_t) { (*visited)[index] = floors.sequence_floor; });
    EXPECT_THAT(read, IsOk());
    return read.ok() ? *read : MetadataZonesRead{};
  }

  std::unique_ptr<storage::MemDevice> device_;
  Superblock superblock_;
  Geometry geometry_;
  uint64_t seed_;
  storage::Buffer page_;
  storage::Buffer chunk_;
};

TEST_F(MetadataZonesTest, AFreshNamespaceIsEmpty) {
  const ZoneSuperblocks found = Superblocks();
  EXPECT_TRUE(found.blank());
  EXPECT_THAT(found.copies[0], StatusIs(absl::StatusCode::kNotFound, "metadata zone 0 is empty"));
  EXPECT_THAT(found.copies[1], StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(MetadataZonesTest, AFormatLaysDownBothCopiesAtTheZonesStarts) {
  AppendMapPage(0, 0, 3);  // what an earlier store left: the format resets it
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  const ZoneSuperblocks found = Superblocks();
  EXPECT_FALSE(found.blank());
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    SCOPED_TRACE(::testing::Message() << "zone " << z);
    ASSERT_THAT(found.copies[z], IsOk());
    EXPECT_EQ(found.copies[z]->copy, z);
    EXPECT_EQ(found.copies[z]->zone_blocks, kZoneBlocks);
  }
  EXPECT_EQ(found.zones[0].write_pointer, found.zones[0].start + 1) << "the copy alone";
  EXPECT_EQ(found.zones[1].state, storage::ZoneState::kFull)
      << "zone 1 waits for the map's first move without counting among the active zones";
  std::map<uint64_t, uint64_t> visited;
  const MetadataZonesRead read = ReadMap(&visited);
  EXPECT_TRUE(visited.empty()) << "the earlier store's map page is gone";
  EXPECT_EQ(read.pages_found, 0u);
  EXPECT_EQ(read.current, 0u);
  EXPECT_EQ(read.next_write_count, 1u);
  EXPECT_TRUE(read.holds_every_page);
}

TEST_F(MetadataZonesTest, DataThatIsNotASuperblockIsSaidSo) {
  std::memset(page_.data, 0xab, kPageBytes);
  AppendPage(0);
  EXPECT_THAT(Superblocks().copies[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                                "not an nvkv store"));
}

// A format cut by a power failure at any point leaves each copy whole or absent (zeros where it
// goes count as absent): never data that looks foreign, which Open would refuse to format over.
TEST(MetadataZonesCutTest, AFormatCutShortLeavesEachCopyWholeOrAbsent) {
  uint64_t blank = 0, whole = 0;
  for (uint64_t cut_after = 1; cut_after <= 4; ++cut_after) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SCOPED_TRACE(::testing::Message() << "cut after " << cut_after << ", seed " << seed);
      std::unique_ptr<storage::MemDevice> inner = ZonedDevice(8);
      std::shared_ptr<storage::MemStorage> storage = inner->storage();
      storage::MemDeviceOptions options;
      options.lba_bytes = kPageBytes;
      options.lba_count = 8 * kZoneBlocks;
      options.zones = inner->info().zones;
      {
        auto device = storage::FaultDevice::Create(std::move(inner), {.seed = seed});
        ASSERT_THAT(device, IsOk());
        ASSERT_THAT((*device)->SetCutAfterOperations(cut_after), IsOk());
        const storage::Buffer page = (*device)->buffers().GetPage();
        const Superblock sb = StoreSuperblock(8);
        (void)FormatMetadataZones(**device, GeometryOf(sb), sb, page);
        (*device)->buffers().PutPage(page);
      }
      auto rebooted = storage::MemDevice::Open(storage, options);
      ASSERT_THAT(rebooted, IsOk());
      const storage::Buffer chunk = (*rebooted)->buffers().GetChunk();
      absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(**rebooted, chunk);
      (*rebooted)->buffers().PutChunk(chunk);
      ASSERT_THAT(found, IsOk());
      for (uint32_t z = 0; z < kMetadataZones; ++z) {
        EXPECT_TRUE(found->copies[z].ok() || absl::IsNotFound(found->copies[z].status()))
            << "zone " << z << ": " << found->copies[z].status();
        whole += found->copies[z].ok() ? 1 : 0;
      }
      blank += found->blank() ? 1 : 0;
    }
  }
  EXPECT_GT(blank, 0u);
  EXPECT_GT(whole, 0u);
}

// A finished zone (the old one after a move) holds zeros past its last append: never written,
// not damage.
TEST_F(MetadataZonesTest, AFinishedZonesUnwrittenPagesAreNotDamage) {
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  AppendMapPage(0, 0, 1);
  AppendMapPage(0, 0, 2);
  storage::IoRequest finish =
      MakeRequest(storage::IoOp::kZoneFinish, device_->info().zones.StartOf(0));
  ASSERT_THAT(storage::RunOne(*device_, finish), IsOk());
  std::map<uint64_t, uint64_t> visited;
  const MetadataZonesRead read = ReadMap(&visited);
  EXPECT_EQ(visited, (std::map<uint64_t, uint64_t>{{0, 20}}));
  EXPECT_EQ(read.pages_found, 2u);
  EXPECT_EQ(read.unusable_pages, 0u);
}

// A copy that cannot be read is that copy's failure: the other one still serves.
TEST(MetadataZonesReadErrorTest, AnUnreadableCopyLeavesTheOther) {
  std::unique_ptr<storage::MemDevice> inner = ZonedDevice(8);
  auto device = storage::FaultDevice::Create(std::move(inner), {.seed = 1});
  ASSERT_THAT(device, IsOk());
  const storage::Buffer page = (*device)->buffers().GetPage();
  const storage::Buffer chunk = (*device)->buffers().GetChunk();
  const Superblock sb = StoreSuperblock(8);
  ASSERT_THAT(FormatMetadataZones(**device, GeometryOf(sb), sb, page), IsOk());
  ASSERT_THAT((*device)->FailReadsOf(0, 1, storage::FaultError::kMediaError), IsOk());
  absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(**device, chunk);
  ASSERT_THAT(found, IsOk());
  EXPECT_THAT(found->copies[0], StatusIs(absl::StatusCode::kDataLoss, "Unrecovered Read Error"));
  ASSERT_THAT(found->copies[1], IsOk());
  EXPECT_EQ(found->copies[1]->copy, 1u);
  EXPECT_FALSE(found->blank());
  (*device)->buffers().PutPage(page);
  (*device)->buffers().PutChunk(chunk);
}

TEST(MetadataZonesSizeTest, TooFewZonesForAStoreAreRefused) {
  std::unique_ptr<storage::MemDevice> device = ZonedDevice(2);
  const storage::Buffer chunk = device->buffers().GetChunk();
  EXPECT_THAT(ReadZoneSuperblocks(*device, chunk),
              StatusIs(absl::StatusCode::kFailedPrecondition, "2 zones; a store needs 2"));
  device->buffers().PutChunk(chunk);
}

// Two map pages (a store of more segments than one page describes), written in both zones.
class TwoMapPagesTest : public MetadataZonesTest {
 protected:
  TwoMapPagesTest() : MetadataZonesTest(MapEntriesPerPage(kPageBytes) + 8) {}
};

TEST_F(TwoMapPagesTest, TheNewestCopyOfEachPageWinsInEitherZone) {
  ASSERT_EQ(geometry_.map_pages(), 2u);
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  AppendMapPage(0, 0, 1);
  AppendMapPage(0, 1, 2);
  AppendMapPage(0, 0, 3);
  // A move to zone 1 begun: zone 1 started again, page 1 copied, page 0 not yet.
  ASSERT_THAT(StartMetadataZone(*device_, geometry_, superblock_, 1, page_), IsOk());
  AppendMapPage(1, 1, 4);
  std::map<uint64_t, uint64_t> visited;
  MetadataZonesRead read = ReadMap(&visited);
  EXPECT_EQ(visited, (std::map<uint64_t, uint64_t>{{0, 30}, {1, 40}}));
  EXPECT_EQ(read.pages_found, 4u);
  EXPECT_EQ(read.current, 1u) << "the zone of the newest map write";
  EXPECT_EQ(read.next_write_count, 5u);
  EXPECT_FALSE(read.holds_every_page) << "zone 1 has no copy of page 0: the move must finish";

  AppendMapPage(1, 0, 5);  // the move finished
  visited.clear();
  read = ReadMap(&visited);
  EXPECT_EQ(visited, (std::map<uint64_t, uint64_t>{{0, 50}, {1, 40}}));
  EXPECT_TRUE(read.holds_every_page);
  EXPECT_EQ(read.next_write_count, 6u);
}

// Zeros below the write pointer are an append a cut lost (never relied on): the older copy
// serves.
TEST_F(TwoMapPagesTest, AnAppendACutLostGivesWayToAnOlderCopy) {
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  AppendMapPage(0, 0, 1);
  AppendMapPage(0, 1, 2);
  std::memset(page_.data, 0, kPageBytes);
  AppendPage(0);
  std::map<uint64_t, uint64_t> visited;
  const MetadataZonesRead read = ReadMap(&visited);
  EXPECT_EQ(visited, (std::map<uint64_t, uint64_t>{{0, 10}, {1, 20}}));
  EXPECT_EQ(read.unusable_pages, 1u);
  EXPECT_EQ(read.damaged_pages, 0u);
  EXPECT_EQ(read.next_write_count, 3u);
}

// A copy that does not verify may have been some page's newest: the map says nothing (no page is
// visited), and recovery reads every segment. So does a map page sealed for the other zone.
TEST_F(TwoMapPagesTest, ADamagedCopyMakesTheMapSayNothing) {
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  AppendMapPage(0, 0, 1);
  AppendMapPage(0, 1, 2);
  AppendMapPage(0, 0, 3);
  std::shared_ptr<storage::MemStorage> storage = device_->storage();
  storage->Corrupt(3 * kPageBytes + 100, 1);  // the copy of count 3, the zone's fourth page
  std::map<uint64_t, uint64_t> visited;
  MetadataZonesRead read = ReadMap(&visited);
  EXPECT_TRUE(visited.empty()) << "page 0's older copy says less than the device held";
  EXPECT_EQ(read.damaged_pages, 1u);
  EXPECT_EQ(read.pages_found, 2u);
  EXPECT_EQ(read.next_write_count, 3u) << "above every count that verifies";

  storage->Corrupt(3 * kPageBytes + 100, 1);  // repaired
  std::vector<SegmentMapEntry> entries(MapEntriesPerPage(kPageBytes));
  SegmentMapPageHeader floors{};
  EncodeMapPage(page_.data, geometry_, seed_, geometry_.MetadataZoneFirstPage(1), 0, floors,
                entries.data(), 1, 9);
  AppendPage(0);  // sealed for zone 1, landed in zone 0
  visited.clear();
  read = ReadMap(&visited);
  EXPECT_TRUE(visited.empty());
  EXPECT_EQ(read.damaged_pages, 1u);
}

// A full zone is read to its capacity, whatever its write pointer says (NVMe gives none).
TEST_F(MetadataZonesTest, AFullZoneIsReadToItsCapacity) {
  ASSERT_THAT(FormatMetadataZones(*device_, geometry_, superblock_, page_), IsOk());
  for (uint64_t count = 1; count < kCapacity; ++count) AppendMapPage(0, 0, count);
  ZoneSuperblocks found = Superblocks();
  ASSERT_EQ(found.zones[0].state, storage::ZoneState::kFull);
  found.zones[0].write_pointer = found.zones[0].start;  // what a drive may report
  std::map<uint64_t, uint64_t> visited;
  absl::StatusOr<MetadataZonesRead> read = ReadMetadataZones(
      *device_, geometry_, seed_, 1, found.zones, chunk_,
      [&](uint64_t index, const SegmentMapPageHeader& floors, const SegmentMapEntry*,
          uint64_t) { visited[index] = floors.sequence_floor; });
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(visited, (std::map<uint64_t, uint64_t>{{0, 10 * (kCapacity - 1)}}));
  EXPECT_EQ(read->pages_found, kCapacity - 1);
}

}  // namespace
}  // namespace nvkv::kv
