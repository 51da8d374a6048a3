// The segment map: its pages and versions (SegmentMap), and what it does for recovery: Open reads
// only the segments it does not say are free, a damaged map page makes recovery read its
// segments, and a segment holding a log is never free in the map on the device.
#include "kv/segment_map.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "kv/segment_scan.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::MemDevice;
using storage::MemDeviceOptions;
using storage::MemStorage;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;

Geometry SmallGeometry(uint64_t segments) {
  Geometry g;
  g.page_bytes = kPageBytes;
  g.pages_per_segment = kPagesPerSegment;
  g.segment_count = segments;
  return g;
}

// ----- SegmentMap alone -----

SegmentMapPageHeader TestFloors() { return {5, 6}; }

TEST(SegmentMapTest, AChangeIsDurableOnceAWriteCarryingItCompletes) {
  const Geometry g = SmallGeometry(600);  // three map pages of 252 entries
  ASSERT_EQ(g.map_pages(), 3u);
  SegmentMap map(g, 7);
  EXPECT_FALSE(map.dirty());
  const SegmentMap::Ticket ticket = map.Set(300, MapState::kInUse);
  EXPECT_EQ(ticket.index, 1u);
  EXPECT_TRUE(map.dirty());
  EXPECT_FALSE(map.Durable(ticket));
  std::vector<uint8_t> page(kPageBytes);
  std::optional<SegmentMap::PageWrite> write = map.TakeWrite(page.data(), TestFloors);
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->index, 1u);
  EXPECT_EQ(write->page_number, g.map_first_page() + 1);
  // A change made while the write is in flight is not in it.
  const SegmentMap::Ticket later = map.Set(301, MapState::kInUse);
  EXPECT_FALSE(map.TakeWrite(page.data(), TestFloors).has_value()) << "two writes of one page";
  map.Written(*write, /*ok=*/true);
  EXPECT_TRUE(map.Durable(ticket));
  EXPECT_FALSE(map.Durable(later));
  EXPECT_TRUE(map.dirty());
  // A failed write leaves the page to be written again.
  write = map.TakeWrite(page.data(), TestFloors);
  ASSERT_TRUE(write.has_value());
  map.Written(*write, /*ok=*/false);
  EXPECT_FALSE(map.Durable(later));
  write = map.TakeWrite(page.data(), TestFloors);
  ASSERT_TRUE(write.has_value());
  map.Written(*write, /*ok=*/true);
  EXPECT_TRUE(map.Durable(later));
  EXPECT_FALSE(map.dirty());
  // Setting what an entry already says changes nothing.
  const SegmentMap::Ticket same = map.Set(300, MapState::kInUse);
  EXPECT_TRUE(map.Durable(same));
  EXPECT_FALSE(map.dirty());
}

// A page that announces a segment (heads may wait for it) is written before pages that only
// mark segments free (lazily), and the floors are taken as the page is encoded.
TEST(SegmentMapTest, AnnouncementsAreWrittenFirstWithFloorsTakenWhenEncoded) {
  const Geometry g = SmallGeometry(600);
  SegmentMap map(g, 7);
  map.Set(1, MapState::kFree);
  map.Set(2, MapState::kFree);
  map.Set(510, MapState::kFree);
  const SegmentMap::Ticket announced = map.Set(300, MapState::kInUse);
  uint64_t next_generation = 40;
  std::vector<uint8_t> page(kPageBytes);
  std::optional<SegmentMap::PageWrite> write = map.TakeWrite(page.data(), [&] {
    return SegmentMapPageHeader{100, next_generation};
  });
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->index, announced.index);
  next_generation = 41;
  std::optional<SegmentMap::PageWrite> second = map.TakeWrite(page.data(), [&] {
    return SegmentMapPageHeader{100, next_generation};
  });
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->index, 0u);
  const SegmentMapEntry* entries = nullptr;
  absl::StatusOr<SegmentMapPageHeader> floors =
      DecodeMapPage(page.data(), g, 7, second->page_number, &entries);
  ASSERT_THAT(floors, IsOk());
  EXPECT_EQ(floors->generation_floor, 41u);
  map.Written(*write, true);
  EXPECT_TRUE(map.Durable(announced));
}

TEST(SegmentMapTest, PagesRoundTripAndDamageIsCaught) {
  const Geometry g = SmallGeometry(300);
  SegmentMap map(g, 99);
  for (uint64_t s = 0; s < 300; ++s) map.Set(s, s % 3 == 0 ? MapState::kInUse : MapState::kFree);
  std::vector<uint8_t> page(kPageBytes);
  auto floors_now = [] { return SegmentMapPageHeader{1234, 56}; };
  ASSERT_EQ(map.TakeWrite(page.data(), floors_now)->index, 0u);  // pages in order
  const SegmentMap::PageWrite write = *map.TakeWrite(page.data(), floors_now);
  ASSERT_EQ(write.index, 1u);
  const SegmentMapEntry* entries = nullptr;
  absl::StatusOr<SegmentMapPageHeader> floors =
      DecodeMapPage(page.data(), g, 99, write.page_number, &entries);
  ASSERT_THAT(floors, IsOk());
  EXPECT_EQ(floors->sequence_floor, 1234u);
  EXPECT_EQ(floors->generation_floor, 56u);
  for (uint64_t e = 0; e < 300 - 252; ++e) {
    EXPECT_EQ(entries[e].state,
              static_cast<uint8_t>((252 + e) % 3 == 0 ? MapState::kInUse : MapState::kFree));
  }
  // The tail past the last segment is zero: kUnknown, read if it ever described a segment.
  EXPECT_EQ(entries[300 - 252].state, 0);
  // Another store's page, a page at another place, a torn page, a page never written.
  EXPECT_THAT(DecodeMapPage(page.data(), g, 98, write.page_number, &entries),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeMapPage(page.data(), g, 99, write.page_number - 1, &entries),
              StatusIs(absl::StatusCode::kDataLoss));
  page[2000] ^= 1;
  EXPECT_THAT(DecodeMapPage(page.data(), g, 99, write.page_number, &entries),
              StatusIs(absl::StatusCode::kDataLoss));
  std::vector<uint8_t> zero(kPageBytes, 0);
  EXPECT_THAT(DecodeMapPage(zero.data(), g, 99, write.page_number, &entries),
              StatusIs(absl::StatusCode::kNotFound));
}

// ----- The map and recovery, on an engine over a MemDevice -----

constexpr uint64_t kSegments = 64;

MemDeviceOptions MemOptions() { return MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes); }

// What Open reads of the log by the map: no clean-close checkpoint (checkpoint_test.cc).
EngineSeams StoreSeams(bool read_all = false) {
  return EngineSeams{.recovery_reads_all = read_all, .checkpoint_at_close = false};
}

Options StoreOptions() {
  Options options;
  options.segment_bytes = kPagesPerSegment * kPageBytes;
  options.shard_count = 1;
  options.page_buffers_per_shard = 16;
  options.background_compaction = false;
  return options;
}

absl::StatusOr<std::unique_ptr<Engine>> OpenOn(const std::shared_ptr<MemStorage>& storage,
                                               bool read_all = false) {
  auto device = MemDevice::Open(storage, MemOptions());
  if (!device.ok()) return device.status();
  return Engine::OpenOnDevice(std::move(*device), StoreOptions(), StoreSeams(read_all));
}

std::string Value(int key, int version) {
  return absl::StrCat("v", version, "-", std::string(1500, static_cast<char>('a' + key % 26)));
}

absl::Status Put(Engine& engine, const std::string& key, const std::string& value) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
}

class SegmentMapRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = MemDevice::Create(MemOptions());
    ASSERT_THAT(created, IsOk());
    storage_ = (*created)->storage();
    auto engine = Engine::OpenOnDevice(std::move(*created), StoreOptions(), StoreSeams());
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }

  // Writes `keys` keys of about two per page: keys / 2 pages, in keys / 32 segments or so.
  void Fill(Engine& engine, int keys, int version) {
    for (int k = 0; k < keys; ++k) {
      const std::string key = absl::StrCat("key", k);
      ASSERT_THAT(Put(engine, key, Value(k, version)), IsOk());
      expected_[key] = Value(k, version);
    }
  }

  void ExpectAll(Engine& engine) {
    for (const auto& [key, value] : expected_) {
      absl::StatusOr<std::string> got = engine.Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      EXPECT_EQ(*got, value) << key;
    }
  }

  // The segments the map on the device says are free, or nullopt for a page that does not
  // verify.
  std::vector<std::optional<MapState>> MapOnDevice() const {
    const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(first.data(), kPageBytes);
    EXPECT_THAT(superblock, IsOk());
    const Geometry g = GeometryOf(*superblock);
    const uint64_t seed = StoreSeed(superblock->store_id);
    std::vector<std::optional<MapState>> states(g.segment_count);
    const uint32_t per_page = MapEntriesPerPage(kPageBytes);
    for (uint64_t index = 0; index < g.map_pages(); ++index) {
      const std::vector<uint8_t> page = storage_->CopyOut(g.map_first_page() + index, 1);
      const SegmentMapEntry* entries = nullptr;
      if (!DecodeMapPage(page.data(), g, seed, g.map_first_page() + index, &entries).ok()) {
        continue;
      }
      for (uint64_t s = index * per_page; s < std::min<uint64_t>(g.segment_count,
                                                                (index + 1) * per_page);
           ++s) {
        states[s] = static_cast<MapState>(entries[s - index * per_page].state);
      }
    }
    return states;
  }

  // Segments that hold a log, by the rules recovery reads a segment with (ScanSegment).
  std::vector<uint64_t> SegmentsWithALog() const {
    const std::vector<uint8_t> bytes = storage_->CopyOut(0, storage_->lba_count());
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(bytes.data(), kPageBytes);
    const Geometry g = GeometryOf(*superblock);
    const uint64_t seed = StoreSeed(superblock->store_id);
    std::vector<uint64_t> segments;
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      const SegmentScanResult scan = ScanSegment(
          g, seed, s,
          [&](uint32_t i) { return bytes.data() + (g.FirstPageOf(s) + i) * g.page_bytes; },
          /*assemble_large_values=*/false, [](const ScannedRecord&) {});
      if (scan.in_use) segments.push_back(s);
    }
    return segments;
  }

  std::shared_ptr<MemStorage> storage_;
  std::map<std::string, std::string> expected_;
};

TEST_F(SegmentMapRecoveryTest, AfterACleanCloseOpenReadsOnlyTheSegmentsHoldingData) {
  {
    auto engine = OpenOn(storage_);
    ASSERT_THAT(engine, IsOk());
    Fill(**engine, 100, 1);  // 50 pages: 4 segments
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const std::vector<uint64_t> with_log = SegmentsWithALog();
  ASSERT_GE(with_log.size(), 3u);
  auto engine = OpenOn(storage_);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.recovery_segments_skipped, stats.segments_total - with_log.size());
  EXPECT_EQ(stats.recovery_pages_scanned, with_log.size() * kPagesPerSegment);
  EXPECT_EQ(stats.recovery_map_pages_damaged, 0u);
  ExpectAll(**engine);
}

TEST_F(SegmentMapRecoveryTest, EverySegmentHoldingALogIsInUseInTheMapOnTheDevice) {
  auto engine = OpenOn(storage_);
  ASSERT_THAT(engine, IsOk());
  for (int round = 0; round < 6; ++round) {
    Fill(**engine, 60, round);
    // Overwrites make segments worth cleaning: freed ones go back to the free list.
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    const std::vector<std::optional<MapState>> map = MapOnDevice();
    for (uint64_t segment : SegmentsWithALog()) {
      ASSERT_TRUE(map[segment].has_value()) << "segment " << segment;
      EXPECT_NE(*map[segment], MapState::kFree) << "round " << round << " segment " << segment;
    }
  }
  ExpectAll(**engine);
  ASSERT_THAT((*engine)->Close(), IsOk());
  // After a clean close the map says exactly which segments hold a log.
  const std::vector<std::optional<MapState>> map = MapOnDevice();
  const std::vector<uint64_t> with_log = SegmentsWithALog();
  for (uint64_t s = 0; s < kSegments; ++s) {
    const bool holds_log = std::find(with_log.begin(), with_log.end(), s) != with_log.end();
    ASSERT_TRUE(map[s].has_value());
    EXPECT_EQ(*map[s], holds_log ? MapState::kInUse : MapState::kFree) << "segment " << s;
  }
}

TEST_F(SegmentMapRecoveryTest, ADamagedMapPageMakesRecoveryReadItsSegmentsAndIsRewritten) {
  {
    auto engine = OpenOn(storage_);
    ASSERT_THAT(engine, IsOk());
    Fill(**engine, 80, 1);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
  const Geometry g = GeometryOf(*DecodeSuperblock(first.data(), kPageBytes));
  storage_->Corrupt(g.map_first_page() * kPageBytes + 100, 1);
  {
    auto engine = OpenOn(storage_);
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_EQ(stats.recovery_map_pages_damaged, 1u);
    EXPECT_EQ(stats.recovery_segments_skipped, 0u);
    EXPECT_EQ(stats.recovery_pages_scanned, kSegments * kPagesPerSegment);
    ExpectAll(**engine);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = OpenOn(storage_);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_map_pages_damaged, 0u);
  EXPECT_EQ((*engine)->Stats().recovery_segments_skipped, kSegments - SegmentsWithALog().size());
  ExpectAll(**engine);
}

// A process killed while the store is open: the map says in use of the segments announced for
// the heads too; recovery reads those, and finds what reading every segment finds.
TEST_F(SegmentMapRecoveryTest, AfterACrashRecoveryFindsWhatReadingEverySegmentFinds) {
  auto engine = OpenOn(storage_);
  ASSERT_THAT(engine, IsOk());
  for (int round = 0; round < 4; ++round) Fill(**engine, 70, round);
  ASSERT_THAT((*engine)->CompactAll(), IsOk());
  Fill(**engine, 20, 9);
  // What the device holds now, as a kill -9 would leave it (every write here was durable).
  const std::shared_ptr<MemStorage> snapshot = CopyOf(*storage_);
  ASSERT_THAT((*engine)->Close(), IsOk());

  auto device = MemDevice::Open(snapshot, MemOptions());
  ASSERT_THAT(device, IsOk());
  auto crashed = Engine::OpenOnDevice(std::move(*device), StoreOptions(), StoreSeams());
  ASSERT_THAT(crashed, IsOk());
  const EngineStats stats = (*crashed)->Stats();
  EXPECT_GT(stats.recovery_segments_skipped, 0u);
  // The heads' segments and the announced ones are read, besides those holding data.
  EXPECT_LT(stats.recovery_segments_skipped, stats.segments_total - 2);
  ExpectAll(**crashed);
  ASSERT_THAT((*crashed)->Close(), IsOk());
}

// Check reads the map too: a map page that does not verify, and a segment holding a log that
// the map on the device says is free (here forged behind the open store's back), are problems.
TEST_F(SegmentMapRecoveryTest, CheckFindsAMapThatSaysALogIsFree) {
  auto engine = OpenOn(storage_);
  ASSERT_THAT(engine, IsOk());
  Fill(**engine, 40, 1);
  absl::StatusOr<CheckReport> healthy = (*engine)->Check();
  ASSERT_THAT(healthy, IsOk());
  EXPECT_TRUE(healthy->problems.empty()) << healthy->problems.front();
  const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
  absl::StatusOr<Superblock> superblock = DecodeSuperblock(first.data(), kPageBytes);
  ASSERT_THAT(superblock, IsOk());
  const Geometry g = GeometryOf(*superblock);
  const uint64_t seed = StoreSeed(superblock->store_id);
  std::vector<SegmentMapEntry> all_free(kSegments);
  for (SegmentMapEntry& entry : all_free) entry.state = static_cast<uint8_t>(MapState::kFree);
  std::vector<uint8_t> page(kPageBytes);
  EncodeMapPage(page.data(), g, seed, g.map_first_page(), 0, {1, 1}, all_free.data(), kSegments,
                1);
  storage_->Write(g.map_first_page(), 1, page.data());
  absl::StatusOr<CheckReport> forged = (*engine)->Check();
  ASSERT_THAT(forged, IsOk());
  ASSERT_FALSE(forged->problems.empty());
  EXPECT_NE(forged->problems.front().find("the segment map says it is free"), std::string::npos)
      << forged->problems.front();
  storage_->Corrupt(g.map_first_page() * kPageBytes + 100, 1);
  absl::StatusOr<CheckReport> damaged = (*engine)->Check();
  ASSERT_THAT(damaged, IsOk());
  ASSERT_FALSE(damaged->problems.empty());
  EXPECT_NE(damaged->problems.front().find("segment map page 0"), std::string::npos)
      << damaged->problems.front();
}

// A segment map write that fails: no segment can be announced any more, so the store refuses
// writes (sticky, saying why) instead of letting a head wait for one forever; what was
// acknowledged before survives a reopen.
TEST_F(SegmentMapRecoveryTest, AFailedMapWriteFailsWritesAndLosesNothing) {
  const uint64_t map_lba = kSuperblockPages + kSegments * kPagesPerSegment;  // 4 KiB blocks
  // The first put takes segment 0 from the segments announced at Open, and the writer announces
  // the next one: the put's page write and the map write, in either order (both go out in the
  // writer's next pass). The second write fails; tries until it is the map's.
  bool map_write_failed = false;
  for (int attempt = 0; attempt < 20 && !map_write_failed; ++attempt) {
    SetUp();  // a fresh store
    expected_.clear();
    auto mem = MemDevice::Open(storage_, MemOptions());
    ASSERT_THAT(mem, IsOk());
    auto fault = storage::FaultDevice::Create(std::move(*mem), {});
    ASSERT_THAT(fault, IsOk());
    storage::FaultDevice* device = fault->get();
    auto engine = Engine::OpenOnDevice(std::move(*fault), StoreOptions(), StoreSeams());
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT(device->FailOperation({.nth = 2, .filter = storage::OpFilter::kWrite}), IsOk());
    absl::Status failed;
    for (int k = 0; k < 4 * static_cast<int>(kPagesPerSegment) && failed.ok(); ++k) {
      const std::string key = absl::StrCat("key", k);
      failed = Put(**engine, key, Value(k, 1));
      if (failed.ok()) expected_[key] = Value(k, 1);
    }
    const std::vector<storage::InjectedFault> faults = device->injected_faults();
    ASSERT_EQ(faults.size(), 1u);
    map_write_failed = faults[0].lba == map_lba;
    // Whichever write failed, writes are refused with its cause from then on.
    const char* cause = map_write_failed ? "segment map" : "injected fault";
    EXPECT_THAT(failed, StatusIs(absl::StatusCode::kFailedPrecondition, cause));
    EXPECT_THAT(Put(**engine, "after", "x"),
                StatusIs(absl::StatusCode::kFailedPrecondition, cause));
    (void)(*engine)->Close();
    engine = OpenOn(storage_);
    ASSERT_THAT(engine, IsOk());
    ExpectAll(**engine);
  }
  EXPECT_TRUE(map_write_failed) << "no attempt failed the map's write";
}

TEST_F(SegmentMapRecoveryTest, ReadingEverySegmentIsStillAvailable) {
  {
    auto engine = OpenOn(storage_);
    ASSERT_THAT(engine, IsOk());
    Fill(**engine, 40, 1);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = OpenOn(storage_, /*read_all=*/true);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_segments_skipped, 0u);
  EXPECT_EQ((*engine)->Stats().recovery_pages_scanned, kSegments * kPagesPerSegment);
  ExpectAll(**engine);
}

}  // namespace
}  // namespace nvkv::kv
