// A store on a zoned namespace: the log goes by Zone Append, its pages named by position and read
// through the place table; Open reads the zones back by position and rebuilds the table; compaction
// empties zones by reset; Check reads the metadata zones. Puts, large values, deletes and batches
// read back at once and after reopening, in both index modes, also when the device carries appends
// out and completes them in a shuffled order; and power cuts at seeded points, compaction running,
// never lose an acknowledged durable write.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "kv/engine.h"
#include "kv/metadata_zones.h"
#include "kv/page_format.h"
#include "storage/base/check.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kBlock = 4096;
constexpr uint64_t kZoneBlocks = 128;
constexpr uint64_t kCapacity = 96;
constexpr uint64_t kZones = 40;

// `max_active` zones open or closed at once at most (as many open); 0: no limit.
storage::MemDeviceOptions ZonedOptions(uint32_t max_active = 0) {
  storage::MemDeviceOptions options;
  options.lba_bytes = kBlock;
  options.lba_count = kZones * kZoneBlocks;
  options.zones = {.zone_count = kZones,
                   .zone_blocks = kZoneBlocks,
                   .capacity_blocks = kCapacity,
                   .max_open = max_active,
                   .max_active = max_active,
                   .max_append_blocks = 8};
  return options;
}

Options StoreOptions(bool ordered) {
  Options options;
  options.shard_count = 2;
  options.index_mode = ordered ? IndexMode::kOrdered : IndexMode::kHash;
  return options;
}

std::string ValueOf(int key, int version) {
  // Every 7th key a large value (several pages), the rest small.
  const size_t bytes = key % 7 == 0 ? 3 * kBlock + 100 : 20 + key % 50;
  std::string value(bytes, static_cast<char>('a' + (key + version) % 26));
  value.replace(0, std::min<size_t>(value.size(), 12),
                std::to_string(key) + ":" + std::to_string(version));
  return value;
}

std::string Key(int key) { return "key-" + std::to_string(key); }

absl::Status Put(Engine& engine, const std::string& key, const std::string& value, bool durable) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

absl::Status Delete(Engine& engine, const std::string& key) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
}

// Every key of `model` reads back as its value, and `absent` keys are not found.
void ExpectHolds(Engine& engine, const std::map<std::string, std::string>& model,
                 const std::vector<std::string>& absent) {
  for (const auto& [key, value] : model) {
    absl::StatusOr<std::string> got = engine.Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    ASSERT_EQ(*got, value) << key;
  }
  for (const std::string& key : absent) {
    EXPECT_THAT(engine.Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
  }
}

// Check finds nothing wrong, and reads what it should.
void ExpectChecksClean(Engine& engine) {
  absl::StatusOr<CheckReport> report = engine.Check();
  ASSERT_THAT(report, IsOk());
  for (const std::string& problem : report->problems) ADD_FAILURE() << problem;
  EXPECT_GT(report->segments_in_use, 0u);
  EXPECT_GT(report->live_keys_checked, 0u);
}

class ZonedEngineTest : public ::testing::TestWithParam<bool /*ordered*/> {};

// Writes `rounds` rounds over 300 keys (puts, overwrites, deletes, a batch per round) into an
// engine on `device`, keeping `model`.
void Workload(Engine& engine, int rounds, std::map<std::string, std::string>* model,
              std::vector<std::string>* absent) {
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 300; ++k) {
      if ((k + round) % 11 == 0 && model->count(Key(k)) > 0) {
        ASSERT_THAT(Delete(engine, Key(k)), IsOk());
        model->erase(Key(k));
        absent->push_back(Key(k));
        continue;
      }
      const std::string value = ValueOf(k, round);
      ASSERT_THAT(Put(engine, Key(k), value, /*durable=*/k % 50 == 0), IsOk());
      (*model)[Key(k)] = value;
    }
    std::vector<std::string> keys, values;
    for (int b = 0; b < 5; ++b) {
      keys.push_back("batch-" + std::to_string(round) + "-" + std::to_string(b));
      values.push_back(ValueOf(b + 1, round));
    }
    std::vector<WriteOp> batch;
    for (int b = 0; b < 5; ++b) batch.push_back(WriteOp{false, keys[b], values[b]});
    ASSERT_THAT(engine.Write(batch, /*durable=*/true), IsOk());
    for (int b = 0; b < 5; ++b) (*model)[keys[b]] = values[b];
  }
  std::erase_if(*absent, [&](const std::string& key) { return model->count(key) > 0; });
}

// A store written `rounds` rounds (Workload) on a fresh device of `options` (by default one that
// keeps 4 zones active), read back and closed: its storage, with `model` and `absent` as written.
std::shared_ptr<storage::MemStorage> WrittenAndClosed(
    bool ordered, std::map<std::string, std::string>* model, std::vector<std::string>* absent,
    const storage::MemDeviceOptions& options = ZonedOptions(/*max_active=*/4), int rounds = 3) {
  auto made = storage::MemDevice::Create(options);
  NVKV_CHECK(made.ok());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(ordered));
  EXPECT_THAT(engine, IsOk());
  if (!engine.ok()) return storage;
  Workload(**engine, rounds, model, absent);
  ExpectHolds(**engine, *model, *absent);
  EXPECT_THAT((*engine)->Close(), IsOk());
  return storage;
}

// The superblock copies of the metadata zones on `storage` (made with `options`) as an Open
// finds them.
ZoneSuperblocks CopiesOn(const std::shared_ptr<storage::MemStorage>& storage,
                         const storage::MemDeviceOptions& options = ZonedOptions(4)) {
  auto device = storage::MemDevice::Open(storage, options);
  NVKV_CHECK(device.ok());
  const storage::Buffer chunk = (*device)->buffers().GetChunk();
  absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(**device, chunk);
  (*device)->buffers().PutChunk(chunk);
  NVKV_CHECK(found.ok());
  return *found;
}

// An engine of `options` over `storage` again, on a device of `device_options`.
absl::StatusOr<std::unique_ptr<Engine>> Reopen(
    const std::shared_ptr<storage::MemStorage>& storage, const Options& options,
    const storage::MemDeviceOptions& device_options = ZonedOptions(/*max_active=*/4)) {
  auto device = storage::MemDevice::Open(storage, device_options);
  if (!device.ok()) return device.status();
  return Engine::OpenOnDevice(std::move(*device), options);
}

// The metadata zone the segment map is not in on `storage`, closed: the full one, its copy alone
// or a closing copy after older map pages, while the map's zone is open. nullopt when both are
// full (the map's zone filled up exactly), which the tests below do not expect.
std::optional<uint32_t> IdleMetadataZone(storage::MemStorage& storage) {
  const std::vector<storage::ZoneDescriptor> zones = storage.Report(0, kMetadataZones);
  const bool full[] = {zones[0].state == storage::ZoneState::kFull,
                       zones[1].state == storage::ZoneState::kFull};
  if (full[0] == full[1]) return std::nullopt;
  return full[0] ? 0 : 1;
}

// Flips a byte of the first superblock copy of metadata zone `zone`: it no longer decodes.
void DamageFirstCopy(storage::MemStorage& storage, uint32_t zone) {
  storage.Corrupt(storage.zones().StartOf(zone) * storage.lba_bytes() + 40, 1);
}

// The device keeps only as many zones active as a store of 2 shards needs (4): heads that leave
// zones (a batch or a large value that does not fit, Close) give them back, finishing them.
TEST_P(ZonedEngineTest, WritesReadBackAndSurviveAReopen) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  std::shared_ptr<storage::MemStorage> storage = WrittenAndClosed(GetParam(), &model, &absent);
  ASSERT_FALSE(HasFailure());
  for (int session = 0; session < 2; ++session) {
    SCOPED_TRACE(::testing::Message() << "session " << session);
    auto engine = Reopen(storage, StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    Workload(**engine, 1, &model, &absent);
    ExpectHolds(**engine, model, absent);
    ExpectChecksClean(**engine);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
}

// More than the store's size in overwrites: compaction empties zones by reset and the store
// never fills; what it holds reads back, also after a reopen. The device keeps only as many zones
// active as a store of 2 shards needs (4): heads that leave zones early (each CompactAll makes
// them) finish them.
TEST_P(ZonedEngineTest, CompactionResetsZonesAndTheStoreNeverFills) {
  auto made = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(made, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  {
    auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    // About 130 KiB a round in 300 keys, 120 rounds: 16 MiB into a store of 38 zones of 384
    // KiB (14 MiB), cleaned in the background, and whole once.
    for (int round = 0; round < 120; ++round) {
      ASSERT_NO_FATAL_FAILURE(Workload(**engine, 1, &model, &absent));
      if (round % 30 == 29) {
        ASSERT_THAT((*engine)->CompactAll(), IsOk());
      }
    }
    ExpectHolds(**engine, model, absent);
    ExpectChecksClean(**engine);
    const EngineStats stats = (*engine)->Stats();
    EXPECT_GT(stats.device.zones.resets, 20u);
    EXPECT_EQ(stats.device.zones.resets, stats.segments_cleaned);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = Reopen(storage, StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  ExpectHolds(**engine, model, absent);
  Workload(**engine, 10, &model, &absent);
  ExpectHolds(**engine, model, absent);
}

// Stats on zones: the zones that hold the store (never fewer than the device has written, and at
// most a zone more per head, not written yet), the zones it keeps active (never fewer than the
// device has open or closed, and within its budget), the resets, and the write amplification,
// which on zones is the whole of it: host page bytes per user byte.
// CompactAll cleans every segment that holds dead records, those the heads left just before
// included: a zone left is a victim only once the writer has given it back (its pages landed,
// finished if partly written), and CompactAll waits for that rather than passing the segment by.
TEST_P(ZonedEngineTest, CompactAllCleansTheZonesTheHeadsJustLeft) {
  auto made = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(made, IsOk());
  auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  for (int round = 0; round < 12; ++round) {
    // Every key overwritten: what the last CompactAll sealed (the heads' zones) is all dead.
    for (int k = 0; k < 32; ++k) {
      ASSERT_THAT(Put(**engine, Key(k), std::string(6000, static_cast<char>('a' + round)),
                      /*durable=*/false),
                  IsOk());
    }
    const uint64_t cleaned = (*engine)->Stats().segments_cleaned;
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    if (round > 0) {
      EXPECT_GT((*engine)->Stats().segments_cleaned, cleaned) << "round " << round;
    }
  }
  for (int k = 0; k < 32; ++k) {
    absl::StatusOr<std::string> got = (*engine)->Get(Key(k));
    ASSERT_THAT(got, IsOk()) << Key(k);
    EXPECT_EQ(*got, std::string(6000, 'a' + 11)) << Key(k);
  }
}

TEST_P(ZonedEngineTest, StatsCountTheZonesInUseActiveAndReset) {
  auto made = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(made, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  Options options = StoreOptions(GetParam());
  options.background_compaction = false;  // nothing writes between Stats and the zone report
  auto engine = Engine::OpenOnDevice(std::move(*made), options);
  ASSERT_THAT(engine, IsOk());
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  for (int round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(Workload(**engine, 10, &model, &absent));
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const EngineStats stats = (*engine)->Stats();
    const ::nvkv::ZoneStats& zones = stats.device.zones;
    uint64_t written = 0, active = 0;
    for (const storage::ZoneDescriptor& zone : storage->Report(0, kZones)) {
      written += zone.write_pointer > zone.start || zone.state == storage::ZoneState::kFull;
      active += zone.state == storage::ZoneState::kImplicitlyOpen ||
                zone.state == storage::ZoneState::kExplicitlyOpen ||
                zone.state == storage::ZoneState::kClosed;
    }
    EXPECT_GE(zones.in_use, written);
    EXPECT_LE(zones.in_use, written + options.shard_count);
    EXPECT_EQ(zones.in_use, stats.segments_total - stats.segments_free + kMetadataZones);
    EXPECT_EQ(zones.retired, 0u);
    EXPECT_EQ(zones.active_budget, 4u);
    EXPECT_GE(zones.active, active);
    EXPECT_LE(zones.active, zones.active_budget);
    EXPECT_GT(zones.resets, 0u);
    EXPECT_EQ(zones.resets, stats.segments_cleaned);
    EXPECT_GT(stats.device_bytes_written, stats.user_bytes_written);
    EXPECT_DOUBLE_EQ(stats.write_amplification,
                     static_cast<double>(stats.device_bytes_written) /
                         static_cast<double>(stats.user_bytes_written));
  }
  const uint64_t in_use = (*engine)->Stats().device.zones.in_use;
  ASSERT_THAT((*engine)->Close(), IsOk());
  // A reader writes nothing: it holds the same zones and keeps none active.
  auto device = storage::MemDevice::Open(storage, ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(device, IsOk());
  options.read_only = true;
  auto reader = Engine::OpenOnDevice(std::move(*device), options);
  ASSERT_THAT(reader, IsOk());
  const ::nvkv::ZoneStats zones = (*reader)->Stats().device.zones;
  EXPECT_EQ(zones.in_use, in_use);
  EXPECT_EQ(zones.active, 0u);
  EXPECT_EQ(zones.active_budget, 0u);
}

// The first zone of the log in `state` (from zone `from` on), or none.
std::optional<uint64_t> ZoneIn(storage::MemStorage& storage, storage::ZoneState state,
                               uint64_t from = kMetadataZones) {
  for (const storage::ZoneDescriptor& zone : storage.Report(from, kZones)) {
    if (zone.state == state) return zone.start / kZoneBlocks;
  }
  return std::nullopt;
}

// Zones the device takes out of service, as drives do when their media wear: read-only at Open a
// free one and one holding records (still readable), and while the store runs another holding
// records. The store opens and reads everything, never writes those zones again, and compaction
// moves their records out and retires them instead of resetting them. The old logs stay on the
// read-only zones: an Open that reads every segment finds no deleted key come back from them.
TEST_P(ZonedEngineTest, ZonesTakenOutOfServiceAreRetired) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  std::shared_ptr<storage::MemStorage> storage = WrittenAndClosed(GetParam(), &model, &absent);
  ASSERT_FALSE(HasFailure());
  const std::optional<uint64_t> with_records = ZoneIn(*storage, storage::ZoneState::kFull);
  const std::optional<uint64_t> empty = ZoneIn(*storage, storage::ZoneState::kEmpty);
  ASSERT_TRUE(with_records.has_value() && empty.has_value());
  storage->RetireZone(*with_records, storage::ZoneState::kReadOnly);
  storage->RetireZone(*empty, storage::ZoneState::kReadOnly);
  {
    auto engine = Reopen(storage, StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().device.zones.retired, 1u) << "the free one, at Open";
    ExpectHolds(**engine, model, absent);
    for (int round = 0; round < 4; ++round) {
      ASSERT_NO_FATAL_FAILURE(Workload(**engine, 10, &model, &absent));
      ASSERT_THAT((*engine)->CompactAll(), IsOk());
      if (round == 1) {
        // One more, full of records, while the store runs.
        const std::optional<uint64_t> more =
            ZoneIn(*storage, storage::ZoneState::kFull, *with_records + 1);
        ASSERT_TRUE(more.has_value());
        storage->RetireZone(*more, storage::ZoneState::kReadOnly);
      }
    }
    ExpectHolds(**engine, model, absent);
    ExpectChecksClean(**engine);
    EXPECT_EQ((*engine)->Stats().device.zones.retired, 3u)
        << "the zones with records, once compaction moved them out";
    // Deleted now, and compacted: their tombstones must stay while old records of theirs do.
    for (int k = 0; k < 300; k += 3) {
      ASSERT_THAT(Delete(**engine, Key(k)), IsOk());
      model.erase(Key(k));
      absent.push_back(Key(k));
    }
    for (int round = 0; round < 3; ++round) {
      ASSERT_NO_FATAL_FAILURE(Workload(**engine, 5, &model, &absent));
      ASSERT_THAT((*engine)->CompactAll(), IsOk());
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  {
    // A reader retires the out-of-service zones too, and check finds nothing wrong with them.
    Options reader = StoreOptions(GetParam());
    reader.read_only = true;
    auto engine = Reopen(storage, reader);
    ASSERT_THAT(engine, IsOk());
    ExpectChecksClean(**engine);
  }
  {
    auto engine = Reopen(storage, StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    Workload(**engine, 5, &model, &absent);
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ExpectHolds(**engine, model, absent);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  // An Open that reads every segment (as one does when the map says nothing) reads the old logs
  // the read-only zones keep: no deleted key comes back from them, nor an older value.
  auto device = storage::MemDevice::Open(storage, ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(device, IsOk());
  auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(GetParam()),
                                     EngineSeams{.recovery_reads_all = true});
  ASSERT_THAT(engine, IsOk());
  ExpectHolds(**engine, model, absent);
}

// A free zone the device took offline at Open: retired (a reader too), never written; the store
// writes, compacts, checks clean and reopens.
TEST_P(ZonedEngineTest, AnOfflineFreeZoneIsRetired) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  std::shared_ptr<storage::MemStorage> storage = WrittenAndClosed(GetParam(), &model, &absent);
  ASSERT_FALSE(HasFailure());
  const std::optional<uint64_t> empty = ZoneIn(*storage, storage::ZoneState::kEmpty);
  ASSERT_TRUE(empty.has_value());
  storage->RetireZone(*empty, storage::ZoneState::kOffline);
  for (const bool read_only : {true, false, false}) {
    Options options = StoreOptions(GetParam());
    options.read_only = read_only;
    auto engine = Reopen(storage, options);
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().device.zones.retired, 1u);
    ExpectHolds(**engine, model, absent);
    if (!read_only) {
      ASSERT_NO_FATAL_FAILURE(Workload(**engine, 20, &model, &absent));
      ASSERT_THAT((*engine)->CompactAll(), IsOk());
      ExpectHolds(**engine, model, absent);
    }
    ExpectChecksClean(**engine);
  }
  EXPECT_EQ(storage->Report(*empty, 1)[0].state, storage::ZoneState::kOffline);
  // An Open that reads every segment (as one does when the map says nothing) cannot read the
  // offline zone: refused as for any pages the device cannot read, naming them; degraded, it
  // goes on without them.
  for (const bool degraded : {false, true}) {
    auto device = storage::MemDevice::Open(storage, ZonedOptions(/*max_active=*/4));
    ASSERT_THAT(device, IsOk());
    Options options = StoreOptions(GetParam());
    options.open_degraded = degraded;
    auto engine = Engine::OpenOnDevice(std::move(*device), options,
                                       EngineSeams{.recovery_reads_all = true});
    if (!degraded) {
      EXPECT_THAT(engine, StatusIs(absl::StatusCode::kUnavailable, "Zone Is Offline"));
      // Not "open it again once the device reads them": an offline zone's data is gone.
      EXPECT_THAT(engine, StatusIs(absl::StatusCode::kUnavailable,
                                   "they lie in a zone the device took offline, which never "
                                   "reads again: open with Options::open_degraded"));
      continue;
    }
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    EXPECT_EQ((*engine)->Stats().device.zones.retired, 1u);
  }
}

// A cut between a metadata zone's start and its finish (a format's, or a move's) leaves it
// active: Open finishes it, so that the heads have the zones the budget counts on.
TEST_P(ZonedEngineTest, OpenFinishesAMetadataZoneACutLeftActive) {
  auto made = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(made, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  {
    auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  // Zone 1 as a format cut before its finish leaves it: its copy alone, the zone open.
  const std::vector<uint8_t> copy1 = storage->CopyOut(kZoneBlocks, 1);
  ASSERT_THAT(storage->ResetZone(kZoneBlocks), IsOk());
  ASSERT_THAT(storage->Append(kZoneBlocks, 1, copy1.data()), IsOk());
  ASSERT_EQ(storage->Report(1, 1)[0].state, storage::ZoneState::kImplicitlyOpen);
  auto engine = Reopen(storage, StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ(storage->Report(1, 1)[0].state, storage::ZoneState::kFull);
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  Workload(**engine, 3, &model, &absent);
  ExpectHolds(**engine, model, absent);
}

// Check on zones: the superblock copies at the metadata zones' starts, the map's newest copies,
// and a note of the zones' states against the device's active limit; a damaged copy is a problem
// (the store still opens from the other) until a writer's Open writes it again.
TEST_P(ZonedEngineTest, CheckReadsTheMetadataZonesAndReportsTheZones) {
  auto made = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(made, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  {
    auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    Workload(**engine, 2, &model, &absent);
    absl::StatusOr<CheckReport> report = (*engine)->Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->ok()) << report->problems.front();
    EXPECT_EQ(report->pages_scanned, report->pages_valid + report->pages_in_holes +
                                         report->pages_stale + report->pages_unwritten +
                                         report->pages_unreadable);
    bool zones_noted = false;
    for (const std::string& note : report->notes) {
      zones_noted = zones_noted || absl::StrContains(note, "active of the 4 the device keeps");
    }
    EXPECT_TRUE(zones_noted);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  DamageFirstCopy(*storage, 1);
  for (const bool read_only : {true, false}) {
    SCOPED_TRACE(read_only ? "a reader" : "a writer");
    Options options = StoreOptions(GetParam());
    options.read_only = read_only;
    auto engine = Reopen(storage, options);
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    absl::StatusOr<CheckReport> report = (*engine)->Check();
    ASSERT_THAT(report, IsOk());
    if (read_only) {
      ASSERT_EQ(report->problems.size(), 1u);
      EXPECT_THAT(report->problems[0], ::testing::HasSubstr("superblock copy 1"));
    } else {
      EXPECT_TRUE(report->ok()) << report->problems.front();
    }
  }
}

// A damaged superblock copy in the metadata zone the map is not in is written again by the next
// writer's Open (the map's zone holds a good copy and every map page, so that zone may be reset):
// the store then survives a second damage, to the other copy.
TEST_P(ZonedEngineTest, OpenWritesADamagedCopyInTheIdleMetadataZoneAgain) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  std::shared_ptr<storage::MemStorage> storage = WrittenAndClosed(GetParam(), &model, &absent);
  const std::optional<uint32_t> idle = IdleMetadataZone(*storage);
  ASSERT_TRUE(idle.has_value());
  DamageFirstCopy(*storage, *idle);
  ASSERT_FALSE(CopiesOn(storage).copies[*idle].ok());
  {
    auto engine = Reopen(storage, StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const ZoneSuperblocks copies = CopiesOn(storage);
  EXPECT_THAT(copies.copies[*idle], IsOk());
  EXPECT_FALSE(copies.closing[*idle]) << "its first copy, written again";
  EXPECT_EQ(storage->Report(*idle, 1)[0].state, storage::ZoneState::kFull)
      << "the copy alone, finished: not among the active zones";
  DamageFirstCopy(*storage, 1 - *idle);
  auto engine = Reopen(storage, StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  ExpectHolds(**engine, model, absent);
}

// A device of 512-byte blocks, zones as ZonedOptions(4)'s in bytes: a 4 KiB page is 8 blocks, so a
// cut can tear an append part way.
storage::MemDeviceOptions SmallBlockOptions() {
  storage::MemDeviceOptions options;
  options.lba_bytes = 512;
  options.zones = {.zone_count = kZones,
                   .zone_blocks = kZoneBlocks * 8,
                   .capacity_blocks = kCapacity * 8,
                   .max_open = 4,
                   .max_active = 4,
                   .max_append_blocks = 64};
  options.lba_count = options.zones.zone_count * options.zones.zone_blocks;
  return options;
}

// A map append a cut tore part way leaves the map's zone's write pointer off a page boundary. A
// writer's Open fills that page up with zeros and the map goes on after it, the zone keeping its
// last pages for its closing copy: so with the zone's first copy damaged as well, the map can
// still move out (ADamagedCopyInTheMapsZoneMovesTheMapOutAtOpen), and the store goes on.
TEST_P(ZonedEngineTest, AMapAppendACutToreLeavesRoomForTheClosingCopy) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  const std::shared_ptr<storage::MemStorage> storage =
      WrittenAndClosed(GetParam(), &model, &absent, SmallBlockOptions(), /*rounds=*/1);
  const std::optional<uint32_t> idle = IdleMetadataZone(*storage);
  ASSERT_TRUE(idle.has_value());
  const uint32_t map_zone = 1 - *idle;
  // The first 3 blocks of a map page's 8, as a cut tears an append.
  const std::vector<uint8_t> torn(3 * 512, 0xab);
  ASSERT_THAT(storage->Append(storage->zones().StartOf(map_zone), 3, torn.data()), IsOk());
  DamageFirstCopy(*storage, map_zone);
  for (int reopen = 0; reopen < 2; ++reopen) {
    auto engine = Reopen(storage, StoreOptions(GetParam()), SmallBlockOptions());
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    Workload(**engine, 1, &model, &absent);
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
    if (reopen == 0) {
      EXPECT_EQ(IdleMetadataZone(*storage), map_zone) << "the map moved out";
    }
    const ZoneSuperblocks copies = CopiesOn(storage, SmallBlockOptions());
    EXPECT_THAT(copies.copies[0], IsOk());
    EXPECT_THAT(copies.copies[1], IsOk());
  }
}

// A damaged first copy in the map's own zone cannot be written again in place: a writer's Open
// fills that zone up to the pages kept for its closing copy and moves the map out, the zone's
// closing copy first, and then writes the first copy again (it is the idle zone now). Both copies
// decode afterwards: a second damage, to the other zone's copy, loses nothing.
TEST_P(ZonedEngineTest, ADamagedCopyInTheMapsZoneMovesTheMapOutAtOpen) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  std::shared_ptr<storage::MemStorage> storage = WrittenAndClosed(GetParam(), &model, &absent);
  const std::optional<uint32_t> idle = IdleMetadataZone(*storage);
  ASSERT_TRUE(idle.has_value());
  const uint32_t map_zone = 1 - *idle;
  DamageFirstCopy(*storage, map_zone);
  {
    auto engine = Reopen(storage, StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  EXPECT_EQ(IdleMetadataZone(*storage), map_zone) << "the map moved out";
  const ZoneSuperblocks copies = CopiesOn(storage);
  EXPECT_THAT(copies.copies[0], IsOk());
  EXPECT_THAT(copies.copies[1], IsOk());
  EXPECT_FALSE(copies.closing[map_zone]) << "its first copy, written again";
  DamageFirstCopy(*storage, *idle);
  auto engine = Reopen(storage, StoreOptions(GetParam()));
  ASSERT_THAT(engine, IsOk());
  ExpectHolds(**engine, model, absent);
  Workload(**engine, 1, &model, &absent);
  ExpectHolds(**engine, model, absent);
}

// Opens an engine of `ordered` mode on `storage` (a device of `options`) through a fault device
// of `seed` that `arm` sets up first, and closes it if it opened: the faults it met.
storage::FaultStats OpenThroughFaults(
    const std::shared_ptr<storage::MemStorage>& storage, const storage::MemDeviceOptions& options,
    bool ordered, uint64_t seed,
    const std::function<absl::Status(storage::FaultDevice&)>& arm) {
  auto inner = storage::MemDevice::Open(storage, options);
  NVKV_CHECK(inner.ok());
  auto fault = storage::FaultDevice::Create(std::move(*inner), {.seed = seed});
  NVKV_CHECK(fault.ok());
  // A queue of the device's family that outlives an engine whose Open failed.
  auto witness = (*fault)->OpenQueue(storage::QueueOptions{});
  NVKV_CHECK(witness.ok());
  auto* faults = static_cast<storage::FaultDevice*>(witness->get());
  NVKV_CHECK(arm(*faults).ok());
  auto engine = Engine::OpenOnDevice(std::move(*fault), StoreOptions(ordered));
  if (engine.ok()) (void)(*engine)->Close();
  return faults->fault_stats();
}

// Opens cut by a power failure at each of their operations in turn while the first superblock
// copy of the idle metadata zone, or of the map's (`in_map_zone`), is damaged: after each, the
// next Open opens the store, loses nothing, and leaves a copy that decodes in each zone.
void CutOpensWhileACopyIsDamaged(bool ordered, bool in_map_zone) {
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  const std::shared_ptr<storage::MemStorage> damaged = WrittenAndClosed(ordered, &model, &absent);
  const std::optional<uint32_t> idle = IdleMetadataZone(*damaged);
  ASSERT_TRUE(idle.has_value());
  DamageFirstCopy(*damaged, in_map_zone ? 1 - *idle : *idle);
  int cuts = 0;
  for (uint64_t cut_after = 1;; ++cut_after) {
    SCOPED_TRACE(::testing::Message() << (in_map_zone ? "the map's zone" : "the idle zone")
                                      << ", cut after " << cut_after << " operations");
    const std::shared_ptr<storage::MemStorage> storage = CopyOf(*damaged);
    const uint64_t cut =
        OpenThroughFaults(storage, ZonedOptions(/*max_active=*/4), ordered, cut_after,
                          [&](storage::FaultDevice& faults) {
                            return faults.SetCutAfterOperations(cut_after);
                          })
            .cuts;
    auto engine = Reopen(storage, StoreOptions(ordered));
    ASSERT_THAT(engine, IsOk());
    ExpectHolds(**engine, model, absent);
    ASSERT_THAT((*engine)->Close(), IsOk());
    const ZoneSuperblocks copies = CopiesOn(storage);
    EXPECT_THAT(copies.copies[0], IsOk());
    EXPECT_THAT(copies.copies[1], IsOk());
    if (cut == 0) break;  // the Open and its Close ran whole: every operation was cut once
    ++cuts;
  }
  EXPECT_GT(cuts, 10);
}

// The Open that writes a damaged copy again (above), cut anywhere, even inside the copy's reset,
// append and finish, and in the map's zone inside its filling and the map's move.
TEST_P(ZonedEngineTest, AnOpenCutWhileItWritesACopyAgainOpensAfterwards) {
  CutOpensWhileACopyIsDamaged(GetParam(), /*in_map_zone=*/false);
  CutOpensWhileACopyIsDamaged(GetParam(), /*in_map_zone=*/true);
}

// The Open that moves the map out of a zone whose first copy is damaged (above), each of its
// writes in turn torn part way (its last 3 sectors written, its start lost, then an error):
// among them the closing copy's own append, the copy that was to stand in for the damaged one.
// The next Open for writing opens all the same, loses nothing, and leaves a copy that decodes in
// each zone: a torn closing copy leaves room for another (FORMAT.md "The segment map's log").
TEST_P(ZonedEngineTest, AnOpenWhoseWritesTearOpensForWritingAfterwards) {
  for (const bool small_blocks : {false, true}) {
    const storage::MemDeviceOptions options =
        small_blocks ? SmallBlockOptions() : ZonedOptions(/*max_active=*/4);
    std::map<std::string, std::string> model;
    std::vector<std::string> absent;
    const std::shared_ptr<storage::MemStorage> damaged =
        WrittenAndClosed(GetParam(), &model, &absent, options, /*rounds=*/1);
    const std::optional<uint32_t> idle = IdleMetadataZone(*damaged);
    ASSERT_TRUE(idle.has_value());
    DamageFirstCopy(*damaged, 1 - *idle);
    int torn = 0;
    for (uint64_t nth = 1;; ++nth) {
      SCOPED_TRACE(::testing::Message() << (small_blocks ? "512-byte" : "4 KiB")
                                        << " blocks, write " << nth << " of the Open torn");
      const std::shared_ptr<storage::MemStorage> storage = CopyOf(*damaged);
      const uint64_t injected =
          OpenThroughFaults(storage, options, GetParam(), nth,
                            [&](storage::FaultDevice& faults) {
                              return faults.FailOperation(
                                  {.nth = nth,
                                   .filter = storage::OpFilter::kWrite,
                                   .error = storage::FaultError::kIoError,
                                   .partial = storage::PartialWrite::kSuffix,
                                   .sectors = 3});
                            })
              .faults_injected;
      auto engine = Reopen(storage, StoreOptions(GetParam()), options);
      ASSERT_THAT(engine, IsOk());
      ExpectHolds(**engine, model, absent);
      std::map<std::string, std::string> written = model;
      std::vector<std::string> gone = absent;
      Workload(**engine, 1, &written, &gone);
      ASSERT_THAT((*engine)->Close(), IsOk());
      const ZoneSuperblocks copies = CopiesOn(storage, options);
      EXPECT_THAT(copies.copies[0], IsOk());
      EXPECT_THAT(copies.copies[1], IsOk());
      if (injected == 0) break;  // the Open ran whole: each of its writes was torn once
      ++torn;
    }
    EXPECT_GT(torn, 3);
  }
}

// The fault device carries zone appends out in a seeded order and completes them shuffled: pages
// land apart from their positions, and are read where they landed, now and after a reopen.
TEST_P(ZonedEngineTest, PagesThatLandApartReadBackWhereTheyLanded) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    auto inner = storage::MemDevice::Create(ZonedOptions());
    ASSERT_THAT(inner, IsOk());
    std::shared_ptr<storage::MemStorage> storage = (*inner)->storage();
    std::map<std::string, std::string> model;
    std::vector<std::string> absent;
    uint64_t place_runs = 0;
    {
      auto fault = storage::FaultDevice::Create(std::move(*inner), {.seed = seed});
      ASSERT_THAT(fault, IsOk());
      auto engine =
          Engine::OpenOnDevice(std::move(*fault), StoreOptions(GetParam()));
      ASSERT_THAT(engine, IsOk());
      Workload(**engine, 2, &model, &absent);
      ExpectHolds(**engine, model, absent);
      place_runs = (*engine)->Stats().device.zones.place_runs;
      EXPECT_GT(place_runs, 0u) << "no page landed apart: the test tests nothing";
      ASSERT_THAT((*engine)->Close(), IsOk());
    }
    auto device = storage::MemDevice::Open(storage, ZonedOptions());
    ASSERT_THAT(device, IsOk());
    auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().device.zones.place_runs, place_runs)
        << "Open rebuilds the same runs from the pages";
    ExpectHolds(**engine, model, absent);
  }
}

// Power cuts at seeded points of a run of durable puts: every put acknowledged before the cut
// reads back after it (its value, or a later one of the same key the cut may have kept).
TEST_P(ZonedEngineTest, PowerCutsNeverLoseAnAcknowledgedDurablePut) {
  int cuts = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    auto inner = storage::MemDevice::Create(ZonedOptions());
    ASSERT_THAT(inner, IsOk());
    std::shared_ptr<storage::MemStorage> storage = inner.value()->storage();
    std::map<std::string, std::vector<std::string>> written;  // per key, values in order
    std::map<std::string, size_t> acknowledged;               // index into written[key]
    {
      auto fault = storage::FaultDevice::Create(std::move(*inner), {.seed = seed});
      ASSERT_THAT(fault, IsOk());
      storage::FaultDevice* faults = fault->get();
      auto engine =
          Engine::OpenOnDevice(std::move(*fault), StoreOptions(GetParam()));
      ASSERT_THAT(engine, IsOk());
      ASSERT_THAT(faults->SetCutAfterOperations(20 + seed * 7), IsOk());
      for (int i = 0; i < 400; ++i) {
        const std::string key = Key(i % 90);
        const std::string value = ValueOf(i % 90, i);
        written[key].push_back(value);
        if (!Put(**engine, key, value, /*durable=*/true).ok()) break;
        acknowledged[key] = written[key].size() - 1;
        // Zones emptied while the puts go on (a cut may come inside a reset's run).
        if (i % 100 == 99 && !(*engine)->CompactAll().ok()) break;
      }
      cuts += static_cast<int>(faults->fault_stats().cuts);
      (void)(*engine)->Close();
    }
    auto device = storage::MemDevice::Open(storage, ZonedOptions());
    ASSERT_THAT(device, IsOk());
    auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(GetParam()));
    ASSERT_THAT(engine, IsOk());
    for (const auto& [key, index] : acknowledged) {
      absl::StatusOr<std::string> got = (*engine)->Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      const std::vector<std::string>& values = written[key];
      EXPECT_TRUE(std::find(values.begin() + static_cast<ptrdiff_t>(index), values.end(), *got) !=
                  values.end())
          << key << ": read a value older than the acknowledged one";
    }
    // The reopened store goes on.
    ASSERT_THAT(Put(**engine, "after", "the cut", true), IsOk());
    EXPECT_THAT((*engine)->Get("after"), IsOk());
  }
  EXPECT_GT(cuts, 20);
}

// A namespace that cannot hold the shards asked for is refused with the numbers.
TEST(ZonedEngineOpenTest, TooFewActiveZonesForTheShardsAreRefused) {
  auto device = storage::MemDevice::Create(ZonedOptions(/*max_active=*/4));
  ASSERT_THAT(device, IsOk());
  Options options = StoreOptions(false);
  options.shard_count = 4;
  EXPECT_THAT(Engine::OpenOnDevice(std::move(*device), options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "4 shards need 6 (one a shard, one for the segment map, one spare): open "
                       "with at most 2 shards"));
}

// Zones larger than the reads Open keeps in flight (8 MiB writable here, where Open's queue has 8
// chunks of at most 508 KiB): Open reads a segment whole, so its queue takes a segment's chunks.
TEST(ZonedEngineOpenTest, AStoreOnZonesOfSeveralMiBReopens) {
  storage::MemDeviceOptions options;
  options.lba_bytes = kBlock;
  options.zones = {.zone_count = 12, .zone_blocks = 2048, .capacity_blocks = 2048,
                   .max_append_blocks = 32};
  options.lba_count = options.zones.zone_count * options.zones.zone_blocks;
  auto made = storage::MemDevice::Create(options);
  ASSERT_THAT(made, IsOk());
  std::shared_ptr<storage::MemStorage> storage = (*made)->storage();
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  {
    auto engine = Engine::OpenOnDevice(std::move(*made), StoreOptions(false));
    ASSERT_THAT(engine, IsOk());
    Workload(**engine, 2, &model, &absent);
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto device = storage::MemDevice::Open(storage, options);
  ASSERT_THAT(device, IsOk());
  auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(false));
  ASSERT_THAT(engine, IsOk());
  ExpectHolds(**engine, model, absent);
}

// Checkpoints are not built on zones: refused, and the store goes on.
TEST(ZonedEngineOpenTest, ACheckpointIsRefusedOnZones) {
  auto device = storage::MemDevice::Create(ZonedOptions());
  ASSERT_THAT(device, IsOk());
  auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(false));
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "k", "v", true), IsOk());
  EXPECT_THAT((*engine)->Checkpoint(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no checkpoints on a zoned store"));
  EXPECT_THAT((*engine)->Get("k"), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Modes, ZonedEngineTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Ordered" : "Hash"; });

}  // namespace
}  // namespace nvkv::kv
