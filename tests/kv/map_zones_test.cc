// The segment map on a zoned store (kv/FORMAT.md "The segment map's log"): each map write an
// append to the current metadata zone, counted above every earlier one across sessions; the map
// moved to the other zone when its zone is full, and never a zone reset unless the other holds
// a copy of every map page. Read back as recovery reads it (ReadMapView), also after power cuts
// at every point of the writes and moves.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kv/map_zone_log.h"
#include "kv/metadata_writer.h"
#include "kv/metadata_zones.h"
#include "kv/recovery_map.h"
#include "kv/segment_map.h"
#include "kv/segment_table.h"
#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

constexpr uint32_t kPageBytes = 4096;
constexpr uint64_t kZoneBlocks = 16;
constexpr uint64_t kCapacity = 12;  // pages of a zone that may be written
constexpr uint8_t kStoreId[16] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

storage::MemDeviceOptions ZonedOptions(uint64_t zones) {
  storage::MemDeviceOptions options;
  options.lba_bytes = kPageBytes;
  options.lba_count = zones * kZoneBlocks;
  options.buffers.buffer_count = 8;
  options.buffers.chunk_count = 2;
  options.zones = {.zone_count = zones, .zone_blocks = kZoneBlocks, .capacity_blocks = kCapacity};
  return options;
}

// A fresh zoned device of `zones` zones.
std::unique_ptr<storage::MemDevice> MadeDevice(uint64_t zones) {
  auto made = storage::MemDevice::Create(ZonedOptions(zones));
  NVKV_CHECK(made.ok());
  return std::move(*made);
}

// The superblock copies of `device`'s metadata zones, as an Open reads them.
absl::StatusOr<ZoneSuperblocks> SuperblocksOn(storage::Device& device) {
  const storage::Buffer chunk = device.buffers().GetChunk();
  absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(device, chunk);
  device.buffers().PutChunk(chunk);
  return found;
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

// --- MapZoneLog: the room of the current zone ---

Geometry ZonedGeometry(uint64_t segments) {
  Geometry g;
  g.page_bytes = kPageBytes;
  g.pages_per_segment = kCapacity;
  g.segment_count = segments;
  g.zone_pages = kZoneBlocks;
  return g;
}

TEST(MapZoneLogTest, AZoneKeepsRoomForEveryPageItLacks) {
  const Geometry g = ZonedGeometry(2 * MapEntriesPerPage(kPageBytes));
  ASSERT_EQ(g.map_pages(), 2u);
  ASSERT_EQ(g.closing_copy_pages(), 4u);  // of 12: the map's places are pages 1 to 7
  MapZoneLog log(g, StoreSuperblock(g.segment_count + kMetadataZones));
  // Half way through a move: 5 of 12 pages used, neither map page there yet.
  log.Resume({.current = 1, .pages_used = 5, .holds_every_page = false});
  EXPECT_EQ(log.missing(), 2u);
  EXPECT_TRUE(log.MayAppend(0));
  log.Take(0);  // 6 used, page 1 missing: one of the two map places left is kept for it
  EXPECT_TRUE(log.MayAppend(0));
  log.Take(0);  // 7 used
  EXPECT_FALSE(log.MayAppend(0)) << "the last map place is page 1's";
  EXPECT_FALSE(log.MoveTarget().has_value());
  EXPECT_TRUE(log.MayAppend(1));
  log.Take(1);  // full for the map, every page held
  EXPECT_FALSE(log.MayAppend(0));
  EXPECT_FALSE(log.MayAppend(1));
  ASSERT_TRUE(log.MoveTarget().has_value()) << "full, and holding every page";
  EXPECT_EQ(log.MoveTarget()->zone, 0u);
  EXPECT_TRUE(log.MoveTarget()->closing_copy_room) << "the last pages are left for it";
  EXPECT_EQ(log.MoveTarget()->superblock.zone_blocks, kZoneBlocks);
  log.Moved();
  EXPECT_EQ(log.current(), 0u);
  EXPECT_EQ(log.pages_used(), 1u);
  EXPECT_EQ(log.missing(), 2u);
}

TEST(MapZoneLogTest, AFailedAppendCountsItsPageMissingAgain) {
  const Geometry g = ZonedGeometry(8);
  MapZoneLog log(g, StoreSuperblock(g.segment_count + kMetadataZones));
  log.Resume({.current = 0, .pages_used = 6, .holds_every_page = false});
  log.Take(0);
  log.Failed(0);
  EXPECT_EQ(log.missing(), 1u);
  log.Take(0);
  EXPECT_FALSE(log.MayAppend(0));
  ASSERT_TRUE(log.MoveTarget().has_value());
  EXPECT_EQ(log.MoveTarget()->zone, 1u);
}

// A closing copy a cut tore took one of the pages kept for it (an Open finds the write pointer
// among them): the move appends another after it, until none is left.
TEST(MapZoneLogTest, ATornClosingCopyLeavesRoomForAnother) {
  const Geometry g = ZonedGeometry(8);
  MapZoneLog log(g, StoreSuperblock(g.segment_count + kMetadataZones));
  for (uint64_t used = g.closing_copy_start(); used <= kCapacity; ++used) {
    SCOPED_TRACE(::testing::Message() << used << " pages used");
    log.Resume({.current = 0, .pages_used = used, .holds_every_page = true});
    EXPECT_FALSE(log.MayAppend(0));
    ASSERT_TRUE(log.MoveTarget().has_value());
    EXPECT_EQ(log.MoveTarget()->closing_copy_room, used < kCapacity);
  }
}

// A zone Open found full that lacks a copy of some page moves all the same: the move writes
// every page again, and a page whose only copy the reset took says nothing meanwhile (recovery
// reads its segments).
TEST(MapZoneLogTest, AFullZoneMovesEvenWhenItLacksAPage) {
  const Geometry g = ZonedGeometry(8);
  MapZoneLog log(g, StoreSuperblock(g.segment_count + kMetadataZones));
  log.Resume({.current = 1, .pages_used = kCapacity, .holds_every_page = false});
  EXPECT_FALSE(log.MayAppend(0));
  ASSERT_TRUE(log.MoveTarget().has_value());
  EXPECT_EQ(log.MoveTarget()->zone, 0u);
  EXPECT_FALSE(log.MoveTarget()->closing_copy_room) << "every page kept for it is taken";
}

TEST(MapZoneLogTest, AZoneTooSmallForTwoCopiesOfTheMapDoesNotFit) {
  Geometry g = ZonedGeometry(8);
  EXPECT_TRUE(g.map_fits_zone());
  EXPECT_EQ(g.closing_copy_pages(), kMaxClosingCopyPages);
  g.pages_per_segment = 3;  // two superblock copies and one map page
  EXPECT_FALSE(g.map_fits_zone());
  g.pages_per_segment = 4;
  EXPECT_TRUE(g.map_fits_zone());
  EXPECT_EQ(g.closing_copy_pages(), 1u) << "no room for more";
  g.pages_per_segment = 6;
  EXPECT_EQ(g.closing_copy_pages(), 3u);
  EXPECT_FALSE(Geometry{}.map_fits_zone());
}

// --- The map written and read back ---

// The map of a store on a zoned device: a table and its map as the engine has them.
struct ZonedMap {
  ZonedMap(const Superblock& superblock, const StoreShape& shape) {
    map = std::make_unique<SegmentMap>(shape.geometry, shape.seed);
    map->UseZones(superblock);
    table = std::make_unique<SegmentTable>(shape.geometry, /*reserve_user=*/3, map.get(),
                                           &next_sequence);
  }
  std::atomic<uint64_t> next_sequence{1};
  std::unique_ptr<SegmentMap> map;
  std::unique_ptr<SegmentTable> table;
};

// Which segments the map says are in use, after step `step` of the workload below: segment s
// is in use when bit s of a value that changes one segment a step is set.
std::vector<bool> InUseAfter(uint64_t step, uint64_t segments) {
  std::vector<bool> in_use(segments, false);
  for (uint64_t k = 1; k <= step; ++k) {
    const uint64_t s = (k * 7) % segments;
    in_use[s] = !in_use[s];
  }
  return in_use;
}

class MapZonesTest : public ::testing::TestWithParam<uint64_t /*zones*/> {
 protected:
  uint64_t zones() const { return GetParam(); }
  Superblock superblock() const { return StoreSuperblock(zones()); }
  StoreShape shape() const {
    StoreShape s;
    s.geometry = GeometryOf(superblock());
    s.seed = StoreSeed(kStoreId);
    return s;
  }
  uint64_t segments() const { return zones() - kMetadataZones; }

  // Formats the metadata zones, and writes the map of a fresh store: every segment free.
  void Format(storage::Device& device, ZonedMap& zoned) {
    const storage::Buffer page = device.buffers().GetPage();
    ASSERT_THAT(FormatMetadataZones(device, shape().geometry, superblock(), page), IsOk());
    device.buffers().PutPage(page);
    for (uint64_t s = 0; s < segments(); ++s) zoned.map->Set(s, MapState::kFree);
    ASSERT_THAT(WriteMapAlone(*zoned.table, shape(), device, /*volatile_cache=*/true), IsOk());
  }
  // Step `step` of the workload: one segment changes, and the map is written.
  absl::Status Step(storage::Device& device, ZonedMap& zoned, uint64_t step) {
    const std::vector<bool> in_use = InUseAfter(step, segments());
    const uint64_t s = (step * 7) % segments();
    zoned.map->Set(s, in_use[s] ? MapState::kInUse : MapState::kFree);
    return WriteMapAlone(*zoned.table, shape(), device, /*volatile_cache=*/true);
  }
  // The map as recovery reads it into `zoned` (fresh), as in use per segment; *said_nothing
  // (when given) tells a map that said nothing (a page a cut tore: every segment to be read),
  // which is otherwise a failure.
  std::vector<bool> Read(storage::Device& device, ZonedMap& zoned,
                         bool* said_nothing = nullptr) {
    absl::StatusOr<MapView> view = ReadMapView(shape(), device, *zoned.table, false);
    EXPECT_THAT(view, IsOk());
    if (!view.ok()) return {};
    if (said_nothing != nullptr) {
      *said_nothing = view->pages_damaged == shape().geometry.map_pages();
      EXPECT_TRUE(view->pages_damaged == 0 || *said_nothing) << view->pages_damaged;
    } else {
      EXPECT_EQ(view->pages_damaged, 0u);
    }
    return view->in_use;
  }
  // What each zone's superblock copy is: every one whole or absent, at least one whole.
  void ExpectSuperblocks(storage::Device& device) {
    absl::StatusOr<ZoneSuperblocks> found = SuperblocksOn(device);
    ASSERT_THAT(found, IsOk());
    int whole = 0;
    for (uint32_t z = 0; z < kMetadataZones; ++z) {
      EXPECT_TRUE(found->copies[z].ok() || absl::IsNotFound(found->copies[z].status()))
          << "zone " << z << ": " << found->copies[z].status();
      whole += found->copies[z].ok() ? 1 : 0;
    }
    EXPECT_GE(whole, 1);
  }
};

// Many more map writes than a zone holds: the map moves between the zones, and reads back as
// written after every step, in a fresh map that then goes on writing where the last one was.
TEST_P(MapZonesTest, TheMapMovesBetweenZonesAndReadsBackAsWritten) {
  auto device = storage::MemDevice::Create(ZonedOptions(zones()));
  ASSERT_THAT(device, IsOk());
  auto writing = std::make_unique<ZonedMap>(superblock(), shape());
  Format(**device, *writing);
  std::vector<uint32_t> current_zones;
  const uint64_t steps = 4 * kCapacity;
  for (uint64_t step = 1; step <= steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    ASSERT_THAT(Step(**device, *writing, step), IsOk());
    const uint32_t current = *writing->map->current_zone();
    if (current_zones.empty() || current_zones.back() != current) current_zones.push_back(current);
    ZonedMap reading(superblock(), shape());
    EXPECT_EQ(Read(**device, reading), InUseAfter(step, segments()));
    EXPECT_EQ(reading.map->current_zone(), current);
    ExpectSuperblocks(**device);
    if (step % 5 == 0) {  // a new session: the map taken up where the last one left it
      writing = std::make_unique<ZonedMap>(superblock(), shape());
      EXPECT_EQ(Read(**device, *writing), InUseAfter(step, segments()));
    }
  }
  EXPECT_GE(current_zones.size(), 4u) << "the map moved back and forth";
}

// Power cuts at every point of the writes and moves: the map read back is, page by page, what
// some write at or after the last acknowledged one made it (or, when a cut tore a page, says
// nothing), both superblock copies are whole or absent, and a fresh map resumes from it
// (finishing a move cut short, writing a map that said nothing again) and reads back exactly.
TEST_P(MapZonesTest, PowerCutsLeaveTheNewestAcknowledgedMapOrANewerOne) {
  const uint64_t per_page = MapEntriesPerPage(kPageBytes);
  const uint64_t steps = 3 * kCapacity;
  uint64_t said_nothing_count = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::unique_ptr<storage::MemDevice> inner = MadeDevice(zones());
    std::shared_ptr<storage::MemStorage> storage = inner->storage();
    uint64_t acknowledged = 0, attempted = 0;
    {
      auto fault = storage::FaultDevice::Create(std::move(inner), {.seed = seed});
      ASSERT_THAT(fault, IsOk());
      ZonedMap zoned(superblock(), shape());
      Format(**fault, zoned);
      ASSERT_THAT((*fault)->SetCutAfterOperations(1 + seed % (2 * steps)), IsOk());
      for (uint64_t step = 1; step <= steps; ++step) {
        attempted = step;
        if (!Step(**fault, zoned, step).ok()) break;
        acknowledged = step;
      }
    }
    auto rebooted = storage::MemDevice::Open(storage, ZonedOptions(zones()));
    ASSERT_THAT(rebooted, IsOk());
    ExpectSuperblocks(**rebooted);
    ZonedMap resumed(superblock(), shape());
    bool said_nothing = false;
    const std::vector<bool> found = Read(**rebooted, resumed, &said_nothing);
    ASSERT_EQ(found.size(), segments());
    // A page a cut tore makes the map say nothing until it is written again (recovery then
    // reads every segment: safe); otherwise it says what some write at or after the last
    // acknowledged one made it.
    said_nothing_count += said_nothing ? 1 : 0;
    for (uint64_t first = 0; first < segments() && !said_nothing; first += per_page) {
      const uint64_t end = std::min(segments(), first + per_page);
      bool matches_one = false;
      for (uint64_t step = acknowledged; step <= attempted && !matches_one; ++step) {
        const std::vector<bool> then = InUseAfter(step, segments());
        matches_one = std::equal(found.begin() + first, found.begin() + end, then.begin() + first);
      }
      EXPECT_TRUE(matches_one) << "map page " << first / per_page << ": acknowledged "
                               << acknowledged << ", attempted " << attempted;
    }
    // Resumed, the map goes on from what it found, and reads back exactly.
    std::vector<bool> model = found;
    for (uint64_t more = 1; more <= kCapacity; ++more) {
      const uint64_t s = (more * 5) % segments();
      model[s] = !model[s];
      resumed.map->Set(s, model[s] ? MapState::kInUse : MapState::kFree);
      ASSERT_THAT(WriteMapAlone(*resumed.table, shape(), **rebooted, true), IsOk());
    }
    ZonedMap reread(superblock(), shape());
    EXPECT_EQ(Read(**rebooted, reread), model);
    EXPECT_EQ(reread.map->current_zone(), resumed.map->current_zone());
    ExpectSuperblocks(**rebooted);
  }
  EXPECT_LT(said_nothing_count, 100u) << "most cuts leave a map that says what it held";
}

// The media damaged superblock copy 0 (the first page of zone 0, where the map is): the move of
// the map to zone 1 resets the zone holding the only other copy. Power cuts at every point of the
// writes and of that move never leave the device without a superblock copy that decodes (zone 0
// gets a closing copy, verified, before zone 1 is reset), and the map reads back.
TEST_P(MapZonesTest, AMoveNeverResetsTheLastGoodSuperblockCopy) {
  const uint64_t steps = 2 * kCapacity;
  uint64_t cut_in_the_window = 0;  // zone 1 reset, its copy not yet on the device
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::unique_ptr<storage::MemDevice> inner = MadeDevice(zones());
    std::shared_ptr<storage::MemStorage> storage = inner->storage();
    {
      auto fault = storage::FaultDevice::Create(std::move(inner), {.seed = seed});
      ASSERT_THAT(fault, IsOk());
      ZonedMap zoned(superblock(), shape());
      Format(**fault, zoned);
      storage->Corrupt(40, 1);  // in copy 0's checksummed bytes
      ASSERT_THAT((*fault)->SetCutAfterOperations(1 + seed % (2 * steps)), IsOk());
      for (uint64_t step = 1; step <= steps; ++step) {
        if (!Step(**fault, zoned, step).ok()) break;
      }
    }
    auto rebooted = storage::MemDevice::Open(storage, ZonedOptions(zones()));
    ASSERT_THAT(rebooted, IsOk());
    absl::StatusOr<ZoneSuperblocks> found = SuperblocksOn(**rebooted);
    ASSERT_THAT(found, IsOk());
    EXPECT_TRUE(found->copies[0].ok() || found->copies[1].ok())
        << "no superblock copy decodes: " << found->copies[0].status() << "; "
        << found->copies[1].status();
    cut_in_the_window += found->copies[1].ok() ? 0 : 1;
    ZonedMap resumed(superblock(), shape());
    bool said_nothing = false;
    EXPECT_EQ(Read(**rebooted, resumed, &said_nothing).size(), segments());
  }
  EXPECT_GT(cut_in_the_window, 0u) << "no cut came between zone 1's reset and its copy";
}

// Zone 0 full for the map, a closing copy written on each page kept for it (as moves cut right
// after it leave them), and then its first copy and every closing one damaged: the move would
// reset zone 1, which holds the only copy left. It is refused, saying so, and zone 1 keeps its
// copy. (With a page kept left, the move appends another closing copy there: next test.)
TEST_P(MapZonesTest, AMoveIsRefusedWhenTheZoneLeftHoldsNoGoodCopy) {
  auto device = storage::MemDevice::Create(ZonedOptions(zones()));
  ASSERT_THAT(device, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*device)->storage();
  const uint64_t closing_start = shape().geometry.closing_copy_start();
  {
    ZonedMap zoned(superblock(), shape());
    Format(**device, zoned);
    for (uint64_t step = 1; storage->Report(0, 1)[0].write_pointer < closing_start; ++step) {
      ASSERT_THAT(Step(**device, zoned, step), IsOk());
    }
    const storage::Buffer page = (*device)->buffers().GetPage();
    for (uint64_t p = closing_start; p < kCapacity; ++p) {
      ASSERT_THAT(CloseMetadataZone(**device, shape().geometry, superblock(), 0, page), IsOk());
    }
    (*device)->buffers().PutPage(page);
  }
  ASSERT_EQ(storage->Report(0, 1)[0].state, storage::ZoneState::kFull);
  storage->Corrupt(40, 1);  // the first copy
  for (uint64_t p = closing_start; p < kCapacity; ++p) storage->Corrupt(p * kPageBytes + 40, 1);
  ZonedMap resumed(superblock(), shape());
  // A damaged closing copy is damage like any (a map page may have been there, in a zone a build
  // before the kept pages wrote): the map says nothing. Segment 1 said otherwise: a map write.
  bool said_nothing = false;
  const bool in_use = Read(**device, resumed, &said_nothing)[1];
  EXPECT_TRUE(said_nothing);
  resumed.map->Set(1, in_use ? MapState::kFree : MapState::kInUse);
  EXPECT_THAT(WriteMapAlone(*resumed.table, shape(), **device, true),
              ::nvkv::testing::StatusIs(absl::StatusCode::kDataLoss,
                                        "holds no superblock copy that decodes"));
  absl::StatusOr<ZoneSuperblocks> found = SuperblocksOn(**device);
  ASSERT_THAT(found, IsOk());
  EXPECT_FALSE(found->copies[0].ok());
  EXPECT_THAT(found->copies[1], IsOk()) << "zone 1 was reset";
}

// As above, but a closing copy on the first page kept for it only (the media damaged it since):
// the move appends another on the next page kept, reads it back, and goes on; Open takes that
// copy for zone 0's, and the map reads back (the damaged page superseded by the move).
TEST_P(MapZonesTest, ADamagedClosingCopyGetsAnotherOnAPageKeptForIt) {
  auto device = storage::MemDevice::Create(ZonedOptions(zones()));
  ASSERT_THAT(device, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*device)->storage();
  const uint64_t closing_start = shape().geometry.closing_copy_start();
  ASSERT_LT(closing_start + 1, kCapacity);
  {
    ZonedMap zoned(superblock(), shape());
    Format(**device, zoned);
    for (uint64_t step = 1; storage->Report(0, 1)[0].write_pointer < closing_start; ++step) {
      ASSERT_THAT(Step(**device, zoned, step), IsOk());
    }
    const storage::Buffer page = (*device)->buffers().GetPage();
    ASSERT_THAT(CloseMetadataZone(**device, shape().geometry, superblock(), 0, page), IsOk());
    (*device)->buffers().PutPage(page);
  }
  storage->Corrupt(40, 1);  // the first copy
  {
    // Open takes the closing copy of a zone a cut left open right after it (before its finish).
    ASSERT_NE(storage->Report(0, 1)[0].state, storage::ZoneState::kFull);
    absl::StatusOr<ZoneSuperblocks> found = SuperblocksOn(**device);
    ASSERT_THAT(found, IsOk());
    EXPECT_THAT(found->copies[0], IsOk());
    EXPECT_TRUE(found->closing[0]);
  }
  storage->Corrupt(closing_start * kPageBytes + 40, 1);  // the closing copy
  ZonedMap resumed(superblock(), shape());
  bool said_nothing = false;
  std::vector<bool> model = Read(**device, resumed, &said_nothing);
  EXPECT_TRUE(said_nothing) << "the damaged closing copy may have been a map page";
  model[1] = !model[1];
  resumed.map->Set(1, model[1] ? MapState::kInUse : MapState::kFree);
  ASSERT_THAT(WriteMapAlone(*resumed.table, shape(), **device, true), IsOk());
  EXPECT_EQ(resumed.map->current_zone(), std::optional<uint32_t>(1)) << "the map moved";
  absl::StatusOr<ZoneSuperblocks> found = SuperblocksOn(**device);
  ASSERT_THAT(found, IsOk());
  EXPECT_THAT(found->copies[0], IsOk());
  EXPECT_TRUE(found->closing[0]);
  EXPECT_THAT(found->copies[1], IsOk());
  ZonedMap reread(superblock(), shape());
  EXPECT_EQ(Read(**device, reread), model);
}

// One map page (8 zones), and two (a store of more segments than one page describes).
INSTANTIATE_TEST_SUITE_P(MapPages, MapZonesTest,
                         ::testing::Values(uint64_t{8},
                                           MapEntriesPerPage(kPageBytes) + kMetadataZones + 6));

}  // namespace
}  // namespace nvkv::kv
