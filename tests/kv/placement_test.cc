// Flexible data placement (NVMe FDP; kv/store_shape.h WritePlacement): on a device with placement
// handles, every page a store writes names the handle of its kind, the log's (records, summaries,
// free markers, a large value's pages) or the metadata's (superblocks, the segment map,
// checkpoints), across formats, compaction, checkpoints and reopens; with one handle, or none,
// everything goes where the device puts it by default. The memory device keeps what each block's
// last write named, as a device with FDP sees it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using storage::MemDevice;
using storage::MemDeviceOptions;
using storage::MemStorage;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint64_t kSegments = 48;
// Identifiers as a namespace might list them: not their indexes.
constexpr uint16_t kFirstId = 21;
constexpr uint16_t kSecondId = 34;
constexpr uint16_t kThirdId = 55;

MemDeviceOptions DeviceWithHandles(std::vector<uint16_t> placement_ids) {
  MemDeviceOptions options = MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes);
  options.placement_ids = std::move(placement_ids);
  return options;
}

// The zero-filled storage of a new device of `device_options`.
std::shared_ptr<MemStorage> NewStorage(const MemDeviceOptions& device_options) {
  auto created = MemDevice::Create(device_options);
  EXPECT_THAT(created, IsOk());
  return created.ok() ? (*created)->storage() : nullptr;
}

absl::StatusOr<std::unique_ptr<Engine>> OpenStore(const std::shared_ptr<MemStorage>& storage,
                                                  const MemDeviceOptions& device_options,
                                                  IndexMode mode) {
  auto device = MemDevice::Open(storage, device_options);
  if (!device.ok()) return device.status();
  Options options;
  options.segment_bytes = kPagesPerSegment * kPageBytes;
  options.shard_count = 2;
  options.page_buffers_per_shard = 16;
  options.background_compaction = false;
  options.index_mode = mode;
  EngineSeams seams;
  seams.summary_min_segment_pages = 4;  // summaries in these small segments
  return Engine::OpenOnDevice(std::move(*device), options, seams);
}

// Overwrites of a few hundred keys, a large value among them, so that segments fill, seal with
// summaries, and compaction has overwritten records to clean.
void WriteRound(Engine& engine, int round) {
  for (int k = 0; k < 200; ++k) {
    const std::string value =
        k == 7 ? std::string(3 * kPageBytes, 'L')
               : absl::StrCat("r", round, "-", std::string(200 + k * 13 % 700, 'v'));
    const std::string key = absl::StrCat("key", k);
    WriteOp op{false, key, value};
    ASSERT_THAT(engine.Write(std::span<const WriteOp>(&op, 1), k % 9 == 0), IsOk());
  }
}

// What each page of the store's region last held, by the kind of write that wrote it.
enum class PageKind { kNeverWritten, kLog, kMetadata };

PageKind KindOf(const std::vector<uint8_t>& page, uint64_t page_number, uint64_t map_first_page) {
  if (page_number < kSuperblockPages || page_number >= map_first_page) {
    return PageKind::kMetadata;  // superblocks and the segment map's region
  }
  PageHeader header;
  std::memcpy(&header, page.data(), sizeof(header));
  if (header.magic != kPageMagic) return PageKind::kNeverWritten;
  return header.type == static_cast<uint8_t>(PageType::kCheckpoint) ? PageKind::kMetadata
                                                                    : PageKind::kLog;
}

// Every block the store wrote names `log_id` or `metadata_id` as its page's kind says; returns
// how many pages of each kind it checked.
struct Checked {
  uint64_t log = 0;
  uint64_t metadata = 0;
};
Checked ExpectPlacedByKind(const MemStorage& storage, uint16_t log_id, uint16_t metadata_id) {
  Checked checked;
  const uint64_t map_first_page = kSuperblockPages + kSegments * kPagesPerSegment;
  const uint64_t pages = storage.lba_count();  // one block a page
  for (uint64_t p = 0; p < pages; ++p) {
    const std::vector<uint8_t> page = storage.CopyOut(p, 1);
    const std::optional<uint16_t> placed = storage.PlacementOf(p);
    const PageKind kind = KindOf(page, p, map_first_page);
    if (!placed.has_value()) continue;  // never written: every write names a handle here
    EXPECT_NE(kind, PageKind::kNeverWritten) << "page " << p << " holds no page of the store";
    if (kind == PageKind::kLog) {
      EXPECT_EQ(*placed, log_id) << "log page " << p;
      ++checked.log;
    } else {
      EXPECT_EQ(*placed, metadata_id) << "metadata page " << p;
      ++checked.metadata;
    }
  }
  return checked;
}

class PlacementTest : public ::testing::TestWithParam<IndexMode> {};

TEST_P(PlacementTest, EveryPageNamesTheHandleOfItsKind) {
  const MemDeviceOptions device_options = DeviceWithHandles({kFirstId, kSecondId, kThirdId});
  const std::shared_ptr<MemStorage> storage = NewStorage(device_options);
  ASSERT_NE(storage, nullptr);
  for (int session = 0; session < 3; ++session) {
    auto engine = OpenStore(storage, device_options, GetParam());
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_EQ(stats.device.placement.ids, (std::vector<uint16_t>{kFirstId, kSecondId, kThirdId}));
    EXPECT_EQ(stats.device.placement.log_id, kFirstId);
    EXPECT_EQ(stats.device.placement.metadata_id, kSecondId);
    for (int round = 0; round < 4; ++round) WriteRound(**engine, session * 4 + round);
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    if (session == 1) {
      ASSERT_THAT((*engine)->Checkpoint(), IsOk());
    }
    ASSERT_THAT((*engine)->Close(), IsOk());  // with the clean-close checkpoint
  }
  const Checked checked = ExpectPlacedByKind(*storage, kFirstId, kSecondId);
  EXPECT_GT(checked.log, kPagesPerSegment);
  EXPECT_GT(checked.metadata, kSuperblockPages) << "the map and a checkpoint too";
  EXPECT_GT(storage->BlocksPlacedWith(kFirstId), storage->BlocksPlacedWith(kSecondId));
  EXPECT_EQ(storage->BlocksPlacedWith(kThirdId), 0u) << "a third handle has no use yet";
  // And the store reads back whole.
  auto engine = OpenStore(storage, device_options, GetParam());
  ASSERT_THAT(engine, IsOk());
  auto large = (*engine)->Get("key7");
  ASSERT_THAT(large, IsOk());
  EXPECT_EQ(*large, std::string(3 * kPageBytes, 'L'));
  ASSERT_THAT((*engine)->Close(), IsOk());
}

TEST_P(PlacementTest, OneHandleTakesEverything) {
  const MemDeviceOptions device_options = DeviceWithHandles({kSecondId});
  const std::shared_ptr<MemStorage> storage = NewStorage(device_options);
  ASSERT_NE(storage, nullptr);
  auto engine = OpenStore(storage, device_options, GetParam());
  ASSERT_THAT(engine, IsOk());
  for (int round = 0; round < 3; ++round) WriteRound(**engine, round);
  ASSERT_THAT((*engine)->CompactAll(), IsOk());
  ASSERT_THAT((*engine)->Close(), IsOk());
  const Checked checked = ExpectPlacedByKind(*storage, kSecondId, kSecondId);
  EXPECT_GT(checked.log, 0u);
  EXPECT_GT(checked.metadata, 0u);
}

TEST_P(PlacementTest, WithoutHandlesNothingIsNamed) {
  const MemDeviceOptions device_options = DeviceWithHandles({});
  const std::shared_ptr<MemStorage> storage = NewStorage(device_options);
  ASSERT_NE(storage, nullptr);
  auto engine = OpenStore(storage, device_options, GetParam());
  ASSERT_THAT(engine, IsOk());
  WriteRound(**engine, 0);
  EXPECT_TRUE((*engine)->Stats().device.placement.ids.empty());
  ASSERT_THAT((*engine)->Close(), IsOk());
  for (uint64_t p = 0; p < storage->lba_count(); ++p) {
    ASSERT_EQ(storage->PlacementOf(p), std::nullopt) << p;
  }
}

INSTANTIATE_TEST_SUITE_P(BothIndexModes, PlacementTest,
                         ::testing::Values(IndexMode::kHash, IndexMode::kOrdered),
                         [](const ::testing::TestParamInfo<IndexMode>& info) {
                           return info.param == IndexMode::kHash ? "Hash" : "Ordered";
                         });

}  // namespace
}  // namespace nvkv::kv
