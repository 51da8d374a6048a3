// The clean-close checkpoint (kv/checkpoint.h): after a clean Close, Open reads it and nothing
// else and finds the state the log gives; the Open that read it retires it before anything is
// written, so a crash later never brings it back; a checkpoint that does not verify, or was
// written for another shape of store, is set aside and the log read instead; and a segment whose
// free pages a checkpoint took brings no stale log back.
#include "kv/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
constexpr uint64_t kSegments = 64;

MemDeviceOptions MemOptions() { return MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes); }

struct Shape {
  std::optional<IndexMode> mode;  // the test's by default
  uint32_t shards = 2;
  bool read_all = false;
  bool checkpoint = true;  // Close writes one
  // While running, one once this much log was written (and as much as the last one's size);
  // 0: the default (none in these small stores).
  uint64_t checkpoint_min_log_bytes = 0;
  uint32_t summary_min_segment_pages = 0;  // larger than a segment: no summaries
  uint64_t recovery_memory_bytes = 0;      // 0: the default
  bool background_compaction = false;
  // EngineSeams::victim_picked.
  const std::function<void(uint64_t)>* victim_picked = nullptr;
};

Options StoreOptions(const Shape& shape, IndexMode mode) {
  Options options;
  options.segment_bytes = kPagesPerSegment * kPageBytes;
  options.recovery_memory_bytes = shape.recovery_memory_bytes;
  options.shard_count = shape.shards;
  options.page_buffers_per_shard = 16;
  options.background_compaction = shape.background_compaction;
  options.index_mode = shape.mode.value_or(mode);
  if (shape.checkpoint_min_log_bytes > 0) {
    options.checkpoint_min_log_bytes = shape.checkpoint_min_log_bytes;
    options.checkpoint_log_ratio = 1;
  }
  return options;
}

EngineSeams StoreSeams(const Shape& shape) {
  EngineSeams seams;
  seams.summary_min_segment_pages = shape.summary_min_segment_pages;
  seams.victim_picked = shape.victim_picked;
  seams.recovery_reads_all = shape.read_all;
  seams.checkpoint_at_close = shape.checkpoint;
  return seams;
}

class CheckpointTest : public ::testing::TestWithParam<IndexMode> {
 protected:
  void SetUp() override {
    auto created = MemDevice::Create(MemOptions());
    ASSERT_THAT(created, IsOk());
    storage_ = (*created)->storage();
    auto engine = Engine::OpenOnDevice(std::move(*created), StoreOptions({}, GetParam()),
                                       StoreSeams({}));
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }

  absl::StatusOr<std::unique_ptr<Engine>> Open(const std::shared_ptr<MemStorage>& storage,
                                               const Shape& shape = {}) {
    auto device = MemDevice::Open(storage, MemOptions());
    if (!device.ok()) return device.status();
    return Engine::OpenOnDevice(std::move(*device), StoreOptions(shape, GetParam()),
                                StoreSeams(shape));
  }

  // Round `round` of writes: puts, overwrites of a third of the keys, deletes and batches, some
  // durable, some not.
  void Write(Engine& engine, int round) {
    for (int k = 0; k < 150; ++k) {
      if (round > 0 && k % 3 != round % 3) continue;
      const std::string key = absl::StrCat("key", k);
      const std::string value = absl::StrCat(
          "r", round, "-", std::string(300 + k * 7 % 900, static_cast<char>('a' + k % 26)));
      WriteOp op{false, key, value};
      ASSERT_THAT(engine.Write(std::span<const WriteOp>(&op, 1), k % 5 == 0), IsOk());
      expected_[key] = value;
      deleted_.erase(key);
    }
    for (int k = round; k < 150; k += 11) {
      const std::string gone = absl::StrCat("key", k), added = absl::StrCat("batch", round, "-", k);
      WriteOp ops[2] = {{true, gone, ""}, {false, added, "in a batch"}};
      ASSERT_THAT(engine.Write(std::span<const WriteOp>(ops, 2), k % 2 == 0), IsOk());
      expected_.erase(gone);
      deleted_.insert(gone);
      expected_[added] = "in a batch";
    }
  }

  void ExpectAll(Engine& engine) {
    for (const auto& [key, value] : expected_) {
      absl::StatusOr<std::string> got = engine.Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      ASSERT_EQ(*got, value) << key;
    }
    for (const std::string& key : deleted_) {
      ASSERT_THAT(engine.Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }

  // The k-th key FillWithPuts writes, padded to `key_bytes`.
  static std::string FillKey(int k, size_t key_bytes) {
    std::string key = absl::StrCat("fill", k);
    if (key.size() < key_bytes) key.resize(key_bytes, 'k');
    return key;
  }

  // Puts of new keys until the store refuses one; returns that refusal.
  absl::Status FillWithPuts(Engine& engine, size_t key_bytes = 0, size_t value_bytes = 1000) {
    absl::Status status;
    for (int k = 0; status.ok(); ++k) {
      const std::string key = FillKey(k, key_bytes), value(value_bytes, 'f');
      WriteOp op{false, key, value};
      status = engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
      if (status.ok()) expected_[key] = value;
    }
    return status;
  }

  void ExpectCheckFindsNothing(Engine& engine) {
    absl::StatusOr<CheckReport> report = engine.Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->problems.empty()) << ::testing::PrintToString(report->problems);
  }

  // Writes two rounds (and `small_keys` keys of short values, in batches) and closes cleanly;
  // returns the stats the engine had before Close.
  EngineStats WriteAndClose(int small_keys = 0) {
    auto engine = Open(storage_);
    EXPECT_THAT(engine, IsOk());
    if (!engine.ok()) return {};
    Write(**engine, 0);
    Write(**engine, 1);
    std::vector<std::string> keys;
    std::vector<WriteOp> ops;
    for (int k = 0; k < small_keys; ++k) {
      keys.push_back(absl::StrCat("small", k));
      if (keys.size() < 100 && k + 1 < small_keys) continue;
      for (const std::string& key : keys) ops.push_back(WriteOp{false, key, "short"});
      EXPECT_THAT((*engine)->Write(ops, /*durable=*/false), IsOk());
      for (const std::string& key : keys) expected_[key] = "short";
      keys.clear();
      ops.clear();
    }
    const EngineStats before = (*engine)->Stats();
    EXPECT_THAT((*engine)->Close(), IsOk());
    return before;
  }

  // A crash now (no Close): opens a copy of the store as it is, which must recover from the base
  // checkpoint and the log written after it, hold what the test expects (with `live_keys`, when
  // given) and pass Check, as an Open of another copy that reads every segment must. Returns the
  // engine that recovered from the base (null when it could not open).
  std::unique_ptr<Engine> CrashAndRecoverFromBase(const Shape& shape,
                                                  std::optional<uint64_t> live_keys) {
    const std::shared_ptr<MemStorage> read_all_copy = CopyOf(*storage_);
    auto crashed = Open(CopyOf(*storage_), shape);
    EXPECT_THAT(crashed, IsOk());
    if (!crashed.ok()) return nullptr;
    const EngineStats stats = (*crashed)->Stats();
    EXPECT_EQ(stats.recovery_start, RecoveryStart::kBaseCheckpoint)
        << stats.recovery_checkpoint_unused_why;
    if (live_keys) {
      EXPECT_EQ(stats.live_keys, *live_keys);
    }
    ExpectAll(**crashed);
    ExpectCheckFindsNothing(**crashed);
    Shape every_segment = shape;
    every_segment.read_all = true;
    auto read_all = Open(read_all_copy, every_segment);
    EXPECT_THAT(read_all, IsOk());
    if (read_all.ok()) {
      EXPECT_NE((*read_all)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint);
      if (live_keys) {
        EXPECT_EQ((*read_all)->Stats().live_keys, *live_keys);
      }
      ExpectAll(**read_all);
    }
    return std::move(*crashed);
  }

  // The keys of the records each segment of `storage` holds a log of (as recovery reads it).
  std::map<uint64_t, std::vector<std::string>> KeysBySegment(const MemStorage& storage) const {
    const std::vector<uint8_t> bytes = storage.CopyOut(0, storage.lba_count());
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(bytes.data(), kPageBytes);
    EXPECT_THAT(superblock, IsOk());
    if (!superblock.ok()) return {};
    const Geometry g = GeometryOf(*superblock);
    std::map<uint64_t, std::vector<std::string>> keys;
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      ScanSegment(
          g, StoreSeed(superblock->store_id), s,
          [&](uint32_t i) { return bytes.data() + (g.FirstPageOf(s) + i) * kPageBytes; },
          /*assemble_large_values=*/false,
          [&](const ScannedRecord& record) { keys[s].emplace_back(record.key); });
    }
    return keys;
  }

  // What the segment map on `storage` says of each segment (and, with `generation_floor`, the
  // highest generation floor of its pages, where recovery starts handing out generations).
  std::vector<SegmentMapEntry> MapEntries(const MemStorage& storage,
                                          uint64_t* generation_floor = nullptr) const {
    const std::vector<uint8_t> bytes = storage.CopyOut(0, storage.lba_count());
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(bytes.data(), kPageBytes);
    EXPECT_THAT(superblock, IsOk());
    if (!superblock.ok()) return {};
    const Geometry g = GeometryOf(*superblock);
    const uint64_t seed = StoreSeed(superblock->store_id);
    const uint32_t per_page = MapEntriesPerPage(kPageBytes);
    std::vector<SegmentMapEntry> all;
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      const uint64_t map_page = g.map_first_page() + s / per_page;
      const SegmentMapEntry* entries = nullptr;
      absl::StatusOr<SegmentMapPageHeader> floors =
          DecodeMapPage(bytes.data() + map_page * kPageBytes, g, seed, map_page, &entries);
      EXPECT_THAT(floors, IsOk());
      if (floors.ok() && generation_floor != nullptr) {
        *generation_floor = std::max(*generation_floor, floors->generation_floor);
      }
      all.push_back(entries == nullptr ? SegmentMapEntry{} : entries[s % per_page]);
    }
    return all;
  }

  // The generations of the checkpoint pages in the segments that the map on `storage` calls free
  // (or never written), and the map's generation floor.
  struct UnnamedCheckpointPages {
    std::vector<uint64_t> generations;
    uint64_t map_floor = 0;
  };
  UnnamedCheckpointPages CheckpointPagesInFreeSegments(const MemStorage& storage) const {
    UnnamedCheckpointPages found;
    const std::vector<SegmentMapEntry> entries = MapEntries(storage, &found.map_floor);
    const std::vector<uint8_t> bytes = storage.CopyOut(0, storage.lba_count());
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(bytes.data(), kPageBytes);
    if (!superblock.ok()) return found;
    const Geometry g = GeometryOf(*superblock);
    const uint64_t seed = StoreSeed(superblock->store_id);
    for (uint64_t s = 0; s < entries.size(); ++s) {
      if (entries[s].state != static_cast<uint8_t>(MapState::kFree) &&
          entries[s].state != static_cast<uint8_t>(MapState::kUnknown)) {
        continue;
      }
      for (uint32_t i = 0; i < g.log_pages(); ++i) {
        const uint64_t page = g.FirstPageOf(s) + i;
        absl::StatusOr<PageHeader> header = VerifyPage(bytes.data() + page * kPageBytes, g, seed, page);
        if (header.ok() && header->type == static_cast<uint8_t>(PageType::kCheckpoint)) {
          found.generations.push_back(GenerationOf(*header));
        }
      }
    }
    return found;
  }

  // The pages of the checkpoint that the segment map on `storage` names with `state`, in its
  // order.
  std::vector<uint64_t> CheckpointPages(const MemStorage& storage,
                                        MapState state = MapState::kCheckpoint) const {
    std::map<uint32_t, std::pair<uint64_t, uint32_t>> places;  // place -> segment, pages
    const std::vector<SegmentMapEntry> entries = MapEntries(storage);
    for (uint64_t s = 0; s < entries.size(); ++s) {
      if (entries[s].state == static_cast<uint8_t>(state)) {
        places[entries[s].summary_first] = {s, entries[s].summary_pages};
      }
    }
    std::vector<uint64_t> pages;
    for (const auto& [place, where] : places) {
      for (uint32_t i = 0; i < where.second; ++i) {
        pages.push_back(2 + where.first * kPagesPerSegment + i);  // FORMAT.md "Device layout"
      }
    }
    return pages;
  }

  // The store on `storage` opened on a FaultDevice with `faults`, and a queue of the device's
  // family that the test keeps, whose fault controls outlive the engine's queues.
  struct FaultyStore {
    std::unique_ptr<storage::Device> watch;
    storage::FaultDevice* device = nullptr;
    std::unique_ptr<Engine> engine;
  };
  FaultyStore OpenFaulty(const std::shared_ptr<MemStorage>& storage,
                         const storage::FaultDeviceOptions& faults) {
    FaultyStore store;
    auto mem = MemDevice::Open(storage, MemOptions());
    EXPECT_THAT(mem, IsOk());
    if (!mem.ok()) return store;
    auto fault = storage::FaultDevice::Create(std::move(*mem), faults);
    EXPECT_THAT(fault, IsOk());
    if (!fault.ok()) return store;
    auto watch = (*fault)->OpenQueue(storage::QueueOptions{});
    EXPECT_THAT(watch, IsOk());
    if (!watch.ok()) return store;
    auto engine =
        Engine::OpenOnDevice(std::move(*fault), StoreOptions({}, GetParam()), StoreSeams({}));
    EXPECT_THAT(engine, IsOk());
    if (!engine.ok()) return store;
    store.watch = std::move(*watch);
    store.device = static_cast<storage::FaultDevice*>(store.watch.get());
    store.engine = std::move(*engine);
    return store;
  }

  std::shared_ptr<MemStorage> storage_;
  std::map<std::string, std::string> expected_;
  std::set<std::string> deleted_;
};

TEST_P(CheckpointTest, ACleanCloseLeavesACheckpointThatOpenReadsAlone) {
  const EngineStats before = WriteAndClose();
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  ASSERT_FALSE(pages.empty());
  const std::shared_ptr<MemStorage> as_closed = CopyOf(*storage_);
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(stats.recovery_checkpoints_unused, 0u);
  EXPECT_EQ(stats.recovery_segments_summarized, 0u);
  EXPECT_EQ(stats.recovery_pages_scanned, pages.size());  // the checkpoint, nothing else
  // The engine's state as it was at Close.
  EXPECT_EQ(stats.live_keys, before.live_keys);
  EXPECT_EQ(stats.live_bytes, before.live_bytes);
  EXPECT_EQ(stats.stale_entries, before.stale_entries);
  EXPECT_EQ(stats.segments_free, before.segments_free);
  ExpectAll(**engine);
  ExpectCheckFindsNothing(**engine);
  // New writes go on above every sequence it named.
  Write(**engine, 2);
  ExpectAll(**engine);
  ASSERT_THAT((*engine)->Close(), IsOk());
  engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  ExpectAll(**engine);
  // Reading every segment of the store as it was closed finds the same.
  auto read_all = Open(as_closed, Shape{.mode = std::nullopt, .read_all = true});
  ASSERT_THAT(read_all, IsOk());
  EXPECT_NE((*read_all)->Stats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ((*read_all)->Stats().live_keys, before.live_keys);
}

// The checkpoint stands for the log as it was at Close. The Open that reads it writes the map
// whole before any write, saying it is the base of the log written after it: a crash after later
// writes recovers from it and that log (puts, overwrites, deletes and batches), and finds what
// reading every segment finds.
TEST_P(CheckpointTest, TheOpenThatReadsACheckpointKeepsItAsTheBaseOfTheLogAfterIt) {
  WriteAndClose();
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  ASSERT_FALSE(pages.empty());
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_TRUE(CheckpointPages(*storage_).empty()) << "the map still says it is current";
  EXPECT_EQ(CheckpointPages(*storage_, MapState::kBaseCheckpoint), pages);
  EXPECT_GT((*engine)->Stats().segments_checkpoint, 0u);
  Write(**engine, 2);
  Write(**engine, 3);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const EngineStats before = (*engine)->Stats();
  // A crash now: no Close.
  const std::shared_ptr<MemStorage> crashed_copy = CopyOf(*storage_);
  const std::shared_ptr<MemStorage> crashed_storage = CopyOf(*storage_);
  auto crashed = Open(crashed_storage);
  ASSERT_THAT(crashed, IsOk());
  const EngineStats stats = (*crashed)->Stats();
  EXPECT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(stats.recovery_start, RecoveryStart::kBaseCheckpoint);
  EXPECT_EQ(stats.recovery_checkpoints_unused, 0u) << stats.recovery_checkpoint_unused_why;
  EXPECT_EQ(stats.live_keys, before.live_keys);
  if (GetParam() == IndexMode::kOrdered) {
    EXPECT_EQ(stats.live_bytes, before.live_bytes);
  } else {
    // An overwrite over the base is taken as a blind one: the entry it made stale counts until
    // compaction settles it (check verifies the count).
    EXPECT_GE(stats.live_bytes, before.live_bytes);
    EXPECT_GT(stats.stale_entries, 0u);
  }
  ExpectAll(**crashed);
  ExpectCheckFindsNothing(**crashed);
  // Reading every segment finds the same.
  auto read_all = Open(crashed_copy, Shape{.mode = std::nullopt, .read_all = true});
  ASSERT_THAT(read_all, IsOk());
  EXPECT_NE((*read_all)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint);
  EXPECT_EQ((*read_all)->Stats().live_keys, before.live_keys);
  ExpectAll(**read_all);
  // The base stays the base of the next crash's recovery, with the log of both sessions after it.
  Write(**crashed, 4);
  ASSERT_THAT((*crashed)->Flush(), IsOk());
  auto again = Open(CopyOf(*crashed_storage));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ((*again)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint)
      << (*again)->Stats().recovery_checkpoint_unused_why;
  EXPECT_EQ((*again)->Stats().live_keys, (*crashed)->Stats().live_keys);
  ExpectAll(**again);
  ExpectCheckFindsNothing(**again);
}

// Compaction frees segments the base checkpoint says hold a log (the map says so lazily, their
// last pages at once) and takes them again for new logs: recovery after a crash forgets what the
// base says of them (their index entries and their place in the table) and reads them as part of
// the log after it.
TEST_P(CheckpointTest, SegmentsFreedAfterTheBaseAreReadAsPartOfTheLogAfterIt) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  for (int round = 2; round < 6; ++round) {
    Write(**engine, round);
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
  }
  Write(**engine, 6);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const EngineStats before = (*engine)->Stats();
  ASSERT_GT(before.segments_cleaned, 0u);
  std::unique_ptr<Engine> crashed = CrashAndRecoverFromBase({}, before.live_keys);
  ASSERT_NE(crashed, nullptr);
  EXPECT_GT(crashed->Stats().recovery_base_segments_freed, 0u);
  // What the store holds then compacts and recovers as any other.
  ASSERT_THAT(crashed->CompactAll(), IsOk());
  ExpectAll(*crashed);
  ASSERT_THAT(crashed->Close(), IsOk());
}

// A Close after a session that began from a base writes a new checkpoint; the map write that
// names it frees the base's segments.
TEST_P(CheckpointTest, ANewCheckpointReplacesTheBase) {
  WriteAndClose();
  const std::vector<uint64_t> first = CheckpointPages(*storage_);
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  Write(**engine, 2);
  ASSERT_THAT((*engine)->Close(), IsOk());
  const std::vector<uint64_t> second = CheckpointPages(*storage_);
  ASSERT_FALSE(second.empty());
  EXPECT_TRUE(CheckpointPages(*storage_, MapState::kBaseCheckpoint).empty());
  for (const uint64_t page : first) {
    const uint64_t segment = (page - 2) / kPagesPerSegment;
    EXPECT_EQ(MapEntries(*storage_)[segment].state, static_cast<uint8_t>(MapState::kFree))
        << "segment " << segment << " of the first checkpoint";
  }
  engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(CheckpointPages(*storage_, MapState::kBaseCheckpoint), second);
  ExpectAll(**engine);
}

// A store that runs out of room for puts keeps its base: the puts are refused, and a crash
// then recovers from the base and the log written since. (Today's code gave the base up to the
// puts, and the crash read the whole log.)
TEST_P(CheckpointTest, AStoreFullOfPutsKeepsItsBase) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  const uint64_t base_segments = (*engine)->Stats().segments_checkpoint;
  ASSERT_GT(base_segments, 0u);
  absl::Status status = FillWithPuts(**engine);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(std::string(status.message()).find("hold the checkpoint"), std::string::npos)
      << status;
  EXPECT_EQ((*engine)->Stats().segments_checkpoint, base_segments);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  EXPECT_FALSE(CheckpointPages(*storage_, MapState::kBaseCheckpoint).empty());
  auto crashed = Open(CopyOf(*storage_));
  ASSERT_THAT(crashed, IsOk());
  EXPECT_EQ((*crashed)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint);
  ExpectAll(**crashed);
}

// Deletes are how a full store makes room again: when the puts have left only the reserve and
// the deletes' tombstones use it up, they take the base's segments rather than be refused, and
// a crash then recovers from the log.
TEST_P(CheckpointTest, DeletesInAFullStoreMayTakeTheBasesSegments) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  ASSERT_GT((*engine)->Stats().segments_checkpoint, 0u);
  // Long keys: their tombstones take nearly the room their puts took.
  constexpr size_t kKeyBytes = 1000;
  ASSERT_THAT(FillWithPuts(**engine, kKeyBytes, 100),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // Without compaction (this fixture's default), the tombstones free no segment: they end in
  // the base's room.
  absl::Status status;
  for (int k = 0; status.ok() && (*engine)->Stats().segments_checkpoint > 0; ++k) {
    const std::string key = FillKey(k, kKeyBytes);
    ASSERT_TRUE(expected_.contains(key)) << "deleted every key with the base still kept";
    WriteOp op{true, key, ""};
    status = (*engine)->Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
    expected_.erase(key);
    deleted_.insert(key);
  }
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ((*engine)->Stats().segments_checkpoint, 0u);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  EXPECT_TRUE(CheckpointPages(*storage_, MapState::kBaseCheckpoint).empty());
  auto crashed = Open(CopyOf(*storage_));
  ASSERT_THAT(crashed, IsOk());
  EXPECT_NE((*crashed)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint);
  ExpectAll(**crashed);
}

// DB::Checkpoint makes every earlier write durable first, also when it then finds no room for
// the checkpoint: a power cut that loses every write not yet durable keeps them all.
TEST_P(CheckpointTest, ACheckpointWithoutRoomStillMakesEveryEarlierWriteDurable) {
  WriteAndClose();
  storage::FaultDeviceOptions lose_unflushed;
  lose_unflushed.keep_weight = 0;
  lose_unflushed.tear_weight = 0;
  FaultyStore store = OpenFaulty(storage_, lose_unflushed);
  ASSERT_NE(store.engine, nullptr);
  ASSERT_THAT(FillWithPuts(*store.engine), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(store.engine->Checkpoint(), StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(store.device->CutPower(), IsOk());
  store.engine.reset();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  ExpectAll(**engine);
}

// A segment of the base whose last page cannot be read or verified may have been freed and
// taken again since: the base is set aside, and the log read.
TEST_P(CheckpointTest, ABaseIsSetAsideWhenALastPageCannotTellWhetherItsSegmentChanged) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  Write(**engine, 2);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const std::shared_ptr<MemStorage> crashed = CopyOf(*storage_);
  // Heads fill the store from the front: segment 0 holds a log the base knows.
  const std::vector<SegmentMapEntry> entries = MapEntries(*crashed);
  ASSERT_NE(entries[0].state, static_cast<uint8_t>(MapState::kFree));
  const uint64_t last_page = 2 + kPagesPerSegment - 1;
  crashed->Corrupt(last_page * kPageBytes + 100, 1);
  auto reopened = Open(crashed);
  ASSERT_THAT(reopened, IsOk());
  const EngineStats stats = (*reopened)->Stats();
  EXPECT_NE(stats.recovery_start, RecoveryStart::kBaseCheckpoint);
  EXPECT_EQ(stats.recovery_checkpoints_unused, 1u);
  EXPECT_NE(stats.recovery_checkpoint_unused_why.find("last page"), std::string::npos)
      << stats.recovery_checkpoint_unused_why;
  ExpectAll(**reopened);
}

// A checkpoint written while the store runs (Engine::Checkpoint) replaces the base: a crash
// after it recovers from it and the log written since, which reads less than the log since the
// last Open.
TEST_P(CheckpointTest, ACheckpointWhileRunningBecomesTheBase) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  const std::vector<uint64_t> first = CheckpointPages(*storage_, MapState::kBaseCheckpoint);
  Write(**engine, 2);
  Write(**engine, 3);
  ASSERT_THAT((*engine)->Checkpoint(), IsOk());
  EXPECT_EQ((*engine)->Stats().checkpoints_written, 1u);
  Write(**engine, 4);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const std::vector<uint64_t> second = CheckpointPages(*storage_, MapState::kBaseCheckpoint);
  ASSERT_FALSE(second.empty());
  EXPECT_NE(second, first);
  EXPECT_TRUE(CheckpointPages(*storage_).empty());
  EXPECT_NE(CrashAndRecoverFromBase({}, (*engine)->Stats().live_keys), nullptr);
}

// A checkpoint while running holds writes back only while it takes its stream from the shards and
// the table, not while its pages are written (the device may take long over them): a durable
// write completes while the checkpoint's first pages are held back at the device, and a crash
// after the checkpoint became the base finds that write in the log after it. (Failed before:
// writes waited for the whole checkpoint.)
TEST_P(CheckpointTest, WritesGoOnWhileACheckpointsPagesAreWritten) {
  WriteAndClose();
  FaultyStore store = OpenFaulty(storage_, {});
  ASSERT_NE(store.engine, nullptr);
  storage::FaultDevice* device = store.device;
  std::unique_ptr<Engine>& engine = store.engine;
  absl::Mutex mu;
  bool held = false, released = false;
  absl::Duration held_for;  // the checkpoint's pages, at the device
  device->SetWriteObserver([&](const storage::IoRequest& request) {
    if (!WritesCheckpointPages(request)) return;
    absl::MutexLock lock(&mu);
    const absl::Time start = absl::Now();
    held = true;
    mu.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(60));
    held_for += absl::Now() - start;
  });
  Write(*engine, 2);
  absl::Status checkpointed;
  std::thread checkpoint([&] { checkpointed = engine->Checkpoint(); });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&held), absl::Seconds(60)));
  }
  std::atomic<bool> wrote = false;
  absl::Status write_status;
  std::thread writer([&] {
    const WriteOp op{false, "during", "the checkpoint"};
    write_status = engine->Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
    wrote = true;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!wrote && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(wrote) << "a durable write waited for the checkpoint's pages";
  {
    absl::MutexLock lock(&mu);
    released = true;
  }
  writer.join();
  checkpoint.join();
  device->SetWriteObserver(nullptr);
  ASSERT_THAT(write_status, IsOk());
  ASSERT_THAT(checkpointed, IsOk());
  expected_["during"] = "the checkpoint";
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.checkpoints_written, 1u);
  // Stats tell the time the checkpoint took from the time writes waited for it.
  EXPECT_GT(stats.checkpoint_writes_held_seconds, 0);
  EXPECT_GE(stats.checkpoint_seconds - stats.checkpoint_writes_held_seconds,
            absl::ToDoubleSeconds(held_for));
  Write(*engine, 3);
  ASSERT_THAT(engine->Flush(), IsOk());
  EXPECT_NE(CrashAndRecoverFromBase({}, engine->Stats().live_keys), nullptr);
}

// Recovery over a base in passes (its tables' budget short) reads the log after the base once:
// the segments it reads whole (here every one: no summaries) are read by the first pass, which
// keeps their records for the others, as a summary in memory. (Each pass read them again before.)
TEST_P(CheckpointTest, ALaterPassOfRecoveryReadsNoSegmentWholeAgain) {
  WriteAndClose();
  Shape no_summaries;
  no_summaries.summary_min_segment_pages = kPagesPerSegment + 1;
  auto engine = Open(storage_, no_summaries);
  ASSERT_THAT(engine, IsOk());
  for (int round = 2; round < 6; ++round) Write(**engine, round);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  std::unique_ptr<Engine> one_pass = CrashAndRecoverFromBase(no_summaries, std::nullopt);
  ASSERT_NE(one_pass, nullptr);
  Shape short_budget = no_summaries;
  short_budget.recovery_memory_bytes = 48 << 10;
  std::unique_ptr<Engine> passes = CrashAndRecoverFromBase(short_budget, std::nullopt);
  ASSERT_NE(passes, nullptr);
  const EngineStats once = one_pass->Stats(), again = passes->Stats();
  EXPECT_EQ(once.recovery_passes, 1u);
  EXPECT_GT(again.recovery_passes, 1u);
  EXPECT_EQ(again.recovery_pages_scanned, once.recovery_pages_scanned);
  EXPECT_EQ(again.live_keys, once.live_keys);
}

// A Close with nothing written since the last checkpoint written while running marks that one
// current: the next Open reads it alone.
TEST_P(CheckpointTest, ACloseRightAfterACheckpointMarksItCurrent) {
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  Write(**engine, 0);
  ASSERT_THAT((*engine)->Checkpoint(), IsOk());
  const std::vector<uint64_t> pages = CheckpointPages(*storage_, MapState::kBaseCheckpoint);
  ASSERT_FALSE(pages.empty());
  ASSERT_THAT((*engine)->Close(), IsOk());
  EXPECT_EQ(CheckpointPages(*storage_), pages);
  engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ((*engine)->Stats().recovery_pages_scanned, pages.size());
  ExpectAll(**engine);
}

// The engine writes checkpoints on its own as the log grows (Options::checkpoint_log_ratio
// and checkpoint_min_log_bytes): a crash then reads the last one and the log after it.
TEST_P(CheckpointTest, TheEngineWritesCheckpointsAsTheLogGrows) {
  const Shape running{.mode = std::nullopt, .checkpoint_min_log_bytes = 128 << 10};
  auto engine = Open(storage_, running);
  ASSERT_THAT(engine, IsOk());
  for (int round = 0; round < 12 && (*engine)->Stats().checkpoints_written < 2; ++round) {
    Write(**engine, round);
    ASSERT_THAT((*engine)->Flush(), IsOk());
    absl::SleepFor(absl::Milliseconds(300));  // the checkpoint thread looks every 100 ms
  }
  EXPECT_GE((*engine)->Stats().checkpoints_written, 2u);
  EXPECT_EQ((*engine)->Stats().checkpoints_failed, 0u);
  auto crashed = Open(CopyOf(*storage_), running);  // no Close
  ASSERT_THAT(crashed, IsOk());
  EXPECT_EQ((*crashed)->Stats().recovery_start, RecoveryStart::kBaseCheckpoint)
      << (*crashed)->Stats().recovery_checkpoint_unused_why;
  ExpectAll(**crashed);
  ExpectCheckFindsNothing(**crashed);
}

// Compaction copies a tombstone with its old sequence while an older put of its key may remain
// (and, where damage hides which record is current, an old put): such a copy in the log after
// the base is older than what the base may hold for its key. A key put, deleted and put again
// before the Close, whose tombstone compaction copies after the Open, keeps its last value
// through a crash.
TEST_P(CheckpointTest, ACopyOfAnOldTombstoneAfterTheBaseDeletesNothing) {
  // Three sessions, each leaving its segments sealed: the first puts share theirs with values
  // that stay (not worth cleaning: it holds the older puts that make compaction keep the
  // tombstones); the deletes share theirs with values overwritten later (cleaned); the last puts
  // share theirs with values that stay. The third Close writes the checkpoint.
  const Shape sealing{.mode = std::nullopt, .shards = 1, .checkpoint = false};
  const Shape one_shard{.mode = std::nullopt, .shards = 1};
  std::unique_ptr<Engine> engine;
  const auto put = [&](const std::string& key, const std::string& value) {
    WriteOp op{false, key, value};
    ASSERT_THAT(engine->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_[key] = value;
  };
  const auto session = [&](const Shape& shape, const std::function<void()>& writes) {
    auto opened = Open(storage_, shape);
    ASSERT_THAT(opened, IsOk());
    engine = std::move(*opened);
    writes();
    ASSERT_THAT(engine->Close(), IsOk());
  };
  session(sealing, [&] {
    for (int k = 0; k < 20; ++k) put(absl::StrCat("key", k), "first");
    for (int f = 0; f < 10; ++f) put(absl::StrCat("stays", f), std::string(3000, 's'));
  });
  session(sealing, [&] {
    for (int k = 0; k < 20; ++k) {
      const std::string key = absl::StrCat("key", k);
      WriteOp op{true, key, ""};
      ASSERT_THAT(engine->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    }
    for (int f = 0; f < 10; ++f) put(absl::StrCat("goes", f), std::string(3000, 'g'));
  });
  session(one_shard, [&] {
    for (int k = 0; k < 20; ++k) put(absl::StrCat("key", k), "third");
    for (int f = 0; f < 10; ++f) put(absl::StrCat("stays-too", f), std::string(3000, 't'));
  });
  auto opened = Open(storage_, one_shard);
  ASSERT_THAT(opened, IsOk());
  engine = std::move(*opened);
  ASSERT_EQ(engine->Stats().recovery_start, RecoveryStart::kCleanClose);
  for (int f = 0; f < 10; ++f) {
    const std::string key = absl::StrCat("goes", f);
    WriteOp op{true, key, ""};
    ASSERT_THAT(engine->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_.erase(key);
    deleted_.insert(key);
  }
  ASSERT_THAT(engine->CompactAll(), IsOk());
  ASSERT_THAT(engine->Flush(), IsOk());
  ASSERT_GT(engine->Stats().segments_cleaned, 0u);
  EXPECT_NE(CrashAndRecoverFromBase(one_shard, std::nullopt), nullptr);
}

// A session that writes nothing leaves the log as the checkpoint it read describes: Close marks
// that checkpoint again instead of writing the index anew. One that writes gets a new one.
TEST_P(CheckpointTest, ASessionThatWritesNothingKeepsTheCheckpointItRead) {
  WriteAndClose();
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  ASSERT_FALSE(pages.empty());
  const auto bytes_of = [&](const std::vector<uint64_t>& of) {
    std::vector<std::vector<uint8_t>> bytes;
    for (const uint64_t page : of) bytes.push_back(storage_->CopyOut(page, 1));
    return bytes;
  };
  const std::vector<std::vector<uint8_t>> written = bytes_of(pages);
  {
    auto engine = Open(storage_);
    ASSERT_THAT(engine, IsOk());
    ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    ExpectAll(**engine);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  EXPECT_EQ(CheckpointPages(*storage_), pages);
  EXPECT_TRUE(bytes_of(pages) == written) << "the checkpoint was written anew";
  {
    auto engine = Open(storage_);
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    ExpectAll(**engine);
    WriteOp op{false, "one more", "value"};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_["one more"] = "value";
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const std::vector<uint64_t> after_write = CheckpointPages(*storage_);
  ASSERT_FALSE(after_write.empty());
  EXPECT_FALSE(after_write == pages && bytes_of(after_write) == written)
      << "a session that wrote kept the old checkpoint";
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  ExpectAll(**engine);
}

// A damaged page, first or last (when most entries are in the indexes already), sets the whole
// checkpoint aside: the indexes and the segment table are made anew from the log.
TEST_P(CheckpointTest, ADamagedCheckpointIsSetAsideAndTheLogRead) {
  const EngineStats before = WriteAndClose(/*small_keys=*/3000);
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  ASSERT_GE(pages.size(), 3u);
  for (const uint64_t page : {pages.front(), pages.back()}) {
    SCOPED_TRACE(absl::StrCat("page ", page, " damaged"));
    const std::shared_ptr<MemStorage> damaged = CopyOf(*storage_);
    damaged->Corrupt(page * kPageBytes + kPageBytes - 100, 1);
    auto engine = Open(damaged);
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
    EXPECT_EQ(stats.recovery_checkpoints_unused, 1u);
    EXPECT_GT(stats.recovery_segments_summarized, 0u);
    EXPECT_EQ(stats.live_keys, before.live_keys);
    ExpectAll(**engine);
    ExpectCheckFindsNothing(**engine);
  }
}

// The checkpoint is read ahead, several runs of pages in flight while one is loaded: a page that
// does not verify, or that the device cannot read, anywhere in a checkpoint of more runs than
// the loader has chunks sets it aside (with the reads still in flight finished first), and the
// log gives every key.
TEST_P(CheckpointTest, ACheckpointReadAheadIsSetAsideWhereverAPageFails) {
  const EngineStats before = WriteAndClose(/*small_keys=*/40000);
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  // Runs of at most a segment's pages (15 here); the loader has at most 4 chunks.
  ASSERT_GT(pages.size(), 5 * (kPagesPerSegment - 1)) << "too few runs to read ahead";
  {
    auto engine = Open(CopyOf(*storage_));
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    EXPECT_EQ((*engine)->Stats().live_keys, before.live_keys);
    ExpectAll(**engine);
  }
  for (const uint64_t page : {pages[1], pages[pages.size() / 2], pages[pages.size() - 2]}) {
    for (const bool unreadable : {false, true}) {
      SCOPED_TRACE(absl::StrCat("page ", page, unreadable ? " unreadable" : " damaged"));
      const std::shared_ptr<MemStorage> copy = CopyOf(*storage_);
      absl::StatusOr<std::unique_ptr<storage::Device>> device = MemDevice::Open(copy, MemOptions());
      ASSERT_THAT(device, IsOk());
      if (unreadable) {
        auto faulty = storage::FaultDevice::Create(std::move(*device), {});
        ASSERT_THAT(faulty, IsOk());
        ASSERT_THAT((*faulty)->FailReadsOf(page, 1), IsOk());  // 4 KiB blocks: LBA = page
        device = std::unique_ptr<storage::Device>(std::move(*faulty));
      } else {
        copy->Corrupt(page * kPageBytes + kPageBytes - 100, 1);
      }
      auto engine =
          Engine::OpenOnDevice(std::move(*device), StoreOptions({}, GetParam()), StoreSeams({}));
      ASSERT_THAT(engine, IsOk());
      const EngineStats stats = (*engine)->Stats();
      EXPECT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
      EXPECT_EQ(stats.recovery_checkpoints_unused, 1u);
      EXPECT_EQ(stats.live_keys, before.live_keys);
      ExpectAll(**engine);
    }
  }
}

// A checkpoint written by a store of another shard count, or in the other index mode, is set
// aside too: the log gives what the new shape needs.
TEST_P(CheckpointTest, ACheckpointOfAnotherShapeIsSetAside) {
  WriteAndClose();
  const IndexMode other = GetParam() == IndexMode::kHash ? IndexMode::kOrdered : IndexMode::kHash;
  for (const Shape& shape : {Shape{.mode = std::nullopt, .shards = 3}, Shape{.mode = other}}) {
    auto engine = Open(CopyOf(*storage_), shape);
    ASSERT_THAT(engine, IsOk());
    EXPECT_NE((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    EXPECT_EQ((*engine)->Stats().recovery_checkpoints_unused, 1u);
    ExpectAll(**engine);
  }
}

TEST_P(CheckpointTest, AnOpenThatReadsEverySegmentIgnoresIt) {
  WriteAndClose();
  auto engine = Open(storage_, Shape{.mode = std::nullopt, .read_all = true});
  ASSERT_THAT(engine, IsOk());
  EXPECT_NE((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  ExpectAll(**engine);
  ExpectCheckFindsNothing(**engine);
}

// The log heads go on in their segments after a clean Close: sessions that each write a few
// records and close fill one segment per head, not one segment each (Close used to seal the
// heads, so every session took fresh segments and left the last ones partly empty).
TEST_P(CheckpointTest, TheHeadsGoOnInTheirSegmentsAfterACleanClose) {
  const Shape one_shard{.mode = std::nullopt, .shards = 1};
  uint64_t free_after_first = 0;
  for (int session = 0; session < 4; ++session) {
    SCOPED_TRACE(absl::StrCat("session ", session));
    auto engine = Open(storage_, one_shard);
    ASSERT_THAT(engine, IsOk());
    if (session > 0) {
      EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
      EXPECT_EQ((*engine)->Stats().recovery_heads_resumed, 1u);
      ExpectAll(**engine);
    }
    for (int k = 0; k < 3; ++k) {
      const std::string key = absl::StrCat("s", session, "-", k);
      const std::string value(200, static_cast<char>('a' + session));
      WriteOp op{false, key, value};
      ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), k == 2), IsOk());
      expected_[key] = value;
    }
    // (The checkpoint the session's Open read is kept, from the second session on.)
    const EngineStats stats = (*engine)->Stats();
    const uint64_t free = stats.segments_free + stats.segments_checkpoint;
    if (session == 0) free_after_first = free;
    EXPECT_EQ(free, free_after_first) << "a session took a fresh segment for its few records";
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  // Reading the log finds the same: the head's segment holds one log written by four sessions.
  auto read_all = Open(CopyOf(*storage_), Shape{.mode = std::nullopt, .shards = 1,
                                                .read_all = true});
  ASSERT_THAT(read_all, IsOk());
  EXPECT_EQ((*read_all)->Stats().recovery_damaged_pages, 0u);
  ExpectAll(**read_all);
  ExpectCheckFindsNothing(**read_all);
}

// A batch that takes a fresh segment and is then refused (here: the store is down to the free
// segments user writes must leave) leaves its head holding that segment with nothing in it. The
// checkpoint Close writes names the head there, at its first page; the Open that reads it resumes
// the head there, and a crash before anything is written finds the segment as the checkpoint
// left it, empty: recovery goes on from that base and reads only that segment, instead of setting
// the base aside as a segment holding "another log" and reading every segment. (Failed before
// the fix: the base was set aside.)
TEST_P(CheckpointTest, AHeadOnAStillEmptySegmentKeepsTheBaseAfterACrash) {
  const Shape one_shard{
      .mode = std::nullopt, .shards = 1, .summary_min_segment_pages = kPagesPerSegment + 1};
  {
    auto engine = Open(storage_, one_shard);
    ASSERT_THAT(engine, IsOk());
    absl::Status status;
    for (int b = 0; status.ok(); ++b) {
      std::vector<std::string> keys;
      std::vector<WriteOp> batch;
      const std::string value(1000, static_cast<char>('a' + b % 26));
      for (int k = 0; k < 6; ++k) keys.push_back(absl::StrCat("batch", b, "-", k));
      for (const std::string& key : keys) batch.push_back(WriteOp{false, key, value});
      status = (*engine)->Write(batch, /*durable=*/false);
      if (!status.ok()) break;
      for (const std::string& key : keys) expected_[key] = value;
    }
    ASSERT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  ASSERT_FALSE(CheckpointPages(*storage_).empty());
  auto engine = Open(storage_, one_shard);
  ASSERT_THAT(engine, IsOk());
  ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  ASSERT_EQ((*engine)->Stats().recovery_heads_resumed, 1u);
  // A crash now, before any write.
  auto crashed = Open(CopyOf(*storage_), one_shard);
  ASSERT_THAT(crashed, IsOk());
  const EngineStats stats = (*crashed)->Stats();
  EXPECT_EQ(stats.recovery_start, RecoveryStart::kBaseCheckpoint)
      << stats.recovery_checkpoint_unused_why;
  EXPECT_EQ(stats.recovery_checkpoints_unused, 0u) << stats.recovery_checkpoint_unused_why;
  // The checkpoint, the last page of each segment, and a few segments whole: the head's, those
  // announced for heads, the map's. (Reading the log reads every segment whole: no summaries.)
  const uint64_t checkpoint_pages = CheckpointPages(*storage_, MapState::kBaseCheckpoint).size();
  EXPECT_LE(stats.recovery_pages_scanned, checkpoint_pages + kSegments + 4 * kPagesPerSegment);
  ExpectAll(**crashed);
  ExpectCheckFindsNothing(**crashed);
}

// A victim background compaction picked just before a checkpoint while running, and freed after
// it without a record to copy (every one dead), is a change to the log that checkpoint does not
// know: the Close after it must not mark that checkpoint current again (it names the segment as
// holding a log), or the next Open finds it disagreeing with the segment map and reads the log.
// (Failed before: Close compared only the segments taken and the heads' pages, and the pick
// came before the checkpoint.)
TEST_P(CheckpointTest, AVictimFreedAfterACheckpointMakesCloseWriteANewOne) {
  absl::Notification picked, go_on;
  std::atomic<bool> armed{false};
  Shape shape{.mode = std::nullopt, .shards = 1, .background_compaction = true};
  const std::function<void(uint64_t)> victim_picked = [&](uint64_t) {
    if (!armed.exchange(false)) return;
    picked.Notify();
    go_on.WaitForNotification();
  };
  shape.victim_picked = &victim_picked;
  auto engine = Open(storage_, shape);
  ASSERT_THAT(engine, IsOk());
  const absl::Cleanup never_left_waiting = [&] {
    if (!go_on.HasBeenNotified()) go_on.Notify();
  };
  // Records of several segments, those of one overwritten: the only segment with garbage, which
  // compaction frees without copying a record.
  const std::string old_value(1000, 'o'), value(1000, 'n');
  for (int k = 0; k < 200; ++k) {
    const std::string key = absl::StrCat("first", k);
    WriteOp op{false, key, old_value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_[key] = old_value;
  }
  ASSERT_THAT((*engine)->Flush(), IsOk());
  const std::map<uint64_t, std::vector<std::string>> keys = KeysBySegment(*storage_);
  ASSERT_GE(keys.size(), 2u);
  for (const std::string& key : keys.begin()->second) {  // not the head's: there is a later one
    WriteOp op{false, key, value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_[key] = value;
  }
  const uint64_t cleaned_before = (*engine)->Stats().segments_cleaned;
  // Distinct keys until free segments run low and compaction picks that segment: a page each,
  // so that the checkpoint stays small enough for the room left.
  const std::string page_value(3500, 'p');
  armed = true;
  for (int k = 0; !picked.HasBeenNotified(); ++k) {
    ASSERT_LT(k, 100'000) << "compaction picked no victim";
    const uint64_t free_before = (*engine)->Stats().segments_free;
    const std::string key = absl::StrCat("fill", k);
    WriteOp op{false, key, page_value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    expected_[key] = page_value;
    // A segment taken, with few left (it looks below 6 here): give compaction time to look
    // before the next, so that it picks with one free segment to spare, and after the victim's
    // free none is wanted. (The checkpoint below takes that one.)
    const uint64_t free = (*engine)->Stats().segments_free;
    if (free < free_before && free < kSegments / 8) {
      picked.WaitForNotificationWithTimeout(absl::Seconds(1));
    }
  }
  ASSERT_THAT((*engine)->Checkpoint(), IsOk());
  go_on.Notify();
  for (int i = 0; i < 500 && (*engine)->Stats().segments_cleaned == cleaned_before; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ((*engine)->Stats().segments_cleaned, cleaned_before + 1);
  ASSERT_THAT((*engine)->Close(), IsOk());
  auto reopened = Open(storage_, Shape{.mode = std::nullopt, .shards = 1});
  ASSERT_THAT(reopened, IsOk());
  const EngineStats stats = (*reopened)->Stats();
  EXPECT_EQ(stats.recovery_checkpoints_unused, 0u) << stats.recovery_checkpoint_unused_why;
  EXPECT_EQ(stats.recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(stats.recovery_pages_scanned,
            CheckpointPages(*storage_, MapState::kBaseCheckpoint).size());
  ExpectAll(**reopened);
  ExpectCheckFindsNothing(**reopened);
}

// A head's segment has a key filter sized for the most puts a segment can hold (128 KiB for
// 1 MiB segments), which the checkpoint need not carry: the head's summary so far, which it
// carries, holds every put of the segment, and Open rebuilds the filter from it (its bits are
// checked in segment_table_test). So a store of one key reads a page or two at Open.
TEST_P(CheckpointTest, AResumedHeadsKeyFilterIsRebuiltNotSaved) {
  constexpr uint32_t kLargePages = 256;  // 1 MiB segments
  const MemDeviceOptions large = MemStoreOptions(16, kLargePages, kPageBytes);
  auto created = MemDevice::Create(large);
  ASSERT_THAT(created, IsOk());
  const std::shared_ptr<MemStorage> storage = (*created)->storage();
  const Shape shape{.mode = std::nullopt, .shards = 1, .summary_min_segment_pages = 128};
  Options options = StoreOptions(shape, GetParam());
  options.segment_bytes = uint64_t{kLargePages} * kPageBytes;
  const auto open = [&](const std::shared_ptr<MemStorage>& on) {
    auto device = MemDevice::Open(on, large);
    EXPECT_THAT(device, IsOk());
    return Engine::OpenOnDevice(std::move(*device), options, StoreSeams(shape));
  };
  {
    auto engine = Engine::OpenOnDevice(std::move(*created), options, StoreSeams(shape));
    ASSERT_THAT(engine, IsOk());
    WriteOp op{false, "only", "one key"};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), true), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  EXPECT_LE(CheckpointPages(*storage).size(), 2u) << "the head's key filter was saved";
  {
    auto engine = open(storage);
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    EXPECT_EQ((*engine)->Stats().recovery_heads_resumed, 1u);
    EXPECT_LE((*engine)->Stats().recovery_pages_scanned, 2u);
    EXPECT_EQ((*engine)->Get("only").value_or(""), "one key");
    const std::string value(3000, 'x');
    WriteOp more{false, "second", value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&more, 1), true), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = open(storage);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_heads_resumed, 1u);
  EXPECT_EQ((*engine)->Get("only").value_or(""), "one key");
  EXPECT_EQ((*engine)->Get("second").value_or(""), std::string(3000, 'x'));
  ExpectCheckFindsNothing(**engine);
}

// A session that writes no record but makes the heads leave their segments (CompactAll seals
// them, writing their summaries, even when no segment is worth cleaning) wrote to the log: its
// Close writes a new checkpoint, whose heads have no segment. The checkpoint it read, marked
// again, would resume the heads over the summaries they wrote.
TEST_P(CheckpointTest, ASessionThatOnlySealsTheHeadsWritesANewCheckpoint) {
  // One shard, distinct keys only: no segment holds garbage, and the head's second segment is
  // filled past half (not worth repacking), so the compaction below cleans nothing.
  const Shape one_shard{.mode = std::nullopt, .shards = 1};
  {
    auto engine = Open(storage_, one_shard);
    ASSERT_THAT(engine, IsOk());
    // Three records a page, 14 data pages a segment: two full segments and 11 pages of a third.
    for (int k = 0; k < 2 * 42 + 33; ++k) {
      const std::string key = absl::StrCat("distinct", k);
      const std::string value(1000, static_cast<char>('a' + k % 26));
      WriteOp op{false, key, value};
      ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
      expected_[key] = value;
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const std::vector<uint64_t> pages = CheckpointPages(*storage_);
  std::vector<std::vector<uint8_t>> written;
  for (const uint64_t page : pages) written.push_back(storage_->CopyOut(page, 1));
  {
    auto engine = Open(storage_, one_shard);
    ASSERT_THAT(engine, IsOk());
    ASSERT_EQ((*engine)->Stats().recovery_heads_resumed, 1u);
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    const EngineStats stats = (*engine)->Stats();
    ASSERT_EQ(stats.segments_cleaned, 0u) << "the test wants a compaction that cleans nothing";
    EXPECT_EQ(stats.puts + stats.deletes, 0u);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  std::vector<std::vector<uint8_t>> now;
  for (const uint64_t page : CheckpointPages(*storage_)) now.push_back(storage_->CopyOut(page, 1));
  EXPECT_FALSE(now == written) << "the checkpoint read was marked again";
  auto engine = Open(storage_, one_shard);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ((*engine)->Stats().recovery_heads_resumed, 0u) << "the head left its segment";
  ExpectAll(**engine);
  Write(**engine, 2);
  ExpectAll(**engine);
  ExpectCheckFindsNothing(**engine);
}

// A resumed head builds on the summary its segment had at Close: when it leaves the segment,
// the summary holds the records of every session that wrote there, and an Open that reads it
// (the next Close writes no checkpoint) finds what the log holds.
TEST_P(CheckpointTest, AResumedHeadsSummaryHoldsEverySessionsRecords) {
  WriteAndClose();
  {
    auto engine = Open(storage_);
    ASSERT_THAT(engine, IsOk());
    ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
    Write(**engine, 2);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = Open(storage_, Shape{.mode = std::nullopt, .checkpoint = false});
  ASSERT_THAT(engine, IsOk());
  ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  Write(**engine, 3);
  const EngineStats before = (*engine)->Stats();
  ASSERT_THAT((*engine)->Close(), IsOk());  // the heads leave their segments with summaries
  engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
  EXPECT_GT(stats.recovery_segments_summarized, 0u);
  EXPECT_EQ(stats.recovery_summaries_unused, 0u);
  EXPECT_EQ(stats.live_keys, before.live_keys);
  ExpectAll(**engine);
  ExpectCheckFindsNothing(**engine);  // every summary says what its log holds
}

// After a crash in a session that resumed its heads, recovery reads their segments as the open
// ones they are: one log each, written before the last Close and after it.
TEST_P(CheckpointTest, ACrashAfterTheHeadsResumedRecoversBothSessionsWrites) {
  WriteAndClose();
  auto engine = Open(storage_);
  ASSERT_THAT(engine, IsOk());
  ASSERT_EQ((*engine)->Stats().recovery_start, RecoveryStart::kCleanClose);
  Write(**engine, 2);
  ASSERT_THAT((*engine)->Flush(), IsOk());
  auto crashed = Open(CopyOf(*storage_));  // no Close
  ASSERT_THAT(crashed, IsOk());
  const EngineStats stats = (*crashed)->Stats();
  EXPECT_NE(stats.recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(stats.recovery_damaged_pages, 0u);
  EXPECT_EQ(stats.live_keys, (*engine)->Stats().live_keys);
  ExpectAll(**crashed);
  ExpectCheckFindsNothing(**crashed);
}

// A checkpoint goes into segments the map calls free, and the map names it only once its pages
// are durable. A cut in between leaves its pages where recovery does not look (free segments are
// not read), so the generations recovery hands out next must already be above theirs: a head
// later given such a segment under a lower generation would write a log that the checkpoint's
// pages, which stand for a free marker, hide from the Open after the next crash. Cuts at every
// operation of a Close and of a checkpoint while running, every write in flight kept. (Failed
// before the map's floor was made durable ahead of the pages: the floor stayed at the
// checkpoint's own generation.)
TEST_P(CheckpointTest, ACutBeforeTheMapNamesACheckpointLeavesTheMapsFloorAboveItsPages) {
  WriteAndClose();
  uint64_t generation_before = 0;
  for (const uint64_t g : CheckpointPagesInFreeSegments(*storage_).generations) {
    generation_before = std::max(generation_before, g);
  }
  const std::set<std::string> deleted_before = deleted_;
  const std::map<std::string, std::string> expected_before = expected_;
  for (const bool at_close : {true, false}) {
    int cuts_between = 0;  // cuts that left pages of this session's checkpoint unnamed
    for (uint64_t n = 1;; ++n) {
      SCOPED_TRACE(::testing::Message() << (at_close ? "Close" : "Checkpoint") << ", cut after "
                                        << n << " operations");
      expected_ = expected_before;
      deleted_ = deleted_before;
      const std::shared_ptr<MemStorage> storage = CopyOf(*storage_);
      storage::FaultDeviceOptions keep_all;
      keep_all.seed = n;
      keep_all.drop_weight = 0;
      keep_all.tear_weight = 0;
      FaultyStore store = OpenFaulty(storage, keep_all);
      ASSERT_NE(store.engine, nullptr);
      storage::FaultDevice* device = store.device;
      Write(*store.engine, 2);
      ASSERT_THAT(device->SetCutAfterOperations(n), IsOk());
      if (at_close) {
        store.engine->Close().IgnoreError();
      } else {
        store.engine->Checkpoint().IgnoreError();
      }
      const bool cut = device->last_cut().has_value();
      store.engine.reset();  // (without a cut yet, its Close may meet it: the copy is dropped)
      if (!cut) break;
      const UnnamedCheckpointPages unnamed = CheckpointPagesInFreeSegments(*storage);
      for (const uint64_t g : unnamed.generations) {
        EXPECT_LT(g, unnamed.map_floor) << "a checkpoint page's generation is not below the "
                                           "map's floor, where the next Open starts";
        if (g > generation_before) ++cuts_between;
      }
      auto reopened = Open(storage);
      ASSERT_THAT(reopened, IsOk());
      ExpectAll(**reopened);
    }
    EXPECT_GT(cuts_between, 0) << (at_close ? "Close" : "Checkpoint")
                               << ": no cut fell between the checkpoint's pages and the map";
  }
}

// Writes go on while a running checkpoint's pages are written, until the map names it: whatever
// operation power fails after (unflushed writes kept, dropped or torn), the store opens with
// every write acknowledged durable, before the checkpoint or during it, and reading every
// segment finds the same. The writes during it are made from the device's queue as it is given
// the checkpoint's first page, durable one by one, so that each seed replays the same
// operations.
TEST_P(CheckpointTest, ACutWhileWritesGoOnDuringACheckpointLosesNoAcknowledgedWrite) {
  WriteAndClose();
  const std::map<std::string, std::string> expected_before = expected_;
  const std::set<std::string> deleted_before = deleted_;
  int cuts_during_writes = 0;  // cuts that fell among the writes made during the checkpoint
  int cuts_after_writes = 0;   // and after them, before the checkpoint returned
  for (uint64_t n = 1;; ++n) {
    SCOPED_TRACE(::testing::Message() << "cut after " << n << " operations");
    expected_ = expected_before;
    deleted_ = deleted_before;
    const std::shared_ptr<MemStorage> storage = CopyOf(*storage_);
    storage::FaultDeviceOptions fates;
    fates.seed = n;
    FaultyStore store = OpenFaulty(storage, fates);
    ASSERT_NE(store.engine, nullptr);
    storage::FaultDevice* device = store.device;
    Write(*store.engine, 2);
    ASSERT_THAT(store.engine->Flush(), IsOk());
    bool wrote_during = false, cut_during = false;
    std::set<std::string> unknown;  // a write the cut failed: either value may be found
    device->SetWriteObserver([&](const storage::IoRequest& request) {
      if (wrote_during || !WritesCheckpointPages(request)) return;
      wrote_during = true;
      for (int i = 0; i < 12; ++i) {
        // New keys, overwrites and deletes of earlier ones.
        const std::string key = i % 3 == 0 ? absl::StrCat("during", i) : absl::StrCat("key", i * 7);
        const bool is_delete = i % 4 == 3;
        const std::string value = absl::StrCat("during the checkpoint ", i);
        const WriteOp op{is_delete, key, is_delete ? std::string_view() : value};
        if (!store.engine->Write(std::span<const WriteOp>(&op, 1), /*durable=*/true).ok()) {
          unknown.insert(key);
          cut_during = true;
          return;
        }
        if (is_delete) {
          expected_.erase(key);
          deleted_.insert(key);
        } else {
          expected_[key] = value;
          deleted_.erase(key);
        }
      }
    });
    ASSERT_THAT(device->SetCutAfterOperations(n), IsOk());
    store.engine->Checkpoint().IgnoreError();
    const bool cut = device->last_cut().has_value();
    device->SetWriteObserver(nullptr);
    store.engine.reset();
    if (!cut) {
      EXPECT_TRUE(wrote_during);
      break;
    }
    cuts_during_writes += cut_during ? 1 : 0;
    cuts_after_writes += wrote_during && !cut_during ? 1 : 0;
    for (const std::string& key : unknown) {
      expected_.erase(key);
      deleted_.erase(key);
    }
    const std::shared_ptr<MemStorage> read_all_copy = CopyOf(*storage);
    auto reopened = Open(storage);
    ASSERT_THAT(reopened, IsOk());
    ExpectAll(**reopened);
    ExpectCheckFindsNothing(**reopened);
    Shape every_segment;
    every_segment.read_all = true;
    auto read_all = Open(read_all_copy, every_segment);
    ASSERT_THAT(read_all, IsOk());
    EXPECT_EQ((*read_all)->Stats().live_keys, (*reopened)->Stats().live_keys);
    ExpectAll(**read_all);
  }
  EXPECT_GT(cuts_during_writes, 0) << "no cut fell among the writes made during the checkpoint";
  EXPECT_GT(cuts_after_writes, 0) << "no cut fell after them";
  std::printf("%d cuts among the writes during the checkpoint, %d after them\n",
              cuts_during_writes, cuts_after_writes);
}

INSTANTIATE_TEST_SUITE_P(Modes, CheckpointTest,
                         ::testing::Values(IndexMode::kHash, IndexMode::kOrdered),
                         [](const auto& info) {
                           return info.param == IndexMode::kHash ? "Hash" : "Ordered";
                         });

// Checkpoint pages over a segment, as ScanSegment sees them: pages 0..14 hold a log of
// `log_generation`, one record each, of which pages [0, checkpoint_pages) were then written over
// by a checkpoint of `checkpoint_generation`; the last page (the free marker) is lost.
struct ScanOfOverwrittenLog {
  SegmentScanResult scan;
  int records = 0;
};
ScanOfOverwrittenLog ScanOverwrittenLog(uint64_t log_generation, uint32_t log_pages,
                                        uint64_t checkpoint_generation, uint32_t checkpoint_first,
                                        uint32_t checkpoint_pages) {
  Geometry g;
  g.page_bytes = kPageBytes;
  g.pages_per_segment = kPagesPerSegment;
  g.segment_count = 4;
  constexpr uint64_t kSeed = 77, kSegment = 2;
  std::vector<std::vector<uint8_t>> pages(kPagesPerSegment, std::vector<uint8_t>(kPageBytes, 0));
  for (uint32_t i = 0; i < log_pages; ++i) {
    PageBuilder builder;
    builder.Start(pages[i].data(), g, PageType::kData, log_generation, i, /*head_sequence=*/i);
    RecordHeader header{};
    header.type = static_cast<uint8_t>(RecordType::kPut);
    header.key_bytes = 4;
    header.value_bytes = 5;
    header.sequence = 100 + i;
    EXPECT_NE(builder.AddRecord(header, "keys", "value"), 0u);
    builder.Finish(kSeed, g.FirstPageOf(kSegment) + i);
  }
  for (uint32_t i = checkpoint_first; i < checkpoint_first + checkpoint_pages; ++i) {
    PageBuilder builder;
    builder.Start(pages[i].data(), g, PageType::kCheckpoint, checkpoint_generation, i, i);
    builder.AddContinuation("checkpoint bytes");
    builder.Finish(kSeed, g.FirstPageOf(kSegment) + i);
  }
  ScanOfOverwrittenLog result;
  result.scan = ScanSegment(
      g, kSeed, kSegment, [&](uint32_t i) { return pages[i].data(); },
      /*assemble_large_values=*/false, [&](const ScannedRecord&) { ++result.records; });
  return result;
}

// A free segment holds stale pages of the logs it held before it was freed; its free markers
// (first and last page) tell them from a new log. A checkpoint written over its first pages
// must tell them apart as well, even when the last page's marker is lost: the stale log is
// older than the checkpoint.
TEST(CheckpointScanTest, CheckpointPagesOverAStaleLogLeaveTheSegmentFree) {
  const ScanOfOverwrittenLog found = ScanOverwrittenLog(/*log_generation=*/5, /*log_pages=*/15,
                                                         /*checkpoint_generation=*/9, 0, 2);
  EXPECT_FALSE(found.scan.in_use) << "the stale log of generation " << found.scan.generation
                                  << " came back";
  EXPECT_EQ(found.records, 0);
  EXPECT_GE(found.scan.max_generation, 9u);
}

// A checkpoint whose marks never reached the map left no floor above its generation, so the
// next Open may give that generation to a head that takes the segment: a log of the
// checkpoint's own generation, over its first pages, is the newer and holds its records.
TEST(CheckpointScanTest, ALogOfTheCheckpointsOwnGenerationOverItIsKept) {
  const ScanOfOverwrittenLog found = ScanOverwrittenLog(/*log_generation=*/9, /*log_pages=*/4,
                                                         /*checkpoint_generation=*/9, 4, 6);
  EXPECT_TRUE(found.scan.in_use);
  EXPECT_EQ(found.scan.generation, 9u);
  EXPECT_EQ(found.records, 4);
}

}  // namespace
}  // namespace nvkv::kv
