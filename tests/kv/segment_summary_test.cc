// Segment summaries (kv/segment_summary.h): their encoding, what makes one unusable, and what
// they do for recovery: after a clean Close, Open reads the summaries instead of the segments
// and finds the same state; a summary that does not verify, or whose segment was freed after it
// was written, makes recovery read the segment instead.
#include "kv/segment_summary.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "kv/recovery.h"
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
constexpr uint64_t kSeed = 0x1234;

Geometry SmallGeometry() {
  Geometry g;
  g.page_bytes = kPageBytes;
  g.pages_per_segment = 64;  // summaries of up to 3 pages
  g.segment_count = 4;
  return g;
}

RecordHeader Header(RecordType type, uint64_t sequence, size_t key_bytes, size_t value_bytes) {
  RecordHeader header{};
  header.type = static_cast<uint8_t>(type);
  header.key_bytes = static_cast<uint16_t>(key_bytes);
  header.value_bytes = static_cast<uint32_t>(value_bytes);
  header.sequence = sequence;
  return header;
}

// A summary of `records` records of segment 2 (log of generation 9, head counter base 100),
// written as its pages would be after `data_pages` data pages.
struct Encoded {
  std::vector<std::vector<uint8_t>> pages;
  uint32_t first = 0;
};
Encoded EncodeSummary(const Geometry& g, int records, bool with_keys, uint32_t data_pages) {
  SummaryBuilder builder;
  builder.Reset(with_keys, g);
  for (int r = 0; r < records; ++r) {
    const std::string key = absl::StrCat("key-", r);
    const RecordType type = r % 5 == 4 ? RecordType::kDelete : RecordType::kPut;
    builder.Add(HashKey(key), key, Header(type, 1000 + r, key.size(), type == RecordType::kPut ? 300 + r : 0),
                static_cast<uint32_t>(r % data_pages));
  }
  const uint32_t count = SummaryPagesFor(builder.summary_bytes(), g);
  const std::string bytes = builder.Take(data_pages, count, /*sequence_floor=*/5000,
                                         /*generation_floor=*/12);
  Encoded encoded;
  encoded.first = data_pages;
  for (uint32_t i = 0; i < count; ++i) {
    encoded.pages.emplace_back(kPageBytes);
    EncodeSummaryPage(encoded.pages.back().data(), g, kSeed, bytes, i, /*generation=*/9,
                      data_pages, /*first_counter=*/100 + data_pages,
                      g.FirstPageOf(2) + data_pages + i);
  }
  return encoded;
}

absl::StatusOr<SummaryFound> Read(const Geometry& g, const Encoded& e, bool with_keys,
                                  std::vector<SummaryRecord>* records, uint64_t newer_than = 0,
                                  std::vector<std::string>* keys = nullptr) {
  return ReadSummary(
      g, kSeed, 2, e.first, static_cast<uint32_t>(e.pages.size()), with_keys,
      [&](uint32_t i) { return e.pages[i].data(); },
      [&](absl::Span<const SummaryRecord> visited) {
        for (const SummaryRecord& r : visited) {
          records->push_back(r);
          records->back().key = {};  // it views the reader's bytes, valid only while visited
          if (keys != nullptr) keys->emplace_back(r.key);
        }
      },
      newer_than);
}

TEST(SegmentSummaryTest, RecordsRoundTripWithAndWithoutKeys) {
  const Geometry g = SmallGeometry();
  for (bool with_keys : {false, true}) {
    SCOPED_TRACE(with_keys ? "with keys" : "hashes only");
    const Encoded encoded = EncodeSummary(g, 100, with_keys, /*data_pages=*/10);
    ASSERT_EQ(encoded.pages.size(), 1u);
    std::vector<SummaryRecord> records;
    std::vector<std::string> keys;
    absl::StatusOr<SummaryFound> found = Read(g, encoded, with_keys, &records, 0, &keys);
    ASSERT_THAT(found, IsOk());
    EXPECT_EQ(found->generation, 9u);
    EXPECT_EQ(found->base, 100u);
    EXPECT_EQ(found->header.entry_count, 100u);
    EXPECT_EQ(found->header.sequence_floor, 5000u);
    EXPECT_EQ(found->header.generation_floor, 12u);
    ASSERT_EQ(records.size(), 100u);
    for (int r = 0; r < 100; ++r) {
      const std::string key = absl::StrCat("key-", r);
      const SummaryRecord& got = records[r];
      EXPECT_EQ(got.hash, HashKey(key));
      EXPECT_EQ(keys[r], with_keys ? key : "");
      EXPECT_EQ(got.sequence, 1000u + r);
      EXPECT_EQ(got.is_delete, r % 5 == 4);
      EXPECT_EQ(got.page_in_segment, static_cast<uint32_t>(r % 10));
      EXPECT_EQ(got.record_bytes, RecordBytes(key.size(), r % 5 == 4 ? 0 : 300 + r));
    }
  }
}

TEST(SegmentSummaryTest, ASummaryAcrossPagesNeedsEveryOne) {
  const Geometry g = SmallGeometry();
  const Encoded encoded = EncodeSummary(g, 200, /*with_keys=*/true, /*data_pages=*/12);
  ASSERT_EQ(encoded.pages.size(), 2u);
  std::vector<SummaryRecord> records;
  ASSERT_THAT(Read(g, encoded, true, &records), IsOk());
  EXPECT_EQ(records.size(), 200u);

  // A torn second page: nothing is visited, whatever the first page held.
  Encoded torn = encoded;
  torn.pages[1][3000] ^= 1;
  records.clear();
  EXPECT_THAT(Read(g, torn, true, &records), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(records.empty());

  // Only the first page of two: its header does not match.
  Encoded short_one = encoded;
  short_one.pages.pop_back();
  EXPECT_THAT(Read(g, short_one, true, &records),
              StatusIs(absl::StatusCode::kDataLoss, "does not match its pages"));

  // A page of another log at the place of the second (another generation).
  Encoded mixed = encoded;
  EncodeSummaryPage(mixed.pages[1].data(), g, kSeed, std::string(5000, 'x'), 1, 10, 12, 112,
                    g.FirstPageOf(2) + 13);
  EXPECT_THAT(Read(g, mixed, true, &records),
              StatusIs(absl::StatusCode::kDataLoss, "another log"));
  EXPECT_TRUE(records.empty());
}

TEST(SegmentSummaryTest, ALogFreedSinceOrKeysNotKeptAreRefused) {
  const Geometry g = SmallGeometry();
  const Encoded encoded = EncodeSummary(g, 20, /*with_keys=*/false, 4);
  std::vector<SummaryRecord> records;
  // The segment's last page holds a free marker of generation 9 or newer: its log was freed.
  EXPECT_THAT(Read(g, encoded, false, &records, /*newer_than=*/9),
              StatusIs(absl::StatusCode::kDataLoss, "was freed since"));
  ASSERT_THAT(Read(g, encoded, false, &records, /*newer_than=*/8), IsOk());
  // An ordered Open needs keys, which a hash-mode summary leaves out.
  EXPECT_THAT(Read(g, encoded, /*with_keys=*/true, &records),
              StatusIs(absl::StatusCode::kFailedPrecondition, "holds no keys"));
}

// A summary whose pages verify but whose header claims more entries than its bytes can hold
// (a bug's or a bit flip's before the checksum): refused as damaged, before anything is sized by
// that count (a reader that reserved room for it asked for hundreds of GiB and threw).
TEST(SegmentSummaryTest, AnEntryCountBeyondItsBytesIsRefusedNotAllocated) {
  const Geometry g = SmallGeometry();
  SummaryBuilder builder;
  builder.Reset(/*with_keys=*/false, g);
  builder.Add(HashKey("k"), "k", Header(RecordType::kPut, 7, 1, 10), 0);
  std::string bytes = builder.Take(/*data_pages=*/4, /*summary_pages=*/1, 5000, 12);
  for (uint32_t claimed : {2u, 0xF0000000u, 0xFFFFFFFFu}) {
    SCOPED_TRACE(claimed);
    SummaryHeader header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    header.entry_count = claimed;
    std::memcpy(bytes.data(), &header, sizeof(header));
    Encoded encoded;
    encoded.first = 4;
    encoded.pages.emplace_back(kPageBytes);
    EncodeSummaryPage(encoded.pages[0].data(), g, kSeed, bytes, 0, 9, 4, 104, g.FirstPageOf(2) + 4);
    std::vector<SummaryRecord> records;
    EXPECT_THAT(Read(g, encoded, false, &records), StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_TRUE(records.empty());
  }
}

TEST(SegmentSummaryTest, ABuilderKeepsRoomWithinItsLimitAndGivesUpBeyondIt) {
  Geometry g = SmallGeometry();
  g.pages_per_segment = 256;
  ASSERT_EQ(MaxSummaryPages(g), 15u);
  SummaryBuilder builder;
  EXPECT_TRUE(builder.abandoned()) << "a builder not started summarizes nothing";
  EXPECT_EQ(builder.PagesWith(100, g), 0u);
  builder.Reset(/*with_keys=*/false, g);
  EXPECT_EQ(builder.PagesWith(0, g), 0u) << "nothing yet";
  // Four records a page (about 1 KB each): 128 summary bytes a page.
  for (uint32_t page = 0; page < 10; ++page) {
    for (int r = 0; r < 4; ++r) {
      builder.Add(HashKey(absl::StrCat(page, "-", r)), "", Header(RecordType::kPut, 1, 8, 1000),
                  page);
    }
  }
  EXPECT_EQ(builder.bytes_per_page(), 128u);
  EXPECT_EQ(builder.EntryBytes(8), 32u);
  EXPECT_EQ(builder.PagesWith(0, g), 1u);
  // 48 + 40 x 32 bytes so far, and 128 more for each of 200 pages: 26928 bytes, 7 pages.
  EXPECT_EQ(builder.PagesWith(200 * builder.bytes_per_page(), g), 7u);
  // Beyond 15 pages: no room is kept, and nothing is given up yet.
  EXPECT_EQ(builder.PagesWith(16 * 4056, g), std::nullopt);
  EXPECT_FALSE(builder.abandoned());
  EXPECT_EQ(builder.entry_count(), 40u);
  // Records of a few bytes, a hundred to a page: the summary outgrows 15 pages and is dropped.
  for (uint32_t page = 10; page < 40 && !builder.abandoned(); ++page) {
    for (int r = 0; r < 100; ++r) {
      builder.Add(HashKey(absl::StrCat(page, "-", r)), "", Header(RecordType::kPut, 1, 8, 8),
                  page);
    }
  }
  EXPECT_TRUE(builder.abandoned());
  EXPECT_EQ(builder.entry_count(), 0u);
  EXPECT_EQ(builder.PagesWith(4056, g), 0u);
}

// ----- What summaries do for recovery -----

constexpr uint64_t kSegments = 48;

MemDeviceOptions MemOptions() { return MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes); }

Options StoreOptions(IndexMode mode) {
  Options options;
  options.segment_bytes = kPagesPerSegment * kPageBytes;
  options.shard_count = 2;
  options.page_buffers_per_shard = 16;
  options.background_compaction = false;
  options.index_mode = mode;
  return options;
}

// Summaries in small segments too, to have many. These tests are about what Open reads without
// a checkpoint (checkpoint_test.cc has those).
EngineSeams StoreSeams(bool read_all = false) {
  return EngineSeams{.recovery_reads_all = read_all,
                     .summary_min_segment_pages = 0,
                     .checkpoint_at_close = false};
}

std::string Value(int key, int version) {
  return absl::StrCat("v", version, "-", std::string(700 + key % 300, static_cast<char>('a' + key % 26)));
}

// A store of 16 segments of 64 pages (summaries of up to 3 pages) and one shard, for the tests
// of a head's room.
constexpr uint32_t kLargeSegmentPages = 64;
MemDeviceOptions LargeSegmentMem() {
  MemDeviceOptions mem = MemOptions();
  mem.lba_count = kSuperblockPages + 16 * kLargeSegmentPages + MapPagesFor(16, kPageBytes);
  return mem;
}
Options LargeSegmentOptions(IndexMode mode) {
  Options options = StoreOptions(mode);
  options.segment_bytes = kLargeSegmentPages * kPageBytes;
  options.shard_count = 1;
  options.page_buffers_per_shard = 32;
  return options;
}

class SummaryRecoveryTest : public ::testing::TestWithParam<IndexMode> {
 protected:
  void SetUp() override {
    auto created = MemDevice::Create(MemOptions());
    ASSERT_THAT(created, IsOk());
    storage_ = (*created)->storage();
    auto engine =
        Engine::OpenOnDevice(std::move(*created), StoreOptions(GetParam()), StoreSeams());
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }

  absl::StatusOr<std::unique_ptr<Engine>> Open(const std::shared_ptr<MemStorage>& storage,
                                               IndexMode mode, bool read_all = false) {
    auto device = MemDevice::Open(storage, MemOptions());
    if (!device.ok()) return device.status();
    return Engine::OpenOnDevice(std::move(*device), StoreOptions(mode), StoreSeams(read_all));
  }

  // Puts, overwrites and deletes (some in batches), then a clean Close.
  void WriteAndClose() {
    auto engine = Open(storage_, GetParam());
    ASSERT_THAT(engine, IsOk());
    for (int version = 0; version < 3; ++version) {
      for (int k = 0; k < 120; ++k) {
        if (version > 0 && k % 3 != 0) continue;
        const std::string key = absl::StrCat("key", k);
        const std::string value = Value(k, version);
        WriteOp op{false, key, value};
        ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), k % 7 == 0), IsOk());
        expected_[key] = value;
      }
    }
    for (int k = 0; k < 120; k += 10) {
      const std::string deleted = absl::StrCat("key", k), added = absl::StrCat("batch", k);
      const std::string value = Value(k, 7);
      WriteOp ops[2] = {{true, deleted, ""}, {false, added, value}};
      ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(ops, 2), false), IsOk());
      expected_.erase(absl::StrCat("key", k));
      deleted_.push_back(absl::StrCat("key", k));
      expected_[absl::StrCat("batch", k)] = Value(k, 7);
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }

  void ExpectAll(Engine& engine) {
    for (const auto& [key, value] : expected_) {
      absl::StatusOr<std::string> got = engine.Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      EXPECT_EQ(*got, value) << key;
    }
    for (const std::string& key : deleted_) {
      EXPECT_THAT(engine.Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
    }
  }

  struct Layout {
    Geometry g;
    uint64_t seed = 0;
  };
  Layout StoreLayout() const {
    const std::vector<uint8_t> first = storage_->CopyOut(0, 1);
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(first.data(), kPageBytes);
    EXPECT_THAT(superblock, IsOk());
    return Layout{GeometryOf(*superblock), StoreSeed(superblock->store_id)};
  }

  // Segments holding a log, and where each log's summary is (pages 0: none), read as recovery
  // reads a segment.
  std::map<uint64_t, SegmentScanResult> Logs() const {
    const Layout layout = StoreLayout();
    const Geometry& g = layout.g;
    const std::vector<uint8_t> bytes = storage_->CopyOut(0, storage_->lba_count());
    std::map<uint64_t, SegmentScanResult> logs;
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      SegmentScanResult scan = ScanSegment(
          g, layout.seed, s,
          [&](uint32_t i) { return bytes.data() + (g.FirstPageOf(s) + i) * g.page_bytes; },
          /*assemble_large_values=*/false, [](const ScannedRecord&) {});
      if (scan.in_use) logs[s] = std::move(scan);
    }
    return logs;
  }

  std::shared_ptr<MemStorage> storage_;
  std::map<std::string, std::string> expected_;
  std::vector<std::string> deleted_;
};

TEST_P(SummaryRecoveryTest, AfterACleanCloseOpenReadsSummariesNotSegments) {
  WriteAndClose();
  const std::map<uint64_t, SegmentScanResult> logs = Logs();
  ASSERT_GE(logs.size(), 4u);
  uint64_t summary_pages = 0;
  for (const auto& [segment, scan] : logs) {
    ASSERT_GT(scan.summary.pages, 0u) << "segment " << segment << " closed without a summary";
    EXPECT_EQ(scan.summary.first + scan.summary.pages, scan.log_pages);
    summary_pages += scan.summary.pages;
  }
  auto engine = Open(storage_, GetParam());
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.recovery_segments_summarized, logs.size());
  EXPECT_EQ(stats.recovery_summaries_unused, 0u);
  // Each summary and its segment's last page; no segment read whole.
  EXPECT_EQ(stats.recovery_pages_scanned, summary_pages + logs.size());
  ExpectAll(**engine);
  // Sequences go on above every record the summaries named: a new write wins.
  WriteOp op{false, "key3", "newest"};
  ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), true), IsOk());
  expected_["key3"] = "newest";
  ASSERT_THAT((*engine)->Close(), IsOk());
  engine = Open(storage_, GetParam());
  ASSERT_THAT(engine, IsOk());
  ExpectAll(**engine);
  // The same state as reading every segment, live bytes included.
  const EngineStats by_summary = (*engine)->Stats();
  ASSERT_THAT((*engine)->Close(), IsOk());
  engine = Open(storage_, GetParam(), /*read_all=*/true);
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_segments_summarized, 0u);
  EXPECT_EQ((*engine)->Stats().live_bytes, by_summary.live_bytes);
  EXPECT_EQ((*engine)->Stats().live_keys, by_summary.live_keys);
  ExpectAll(**engine);
}

TEST_P(SummaryRecoveryTest, ADamagedSummaryMakesRecoveryReadItsSegment) {
  WriteAndClose();
  const std::map<uint64_t, SegmentScanResult> logs = Logs();
  const auto& [segment, scan] = *logs.begin();
  const Layout layout = StoreLayout();
  storage_->Corrupt((layout.g.FirstPageOf(segment) + scan.summary.first) * kPageBytes + 2000, 1);
  auto engine = Open(storage_, GetParam());
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.recovery_summaries_unused, 1u);
  EXPECT_EQ(stats.recovery_segments_summarized, logs.size() - 1);
  ExpectAll(**engine);
}

// Open reads summaries in batches, as many as the queue's chunks hold. A store of hundreds of
// summarized segments takes more than one; a summary that does not verify and one the device
// cannot read, in the later part, have their segments read instead, and the state is the one
// reading every segment gives.
TEST_P(SummaryRecoveryTest, ManySummariesAreReadInBatchesAndAFailedOneIsReadWhole) {
  constexpr uint64_t kManySegments = 640;
  const MemDeviceOptions mem = MemStoreOptions(kManySegments, kPagesPerSegment, kPageBytes);
  auto created = MemDevice::Create(mem);
  ASSERT_THAT(created, IsOk());
  const std::shared_ptr<MemStorage> storage = (*created)->storage();
  std::map<std::string, std::string> expected;
  {
    auto engine =
        Engine::OpenOnDevice(std::move(*created), StoreOptions(GetParam()), StoreSeams());
    ASSERT_THAT(engine, IsOk());
    std::vector<std::string> keys, values;
    for (int k = 0; k < 24000; ++k) {
      keys.push_back(absl::StrCat("many", k));
      values.push_back(Value(k, 1));
      expected[keys.back()] = values.back();
      if (keys.size() < 20) continue;
      std::vector<WriteOp> ops;
      for (size_t i = 0; i < keys.size(); ++i) ops.push_back(WriteOp{false, keys[i], values[i]});
      ASSERT_THAT((*engine)->Write(ops, /*durable=*/false), IsOk());
      keys.clear();
      values.clear();
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  storage_ = storage;  // for Logs() and StoreLayout()
  const std::map<uint64_t, SegmentScanResult> logs = Logs();
  ASSERT_GE(logs.size(), 500u) << "too few summaries for more than one batch";
  std::vector<std::pair<uint64_t, SegmentScanResult>> in_order(logs.begin(), logs.end());
  const Layout layout = StoreLayout();
  const auto summary_page = [&](size_t i) {
    return layout.g.FirstPageOf(in_order[i].first) + in_order[i].second.summary.first;
  };
  const std::shared_ptr<MemStorage> damaged = CopyOf(*storage);
  damaged->Corrupt(summary_page(in_order.size() - 40) * kPageBytes + 2000, 1);
  auto device = MemDevice::Open(damaged, mem);
  ASSERT_THAT(device, IsOk());
  auto faulty = storage::FaultDevice::Create(std::move(*device), {});
  ASSERT_THAT(faulty, IsOk());
  ASSERT_THAT((*faulty)->FailReadsOf(summary_page(in_order.size() / 2), 1), IsOk());
  auto engine = 
      Engine::OpenOnDevice(std::move(*faulty), StoreOptions(GetParam()), StoreSeams());
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.recovery_summaries_unused, 2u);
  EXPECT_EQ(stats.recovery_segments_summarized, logs.size() - 2);
  for (const auto& [key, value] : expected) {
    absl::StatusOr<std::string> got = (*engine)->Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    ASSERT_EQ(*got, value) << key;
  }
  auto device_all = MemDevice::Open(CopyOf(*storage), mem);
  ASSERT_THAT(device_all, IsOk());
  auto read_all = Engine::OpenOnDevice(std::move(*device_all), StoreOptions(GetParam()),
                                       StoreSeams(/*read_all=*/true));
  ASSERT_THAT(read_all, IsOk());
  EXPECT_EQ(stats.live_keys, (*read_all)->Stats().live_keys);
  EXPECT_EQ(stats.live_bytes, (*read_all)->Stats().live_bytes);
}

// Under a budget for its tables of newest records (Options::recovery_memory_bytes),
// recovery reads the log in passes, each for a share of the keys, and ends with the state one
// pass gives: every key, live bytes, and a store that Check finds sound. A budget of one byte
// takes the most passes. By summaries the passes are known before anything is read; segments
// read whole (read_all) name their records only as they are read, so recovery starts again.
TEST_P(SummaryRecoveryTest, UnderATableBudgetRecoveryReadsTheLogInPassesToTheSameState) {
  WriteAndClose();
  auto once = Open(storage_, GetParam());
  ASSERT_THAT(once, IsOk());
  const EngineStats one_pass = (*once)->Stats();
  ASSERT_EQ(one_pass.recovery_passes, 1u);
  ASSERT_GT(one_pass.recovery_segments_summarized, 0u);
  ASSERT_THAT((*once)->Close(), IsOk());
  for (const bool read_all : {false, true}) {
    SCOPED_TRACE(read_all ? "every segment read whole" : "by summaries");
    auto device = MemDevice::Open(CopyOf(*storage_), MemOptions());
    ASSERT_THAT(device, IsOk());
    Options options = StoreOptions(GetParam());
    options.recovery_memory_bytes = 1;
    auto engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams(read_all));
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_EQ(stats.recovery_passes, kMaxRecoveryPasses);
    EXPECT_EQ(stats.recovery_segments_summarized,
              read_all ? 0u : one_pass.recovery_segments_summarized);
    // Every pass reads the log again.
    EXPECT_GE(stats.recovery_pages_scanned, kMaxRecoveryPasses * (read_all ? kPagesPerSegment : 2));
    EXPECT_EQ(stats.recovery_records, one_pass.recovery_records);
    EXPECT_EQ(stats.live_keys, one_pass.live_keys);
    EXPECT_EQ(stats.live_bytes, one_pass.live_bytes);
    ExpectAll(**engine);
    absl::StatusOr<CheckReport> check = (*engine)->Check();
    ASSERT_THAT(check, IsOk());
    for (const std::string& problem : check->problems) ADD_FAILURE() << problem;
    // New writes go on above every sequence the passes found.
    WriteOp op{false, "key3", "newest"};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), true), IsOk());
    absl::StatusOr<std::string> got = (*engine)->Get("key3");
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(*got, "newest");
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
}

// A store of 640 segments holding `keys` keys in puts of `value_bytes` values, the first third
// of the keys put twice when `overwrite`, in batches of 20, written and closed with `options`;
// the opener it returns opens copies of it with a budget for recovery's tables.
constexpr uint64_t kManySegments = 640;
constexpr int kManyKeys = 16000;
std::function<absl::StatusOr<std::unique_ptr<Engine>>(uint64_t)> ManyKeysStore(
    const Options& options, int keys = kManyKeys, bool overwrite = true,
    size_t value_bytes = 0, const EngineSeams& seams = StoreSeams()) {
  const MemDeviceOptions mem = MemStoreOptions(kManySegments, kPagesPerSegment, kPageBytes);
  auto created = MemDevice::Create(mem);
  if (!created.ok()) return nullptr;
  const std::shared_ptr<MemStorage> storage = (*created)->storage();
  auto engine = Engine::OpenOnDevice(std::move(*created), options, seams);
  if (!engine.ok()) return nullptr;
  std::vector<std::string> batch;
  std::vector<WriteOp> ops;
  for (int k = 0; k < (overwrite ? keys * 3 / 2 : keys); ++k) {
    batch.push_back(absl::StrCat("many", k % keys));
    if (batch.size() < 20) continue;
    const std::string value = value_bytes == 0 ? Value(k, 1) : std::string(value_bytes, 'v');
    ops.clear();
    for (const std::string& key : batch) ops.push_back(WriteOp{false, key, value});
    if (!(*engine)->Write(ops, /*durable=*/false).ok()) return nullptr;
    batch.clear();
  }
  if (!(*engine)->Close().ok()) return nullptr;
  return [storage, mem, options,
          seams](uint64_t budget) -> absl::StatusOr<std::unique_ptr<Engine>> {
    auto device = MemDevice::Open(CopyOf(*storage), mem);
    if (!device.ok()) return device.status();
    Options with_budget = options;
    with_budget.recovery_memory_bytes = budget;
    return Engine::OpenOnDevice(std::move(*device), with_budget, seams);
  };
}

// Between one byte and no bound: the passes it takes keep the tables within the budget, and a
// store of many summaries (more than one batch a pass) recovers as in one pass.
TEST_P(SummaryRecoveryTest, TheTablesOfEachPassStayWithinTheBudget) {
  const auto open = ManyKeysStore(StoreOptions(GetParam()));
  ASSERT_NE(open, nullptr);
  auto once = open(/*budget=*/uint64_t{1} << 40);
  ASSERT_THAT(once, IsOk());
  const EngineStats one_pass = (*once)->Stats();
  ASSERT_EQ(one_pass.recovery_passes, 1u);
  ASSERT_EQ(one_pass.live_keys, static_cast<uint64_t>(kManyKeys));
  // The tables one pass held, all shards together.
  const uint64_t tables = one_pass.recovery_table_bytes * StoreOptions(GetParam()).shard_count;
  for (const uint64_t parts : {3, 8}) {
    SCOPED_TRACE(::testing::Message() << "a budget of 1/" << parts << " of the tables");
    auto engine = open(tables / parts);
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_GE(stats.recovery_passes, parts);
    EXPECT_LE(stats.recovery_passes, 2 * parts);
    EXPECT_LE(stats.recovery_table_bytes * StoreOptions(GetParam()).shard_count, tables / parts);
    EXPECT_EQ(stats.live_keys, one_pass.live_keys);
    EXPECT_EQ(stats.live_bytes, one_pass.live_bytes);
    for (int k = 0; k < 16000; k += 7) {
      absl::StatusOr<std::string> got = (*engine)->Get(absl::StrCat("many", k));
      ASSERT_THAT(got, IsOk()) << k;
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
}

// Segments read whole (no summaries: records this small would need more room for them than a
// summary may take) name their records only as they are read, so the passes a budget needs are
// not known before. Recovery projects them from the first segments it reads, and starts again
// after those few, not once the tables have outgrown the budget. (The parent started again only
// then, having read a good part of the log, and in more passes than needed.)
TEST_P(SummaryRecoveryTest, SegmentsReadWholeTellTheirPassesEarly) {
  constexpr int kKeys = 100000;
  Options options = StoreOptions(GetParam());
  EngineSeams seams = StoreSeams();
  seams.summary_min_segment_pages = kPagesPerSegment + 1;  // none
  const auto open = ManyKeysStore(options, kKeys, /*overwrite=*/false,
                                  /*value_bytes=*/100, seams);
  ASSERT_NE(open, nullptr);
  auto once = open(/*budget=*/uint64_t{1} << 40);
  ASSERT_THAT(once, IsOk());
  const EngineStats one_pass = (*once)->Stats();
  ASSERT_EQ(one_pass.recovery_passes, 1u);
  ASSERT_EQ(one_pass.recovery_restarts, 0u);
  ASSERT_EQ(one_pass.recovery_segments_summarized, 0u);
  ASSERT_EQ(one_pass.live_keys, static_cast<uint64_t>(kKeys));
  const uint64_t tables = one_pass.recovery_table_bytes * options.shard_count;
  for (const uint64_t parts : {2, 5}) {
    SCOPED_TRACE(::testing::Message() << "a budget of 1/" << parts << " of the tables");
    auto engine = open(tables / parts);
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_GE(stats.recovery_passes, parts);
    EXPECT_LE(stats.recovery_passes, parts + 1);
    EXPECT_EQ(stats.recovery_restarts, 1u);
    // Each pass reads the log once, and the start given up a small part of it.
    EXPECT_LE(stats.recovery_pages_scanned,
              stats.recovery_passes * one_pass.recovery_pages_scanned +
                  one_pass.recovery_pages_scanned / 8);
    EXPECT_EQ(stats.live_keys, one_pass.live_keys);
    EXPECT_EQ(stats.live_bytes, one_pass.live_bytes);
    for (int k = 0; k < kKeys; k += 97) {
      absl::StatusOr<std::string> got = (*engine)->Get(absl::StrCat("many", k));
      ASSERT_THAT(got, IsOk()) << k;
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
}

// Where the memory the process may take leaves the tables too little for one pass
// (EngineSeams::memory_headroom_bytes stands for a memory cgroup's limit), the first pass
// finds so from the first segments it reads whole and goes on as the first of the passes
// needed, rather than start again: every page is read once a pass, at most. (The parent started
// again, reading those first segments once more: 2.03 reads a page in two passes for the
// 10M-key crash Open under a 400 MB cgroup, bench/README.)
TEST_P(SummaryRecoveryTest, AFirstPassThatFindsItNeedsMoreGoesOnAsTheFirstOfThem) {
  constexpr int kKeys = 100000;
  Options options = StoreOptions(GetParam());
  EngineSeams seams = StoreSeams();
  seams.summary_min_segment_pages = kPagesPerSegment + 1;  // none
  const auto unbounded = ManyKeysStore(options, kKeys, /*overwrite=*/false,
                                       /*value_bytes=*/100, seams);
  ASSERT_NE(unbounded, nullptr);
  auto once = unbounded(/*budget=*/0);
  ASSERT_THAT(once, IsOk());
  const EngineStats one_pass = (*once)->Stats();
  ASSERT_EQ(one_pass.recovery_passes, 1u);
  ASSERT_EQ(one_pass.recovery_segments_summarized, 0u);
  ASSERT_THAT((*once)->Close(), IsOk());
  const uint64_t tables = one_pass.recovery_table_bytes * options.shard_count;
  // Room for the index, a little for the key filters, and a part of the tables.
  seams.memory_headroom_bytes = one_pass.index_bytes * 3 / 2 + tables / 2;
  const auto bounded = ManyKeysStore(options, kKeys, /*overwrite=*/false,
                                     /*value_bytes=*/100, seams);
  ASSERT_NE(bounded, nullptr);
  auto engine = bounded(/*budget=*/0);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_GE(stats.recovery_passes, 2u);
  EXPECT_EQ(stats.recovery_restarts, 0u);
  EXPECT_LE(stats.recovery_pages_scanned,
            stats.recovery_passes * one_pass.recovery_pages_scanned);
  EXPECT_EQ(stats.live_keys, one_pass.live_keys);
  EXPECT_EQ(stats.live_bytes, one_pass.live_bytes);
  for (int k = 0; k < kKeys; k += 97) {
    absl::StatusOr<std::string> got = (*engine)->Get(absl::StrCat("many", k));
    ASSERT_THAT(got, IsOk()) << k;
  }
  ASSERT_THAT((*engine)->Close(), IsOk());
}

// A recovery that starts again (its tables outgrew the budget in the passes it planned: segments
// read whole name their records only as they are read) reports it, and counts the pages and
// time of the start it gave up with the rest.
TEST_P(SummaryRecoveryTest, ARecoveryThatStartsAgainReportsEveryStart) {
  constexpr int kKeys = 100000;
  Options options = StoreOptions(GetParam());
  EngineSeams seams = StoreSeams();
  seams.summary_min_segment_pages = kPagesPerSegment + 1;  // none
  const auto open = ManyKeysStore(options, kKeys, /*overwrite=*/false,
                                  /*value_bytes=*/100, seams);
  ASSERT_NE(open, nullptr);
  auto once = open(/*budget=*/uint64_t{1} << 40);
  ASSERT_THAT(once, IsOk());
  const EngineStats one_pass = (*once)->Stats();
  ASSERT_EQ(one_pass.recovery_passes, 1u);
  ASSERT_EQ(one_pass.recovery_restarts, 0u);
  ASSERT_EQ(one_pass.recovery_segments_summarized, 0u);
  auto engine = open(one_pass.recovery_table_bytes * options.shard_count / 2);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  EXPECT_GE(stats.recovery_passes, 2u);
  EXPECT_EQ(stats.recovery_restarts, 1u);
  EXPECT_GT(stats.recovery_pages_scanned,
            stats.recovery_passes * one_pass.recovery_pages_scanned);
  EXPECT_EQ(stats.live_keys, one_pass.live_keys);
}

// A later pass must read what the first read. A read that fails only then (a summary's, or a
// segment's read whole) is tried again: once it fails (a transient error) Open goes on, and
// finds every key; when it fails every time Open fails with kUnavailable rather than build an
// index from two different logs.
TEST_P(SummaryRecoveryTest, APassThatReadsOtherwiseThanTheFirstFailsOpen) {
  WriteAndClose();
  for (const bool read_all : {false, true}) {
    SCOPED_TRACE(read_all ? "every segment read whole" : "by summaries");
    Options options = StoreOptions(GetParam());
    options.recovery_memory_bytes = 1;
    const EngineSeams seams = StoreSeams(read_all);
    // How many reads an Open in passes makes, without faults.
    uint64_t reads = 0;
    {
      auto device = MemDevice::Open(CopyOf(*storage_), MemOptions());
      ASSERT_THAT(device, IsOk());
      auto faulty = storage::FaultDevice::Create(std::move(*device), {});
      ASSERT_THAT(faulty, IsOk());
      storage::FaultDevice* counted = faulty->get();
      auto engine = Engine::OpenOnDevice(std::move(*faulty), options, seams);
      ASSERT_THAT(engine, IsOk());
      ASSERT_EQ((*engine)->Stats().recovery_passes, kMaxRecoveryPasses);
      reads = counted->fault_stats().reads;
      ASSERT_THAT((*engine)->Close(), IsOk());
    }
    // The last read of recovery is in its last pass. A segment's read that fails is read again
    // a page at a time (segment_read.h): its first page's read fails too, so that the page is
    // unreadable in that read of the pass.
    for (const uint64_t failing : {uint64_t{2}, uint64_t{64}}) {
      SCOPED_TRACE(absl::StrCat(failing, " reads fail from the last one of recovery on"));
      auto device = MemDevice::Open(CopyOf(*storage_), MemOptions());
      ASSERT_THAT(device, IsOk());
      auto faulty = storage::FaultDevice::Create(std::move(*device), {});
      ASSERT_THAT(faulty, IsOk());
      for (uint64_t nth = reads; nth < reads + failing; ++nth) {
        ASSERT_THAT((*faulty)->FailOperation({.nth = nth, .filter = storage::OpFilter::kRead}),
                    IsOk());
      }
      auto engine = Engine::OpenOnDevice(std::move(*faulty), options, seams);
      if (failing == 2) {
        ASSERT_THAT(engine, IsOk()) << "a read that failed once was not tried again";
        ExpectAll(**engine);
        continue;
      }
      EXPECT_THAT(engine, StatusIs(absl::StatusCode::kUnavailable));
      EXPECT_THAT(std::string(engine.status().message()),
                  ::testing::HasSubstr("the device reads differently"));
    }
  }
}

// Compaction frees a segment with free markers, and the map says so later, lazily: a power cut
// between the two leaves the map naming the summary of a log that is gone. Its records must not
// come back (the copies moved elsewhere were cleaned since, and a put whose tombstone compaction
// dropped would be live again). Here forged: free markers newer than the log on the segment's
// last and first pages, the map untouched.
TEST_P(SummaryRecoveryTest, ASegmentFreedAfterItsSummaryIsNotBroughtBack) {
  WriteAndClose();
  const std::map<uint64_t, SegmentScanResult> logs = Logs();
  const auto& [segment, scan] = *logs.begin();
  const Layout layout = StoreLayout();
  const Geometry& g = layout.g;
  std::vector<uint8_t> marker(kPageBytes);
  for (uint32_t index : {g.pages_per_segment - 1, 0u}) {
    EncodeFreePage(marker.data(), g, scan.generation + 1000, layout.seed, g.FirstPageOf(segment) + index,
                   index);
    storage_->Write(g.FirstPageOf(segment) + index, 1, marker.data());
  }
  // What reading every segment finds (on a copy: that Open rewrites the map to say the segment
  // is free), the keys whose records were only in that segment absent.
  auto copy = MemStorage::Create(storage_->lba_bytes(), storage_->lba_count());
  ASSERT_THAT(copy, IsOk());
  const std::vector<uint8_t> bytes = storage_->CopyOut(0, storage_->lba_count());
  (*copy)->Write(0, storage_->lba_count(), bytes.data());
  auto engine = Open(*copy, GetParam(), /*read_all=*/true);
  ASSERT_THAT(engine, IsOk());
  std::map<std::string, std::string> by_scan;
  for (const auto& [key, value] : expected_) {
    absl::StatusOr<std::string> got = (*engine)->Get(key);
    by_scan[key] = got.ok() ? *got : std::string(absl::StatusCodeToString(got.status().code()));
  }
  ASSERT_THAT((*engine)->Close(), IsOk());
  engine = Open(storage_, GetParam());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_summaries_unused, 1u);
  int gone = 0;
  for (const auto& [key, value] : by_scan) {
    absl::StatusOr<std::string> got = (*engine)->Get(key);
    const std::string seen =
        got.ok() ? *got : std::string(absl::StatusCodeToString(got.status().code()));
    EXPECT_EQ(seen, value) << key;
    gone += value == "NOT_FOUND" ? 1 : 0;
  }
  EXPECT_GT(gone, 0) << "the freed segment held no key's only record: the test shows nothing";
}

// Check compares every summary with its log: a summary that names another record than the log
// holds (forged here: one entry's sequence changed, the pages sealed again) is a problem, since
// recovery would take it instead of the log.
TEST_P(SummaryRecoveryTest, CheckFindsASummaryThatDisagreesWithItsLog) {
  WriteAndClose();
  {
    auto engine = Open(storage_, GetParam());
    ASSERT_THAT(engine, IsOk());
    absl::StatusOr<CheckReport> report = (*engine)->Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->problems.empty()) << report->problems.front();
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const std::map<uint64_t, SegmentScanResult> logs = Logs();
  const auto& [segment, scan] = *logs.begin();
  const Layout layout = StoreLayout();
  const Geometry& g = layout.g;
  const uint64_t first_page = g.FirstPageOf(segment) + scan.summary.first;
  std::string summary;
  PageHeader header{};
  for (uint32_t i = 0; i < scan.summary.pages; ++i) {
    const std::vector<uint8_t> page = storage_->CopyOut(first_page + i, 1);
    PageHeader h;
    std::memcpy(&h, page.data(), sizeof(h));
    if (i == 0) header = h;
    summary.append(reinterpret_cast<const char*>(page.data()) + sizeof(PageHeader), h.used_bytes);
  }
  // Entry 0's sequence, one higher.
  uint64_t sequence_and_type = 0;
  const size_t at = sizeof(SummaryHeader) + offsetof(SummaryEntry, sequence_and_type);
  std::memcpy(&sequence_and_type, summary.data() + at, 8);
  ++sequence_and_type;
  std::memcpy(summary.data() + at, &sequence_and_type, 8);
  std::vector<uint8_t> page(kPageBytes);
  for (uint32_t i = 0; i < scan.summary.pages; ++i) {
    EncodeSummaryPage(page.data(), g, layout.seed, summary, i, GenerationOf(header),
                      scan.summary.first, header.head_sequence, first_page + i);
    storage_->Write(first_page + i, 1, page.data());
  }
  auto engine = Open(storage_, GetParam());
  ASSERT_THAT(engine, IsOk());
  absl::StatusOr<CheckReport> report = (*engine)->Check();
  ASSERT_THAT(report, IsOk());
  ASSERT_EQ(report->problems.size(), 1u) << ::testing::PrintToString(report->problems);
  EXPECT_NE(report->problems[0].find(absl::StrCat("segment ", segment, "'s summary")),
            std::string::npos)
      << report->problems[0];
  EXPECT_NE(report->problems[0].find("entry 0"), std::string::npos) << report->problems[0];
}

TEST_P(SummaryRecoveryTest, AStoreReopenedInTheOtherModeFindsTheSameState) {
  WriteAndClose();
  const IndexMode other = GetParam() == IndexMode::kHash ? IndexMode::kOrdered : IndexMode::kHash;
  auto engine = Open(storage_, other);
  ASSERT_THAT(engine, IsOk());
  const EngineStats stats = (*engine)->Stats();
  if (other == IndexMode::kOrdered) {
    // Hash-mode summaries hold no keys, which an ordered index needs: it reads the segments.
    EXPECT_EQ(stats.recovery_segments_summarized, 0u);
    EXPECT_GT(stats.recovery_summaries_unused, 0u);
  } else {
    EXPECT_GT(stats.recovery_segments_summarized, 0u);
    EXPECT_EQ(stats.recovery_summaries_unused, 0u);
  }
  ExpectAll(**engine);
}

// The room a head keeps for its summary grows with the records it appends. A batch reserves its
// pages, its summary entries included, before it appends (with other shards' locks held, it
// may not wait or move): a batch of small records after pages of large ones must not find the
// segment full midway and go on in another segment (a batch never spans segments: recovery
// would drop both halves, or keep one by the summary and drop the other).
TEST_P(SummaryRecoveryTest, ABatchOfSmallRecordsAfterLargeOnesStaysInOneSegment) {
  constexpr int kBatchRecords = 300;  // about three pages of small records
  // A batch starting after `fill` pages of one large record each, in a fresh store.
  for (int fill = 48; fill < static_cast<int>(kLargeSegmentPages); ++fill) {
    SCOPED_TRACE(absl::StrCat("batch after ", fill, " pages"));
    const MemDeviceOptions mem = LargeSegmentMem();
    const Options options = LargeSegmentOptions(GetParam());
    auto created = MemDevice::Create(mem);
    ASSERT_THAT(created, IsOk());
    std::shared_ptr<MemStorage> storage = (*created)->storage();
    auto engine = Engine::OpenOnDevice(std::move(*created), options, StoreSeams());
    ASSERT_THAT(engine, IsOk());
    const std::string large(3500, 'L');
    for (int i = 0; i < fill; ++i) {
      const std::string key = absl::StrCat("large", i);
      WriteOp op{false, key, large};
      ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
    }
    std::vector<std::string> keys;
    for (int i = 0; i < kBatchRecords; ++i) keys.push_back(absl::StrCat("b-", i));
    std::vector<WriteOp> ops;
    for (const std::string& key : keys) ops.push_back({false, key, "value-8"});
    ASSERT_THAT((*engine)->Write(ops, false), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());

    // The batch's records lie in one segment, and a reopen finds it whole.
    const std::vector<uint8_t> bytes = storage->CopyOut(0, storage->lba_count());
    absl::StatusOr<Superblock> superblock = DecodeSuperblock(bytes.data(), kPageBytes);
    ASSERT_THAT(superblock, IsOk());
    const Geometry g = GeometryOf(*superblock);
    std::set<uint64_t> segments;
    int found = 0;
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      ScanSegment(
          g, StoreSeed(superblock->store_id), s,
          [&](uint32_t i) { return bytes.data() + (g.FirstPageOf(s) + i) * g.page_bytes; },
          /*assemble_large_values=*/false, [&](const ScannedRecord& record) {
            if (!record.key.starts_with("b-")) return;
            segments.insert(s);
            ++found;
          });
    }
    EXPECT_EQ(found, kBatchRecords) << "reading the segments drops the batch";
    EXPECT_EQ(segments.size(), 1u) << "the batch spans segments";
    auto device = MemDevice::Open(storage, mem);
    ASSERT_THAT(device, IsOk());
    engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams());
    ASSERT_THAT(engine, IsOk());
    for (const std::string& key : keys) ASSERT_THAT((*engine)->Get(key), IsOk()) << key;
  }
}

// A batch that fits the open page, when the summary's room does not take its entries: the head
// must move on to another segment (it looped, finding "room" for no page and then none for the
// summary, for ever).
TEST_P(SummaryRecoveryTest, ABatchThatFitsTheOpenPageButNotTheSummaryMovesOn) {
  const MemDeviceOptions mem = LargeSegmentMem();
  const Options options = LargeSegmentOptions(GetParam());
  auto created = MemDevice::Create(mem);
  ASSERT_THAT(created, IsOk());
  std::shared_ptr<MemStorage> storage = (*created)->storage();
  auto engine = Engine::OpenOnDevice(std::move(*created), options, StoreSeams());
  ASSERT_THAT(engine, IsOk());
  auto put = [&](const std::string& key, const std::string& value) {
    WriteOp op{false, key, value};
    return (*engine)->Write(std::span<const WriteOp>(&op, 1), false);
  };
  // Pages 0..60 hold a large record each; page 61 a record of 2000 bytes and room for more.
  for (int i = 0; i <= 60; ++i) ASSERT_THAT(put(absl::StrCat("large", i), std::string(3500, 'L')), IsOk());
  ASSERT_THAT(put("medium", std::string(2000, 'M')), IsOk());
  // 70 records of 28 bytes fit the rest of page 61; with them the summary needs a second page,
  // which the segment does not have.
  std::vector<std::string> keys;
  for (int i = 0; i < 70; ++i) keys.push_back(absl::StrCat("k", i < 10 ? "0" : "", i));
  std::vector<WriteOp> ops;
  for (const std::string& key : keys) ops.push_back({false, key, "v"});
  ASSERT_THAT((*engine)->Write(ops, false), IsOk());
  ASSERT_THAT((*engine)->Close(), IsOk());
  auto device = MemDevice::Open(storage, mem);
  ASSERT_THAT(device, IsOk());
  engine = Engine::OpenOnDevice(std::move(*device), options, StoreSeams());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Stats().recovery_summaries_unused, 0u);
  for (const std::string& key : keys) ASSERT_THAT((*engine)->Get(key), IsOk()) << key;
  ASSERT_THAT((*engine)->Get("medium"), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Modes, SummaryRecoveryTest,
                         ::testing::Values(IndexMode::kHash, IndexMode::kOrdered),
                         [](const auto& info) {
                           return info.param == IndexMode::kHash ? "Hash" : "Ordered";
                         });

}  // namespace
}  // namespace nvkv::kv
