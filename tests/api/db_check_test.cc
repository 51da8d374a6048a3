// DB::Check and DB::ForEachLive, through nvkv::DB only, on a store file in a fresh directory.
// Damage is done the way it happens: bytes of the store file change under the store (pwrite),
// while it is closed or while it is open.
#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nvkv/db.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

constexpr uint64_t kPageBytes = 4096;

class DBCheckTest : public ::testing::Test {
 protected:
  DBCheckTest() {
    options_.capacity_bytes = 32 << 20;
    options_.segment_bytes = 1 << 20;  // values of 150 KB: more than a quarter of the 512 KiB
                                       // segments a 32 MiB store gets by default
    // One shard: one log head, so keys land in one segment in the order they are written.
    options_.shard_count = 1;
    options_.background_compaction = false;
  }

  std::unique_ptr<DB> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options_, path_);
    EXPECT_THAT(db, IsOk());
    return db.ok() ? std::move(*db) : nullptr;
  }

  static std::string Key(int i) { return absl::StrFormat("key%05d", i); }

  // Every pair ForEachLive visits, failing the test on a key visited twice.
  static std::map<std::string, std::string> Visit(DB& db) {
    std::map<std::string, std::string> seen;
    absl::Status status = db.ForEachLive([&](std::string_view key, std::string_view value) {
      const bool inserted = seen.emplace(std::string(key), std::string(value)).second;
      EXPECT_TRUE(inserted) << "visited twice: " << key;
      return absl::OkStatus();
    });
    EXPECT_THAT(status, IsOk());
    return seen;
  }

  // The store page that holds `needle` (found by searching the file's bytes).
  uint64_t PageHolding(std::string_view needle) {
    std::ifstream file(path_, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    const size_t at = bytes.find(needle);
    EXPECT_NE(at, std::string::npos) << needle;
    EXPECT_EQ(bytes.find(needle, at + 1), std::string::npos) << "more than one copy: " << needle;
    return at / kPageBytes;
  }

  // Flips one byte in the middle of page `page` of the store file.
  void DamagePage(uint64_t page) {
    const int fd = open(path_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t at = static_cast<off_t>(page * kPageBytes + kPageBytes / 2);
    char byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, at), 1);
    byte ^= 0x5a;
    ASSERT_EQ(pwrite(fd, &byte, 1, at), 1);
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }

  // Zeroes every page of the clean-close checkpoint (type 6, kv/FORMAT.md "Checkpoint"): the
  // store is then as a crash would have left it (a crash leaves no checkpoint), and Open reads
  // the log.
  void ZeroCheckpoint() {
    const int fd = open(path_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t size = lseek(fd, 0, SEEK_END);
    const std::string zeros(kPageBytes, '\0');
    int zeroed = 0;
    for (off_t at = 0; at < size; at += kPageBytes) {
      uint8_t header[13] = {};
      ASSERT_EQ(pread(fd, header, sizeof(header), at), static_cast<ssize_t>(sizeof(header)));
      if (std::memcmp(header + 8, "NVKP", 4) != 0 || header[12] != 6) continue;
      ASSERT_EQ(pwrite(fd, zeros.data(), zeros.size(), at), static_cast<ssize_t>(zeros.size()));
      ++zeroed;
    }
    EXPECT_GT(zeroed, 0) << "no checkpoint page";
    ASSERT_EQ(fsync(fd), 0);
    close(fd);
  }

  // Writes `before` keys, then `needle` (each durable Put fills and writes a page of its own),
  // then `after` keys, and closes the store.
  void WriteAround(const std::string& needle, int before, int after) {
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    for (int i = 0; i < before; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "before"));
    NVKV_ASSERT_OK(db->Put(needle, "needle-value"));
    for (int i = 0; i < after; ++i) NVKV_ASSERT_OK(db->Put(Key(before + i), "after"));
    NVKV_ASSERT_OK(db->Close());
  }

  static std::string Where(uint64_t page, uint32_t lba_bytes) {
    return absl::StrFormat("segment %d page %d (page %d, LBA 0x%x)", (page - 2) / 256,
                           (page - 2) % 256, page, page * kPageBytes / lba_bytes);
  }

  static uint64_t PagesCounted(const CheckReport& report) {
    return report.pages_valid + report.pages_in_holes + report.pages_stale +
           report.pages_unwritten + report.pages_unreadable;
  }

  testing::TempDir dir_;
  std::string path_ = dir_.File("store");
  Options options_;
};

// ----- Check -----

TEST_F(DBCheckTest, CheckOfAHealthyStoreFindsNoProblem) {
  options_.shard_count = 4;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 200; ++i) {
    NVKV_ASSERT_OK(db->Put(Key(i), absl::StrCat("v", i), WriteOptions{.durable = i % 3 == 0}));
  }
  for (int i = 0; i < 20; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "overwritten"));
  for (int i = 20; i < 30; ++i) NVKV_ASSERT_OK(db->Delete(Key(i)));
  NVKV_ASSERT_OK(db->Put("large", std::string(100000, 'L')));
  WriteBatch batch;
  batch.Put("batch-1", "1");
  batch.Put("batch-2", "2");
  NVKV_ASSERT_OK(db->Write(batch));

  uint64_t last_done = 0, total_seen = 0;
  absl::StatusOr<CheckReport> report = db->Check([&](uint64_t done, uint64_t total) {
    EXPECT_EQ(done, last_done + 1);
    last_done = done;
    total_seen = total;
  });
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->problems, IsEmpty());
  EXPECT_TRUE(report->ok());
  const Stats stats = db->GetStats();
  EXPECT_EQ(report->live_keys_checked, stats.live_keys);
  EXPECT_EQ(report->live_keys_checked, 200u - 10 + 3);
  EXPECT_EQ(report->segments_scanned, stats.segments_total);
  EXPECT_EQ(report->segments_in_use, stats.segments_total - stats.segments_free);
  // Superblocks, segments, and the segment map after them: 16 bytes an entry after a 56-byte
  // page head (kv/FORMAT.md "Segment map").
  const uint64_t map_entries_per_page = (stats.page_bytes - 56) / 16;
  const uint64_t map_pages = (stats.segments_total + map_entries_per_page - 1) / map_entries_per_page;
  EXPECT_EQ(report->pages_scanned,
            2 + stats.segments_total * stats.pages_per_segment + map_pages);
  EXPECT_EQ(PagesCounted(*report), report->pages_scanned);
  EXPECT_EQ(report->pages_in_holes, 0u);
  EXPECT_EQ(report->torn_tails, 0u);
  EXPECT_EQ(last_done, stats.segments_total);
  EXPECT_EQ(total_seen, stats.segments_total);
}

TEST_F(DBCheckTest, CheckNamesADamagedPageThatTheLogGoesOnAfter) {
  WriteAround("needle-key-7f3a9c", /*before=*/5, /*after=*/10);
  const uint64_t page = PageHolding("needle-key-7f3a9c");
  DamagePage(page);

  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  // Closed cleanly, the store has its checkpoint: recovery reads that, not the damaged page, and
  // the index still points at it, as it did before the store was closed. The key reads as data
  // loss, never as absent or as an older value.
  EXPECT_EQ(db->GetStats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(db->GetStats().recovery_damaged_pages, 0u);
  EXPECT_EQ(db->GetStats().live_keys, 16u);
  EXPECT_TRUE(absl::IsDataLoss(db->Get("needle-key-7f3a9c").status()));
  absl::StatusOr<CheckReport> report = db->Check();
  ASSERT_THAT(report, IsOk());
  ASSERT_EQ(report->problems.size(), 2u) << ::testing::PrintToString(report->problems);
  EXPECT_EQ(report->problems[0],
            absl::StrCat(Where(page, db->GetStats().device.lba_bytes),
                         ": checksum mismatch; a hole in the log of generation 1: its records "
                         "are lost, recovery reads the rest of the segment"));
  EXPECT_THAT(report->problems[1],
              HasSubstr("1 index entries point at pages without their record"));
  EXPECT_FALSE(report->ok());
  EXPECT_EQ(report->pages_in_holes, 1u);
  EXPECT_EQ(report->pages_unreadable, 0u);
  EXPECT_EQ(report->torn_tails, 0u);
  EXPECT_EQ(report->live_keys_checked, 15u);
  EXPECT_EQ(PagesCounted(*report), report->pages_scanned);
}

TEST_F(DBCheckTest, CheckCountsADamagedLastPageAsATornTailNotAProblem) {
  WriteAround("needle-key-5e21b0", /*before=*/5, /*after=*/0);
  const uint64_t page = PageHolding("needle-key-5e21b0");
  DamagePage(page);
  // As if the power had failed while the needle's page was being written: it is the last page
  // of the log its head was filling (Close keeps the heads in their segments, with no summary
  // yet), torn, and there is no checkpoint. Recovery reads the segment.
  ZeroCheckpoint();

  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_NE(db->GetStats().recovery_start, RecoveryStart::kCleanClose);
  EXPECT_EQ(db->GetStats().live_keys, 5u);
  absl::StatusOr<CheckReport> report = db->Check();
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->problems, IsEmpty());
  EXPECT_EQ(report->torn_tails, 1u);
  EXPECT_EQ(report->pages_unreadable, 1u);
  EXPECT_EQ(report->live_keys_checked, 5u);
  EXPECT_EQ(PagesCounted(*report), report->pages_scanned);
}

TEST_F(DBCheckTest, CheckNamesTheKeyWhosePageWasDamagedWhileOpenInOrderedMode) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 3; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "before"));
  NVKV_ASSERT_OK(db->Put("needle-key-0c44d1", "needle-value"));
  NVKV_ASSERT_OK(db->Flush());
  const uint64_t page = PageHolding("needle-key-0c44d1");
  DamagePage(page);

  absl::StatusOr<CheckReport> report = db->Check();
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->problems,
              Contains(absl::StrCat("index entry of key \"needle-key-0c44d1\" points at ",
                                    Where(page, db->GetStats().device.lba_bytes),
                                    ": checksum mismatch")));
  EXPECT_EQ(report->live_keys_checked, 3u);
}

TEST_F(DBCheckTest, CheckCountsIndexEntriesWithoutARecordInHashMode) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 3; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "before"));
  NVKV_ASSERT_OK(db->Put("needle-key-93bb20", "needle-value"));
  NVKV_ASSERT_OK(db->Flush());
  DamagePage(PageHolding("needle-key-93bb20"));

  absl::StatusOr<CheckReport> report = db->Check();
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->problems,
              Contains(AllOf(HasSubstr("the index holds 4 entries but the log holds 3 records "
                                       "they point at"),
                             HasSubstr("1 index entries point at pages without their record"))));
}

// ----- ForEachLive -----

TEST_F(DBCheckTest, ForEachLiveVisitsEveryLiveKeyOnceInBothIndexModes) {
  for (IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
    SCOPED_TRACE(IndexModeName(mode));
    testing::TempDir dir;
    path_ = dir.File("store");
    options_.index_mode = mode;
    options_.shard_count = 4;
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    std::map<std::string, std::string> expected;
    for (int i = 0; i < 300; ++i) {
      NVKV_ASSERT_OK(db->Put(Key(i), absl::StrCat("v", i), WriteOptions{.durable = false}));
      expected[Key(i)] = absl::StrCat("v", i);
    }
    for (int i = 0; i < 300; i += 7) {
      NVKV_ASSERT_OK(db->Put(Key(i), "again", WriteOptions{.durable = false}));
      expected[Key(i)] = "again";
    }
    for (int i = 1; i < 300; i += 11) {
      NVKV_ASSERT_OK(db->Delete(Key(i)));
      expected.erase(Key(i));
    }
    const std::string binary_key("\0\n\t\xff", 4);
    NVKV_ASSERT_OK(db->Put(binary_key, ""));
    expected[binary_key] = "";
    std::string large(150000, '\0');
    for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 7);
    NVKV_ASSERT_OK(db->Put("large", large));
    expected["large"] = large;
    WriteBatch batch;
    batch.Put("batch-1", "1");
    batch.Delete(Key(2));
    NVKV_ASSERT_OK(db->Write(batch));
    expected["batch-1"] = "1";
    expected.erase(Key(2));

    EXPECT_EQ(Visit(*db), expected);
    // Compaction moves records between segments; the walk still sees each key once.
    NVKV_ASSERT_OK(db->CompactAll());
    EXPECT_EQ(Visit(*db), expected);
    // And so does a fresh index, rebuilt from the log.
    NVKV_ASSERT_OK(db->Close());
    db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(Visit(*db), expected);
  }
}

TEST_F(DBCheckTest, ForEachLiveReportsProgressPerSegment) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  uint64_t calls = 0, last_total = 0;
  NVKV_ASSERT_OK(db->ForEachLive(
      [](std::string_view, std::string_view) { return absl::OkStatus(); },
      [&](uint64_t done, uint64_t total) {
        ++calls;
        EXPECT_EQ(done, calls);
        last_total = total;
      }));
  EXPECT_EQ(calls, db->GetStats().segments_total);
  EXPECT_EQ(last_total, calls);
}

TEST_F(DBCheckTest, ForEachLiveStopsAtTheVisitorsError) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 10; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "v"));
  int visits = 0;
  absl::Status status = db->ForEachLive([&](std::string_view, std::string_view) {
    return ++visits == 3 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled, "enough"));
  EXPECT_EQ(visits, 3);
}

TEST_F(DBCheckTest, VisitorMayReadButNotCompactOrWalkAgain) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  NVKV_ASSERT_OK(db->ForEachLive([&](std::string_view key, std::string_view value) {
    absl::StatusOr<std::string> read = db->Get(key);
    EXPECT_THAT(read, IsOk());
    if (read.ok()) {
      EXPECT_EQ(*read, value);
    }
    EXPECT_THAT(db->CompactAll(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(db->Checkpoint(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(db->Check(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(db->ForEachLive([](std::string_view, std::string_view) {
      return absl::OkStatus();
    }),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    return absl::OkStatus();
  }));
  // Outside the visitor they work again.
  NVKV_EXPECT_OK(db->CompactAll());
  NVKV_EXPECT_OK(db->Checkpoint());
}

TEST_F(DBCheckTest, CheckAndForEachLiveAfterCloseAreFailedPrecondition) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Close());
  EXPECT_THAT(db->Check(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(db->ForEachLive([](std::string_view, std::string_view) {
    return absl::OkStatus();
  }),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace nvkv
