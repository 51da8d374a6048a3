// The first step of an Open on a zoned namespace (StoreOpener, kv/FORMAT.md "Zoned
// namespaces"): a blank namespace formatted (every zone emptied, both superblock copies at the
// metadata zones' starts), a store found again by either copy, and what is refused, writing
// nothing: foreign data and damaged copies without force_format, another format version, a
// store formatted for another zone model, zones that are not whole pages or too small for the
// map, a segment size that is not the zone's, too few zones for the shards; and a format cut by
// a power failure at any point leaves a namespace that formats or opens, never one refused.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv/engine.h"
#include "kv/metadata_zones.h"
#include "kv/page_format.h"
#include "kv/store_open.h"
#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kBlock = 4096;
constexpr uint64_t kZoneBlocks = 64;
constexpr uint64_t kCapacity = 48;
constexpr uint64_t kZones = 16;

storage::MemDeviceOptions ZonedOptions(uint64_t zone_blocks = kZoneBlocks,
                                       uint64_t capacity = kCapacity, uint64_t zones = kZones) {
  storage::MemDeviceOptions options;
  options.lba_bytes = kBlock;
  options.lba_count = zones * zone_blocks;
  options.zones = {.zone_count = zones, .zone_blocks = zone_blocks, .capacity_blocks = capacity};
  return options;
}

Options StoreOptions() {
  Options options;
  options.shard_count = 2;
  return options;
}

// StoreOpener::Open over `device`, as an Open runs it.
absl::StatusOr<OpenedStore> OpenOn(storage::Device& device, const Options& options,
                                   bool read_only = false) {
  const std::string path = device.info().path;
  StoreOpener opener(options, read_only, path, device,
                     [&device](uint32_t chunks) {
                       return device.OpenQueue(LargeIoQueueOptions(chunks));
                     });
  return opener.Open();
}

std::vector<storage::ZoneDescriptor> Zones(storage::MemStorage& storage) {
  return storage.Report(0, storage.zones().zone_count);
}

class ZonedOpenTest : public ::testing::Test {
 protected:
  ZonedOpenTest() {
    auto device = storage::MemDevice::Create(ZonedOptions());
    NVKV_CHECK(device.ok());
    device_ = std::move(*device);
    storage_ = device_->storage();
  }
  // Everything the namespace holds: every block and every zone's state and pointer.
  struct Image {
    std::vector<uint8_t> bytes;
    std::vector<storage::ZoneDescriptor> zones;
    bool operator==(const Image&) const = default;
  };
  Image Snapshot() {
    return {storage_->CopyOut(0, static_cast<uint32_t>(storage_->lba_count())), Zones(*storage_)};
  }
  // Appends a page of `fill` bytes to zone `zone`.
  void AppendFill(uint64_t zone, uint8_t fill) {
    std::vector<uint8_t> page(kBlock, fill);
    ASSERT_THAT(storage_->Append(zone * kZoneBlocks, 1, page.data()), IsOk());
  }

  std::unique_ptr<storage::MemDevice> device_;
  std::shared_ptr<storage::MemStorage> storage_;
};

TEST_F(ZonedOpenTest, ABlankNamespaceIsFormattedIntoZonesAndFoundAgain) {
  AppendFill(5, 0x5a);  // an earlier user's data in a segment's zone: emptied by the format
  absl::StatusOr<OpenedStore> opened = OpenOn(*device_, StoreOptions());
  ASSERT_THAT(opened, IsOk());
  EXPECT_TRUE(opened->formatted_now);
  const Superblock& sb = opened->superblock;
  EXPECT_EQ(sb.format_version, kZonedFormatVersion);
  EXPECT_EQ(sb.zone_blocks, kZoneBlocks);
  EXPECT_EQ(sb.capacity_blocks, kCapacity);
  EXPECT_EQ(sb.segment_count, kZones - kMetadataZones);
  const Geometry& g = opened->shape.geometry;
  EXPECT_TRUE(g.zoned());
  EXPECT_EQ(g.pages_per_segment, kCapacity);
  EXPECT_EQ(g.FirstPageOf(0), kMetadataZones * kZoneBlocks);
  const std::vector<storage::ZoneDescriptor> zones = Zones(*storage_);
  EXPECT_EQ(zones[0].write_pointer, zones[0].start + 1) << "superblock copy 0 alone";
  EXPECT_EQ(zones[1].state, storage::ZoneState::kFull) << "copy 1, finished";
  for (uint64_t z = kMetadataZones; z < kZones; ++z) {
    EXPECT_EQ(zones[z].state, storage::ZoneState::kEmpty) << "zone " << z;
  }
  opened->queue.reset();

  absl::StatusOr<OpenedStore> again = OpenOn(*device_, StoreOptions());
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->formatted_now);
  EXPECT_EQ(std::memcmp(again->superblock.store_id, sb.store_id, sizeof(sb.store_id)), 0);
  EXPECT_EQ(again->shape.seed, opened->shape.seed);
  again->queue.reset();
  Options exclusive = StoreOptions();
  exclusive.error_if_exists = true;
  EXPECT_THAT(OpenOn(*device_, exclusive), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(ZonedOpenTest, EitherCopyOpensTheStore) {
  ASSERT_THAT(OpenOn(*device_, StoreOptions()), IsOk());
  for (uint32_t damaged : {0u, 1u}) {
    SCOPED_TRACE(::testing::Message() << "copy " << damaged << " damaged");
    const uint64_t offset = damaged * kZoneBlocks * kBlock + 40;
    storage_->Corrupt(offset, 1);
    absl::StatusOr<OpenedStore> opened = OpenOn(*device_, StoreOptions());
    ASSERT_THAT(opened, IsOk());
    EXPECT_FALSE(opened->formatted_now);
    opened->queue.reset();
    storage_->Corrupt(offset, 1);  // back as it was
  }
}

TEST_F(ZonedOpenTest, ForeignDataIsRefusedAndLeftUntouchedUnlessForced) {
  AppendFill(0, 0xab);
  const Image before = Snapshot();
  absl::StatusOr<OpenedStore> refused = OpenOn(*device_, StoreOptions());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition, "not an nvkv store"));
  EXPECT_TRUE(refused.status().GetPayload(kFormatRefusedPayload).has_value());
  EXPECT_TRUE(Snapshot() == before) << "a refusal writes nothing";
  Options forced = StoreOptions();
  forced.force_format = true;
  absl::StatusOr<OpenedStore> formatted = OpenOn(*device_, forced);
  ASSERT_THAT(formatted, IsOk());
  EXPECT_TRUE(formatted->formatted_now);
}

TEST_F(ZonedOpenTest, BothCopiesDamagedIsDataLossAndWritesNothing) {
  ASSERT_THAT(OpenOn(*device_, StoreOptions()), IsOk());
  storage_->Corrupt(40, 1);
  storage_->Corrupt(kZoneBlocks * kBlock + 40, 1);
  const Image before = Snapshot();
  EXPECT_THAT(OpenOn(*device_, StoreOptions()),
              StatusIs(absl::StatusCode::kDataLoss, "both nvkv superblocks are damaged"));
  EXPECT_TRUE(Snapshot() == before);
}

TEST_F(ZonedOpenTest, ANewerFormatIsRefusedEvenWithForceFormat) {
  absl::StatusOr<OpenedStore> opened = OpenOn(*device_, StoreOptions());
  ASSERT_THAT(opened, IsOk());
  Superblock newer = opened->superblock;
  opened->queue.reset();
  newer.format_version = kNewestFormatVersion + 1;
  std::vector<uint8_t> page(kBlock);
  EncodeSuperblock(newer, page.data(), kBlock);
  ASSERT_THAT(storage_->ResetZone(0), IsOk());
  ASSERT_THAT(storage_->Append(0, 1, page.data()), IsOk());
  const Image before = Snapshot();
  Options forced = StoreOptions();
  forced.force_format = true;
  EXPECT_THAT(OpenOn(*device_, forced),
              StatusIs(absl::StatusCode::kFailedPrecondition, "this nvkv reads up to version"));
  EXPECT_TRUE(Snapshot() == before);
}

TEST_F(ZonedOpenTest, AStoreFormattedForOtherZonesIsRefused) {
  ASSERT_THAT(OpenOn(*device_, StoreOptions()), IsOk());
  // The same bytes seen with a smaller zone capacity (a namespace made again differently).
  auto other = storage::MemDevice::Create(ZonedOptions(kZoneBlocks, kCapacity - 8));
  ASSERT_THAT(other, IsOk());
  const std::vector<uint8_t> bytes =
      storage_->CopyOut(0, static_cast<uint32_t>(2 * kZoneBlocks));
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    ASSERT_THAT((*other)->storage()->Append(z * kZoneBlocks, 1, bytes.data() + z * kZoneBlocks *
                                                                                   kBlock),
                IsOk());
  }
  EXPECT_THAT(OpenOn(**other, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "formatted for zones of 64 blocks (48 writable) of 4096 bytes; the "
                       "namespace has zones of 64 blocks (40 writable)"));
}

TEST(ZonedFormatTest, ZonesThatAreNotWholePagesAreRefused) {
  auto device = storage::MemDevice::Create(ZonedOptions(kZoneBlocks, 45));
  ASSERT_THAT(device, IsOk());
  Options options = StoreOptions();
  options.page_bytes = 8192;
  EXPECT_THAT(OpenOn(**device, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "zones of 64 blocks (45 writable) of 4096 bytes are not whole pages of "
                       "8192 bytes"));
}

TEST(ZonedFormatTest, ASegmentSizeOtherThanTheZonesIsRefused) {
  auto device = storage::MemDevice::Create(ZonedOptions());
  ASSERT_THAT(device, IsOk());
  Options options = StoreOptions();
  options.segment_bytes = 256 << 10;
  EXPECT_THAT(OpenOn(**device, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "on a zoned namespace a segment is a zone's writable part (196608 bytes"));
  options.segment_bytes = kCapacity * kBlock;
  EXPECT_THAT(OpenOn(**device, options), IsOk());
}

TEST(ZonedFormatTest, TooFewZonesForTheShardsAreRefused) {
  auto device = storage::MemDevice::Create(ZonedOptions(kZoneBlocks, kCapacity, 8));
  ASSERT_THAT(device, IsOk());
  EXPECT_THAT(OpenOn(**device, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "6 segments of 196608 bytes; need"));
}

TEST(ZonedFormatTest, ZonesTooSmallForTheMapAreRefused) {
  // 600 zones of 8 writable pages: a map of 3 pages needs 8 pages of a zone (two superblock
  // copies and two of the map), and 8 suffice; of 1,100 zones: a map of 5 pages needs 12.
  auto fits = storage::MemDevice::Create(ZonedOptions(8, 8, 600));
  ASSERT_THAT(fits, IsOk());
  EXPECT_THAT(OpenOn(**fits, StoreOptions()), IsOk());
  auto too_small = storage::MemDevice::Create(ZonedOptions(8, 8, 1100));
  ASSERT_THAT(too_small, IsOk());
  EXPECT_THAT(OpenOn(**too_small, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "zones of 8 writable pages cannot hold two superblock copies and two "
                       "copies of the segment map of 1098 segments (12 pages)"));
}

// Zones larger than nvkv reads whole (a segment is a zone's writable part) are refused with the
// numbers, and nothing is written: a format must not leave a store no Open can read.
TEST(ZonedFormatTest, ZonesLargerThanASegmentReadWholeAreRefused) {
  const uint64_t blocks = (uint64_t{129} << 20) / kBlock;  // 129 MiB, all writable
  auto device = storage::MemDevice::Create(ZonedOptions(blocks, blocks, 12));
  ASSERT_THAT(device, IsOk());
  EXPECT_THAT(OpenOn(**device, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "zones of 129 MiB writable: nvkv reads a zone whole into memory while it "
                       "opens and compacts, and takes zones of up to 128 MiB writable"));
  for (const storage::ZoneDescriptor& zone : (*device)->storage()->Report(0, 12)) {
    EXPECT_EQ(zone.state, storage::ZoneState::kEmpty);
  }
}

TEST(ZonedFormatTest, NothingIsFormattedWhereTheOptionsSayNot) {
  auto device = storage::MemDevice::Create(ZonedOptions());
  ASSERT_THAT(device, IsOk());
  EXPECT_THAT(OpenOn(**device, StoreOptions(), /*read_only=*/true),
              StatusIs(absl::StatusCode::kNotFound, "a read-only open formats nothing"));
  Options no_create = StoreOptions();
  no_create.create_if_missing = false;
  EXPECT_THAT(OpenOn(**device, no_create),
              StatusIs(absl::StatusCode::kNotFound, "create_if_missing is off"));
  for (const storage::ZoneDescriptor& zone : Zones(*(*device)->storage())) {
    EXPECT_EQ(zone.state, storage::ZoneState::kEmpty);
  }
}

// A format over foreign data (force_format) cut by a power failure at any point: the namespace
// then holds the foreign data, nothing, or the new store, and an Open with force_format formats
// or opens it; never a copy of one store beside another's, nothing refused as damaged.
TEST(ZonedFormatCutTest, AFormatCutAnywhereFormatsOrOpensAfterwards) {
  int formatted_again = 0, opened = 0;
  Options forced = StoreOptions();
  forced.force_format = true;
  for (uint64_t cut_after = 1; cut_after <= kZones + 10; ++cut_after) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(::testing::Message() << "cut after " << cut_after << ", seed " << seed);
      auto inner = storage::MemDevice::Create(ZonedOptions());
      ASSERT_THAT(inner, IsOk());
      std::shared_ptr<storage::MemStorage> storage = (*inner)->storage();
      std::vector<uint8_t> foreign(kBlock, 0xab);
      ASSERT_THAT(storage->Append(0, 1, foreign.data()), IsOk());
      ASSERT_THAT(storage->Append(kZoneBlocks, 1, foreign.data()), IsOk());
      {
        auto fault = storage::FaultDevice::Create(std::move(*inner), {.seed = seed});
        ASSERT_THAT(fault, IsOk());
        ASSERT_THAT((*fault)->SetCutAfterOperations(cut_after), IsOk());
        (void)OpenOn(**fault, forced);
      }
      auto rebooted = storage::MemDevice::Open(storage, ZonedOptions());
      ASSERT_THAT(rebooted, IsOk());
      const storage::Buffer chunk = (*rebooted)->buffers().GetChunk();
      absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(**rebooted, chunk);
      (*rebooted)->buffers().PutChunk(chunk);
      ASSERT_THAT(found, IsOk());
      if (found->copies[0].ok() && found->copies[1].ok()) {
        EXPECT_EQ(std::memcmp(found->copies[0]->store_id, found->copies[1]->store_id, 16), 0);
      }
      absl::StatusOr<OpenedStore> after = OpenOn(**rebooted, forced);
      ASSERT_THAT(after, IsOk());
      (after->formatted_now ? formatted_again : opened) += 1;
    }
  }
  EXPECT_GT(formatted_again, 0);
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace nvkv::kv
