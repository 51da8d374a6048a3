// Data safety: acknowledged writes survive damaged pages, compaction and a change of index
// mode, and a read never returns a value that is not the latest one. Each test sets up the
// store on a MemDevice whose bytes it can damage (MemStorage::Corrupt) while the engine runs or
// between opens, and places records deterministically: one shard, durable puts (each written
// on its own page) and values of 3,000 bytes (one record per 4 KiB page), so that page i of a
// segment holds the i-th write. On a conventional device and on a zoned one (a zone of 32
// blocks, 16 of them writable, per segment; appends land in order), where what a test forges
// means the same.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"
#include "xxhash.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::FaultDevice;
using storage::MemDevice;
using storage::MemDeviceOptions;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint64_t kSegments = 32;

MemDeviceOptions MemOptions(Layout layout) {
  return layout == Layout::kZoned ? ZonedMemStoreOptions(kSegments, kPagesPerSegment, kPageBytes)
                                  : MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes);
}

// These tests forge, after a clean Close, what a crash or the media leaves in the log; a crash
// leaves no checkpoint (kv/checkpoint.h), so none is written.
constexpr EngineSeams kSeams{.checkpoint_at_close = false};

Options StoreOptions(IndexMode mode = IndexMode::kHash) {
  Options options;
  options.segment_bytes = kPagesPerSegment * kPageBytes;  // a zone's writable part on zones
  options.shard_count = 1;
  options.page_buffers_per_shard = 16;
  options.index_mode = mode;
  options.background_compaction = false;  // no I/O the test did not ask for
  // What damaged pages do to reads is what these tests are about: no record cache answers in
  // front of the device (cache_test.cc and the crash test run with one).
  options.cache_bytes = 0;
  return options;
}


// A value that fills most of a page: one record per page.
std::string BigValue(int i) { return absl::StrCat("v", i, "-", std::string(3000, 'a' + i % 26)); }
std::string Key(int i) { return absl::StrCat("key-", i); }

absl::Status Put(Engine& engine, std::string_view key, std::string_view value,
                 bool durable = true) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

absl::Status Delete(Engine& engine, std::string_view key, bool durable = true) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

class DataSafetyTest : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    auto storage = storage::MemStorage::Create(MemOptions().lba_bytes, MemOptions().lba_count,
                                               MemOptions().zones);
    ASSERT_THAT(storage, IsOk());
    storage_ = *storage;
  }

  bool zoned() const { return GetParam() == Layout::kZoned; }
  MemDeviceOptions MemOptions() const { return nvkv::kv::MemOptions(GetParam()); }

  // The block of page `index` of `segment` (FORMAT.md): conventional, segment s starts at
  // 2 + s * pages; zoned, at its zone (the metadata zones first), where the appends land in
  // order.
  uint64_t PageNumber(uint64_t segment, uint32_t index) const {
    if (zoned()) return (kMetadataZones + segment) * 2 * kPagesPerSegment + index;
    return kSuperblockPages + segment * kPagesPerSegment + index;
  }

  std::unique_ptr<Engine> Open(const Options& options = StoreOptions()) {
    auto mem = MemDevice::Open(storage_, MemOptions());
    EXPECT_THAT(mem, IsOk());
    auto engine = Engine::OpenOnDevice(std::move(*mem), options, kSeams);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // Flips bytes in the middle of a page: its checksum no longer matches.
  void DamagePage(uint64_t page_number) {
    storage_->Corrupt(page_number * kPageBytes + 1000, 16);
  }

  // Writes keys [first, first + count) durably, one page each.
  static void PutPages(Engine& engine, int first, int count) {
    for (int i = first; i < first + count; ++i) {
      ASSERT_THAT(Put(engine, Key(i), BigValue(i)), IsOk()) << i;
    }
  }

  // The keys of the batch WriteBatchOfThreePages writes.
  static std::vector<std::string> BatchKeys() {
    std::vector<std::string> keys;
    for (int i = 0; i < 6; ++i) keys.push_back(absl::StrCat("batch-", i));
    return keys;
  }

  // A durable batch of six records of ~1,830 bytes: two per page, three pages.
  static void WriteBatchOfThreePages(Engine& engine) {
    const std::vector<std::string> keys = BatchKeys();
    const std::string value(1800, 'b');
    std::vector<WriteOp> ops;
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
    ASSERT_THAT(engine.Write(ops, /*durable=*/true), IsOk());
  }

  // The store over a FaultDevice that loses every unflushed write at a power cut; *device
  // points at it.
  std::unique_ptr<Engine> OpenLosingUnflushedWrites(const Options& options,
                                                    FaultDevice** device) {
    auto mem = MemDevice::Open(storage_, MemOptions());
    EXPECT_THAT(mem, IsOk());
    storage::FaultDeviceOptions fault_options;
    fault_options.keep_weight = 0;
    fault_options.tear_weight = 0;
    auto fault = FaultDevice::Create(std::move(*mem), fault_options);
    EXPECT_THAT(fault, IsOk());
    *device = fault->get();
    auto engine = Engine::OpenOnDevice(std::move(*fault), options, kSeams);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  std::shared_ptr<storage::MemStorage> storage_;
};

// --- Recovery across damaged pages ---

TEST_P(DataSafetyTest, RecoveryContinuesPastADamagedPageInTheMiddleOfASegment) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 12);  // segment 0, pages 0..11
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(0, 5));
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 12; ++i) {
    auto got = engine->Get(Key(i));
    if (i == 5) {
      EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kNotFound)) << i;
    } else {
      ASSERT_THAT(got, IsOk()) << i;
      EXPECT_EQ(*got, BigValue(i)) << i;
    }
  }
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.recovery_damaged_pages, 1u);
  auto report = engine->Check();
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->pages_in_holes, 1u);
  EXPECT_FALSE(report->ok());
}

TEST_P(DataSafetyTest, SegmentWhoseFirstPageIsDamagedIsRecoveredAndNotReused) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 16);  // fills segment 0
    PutPages(*engine, 16, 8);  // segment 1, pages 0..7
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(1, 0));
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    for (int i = 17; i < 24; ++i) {
      auto got = engine->Get(Key(i));
      ASSERT_THAT(got, IsOk()) << i;
      EXPECT_EQ(*got, BigValue(i));
    }
    // Writes after the reopen must not land on segment 1 (it is not free).
    PutPages(*engine, 100, 40);
    ASSERT_THAT(engine->Close(), IsOk());
  }
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (int i = 17; i < 24; ++i) {
    auto got = engine->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, BigValue(i));
  }
}

TEST_P(DataSafetyTest, DamagedFirstPageDoesNotBringADeletedKeyBack) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    ASSERT_THAT(Put(*engine, "doomed", "value"), IsOk());  // segment 0, page 0
    PutPages(*engine, 0, 15);                               // fills segment 0
    PutPages(*engine, 15, 1);                               // segment 1, page 0
    ASSERT_THAT(Delete(*engine, "doomed"), IsOk());         // segment 1, page 1
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(1, 0));
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("doomed").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(DataSafetyTest, BatchStraddlingAHoleIsDroppedWholeAndLaterRecordsSurvive) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 2);          // pages 0, 1
    WriteBatchOfThreePages(*engine);  // pages 2..4
    PutPages(*engine, 2, 3);          // pages 5..7
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(0, 3));  // the batch's middle page
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(engine->Get(absl::StrCat("batch-", i)).status(),
                StatusIs(absl::StatusCode::kNotFound))
        << i;
  }
  for (int i = 0; i < 5; ++i) {
    auto got = engine->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, BigValue(i));
  }
  EXPECT_EQ(engine->Stats().recovery_batches_discarded, 1u);
}

TEST_P(DataSafetyTest, BatchWhoseFirstPageIsDamagedIsDroppedWhole) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 2);          // pages 0, 1
    WriteBatchOfThreePages(*engine);  // pages 2..4
    PutPages(*engine, 2, 3);          // pages 5..7
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(0, 2));  // the batch's first page: its tail must not apply alone
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(engine->Get(absl::StrCat("batch-", i)).status(),
                StatusIs(absl::StatusCode::kNotFound))
        << i;
  }
  for (int i = 0; i < 5; ++i) EXPECT_THAT(engine->Get(Key(i)), IsOk()) << i;
}

// --- Compaction of a segment with a damaged page ---

TEST_P(DataSafetyTest, CompactionLeavesRecordsAfterADamagedPageInPlace) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  PutPages(*engine, 0, 16);  // segment 0, pages 0..15
  PutPages(*engine, 0, 4);   // overwrites: pages 0..3 of segment 0 are garbage
  DamagePage(PageNumber(0, 6));
  ASSERT_THAT(engine->CompactAll(), IsOk());
  // Reuse every free segment: if segment 0 had been freed, its records would be overwritten.
  PutPages(*engine, 1000, 3 * kPagesPerSegment);
  for (int i = 0; i < 16; ++i) {
    auto got = engine->Get(Key(i));
    if (i == 6) {
      EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kDataLoss));
      continue;
    }
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, BigValue(i)) << i;
  }
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.segments_retained, 1u);
  EXPECT_GE(stats.compaction_damaged_pages, 1u);
  // Repairing the damaged key lets compaction free the segment on a later pass.
  ASSERT_THAT(Put(*engine, Key(6), "repaired"), IsOk());
  ASSERT_THAT(engine->CompactAll(), IsOk());
  EXPECT_EQ(engine->Stats().segments_retained, 0u);
  for (int i = 0; i < 16; ++i) {
    auto got = engine->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, i == 6 ? "repaired" : BigValue(i)) << i;
  }
}

// Live bytes are an estimate that can drift: here settling a stale entry subtracts the size of
// the newest record of its key on its page, which is a record of a batch a crash cut (dropped),
// larger than the indexed one by exactly the size of another key's record, on a page damaged
// since. The victim's count reaches 0 while that key's entry still points into it: compaction
// must keep the segment (the index, not the count, says whether anything points into it).
TEST_P(DataSafetyTest, CompactionKeepsAVictimAnIndexEntryPointsIntoWhenItsLiveBytesReachZero) {
  const std::string z_value(3000, 'z');
  const std::string a_before(100, 'a');
  // The cut batch's record of "a" is larger than the one before it by "z"'s record.
  const std::string a_in_batch(
      RecordBytes(1, a_before.size()) + RecordBytes(1, z_value.size()) - RecordBytes(1, 0), 'X');
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    ASSERT_THAT(Put(*engine, "z", z_value), IsOk());                           // page 0
    ASSERT_THAT(Put(*engine, "a", a_before, /*durable=*/false), IsOk());       // page 1
    std::vector<WriteOp> ops{WriteOp{false, "a", a_in_batch}};                 // page 1 too
    const std::vector<std::string> keys = BatchKeys();
    const std::string value(1800, 'b');
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});  // pages 2..4
    ASSERT_THAT(engine->Write(ops, /*durable=*/true), IsOk());
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(0, 4));  // the batch's end never landed
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  ASSERT_EQ(engine->Stats().recovery_batches_discarded, 1u);
  ASSERT_EQ(engine->Get("a").value_or("?"), a_before);
  // A blind overwrite (no cache) leaves "a"'s entry on page 1 stale for compaction to settle.
  ASSERT_THAT(Put(*engine, "a", "after"), IsOk());
  DamagePage(PageNumber(0, 0));  // "z" stays indexed where compaction cannot read it
  ASSERT_THAT(engine->CompactAll(), IsOk());
  EXPECT_EQ(engine->Stats().segments_retained, 1u) << "segment 0 was freed under \"z\"'s entry";
  // Reuse every free segment: had segment 0 been freed, "z"'s page would hold another log.
  PutPages(*engine, 1000, 3 * kPagesPerSegment);
  EXPECT_THAT(engine->Get("z").status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(engine->Get("a").value_or("?"), "after");
}

// --- Index modes ---

// Two keys whose hash-index tags are equal and that fall in the same shard (found by brute
// force: 32-bit tags collide among ~2^16 keys).
std::pair<std::string, std::string> KeysWithOneTag(uint32_t shard_count) {
  std::map<std::pair<uint32_t, uint32_t>, std::string> seen;
  for (uint64_t i = 0;; ++i) {
    std::string key = absl::StrCat("tag-", i);
    const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
    const uint32_t tag = static_cast<uint32_t>(h.low64);
    const uint32_t shard = static_cast<uint32_t>(((h.high64 >> 32) * shard_count) >> 32);
    auto [it, inserted] = seen.emplace(std::make_pair(tag, shard), key);
    if (!inserted) return {it->second, key};
  }
}

TEST_P(DataSafetyTest, OrderedStoreReopenedInHashModeReturnsLatestValues) {
  const auto [a, b] = KeysWithOneTag(1);
  {
    auto engine = Open(StoreOptions(IndexMode::kOrdered));
    ASSERT_NE(engine, nullptr);
    // Non-durable, so both land on one open page if ordered mode lets them.
    ASSERT_THAT(Put(*engine, a, "a-old", /*durable=*/false), IsOk());
    ASSERT_THAT(Put(*engine, b, "b-old", /*durable=*/false), IsOk());
    ASSERT_THAT(engine->Flush(), IsOk());
    ASSERT_THAT(Delete(*engine, a), IsOk());
    ASSERT_THAT(engine->Close(), IsOk());
  }
  auto engine = Open(StoreOptions(IndexMode::kHash));
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get(a).status(), StatusIs(absl::StatusCode::kNotFound));
  auto got_b = engine->Get(b);
  ASSERT_THAT(got_b, IsOk());
  EXPECT_EQ(*got_b, "b-old");
  // Overwriting b in hash mode must replace b's entry, not lose it.
  ASSERT_THAT(Put(*engine, b, "b-new"), IsOk());
  ASSERT_THAT(Put(*engine, a, "a-new"), IsOk());
  EXPECT_EQ(engine->Get(a).value_or("?"), "a-new");
  EXPECT_EQ(engine->Get(b).value_or("?"), "b-new");
}

// --- Durable writes that write nothing ---

TEST_P(DataSafetyTest, DurableDeleteOfAnAbsentKeyWaitsForTheDeleteThatRemovedIt) {
  Options options = StoreOptions();
  options.max_write_delay_us = 10'000'000;  // the non-durable delete stays in memory
  FaultDevice* device = nullptr;
  {
    auto engine = OpenLosingUnflushedWrites(options, &device);
    ASSERT_NE(engine, nullptr);
    ASSERT_THAT(Put(*engine, "k", "v"), IsOk());
    ASSERT_THAT(Delete(*engine, "k", /*durable=*/false), IsOk());
    // The key is absent now, but only because of a delete that is not durable yet.
    ASSERT_THAT(Delete(*engine, "k", /*durable=*/true), IsOk());
    ASSERT_THAT(device->CutPower(), IsOk());
  }
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("k").status(), StatusIs(absl::StatusCode::kNotFound));
}

// The segment map must say "in use" of a segment, on the device, before a head writes there:
// recovery skips the segments it says are free. Durable puts by FUA, and nothing else, so that
// no flush ever runs: whatever the writer announced in the map is durable only if it was written
// so. Eight segments' worth of puts go past the segments announced at Open.
TEST_P(DataSafetyTest, PutsInSegmentsAnnouncedWhileRunningSurviveAPowerCutWithoutFlushes) {
  Options options = StoreOptions();
  options.durable_writes = DurableWrites::kFua;
  options.max_write_delay_us = 10'000'000;
  constexpr int kPuts = 8 * kPagesPerSegment;
  {
    FaultDevice* device = nullptr;
    auto engine = OpenLosingUnflushedWrites(options, &device);
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, kPuts);
    EXPECT_EQ(engine->Stats().flushes, 0u);
    ASSERT_THAT(device->CutPower(), IsOk());
  }
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  EXPECT_GT(engine->Stats().recovery_segments_skipped, 0u);
  for (int i = 0; i < kPuts; ++i) EXPECT_EQ(engine->Get(Key(i)).value_or("?"), BigValue(i)) << i;
}

// DurableWrites::kFlush: durable writes go out without FUA and a flush makes them durable
// before they return, so a power cut that loses every unflushed write loses none of them; a
// large value (written by the calling thread) and a batch too.
TEST_P(DataSafetyTest, DurableWritesByFlushSurviveAPowerCutThatLosesUnflushedWrites) {
  Options options = StoreOptions();
  options.durable_writes = DurableWrites::kFlush;
  const std::string large(10000, 'L');
  {
    FaultDevice* device = nullptr;
    auto engine = OpenLosingUnflushedWrites(options, &device);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->Stats().durable_writes, DurableWrites::kFlush);
    PutPages(*engine, 0, 6);
    ASSERT_THAT(Put(*engine, "large", large), IsOk());
    WriteBatchOfThreePages(*engine);
    const EngineStats stats = engine->Stats();
    EXPECT_EQ(stats.fua_writes, 0u);
    EXPECT_GE(stats.flushes, 1u);
    ASSERT_THAT(device->CutPower(), IsOk());
  }
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(engine->Get(Key(i)).value_or("?"), BigValue(i)) << i;
  EXPECT_EQ(engine->Get("large").value_or("?"), large);
  for (const std::string& key : BatchKeys()) EXPECT_THAT(engine->Get(key), IsOk()) << key;
}

// The default picks FUA here (the memory device is not a file), and every durable page goes
// with it.
TEST_P(DataSafetyTest, DurableWritesByDefaultUseFuaOnThisDevice) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().durable_writes, DurableWrites::kFua);
  PutPages(*engine, 0, 3);
  EXPECT_GE(engine->Stats().fua_writes, 3u);
}

// --- Repairing a damaged key ---

TEST_P(DataSafetyTest, KeyOnADamagedPageCanBeOverwrittenAndDeleted) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  PutPages(*engine, 0, 4);
  DamagePage(PageNumber(0, 2));
  EXPECT_THAT(engine->Get(Key(2)).status(), StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_THAT(Put(*engine, Key(2), "again"), IsOk());
  EXPECT_EQ(engine->Get(Key(2)).value_or("?"), "again");
  ASSERT_THAT(Delete(*engine, Key(2)), IsOk());
  EXPECT_THAT(engine->Get(Key(2)).status(), StatusIs(absl::StatusCode::kNotFound));
  DamagePage(PageNumber(0, 3));
  ASSERT_THAT(Delete(*engine, Key(3)), IsOk());
  EXPECT_THAT(engine->Get(Key(3)).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(engine->Close(), IsOk());
  engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get(Key(2)).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(engine->Get(Key(3)).status(), StatusIs(absl::StatusCode::kNotFound));
  for (int i : {0, 1}) EXPECT_EQ(engine->Get(Key(i)).value_or("?"), BigValue(i));
}


// Two keys with one tag in one shard are both candidates of every lookup of either. While
// compaction moves them around (and frees and reuses the segments they were in), a read must
// never answer NotFound for a key that is there: a miss is only final when the index did not
// change under the read.
TEST_P(DataSafetyTest, KeysSharingATagNeverReadAsNotFoundWhileCompactionMovesThem) {
  const auto [a, b] = KeysWithOneTag(1);
  Options options = StoreOptions();
  options.page_buffers_per_shard = 16;
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(Put(*engine, a, "value-a"), IsOk());
  ASSERT_THAT(Put(*engine, b, "value-b"), IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int> compactions{0};
  std::thread mover([&] {
    int i = 0;
    while (!stop.load()) {
      // Garbage around the two keys, then clean: they move to new pages, and the segments they
      // left are freed and reused.
      for (int j = 0; j < 8; ++j) {
        if (!Put(*engine, Key(i++ % 40), BigValue(j)).ok()) return;
      }
      if (!engine->CompactAll().ok()) return;
      compactions.fetch_add(1);
    }
  });
  int reads = 0;
  while (compactions.load() < 100 && reads < 1000000) {
    for (const auto& [key, want] : {std::pair{a, "value-a"}, std::pair{b, "value-b"}}) {
      auto got = engine->Get(key);
      ASSERT_THAT(got, IsOk()) << key << " after " << reads << " reads";
      ASSERT_EQ(*got, want);
      ++reads;
    }
  }
  stop.store(true);
  mover.join();
  EXPECT_GE(compactions.load(), 1);
}


uint32_t ShardOf(std::string_view key, uint32_t shard_count) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return static_cast<uint32_t>(((h.high64 >> 32) * shard_count) >> 32);
}

// Background compaction copies a victim's records one by one to their own shards' heads. If the
// victim still sits in the volatile cache when its copies land, a power cut can keep some copies
// and lose the original: part of a batch. Here every unflushed write is lost at the cut, and
// power fails at the first flush after the batch, which compaction issues while it cleans.
TEST_P(DataSafetyTest, BackgroundCompactionNeverTearsANonDurableBatch) {
  Options options = StoreOptions();
  options.shard_count = 2;
  options.background_compaction = true;
  options.max_write_delay_us = 10'000'000;  // no flush on a timer during the test
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 8; ++i) keys.push_back(absl::StrCat("batch-", i));
  uint32_t on_shard_one = 0;
  for (const std::string& key : keys) on_shard_one += ShardOf(key, 2);
  ASSERT_GT(on_shard_one, 0u);
  ASSERT_LT(on_shard_one, keys.size());  // the copies go to both heads
  FaultDevice* device = nullptr;
  {
    auto engine = OpenLosingUnflushedWrites(options, &device);
    ASSERT_NE(engine, nullptr);
    std::vector<WriteOp> ops;
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, "in-the-batch"});
    ASSERT_THAT(engine->Write(ops, /*durable=*/false), IsOk());
    ASSERT_THAT(device->SetCutAfterOperations(1, storage::OpFilter::kFlush), IsOk());
    // Overwrites of a few keys of the batch's head's shard: every segment after the batch's is
    // mostly garbage, and as free segments run low compaction cleans the oldest first, the
    // batch's.
    std::vector<std::string> fill;
    for (int i = 0; fill.size() < 8; ++i) {
      if (ShardOf(Key(i), 2) == 0) fill.push_back(Key(i));
    }
    for (int i = 0; i < 4000 && device->fault_stats().powered; ++i) {
      if (!Put(*engine, fill[i % fill.size()], BigValue(i), /*durable=*/false).ok()) break;
    }
    for (int wait = 0; wait < 1000 && device->fault_stats().powered; ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(device->fault_stats().powered) << "compaction issued no flush";
  }
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  size_t present = 0;
  for (const std::string& key : keys) {
    auto got = engine->Get(key);
    if (got.ok()) {
      ++present;
    } else {
      EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }
  EXPECT_TRUE(present == 0 || present == keys.size()) << present << " of " << keys.size();
}


// A segment freed by compaction keeps its old log on pages 1.. behind the free marker on page 0.
// When it is reused and the first page of its next log is lost (torn by a crash, or damaged),
// that stale log must not come back: its dead records would outlive the tombstones that hid
// them, which compaction has dropped meanwhile.
// Freeing a segment must be all or nothing for recovery. Compaction drops a tombstone whose
// key's older records lie only in the victim itself, then writes the free markers. Found by the
// crash test (NVKV_CRASH_SEED=1076, hash mode): the last-page marker torn by the cut left the
// victim's log alive but for its last page, which held the end of a durable batch with the
// tombstone; recovery dropped the batch as torn and the key's older put came back.
TEST_P(DataSafetyTest, ATornFreeMarkerDoesNotBringBackARecordItsSegmentDeleted) {
  // A zone is emptied by a reset, made durable before a head takes it (zoned_engine_test and the
  // crash test cut power around it).
  if (zoned()) GTEST_SKIP() << "no free markers on zones";
  auto mem = MemDevice::Open(storage_, MemOptions());
  ASSERT_THAT(mem, IsOk());
  auto fault = FaultDevice::Create(std::move(*mem), {});
  ASSERT_THAT(fault, IsOk());
  FaultDevice* device = fault->get();
  // With a record cache overwrites find the records they replace (not blind): segment 0's
  // records are known dead, and CompactAll cleans it.
  Options options = StoreOptions();
  options.cache_bytes = Options{}.cache_bytes;
  {
    auto engine = Engine::OpenOnDevice(std::move(*fault), options, kSeams);
    ASSERT_THAT(engine, IsOk());
    // Segment 0: "doomed" on its first page, twelve keys, then a durable batch of three pages
    // that ends by deleting "doomed" (on the segment's last page when the log may use it).
    ASSERT_THAT(Put(**engine, "doomed", BigValue(99)), IsOk());
    PutPages(**engine, 1, 12);
    std::vector<WriteOp> ops;
    const std::string value(1800, 'b');
    const std::vector<std::string> keys = BatchKeys();  // the ops view these
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
    ops.push_back(WriteOp{true, "doomed", {}});
    ASSERT_THAT((*engine)->Write(ops, /*durable=*/true), IsOk());
    // Everything else segment 0 holds is overwritten: cleaning it copies nothing, and its
    // tombstone hides only a record of its own.
    PutPages(**engine, 1, 12);
    WriteBatchOfThreePages(**engine);
    ASSERT_THAT((*engine)->Get("doomed").status(), StatusIs(absl::StatusCode::kNotFound));
    // The free marker on segment 0's last page, its first write, is torn: one sector lands.
    ASSERT_THAT(device->FailOperation({.nth = 1,
                                       .filter = storage::OpFilter::kWrite,
                                       .partial = storage::PartialWrite::kPrefix,
                                       .sectors = 1}),
                IsOk());
    EXPECT_FALSE((*engine)->CompactAll().ok());
    const std::vector<storage::InjectedFault> faults = device->injected_faults();
    ASSERT_EQ(faults.size(), 1u);
    EXPECT_EQ(faults[0].lba, PageNumber(0, kPagesPerSegment - 1)) << "not the last page's marker";
    (void)(*engine)->Close();
  }
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("doomed").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(DataSafetyTest, LostFirstPageOfAReusedSegmentDoesNotBringBackItsStaleLog) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 1);                                    // segment 0, page 0
    ASSERT_THAT(Put(*engine, "doomed", BigValue(99)), IsOk());  // page 1
    PutPages(*engine, 1, 14);                                   // fills segment 0
    ASSERT_THAT(Delete(*engine, "doomed"), IsOk());             // segment 1
    // Overwrite everything twice: segments 0 and 1 hold only dead records and the tombstone.
    PutPages(*engine, 0, 15);
    PutPages(*engine, 0, 15);
    ASSERT_THAT(engine->CompactAll(), IsOk());
    ASSERT_THAT(engine->CompactAll(), IsOk());  // the tombstone has nothing left to hide
    EXPECT_THAT(engine->Get("doomed").status(), StatusIs(absl::StatusCode::kNotFound));
    ASSERT_THAT(engine->Close(), IsOk());
  }
  // Segment 0 was freed; its stale log still lies on pages 1..15 behind the free marker. Lose
  // page 0, as a torn first write of the segment's next log or media damage would.
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->Stats().segments_free, kSegments - 1);  // the copies' segment only
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(0, 0));
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("doomed").status(), StatusIs(absl::StatusCode::kNotFound));
}


// Stores written before kPageContinuesBatch existed have no flag on a batch's later pages:
// recovery must still read such a batch whole (its records say that they go on).
TEST_P(DataSafetyTest, BatchOnPagesWithoutTheContinuationFlagIsRecoveredWhole) {
  if (zoned()) GTEST_SKIP() << "no zoned store was ever written without the flag";
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, 2);          // pages 0, 1
    WriteBatchOfThreePages(*engine);  // pages 2..4
    ASSERT_THAT(engine->Close(), IsOk());
  }
  const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
  absl::StatusOr<Superblock> superblock = DecodeSuperblock(first.data(), kPageBytes);
  ASSERT_THAT(superblock, IsOk());
  const uint64_t store_seed = StoreSeed(superblock->store_id);
  for (uint32_t index : {3u, 4u}) {
    const uint64_t page_number = PageNumber(0, index);
    std::vector<uint8_t> page = storage_->CopyOut(page_number, 1);
    PageHeader header;
    std::memcpy(&header, page.data(), sizeof(header));
    ASSERT_EQ(header.flags, kPageContinuesBatch) << index;
    header.flags = 0;  // as an older writer left it
    std::memcpy(page.data(), &header, sizeof(header));
    const uint64_t checksum =
        XXH3_64bits_withSeed(page.data() + 8, kPageBytes - 8, PageSeed(store_seed, page_number));
    std::memcpy(page.data(), &checksum, sizeof(checksum));
    storage_->Write(page_number, 1, page.data());
  }
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (const std::string& key : BatchKeys()) EXPECT_THAT(engine->Get(key), IsOk()) << key;
  EXPECT_EQ(engine->Stats().recovery_batches_discarded, 0u);
}

// Segment generations count every segment taken and every segment freed, and grow past 2^32 on
// a busy store (2^32 segments of 64 KiB are 256 TiB of writes). A 32-bit generation wrapped
// around: a log written after the wrap carried a generation below that of the free marker it
// partly overwrote, so recovery took it for the segment's stale log and its records were lost.
// Each run starts the store just below 2^32 (its first log rewritten with that generation),
// cycles every segment, and ends with a few writes into a partly filled segment; the runs move
// the wrap to a different point of the workload.
TEST_P(DataSafetyTest, GenerationsPastTwoToThe32KeepEveryLog) {
  // A reset zone holds no older log for a generation to tell apart.
  if (zoned()) GTEST_SKIP() << "generations tell logs from free markers; zones are reset";
  for (uint32_t before_wrap = 1; before_wrap <= 16; ++before_wrap) {
    SCOPED_TRACE(absl::StrCat("starting 2^32 - ", before_wrap));
    SetUp();  // a fresh store
    {
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      PutPages(*engine, 0, 4);
      ASSERT_THAT(engine->Close(), IsOk());
    }
    const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(first.data(), kPageBytes);
    ASSERT_THAT(superblock, IsOk());
    const uint64_t store_seed = StoreSeed(superblock->store_id);
    for (uint32_t index = 0; index < kPagesPerSegment; ++index) {
      const uint64_t page_number = PageNumber(0, index);
      std::vector<uint8_t> page = storage_->CopyOut(page_number, 1);
      if (!VerifyPage(page.data(), GeometryOf(*superblock), store_seed, page_number).ok()) {
        continue;
      }
      PageHeader header;
      std::memcpy(&header, page.data(), sizeof(header));
      SetGeneration(header, (uint64_t{1} << 32) - before_wrap);
      std::memcpy(page.data(), &header, sizeof(header));
      const uint64_t checksum = XXH3_64bits_withSeed(page.data() + 8, kPageBytes - 8,
                                                     PageSeed(store_seed, page_number));
      std::memcpy(page.data(), &checksum, sizeof(checksum));
      storage_->Write(page_number, 1, page.data());
    }
    std::map<std::string, std::string> latest;
    for (int i = 0; i < 4; ++i) latest[Key(i)] = BigValue(i);
    {
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      // Overwrites of 20 keys, a segment and a quarter each round, and every segment with dead
      // records cleaned after each: segments are freed (a marker) and taken again many times.
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 20; ++i) {
          const std::string value = BigValue(round * 20 + i);
          ASSERT_THAT(Put(*engine, Key(i), value, /*durable=*/false), IsOk()) << round;
          latest[Key(i)] = value;
        }
        ASSERT_THAT(engine->CompactAll(), IsOk()) << round;
      }
      // A few more: a log that does not reach its segment's last page (its free marker).
      for (int i = 20; i < 23; ++i) {
        ASSERT_THAT(Put(*engine, Key(i), BigValue(i), /*durable=*/false), IsOk());
        latest[Key(i)] = BigValue(i);
      }
      ASSERT_THAT(engine->Close(), IsOk());
    }
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    for (const auto& [key, value] : latest) {
      auto got = engine->Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      EXPECT_EQ(*got, value) << key;
    }
    absl::StatusOr<CheckReport> report = engine->Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->ok()) << absl::StrJoin(report->problems, "\n");
  }
}


// --- A batch cut short by a crash stays discarded ---
//
// Recovery drops a batch whose end never reached the device, but its first pages stay on the
// device until compaction cleans their segment. Compaction must read the victim as recovery
// does: a record recovery did not apply is not live, and copying it as a lone record would
// apply part of a batch that was never acknowledged, after the fact. Here the crash is played
// by damaging the batch's last page, the log's last page, as a write that never landed leaves
// it (a torn tail, not a hole).

TEST_P(DataSafetyTest, DeleteInABatchCutByACrashStaysUndoneAfterCompaction) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    PutPages(*engine, 0, kPagesPerSegment);  // segment 0, all live
    const std::string deleted = Key(0);
    std::vector<WriteOp> ops{WriteOp{true, deleted, {}}};
    const std::string value(1800, 'b');
    const std::vector<std::string> keys = BatchKeys();  // the ops view these strings
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
    ASSERT_THAT(engine->Write(ops, /*durable=*/true), IsOk());  // segment 1, pages 0..2
    ASSERT_THAT(engine->Close(), IsOk());
  }
  DamagePage(PageNumber(1, 2));  // the batch's end never landed
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->Stats().recovery_batches_discarded, 1u);
    auto got = engine->Get(Key(0));
    ASSERT_THAT(got, IsOk()) << "the cut batch's delete was applied";
    // Segment 1 holds only the cut batch, all dead: compaction cleans it. Its delete would be
    // kept if it were live, as an older record of its key lies in segment 0.
    ASSERT_THAT(engine->CompactAll(), IsOk());
    EXPECT_GE(engine->Stats().segments_cleaned, 1u);
    got = engine->Get(Key(0));
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(*got, BigValue(0));
    ASSERT_THAT(engine->Close(), IsOk());
  }
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  auto got = engine->Get(Key(0));
  ASSERT_THAT(got, IsOk()) << "compaction copied the cut batch's delete";
  EXPECT_EQ(*got, BigValue(0));
  for (const std::string& key : BatchKeys()) {
    EXPECT_THAT(engine->Get(key).status(), StatusIs(absl::StatusCode::kNotFound)) << key;
  }
}

// The cut batch's first record overwrites or deletes a key whose current record sits earlier on
// the same page (an overwrite with a value of the same size: the index entry, page and size,
// fits both records). Only the batch's record is newer, and neither a read, compaction, a dump
// nor check may take it.
TEST_P(DataSafetyTest, RecordInABatchCutByACrashNeverReplacesTheOneBeforeItOnItsPage) {
  const std::string before = "value-before-the-batch";
  const std::string in_batch = "value-in-the-cut-batch";
  ASSERT_EQ(before.size(), in_batch.size());
  for (const bool batch_deletes : {false, true}) {
    SCOPED_TRACE(batch_deletes ? "the batch deletes the key" : "the batch overwrites the key");
    SetUp();  // a fresh store
    {
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      ASSERT_THAT(Put(*engine, "shared", before, /*durable=*/false), IsOk());  // page 0
      std::vector<WriteOp> ops{WriteOp{batch_deletes, "shared", in_batch}};
      const std::string value(1800, 'b');
      const std::vector<std::string> keys = BatchKeys();  // the ops view these strings
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
      ASSERT_THAT(engine->Write(ops, /*durable=*/true), IsOk());  // pages 0..2
      ASSERT_THAT(engine->Close(), IsOk());
    }
    DamagePage(PageNumber(0, 2));  // the batch's end never landed
    auto check_shared = [&](Engine& engine, const char* when) {
      auto got = engine.Get("shared");
      ASSERT_THAT(got, IsOk()) << when;
      EXPECT_EQ(*got, before) << when;
    };
    {
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      EXPECT_EQ(engine->Stats().recovery_batches_discarded, 1u);
      check_shared(*engine, "after recovery");
      ASSERT_THAT(engine->CompactAll(), IsOk());  // the cut batch's records are dead
      EXPECT_GE(engine->Stats().segments_cleaned, 1u);
      check_shared(*engine, "after compaction");
      std::map<std::string, std::string> dumped;
      ASSERT_THAT(engine->ForEachLive([&](std::string_view key, std::string_view value) {
        dumped[std::string(key)] = std::string(value);
        return absl::OkStatus();
      }),
                  IsOk());
      EXPECT_EQ(dumped, (std::map<std::string, std::string>{{"shared", before}}));
      absl::StatusOr<CheckReport> report = engine->Check();
      ASSERT_THAT(report, IsOk());
      EXPECT_TRUE(report->ok()) << absl::StrJoin(report->problems, "\n");
      ASSERT_THAT(engine->Close(), IsOk());
    }
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    check_shared(*engine, "after reopening");
    for (const std::string& key : BatchKeys()) {
      EXPECT_THAT(engine->Get(key).status(), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }
}

// Reads before compaction: the page with the key's current record and the cut batch's record is
// still the one the index points at.
TEST_P(DataSafetyTest, ReadsSkipTheRecordsOfABatchCutByACrash) {
  for (const bool batch_deletes : {false, true}) {
    SCOPED_TRACE(batch_deletes ? "the batch deletes the key" : "the batch overwrites the key");
    SetUp();
    {
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      ASSERT_THAT(Put(*engine, "shared", "before", /*durable=*/false), IsOk());  // page 0
      std::vector<WriteOp> ops{WriteOp{batch_deletes, "shared", "in the batch, longer"}};
      const std::string value(1800, 'b');
      const std::vector<std::string> keys = BatchKeys();  // the ops view these strings
    for (const std::string& key : keys) ops.push_back(WriteOp{false, key, value});
      ASSERT_THAT(engine->Write(ops, /*durable=*/true), IsOk());  // pages 0..2
      ASSERT_THAT(engine->Close(), IsOk());
    }
    DamagePage(PageNumber(0, 2));
    for (int reopen = 0; reopen < 2; ++reopen) {  // the record stays dropped at every Open
      auto engine = Open();
      ASSERT_NE(engine, nullptr);
      auto got = engine->Get("shared");
      ASSERT_THAT(got, IsOk()) << reopen;
      EXPECT_EQ(*got, "before") << reopen;
      const std::vector<std::string_view> keys{"shared"};
      std::vector<absl::StatusOr<std::string>> many;
      engine->MultiGet(keys, &many);
      ASSERT_EQ(many.size(), 1u);
      ASSERT_THAT(many[0], IsOk());
      EXPECT_EQ(*many[0], "before");
      ASSERT_THAT(engine->Close(), IsOk());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataSafetyTest,
                         ::testing::Values(Layout::kConventional, Layout::kZoned),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace nvkv::kv
