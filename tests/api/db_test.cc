// The public C++ API, through nvkv::DB only, on a store file in a fresh directory.
#include "nvkv/db.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class DBTest : public ::testing::Test {
 protected:
  DBTest() { options_.capacity_bytes = 32 << 20; }

  // Opens the store at path_ with options_; fails the test on error.
  std::unique_ptr<DB> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options_, path_);
    EXPECT_THAT(db, IsOk());
    return db.ok() ? std::move(*db) : nullptr;
  }

  // "key00042": fixed width, so byte order is numeric order.
  static std::string Key(int i) { return absl::StrFormat("key%05d", i); }

  testing::TempDir dir_;
  std::string path_ = dir_.File("store");
  Options options_;
};

// ----- Put, Get, Delete -----

// A device can be described without a store on it, and while one is open only for reading.
TEST_F(DBTest, InspectDeviceDescribesTheDeviceWithoutAStore) {
  EXPECT_THAT(DB::InspectDevice(path_), StatusIs(absl::StatusCode::kNotFound));
  auto db = DB::Open(options_, path_);
  ASSERT_THAT(db, IsOk());
  EXPECT_THAT(DB::InspectDevice(path_), StatusIs(absl::StatusCode::kFailedPrecondition))
      << "a store open for writing keeps it off";
  ASSERT_THAT((*db)->Close(), IsOk());
  absl::StatusOr<DeviceStats> device = DB::InspectDevice(path_);
  ASSERT_THAT(device, IsOk());
  EXPECT_EQ(device->path, path_);
  EXPECT_EQ(device->capacity_bytes, options_.capacity_bytes);
  EXPECT_EQ(device->capacity_bytes, device->lba_count * device->lba_bytes);
  EXPECT_FALSE(device->zoned);
  EXPECT_EQ(device->zones.zone_count, 0u);
  EXPECT_FALSE(device->zones.states_reported);
  EXPECT_THAT(DB::InspectDevice(dir_.path()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(DBTest, PutThenGetReturnsTheValue) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  absl::StatusOr<std::string> value = db->Get("k");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "v");
}

TEST_F(DBTest, GetOfAbsentKeyIsNotFound) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Get("never-written"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, PutReplacesTheEarlierValue) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "first"));
  NVKV_ASSERT_OK(db->Put("k", "second"));
  absl::StatusOr<std::string> value = db->Get("k");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "second");
}

TEST_F(DBTest, DeleteMakesTheKeyNotFound) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  NVKV_ASSERT_OK(db->Delete("k"));
  EXPECT_THAT(db->Get("k"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, DeleteOfAbsentKeyIsOk) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Delete("never-written"), IsOk());
}

TEST_F(DBTest, EmptyValueIsAValue) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", ""));
  absl::StatusOr<std::string> value = db->Get("k");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "");
}

TEST_F(DBTest, KeysAndValuesMayHoldAnyBytes) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::string key("a\0b\xff", 4);
  const std::string value("\0\0\x80x", 4);
  NVKV_ASSERT_OK(db->Put(key, value));
  EXPECT_THAT(db->Get(std::string("a", 1)), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<std::string> read = db->Get(key);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, value);
}

TEST_F(DBTest, NonDurableWriteIsVisibleAtOnce) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v", WriteOptions{.durable = false}));
  absl::StatusOr<std::string> value = db->Get("k");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "v");
}

// ----- Limits -----

TEST_F(DBTest, EmptyKeyIsInvalidArgument) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Put("", "v"), StatusIs(absl::StatusCode::kInvalidArgument, "empty key"));
  EXPECT_THAT(db->Get(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(db->Delete(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(DBTest, ACheckpointLogRatioAbove1024IsRefused) {
  options_.checkpoint_log_ratio = 1025;
  EXPECT_THAT(DB::Open(options_, path_),
              StatusIs(absl::StatusCode::kInvalidArgument, "checkpoint_log_ratio"));
  options_.checkpoint_log_ratio = 1024;
  EXPECT_THAT(DB::Open(options_, path_), IsOk());
}

TEST_F(DBTest, KeyOfMaxKeyBytesIsAccepted) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::string key(DB::kMaxKeyBytes, 'k');
  NVKV_ASSERT_OK(db->Put(key, "v"));
  EXPECT_THAT(db->Get(key), IsOk());
}

TEST_F(DBTest, KeyOverMaxKeyBytesIsInvalidArgument) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::string key(DB::kMaxKeyBytes + 1, 'k');
  EXPECT_THAT(db->Put(key, "v"), StatusIs(absl::StatusCode::kInvalidArgument, "1025 bytes"));
  EXPECT_THAT(db->Get(key), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(db->Delete(key), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(DBTest, ValueOfMaxValueBytesIsAccepted) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::string value(db->max_value_bytes(), 'v');
  NVKV_ASSERT_OK(db->Put("k", value));
  absl::StatusOr<std::string> read = db->Get("k");
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(*read, value);
}

TEST_F(DBTest, ValueOverMaxValueBytesIsInvalidArgumentAndWritesNothing) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::string value(size_t{db->max_value_bytes()} + 1, 'v');
  EXPECT_THAT(db->Put("k", value), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(db->Get("k"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, LimitsFollowTheSegmentSize) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  // 4 KiB pages; a 32 MiB store gets 512 KiB segments (64 of them): a quarter of a segment's
  // payload is under 128 KiB.
  const uint64_t segment_bytes = uint64_t{db->GetStats().pages_per_segment} * options_.page_bytes;
  ASSERT_EQ(segment_bytes, 512u << 10);
  EXPECT_GT(db->max_value_bytes(), 0u);
  EXPECT_LT(db->max_value_bytes(), segment_bytes / 4);
  // A batch is bounded by half a segment and by half the page buffers a shard owns, in pages'
  // payload (records of just over half a page take a page each): 32 buffers by default.
  EXPECT_EQ(db->max_batch_bytes(), uint64_t{options_.page_buffers_per_shard} / 2 * (4096 - 40));
  EXPECT_LT(db->max_batch_bytes(), segment_bytes / 2);
}

// segment_bytes 0 (the default) sizes segments to the store: 1 MiB from 64 MiB up, else a 64th of
// it, at least 16 pages; a size that is set is kept.
TEST_F(DBTest, SegmentsAreSizedToTheStoreUnlessSet) {
  struct Case {
    uint64_t capacity_bytes;
    uint32_t segment_bytes;  // as set
    uint64_t expected_bytes;
  };
  for (const Case& c : {Case{128u << 20, 0, 1u << 20}, Case{64u << 20, 0, 1u << 20},
                        Case{16u << 20, 0, 256u << 10}, Case{2u << 20, 0, 64u << 10},
                        Case{16u << 20, 1u << 20, 1u << 20}}) {
    SCOPED_TRACE(absl::StrCat(c.capacity_bytes, " bytes, segment_bytes ", c.segment_bytes));
    std::filesystem::remove(path_);
    options_.capacity_bytes = c.capacity_bytes;
    options_.segment_bytes = c.segment_bytes;
    options_.shard_count = 1;  // 16 segments of 1 MiB are enough for one shard
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    const Stats stats = db->GetStats();
    EXPECT_EQ(uint64_t{stats.pages_per_segment} * stats.page_bytes, c.expected_bytes);
    ASSERT_THAT(db->Close(), IsOk());
    // Reopened with other options, the store keeps what it was formatted with.
    options_.segment_bytes = 8u << 20;
    db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    EXPECT_EQ(uint64_t{db->GetStats().pages_per_segment} * stats.page_bytes, c.expected_bytes);
  }
}

// ----- WriteBatch -----

TEST(WriteBatchTest, CountsEntriesAndBytes) {
  WriteBatch batch;
  EXPECT_EQ(batch.Count(), 0u);
  EXPECT_EQ(batch.ApproximateSize(), 0u);
  batch.Put("key", "value");
  batch.Delete("gone");
  EXPECT_EQ(batch.Count(), 2u);
  EXPECT_EQ(batch.ApproximateSize(), 3 + 5 + 4 + 2 * WriteBatch::kEntryOverheadBytes);
  batch.Clear();
  EXPECT_EQ(batch.Count(), 0u);
  EXPECT_EQ(batch.ApproximateSize(), 0u);
}

TEST(WriteBatchTest, OwnsItsBytes) {
  WriteBatch batch;
  {
    std::string key = "key";
    std::string value = "value";
    batch.Put(key, value);
    key.assign("XXX");
    value.assign("XXXXX");
  }
  WriteBatch copy = batch;
  EXPECT_EQ(copy.Count(), 1u);
  EXPECT_EQ(copy.ApproximateSize(), batch.ApproximateSize());
}

TEST_F(DBTest, WriteAppliesEveryEntryInOrder) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("old", "x"));
  WriteBatch batch;
  batch.Put("a", "1");
  batch.Put("b", "2");
  batch.Delete("old");
  batch.Put("a", "3");  // a later entry for the same key wins
  NVKV_ASSERT_OK(db->Write(batch));
  absl::StatusOr<std::string> a = db->Get("a");
  absl::StatusOr<std::string> b = db->Get("b");
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(*a, "3");
  EXPECT_EQ(*b, "2");
  EXPECT_THAT(db->Get("old"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, EmptyWriteBatchIsOk) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Write(WriteBatch()), IsOk());
}

TEST_F(DBTest, WriteBatchWithABadEntryWritesNothing) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  WriteBatch batch;
  batch.Put("good", "v");
  batch.Put(std::string(DB::kMaxKeyBytes + 1, 'k'), "v");
  EXPECT_THAT(db->Write(batch), StatusIs(absl::StatusCode::kInvalidArgument, "entry 1"));
  EXPECT_THAT(db->Get("good"), StatusIs(absl::StatusCode::kNotFound));
}

// ----- MultiGet -----

TEST_F(DBTest, MultiGetAnswersEachKeyInItsPlace) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("a", "1"));
  NVKV_ASSERT_OK(db->Put("c", "3"));
  const std::vector<std::string_view> keys = {"a", "b", "", "c", "a"};
  std::vector<absl::StatusOr<std::string>> values = db->MultiGet(keys);
  ASSERT_EQ(values.size(), 5u);
  ASSERT_THAT(values[0], IsOk());
  EXPECT_EQ(*values[0], "1");
  EXPECT_THAT(values[1], StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(values[2], StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(values[3], IsOk());
  EXPECT_EQ(*values[3], "3");
  ASSERT_THAT(values[4], IsOk());
  EXPECT_EQ(*values[4], "1");
}

TEST_F(DBTest, MultiGetOfNoKeysIsEmpty) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_TRUE(db->MultiGet({}).empty());
}

// ----- GetAsync and Poll -----

TEST_F(DBTest, GetAsyncCallbackRunsOnlyInsidePoll) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  int calls = 0;
  std::string seen;
  NVKV_ASSERT_OK(db->GetAsync("k", [&](absl::StatusOr<std::string> value) {
    ++calls;
    seen = value.ok() ? *value : value.status().ToString();
  }));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(db->PendingReads(), 1u);
  absl::StatusOr<uint32_t> completed = db->Poll(1);
  ASSERT_THAT(completed, IsOk());
  EXPECT_EQ(*completed, 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, "v");
  EXPECT_EQ(db->PendingReads(), 0u);
}

TEST_F(DBTest, GetAsyncOfAbsentKeyReportsNotFound) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  absl::Status seen = absl::UnknownError("callback did not run");
  NVKV_ASSERT_OK(db->GetAsync("absent", [&](absl::StatusOr<std::string> value) {
    seen = value.status();
  }));
  ASSERT_THAT(db->Poll(1), IsOk());
  EXPECT_THAT(seen, StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, GetAsyncOfBadKeyFailsAndNeverCallsBack) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  bool called = false;
  EXPECT_THAT(db->GetAsync("", [&](absl::StatusOr<std::string>) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(db->PendingReads(), 0u);
  absl::StatusOr<uint32_t> completed = db->Poll(0);
  ASSERT_THAT(completed, IsOk());
  EXPECT_EQ(*completed, 0u);
  EXPECT_FALSE(called);
}

TEST_F(DBTest, PollForMoreThanPendingReturnsWhatFinished) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("a", "1"));
  NVKV_ASSERT_OK(db->Put("b", "2"));
  std::map<std::string, std::string> seen;
  for (const char* key : {"a", "b"}) {
    NVKV_ASSERT_OK(db->GetAsync(key, [&seen, key](absl::StatusOr<std::string> value) {
      seen[key] = value.ok() ? *value : "error";
    }));
  }
  uint32_t completed = 0;
  while (completed < 2) {
    absl::StatusOr<uint32_t> now = db->Poll(100);  // clamped to the 2 in flight
    ASSERT_THAT(now, IsOk());
    completed += *now;
  }
  EXPECT_THAT(seen, ElementsAre(Pair("a", "1"), Pair("b", "2")));
}

TEST_F(DBTest, PendingReadsArePerThread) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  bool called = false;
  NVKV_ASSERT_OK(db->GetAsync("k", [&](absl::StatusOr<std::string>) { called = true; }));
  uint32_t other_pending = 99;
  uint32_t other_completed = 99;
  std::thread other([&] {
    other_pending = db->PendingReads();
    absl::StatusOr<uint32_t> completed = db->Poll(0);
    other_completed = completed.ok() ? *completed : 98;
  });
  other.join();
  EXPECT_EQ(other_pending, 0u);
  EXPECT_EQ(other_completed, 0u);
  EXPECT_FALSE(called);
  ASSERT_THAT(db->Poll(1), IsOk());
  EXPECT_TRUE(called);
}

// ----- Iterator and Scan -----

TEST_F(DBTest, IteratorWalksEveryKeyInOrderAcrossBatches) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  constexpr int kKeys = 2 * Iterator::kBatchKeys + 7;
  for (int i = kKeys - 1; i >= 0; --i) {  // written backwards: order comes from the index
    NVKV_ASSERT_OK(db->Put(Key(i), absl::StrCat("v", i), WriteOptions{.durable = false}));
  }
  std::unique_ptr<Iterator> it = db->NewIterator();
  int i = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++i) {
    ASSERT_LT(i, kKeys);
    EXPECT_EQ(it->key(), Key(i));
    EXPECT_EQ(it->value(), absl::StrCat("v", i));
  }
  EXPECT_EQ(i, kKeys);
  EXPECT_THAT(it->status(), IsOk());
}

TEST_F(DBTest, IteratorSeekFindsFirstKeyAtOrAfterTarget) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (const char* key : {"apple", "banana", "cherry"}) NVKV_ASSERT_OK(db->Put(key, key));
  std::unique_ptr<Iterator> it = db->NewIterator();
  EXPECT_FALSE(it->Valid());  // unpositioned
  it->Seek("b");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key(), "banana");
  it->Seek("banana");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key(), "banana");
  it->Next();
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->key(), "cherry");
  it->Next();
  EXPECT_FALSE(it->Valid());
  it->Seek("d");
  EXPECT_FALSE(it->Valid());
  EXPECT_THAT(it->status(), IsOk());
}

TEST_F(DBTest, IteratorOverEmptyStoreIsNotValid) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  std::unique_ptr<Iterator> it = db->NewIterator();
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  EXPECT_THAT(it->status(), IsOk());
}

// The walk is not a snapshot: writes between batches show up after the position reached, never
// before it, and no key comes twice.
TEST_F(DBTest, IteratorSeesWritesAheadOfItsPositionOnly) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  constexpr int kKeys = 2 * Iterator::kBatchKeys;
  for (int i = 0; i < kKeys; i += 2) NVKV_ASSERT_OK(db->Put(Key(i), "old"));
  std::unique_ptr<Iterator> it = db->NewIterator();
  it->SeekToFirst();
  ASSERT_TRUE(it->Valid());
  ASSERT_EQ(it->key(), Key(0));
  // Odd keys, behind and ahead of the first batch, written after it was read.
  for (int i = 1; i < kKeys; i += 2) NVKV_ASSERT_OK(db->Put(Key(i), "new"));
  std::vector<std::string> walked;
  for (; it->Valid(); it->Next()) walked.emplace_back(it->key());
  ASSERT_THAT(it->status(), IsOk());
  // The first batch held all kBatchKeys even keys, read before any odd key existed. The next
  // batch starts after the last of them, Key(kKeys - 2), where only Key(kKeys - 1) is new.
  std::vector<std::string> expected;
  for (int i = 0; i < kKeys; i += 2) expected.push_back(Key(i));
  expected.push_back(Key(kKeys - 1));
  EXPECT_EQ(walked, expected);
}

TEST_F(DBTest, IteratorInHashModeIsFailedPrecondition) {
  options_.index_mode = IndexMode::kHash;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  std::unique_ptr<Iterator> it = db->NewIterator();
  EXPECT_THAT(it->status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  EXPECT_THAT(it->status(), StatusIs(absl::StatusCode::kFailedPrecondition, "kOrdered"));
}

TEST_F(DBTest, ScanReturnsTheHalfOpenRangeInOrder) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (const char* key : {"a", "b", "c", "d"}) NVKV_ASSERT_OK(db->Put(key, key));
  std::vector<std::pair<std::string, std::string>> out = {{"stale", "entry"}};
  NVKV_ASSERT_OK(db->Scan("b", "d", 10, &out));
  EXPECT_THAT(out, ElementsAre(Pair("b", "b"), Pair("c", "c")));
  NVKV_ASSERT_OK(db->Scan("b", "", 10, &out));
  EXPECT_THAT(out, ElementsAre(Pair("b", "b"), Pair("c", "c"), Pair("d", "d")));
  NVKV_ASSERT_OK(db->Scan("", "", 2, &out));
  EXPECT_THAT(out, ElementsAre(Pair("a", "a"), Pair("b", "b")));
}

TEST_F(DBTest, ScanInHashModeIsFailedPrecondition) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  std::vector<std::pair<std::string, std::string>> out;
  EXPECT_THAT(db->Scan("", "", 10, &out), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// ----- Stats -----

TEST_F(DBTest, StatsCountOperationsAndDescribeTheStore) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("a", "12345"));
  NVKV_ASSERT_OK(db->Put("b", "12345"));
  NVKV_ASSERT_OK(db->Put("c", "12345"));
  NVKV_ASSERT_OK(db->Delete("c"));
  ASSERT_THAT(db->Get("a"), IsOk());
  ASSERT_THAT(db->Get("c"), StatusIs(absl::StatusCode::kNotFound));

  const Stats stats = db->GetStats();
  EXPECT_EQ(stats.live_keys, 2u);
  EXPECT_EQ(stats.puts, 3u);
  EXPECT_EQ(stats.deletes, 1u);
  EXPECT_EQ(stats.gets, 2u);
  EXPECT_GE(stats.user_bytes_written, 3u * 6);
  EXPECT_GT(stats.device_bytes_written, 0u);
  EXPECT_GT(stats.write_amplification, 0.0);
  EXPECT_EQ(stats.page_bytes, options_.page_bytes);
  EXPECT_EQ(stats.pages_per_segment, (32u << 20) / 64 / options_.page_bytes);  // sized to it
  EXPECT_EQ(stats.shard_count, options_.shard_count);
  EXPECT_EQ(stats.index_mode, IndexMode::kHash);
  EXPECT_TRUE(stats.device.kind == DeviceKind::kDirectFile ||
              stats.device.kind == DeviceKind::kSyncFile);
  EXPECT_EQ(stats.device.path, path_);
  EXPECT_GT(stats.device.lba_bytes, 0u);
  EXPECT_EQ(stats.device.capacity_bytes, options_.capacity_bytes);
  EXPECT_EQ(stats.device.capacity_bytes,
            stats.device.lba_count * stats.device.lba_bytes);
  EXPECT_FALSE(stats.device.block_device);
  EXPECT_EQ(stats.device.nsid, 0u);

  EXPECT_THAT(stats.ToString(), HasSubstr("keys: 2 live"));
  const std::string json = stats.ToJson();
  EXPECT_THAT(json, HasSubstr("\"live_keys\":2,"));
  EXPECT_THAT(json, HasSubstr("\"index_mode\":\"hash\""));
  EXPECT_THAT(json, HasSubstr("\"ring\":{"));
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

// Stats::queues says what each kind of queue asked of the kernel: reads started together go
// out in one system call, a synchronous Get in one of its own, and writes and Open have theirs.
TEST_F(DBTest, QueueStatsCountRequestsAndTheSystemCallsThatPushedThem) {
  options_.cache_bytes = 0;  // every read goes to the device
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 16; ++i) NVKV_ASSERT_OK(db->Put(Key(i), "value"));
  const Stats before = db->GetStats();
  EXPECT_GE(before.queues.log_writes.requests, 1u);
  EXPECT_GE(before.queues.log_writes.submitting_calls, 1u);
  EXPECT_GE(before.queues.open.requests, 1u);  // the superblocks at least
  if (before.device.kind == DeviceKind::kSyncFile) {
    GTEST_SKIP() << "no io_uring here: every request is a system call of its own";
  }

  int answered = 0;
  for (int i = 0; i < 16; ++i) {
    NVKV_ASSERT_OK(db->GetAsync(Key(i), [&answered](absl::StatusOr<std::string> value) {
      EXPECT_THAT(value, IsOk());
      ++answered;
    }));
  }
  while (answered < 16) NVKV_ASSERT_OK(db->Poll(1).status());
  const Stats batched = db->GetStats();
  const QueueCalls& reads = batched.queues.reads;
  EXPECT_EQ(reads.requests - before.queues.reads.requests, 16u);
  EXPECT_EQ(reads.requests_submitted - before.queues.reads.requests_submitted, 16u);
  // The first Poll pushed all sixteen in one call.
  EXPECT_EQ(reads.submitting_calls - before.queues.reads.submitting_calls, 1u);
  EXPECT_DOUBLE_EQ(reads.requests_per_submitting_call(), 16.0);

  for (int i = 0; i < 4; ++i) NVKV_ASSERT_OK(db->Get(Key(i)).status());
  const Stats single = db->GetStats();
  EXPECT_EQ(single.queues.reads.requests - reads.requests, 4u);
  EXPECT_EQ(single.queues.reads.submitting_calls - reads.submitting_calls, 4u);
  EXPECT_THAT(single.ToString(), HasSubstr("queue reads: 20 requests in "));
  EXPECT_THAT(single.ToJson(), HasSubstr("\"reads\":{\"requests\":20,"));

  // MultiGet sends its reads together too.
  std::vector<std::string> names;
  for (int i = 0; i < 16; ++i) names.push_back(Key(i));
  const std::vector<std::string_view> keys(names.begin(), names.end());
  for (const absl::StatusOr<std::string>& value : db->MultiGet(keys)) EXPECT_THAT(value, IsOk());
  const Stats multi = db->GetStats();
  EXPECT_EQ(multi.queues.reads.requests_submitted - single.queues.reads.requests_submitted, 16u);
  EXPECT_EQ(multi.queues.reads.submitting_calls - single.queues.reads.submitting_calls, 1u);

  // Poll(16) with sixteen reads in flight submits them and waits for all in one system call: one
  // wake-up, not one per completion.
  answered = 0;
  for (int i = 0; i < 16; ++i) {
    NVKV_ASSERT_OK(db->GetAsync(Key(i), [&answered](absl::StatusOr<std::string> value) {
      EXPECT_THAT(value, IsOk());
      ++answered;
    }));
  }
  absl::StatusOr<uint32_t> polled = db->Poll(16);
  ASSERT_THAT(polled, IsOk());
  EXPECT_EQ(*polled, 16u);
  EXPECT_EQ(answered, 16);
  const Stats waited = db->GetStats();
  EXPECT_EQ(waited.queues.reads.requests - multi.queues.reads.requests, 16u);
  EXPECT_EQ(waited.queues.reads.calls - multi.queues.reads.calls, 1u);
}

// A batch that fills several pages of one head hands the writer consecutive pages at once: they
// go to the device in one write command (a run), not one command each, and read back whole
// after a reopen.
TEST_F(DBTest, ConsecutivePagesOfAHeadGoOutInOneWriteCommand) {
  options_.cache_bytes = 0;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const Stats before = db->GetStats();
  WriteBatch batch;
  // Three 1,000-byte values fill a 4 KiB page: 24 fill eight pages of the batch's head.
  for (int i = 0; i < 24; ++i) batch.Put(Key(i), std::string(1000, static_cast<char>('a' + i)));
  NVKV_ASSERT_OK(db->Write(batch));
  const Stats after = db->GetStats();
  const uint64_t pages = after.pages_written - before.pages_written;
  const uint64_t commands = after.page_write_commands - before.page_write_commands;
  EXPECT_GE(pages, 8u);
  // The pages sealed while the batch held its head go in one command; the last (open) page
  // follows once they are written.
  EXPECT_LE(commands, 2u);
  EXPECT_THAT(after.ToString(), HasSubstr(absl::StrCat(after.page_write_commands,
                                                       " page write commands")));
  EXPECT_THAT(after.ToJson(), HasSubstr(absl::StrCat("\"page_write_commands\":",
                                                     after.page_write_commands)));
  db.reset();
  db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 24; ++i) {
    absl::StatusOr<std::string> value = db->Get(Key(i));
    ASSERT_THAT(value, IsOk());
    EXPECT_EQ(*value, std::string(1000, static_cast<char>('a' + i)));
  }
}

// The process's first Open turns Abseil's mutex deadlock detection off (unless the build keeps
// it): two locks taken in both orders, which it aborts on when set so, pass once a store was
// opened. Each half runs in a fresh process (threadsafe death tests re-execute the binary), so
// that no Open of an earlier test has come first.
TEST_F(DBTest, OpenTurnsMutexDeadlockDetectionOff) {
#ifdef NVKV_MUTEX_DEADLOCK_DETECTION
  GTEST_SKIP() << "this build keeps Abseil's deadlock detection (NVKV_MUTEX_DEADLOCK_DETECTION)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto take_both_orders = [] {
    absl::Mutex a, b;
    {
      absl::MutexLock first(&a);
      absl::MutexLock second(&b);
    }
    absl::MutexLock first(&b);
    absl::MutexLock second(&a);
  };
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
  EXPECT_DEATH(take_both_orders(), "deadlock");  // it is there to be turned off
  EXPECT_EXIT(
      {
        absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options_, path_);
        if (!db.ok()) std::exit(2);
        take_both_orders();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
#endif
}

// ----- Open, reopen, close -----

TEST_F(DBTest, ReopenKeepsDurableWrites) {
  {
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    NVKV_ASSERT_OK(db->Put("k", "v"));
    WriteBatch batch;
    batch.Put("b1", "1");
    batch.Put("b2", "2");
    NVKV_ASSERT_OK(db->Write(batch));
    NVKV_ASSERT_OK(db->Close());
  }
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  std::vector<std::string_view> keys = {"k", "b1", "b2"};
  std::vector<absl::StatusOr<std::string>> values = db->MultiGet(keys);
  ASSERT_EQ(values.size(), 3u);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_THAT(values[i], IsOk()) << keys[i];
  EXPECT_EQ(*values[0], "v");
  EXPECT_EQ(*values[1], "1");
  EXPECT_EQ(*values[2], "2");
  EXPECT_EQ(db->GetStats().live_keys, 3u);
}

TEST_F(DBTest, ReopenKeepsNonDurableWritesAfterFlush) {
  {
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    NVKV_ASSERT_OK(db->Put("k", "v", WriteOptions{.durable = false}));
    NVKV_ASSERT_OK(db->Flush());
    NVKV_ASSERT_OK(db->Close());
  }
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  absl::StatusOr<std::string> value = db->Get("k");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "v");
}

TEST_F(DBTest, DestroyingWithoutCloseKeepsWrites) {
  {
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    NVKV_ASSERT_OK(db->Put("k", "v", WriteOptions{.durable = false}));
  }
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(db->Get("k"), IsOk());
}

TEST_F(DBTest, SecondOpenOfTheSamePathIsFailedPrecondition) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_THAT(DB::Open(options_, path_), StatusIs(absl::StatusCode::kFailedPrecondition));
  NVKV_ASSERT_OK(db->Close());
  // Close released the store.
  EXPECT_THAT(DB::Open(options_, path_), IsOk());
}

TEST_F(DBTest, OpenOfMissingPathWithoutCreateIsNotFound) {
  options_.create_if_missing = false;
  EXPECT_THAT(DB::Open(options_, path_), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DBTest, ErrorIfExistsIsAlreadyExists) {
  {
    std::unique_ptr<DB> db = OpenOrDie();
    ASSERT_NE(db, nullptr);
    NVKV_ASSERT_OK(db->Close());
  }
  options_.error_if_exists = true;
  EXPECT_THAT(DB::Open(options_, path_), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(DBTest, OutOfRangeOptionsAreInvalidArgument) {
  Options bad_shards = options_;
  bad_shards.shard_count = 0;
  EXPECT_THAT(DB::Open(bad_shards, path_), StatusIs(absl::StatusCode::kInvalidArgument));
  Options bad_enum = options_;
  bad_enum.index_mode = static_cast<IndexMode>(7);
  EXPECT_THAT(DB::Open(bad_enum, path_), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DB::Open(options_, ""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(DBTest, EveryCallAfterCloseIsFailedPrecondition) {
  options_.index_mode = IndexMode::kOrdered;
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  NVKV_ASSERT_OK(db->Put("k", "v"));
  NVKV_ASSERT_OK(db->Close());
  constexpr auto kClosed = absl::StatusCode::kFailedPrecondition;
  EXPECT_THAT(db->Put("k", "v"), StatusIs(kClosed));
  EXPECT_THAT(db->Get("k"), StatusIs(kClosed));
  EXPECT_THAT(db->Delete("k"), StatusIs(kClosed));
  WriteBatch batch;
  batch.Put("k", "v");
  EXPECT_THAT(db->Write(batch), StatusIs(kClosed));
  const std::vector<std::string_view> keys = {"k"};
  std::vector<absl::StatusOr<std::string>> values = db->MultiGet(keys);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_THAT(values[0], StatusIs(kClosed));
  EXPECT_THAT(db->GetAsync("k", [](absl::StatusOr<std::string>) {}), StatusIs(kClosed));
  EXPECT_THAT(db->Poll(0), StatusIs(kClosed));
  std::vector<std::pair<std::string, std::string>> out;
  EXPECT_THAT(db->Scan("", "", 10, &out), StatusIs(kClosed));
  std::unique_ptr<Iterator> it = db->NewIterator();
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  EXPECT_THAT(it->status(), StatusIs(kClosed));
  EXPECT_THAT(db->Flush(), StatusIs(kClosed));
  EXPECT_THAT(db->CompactAll(), StatusIs(kClosed));
  EXPECT_THAT(db->Checkpoint(), StatusIs(kClosed));
  EXPECT_THAT(db->Close(), StatusIs(kClosed));
  EXPECT_EQ(db->PendingReads(), 0u);
  EXPECT_EQ(db->GetStats().live_keys, 1u);  // as when Close() began
}

// ----- Maintenance and threads -----

TEST_F(DBTest, FlushAndCompactAllKeepEveryLiveKey) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  for (int i = 0; i < 100; ++i) {
    NVKV_ASSERT_OK(db->Put(Key(i % 10), absl::StrCat(i), WriteOptions{.durable = false}));
  }
  NVKV_ASSERT_OK(db->Flush());
  NVKV_ASSERT_OK(db->CompactAll());
  for (int k = 0; k < 10; ++k) {
    absl::StatusOr<std::string> value = db->Get(Key(k));
    ASSERT_THAT(value, IsOk());
    EXPECT_EQ(*value, absl::StrCat(90 + k));
  }
  EXPECT_EQ(db->GetStats().live_keys, 10u);
}

TEST_F(DBTest, ThreadsWriteAndReadAtOnce) {
  std::unique_ptr<DB> db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeysPerThread; ++i) {
        const std::string key = Key(t * kKeysPerThread + i);
        if (!db->Put(key, key, WriteOptions{.durable = false}).ok()) ++failures;
        absl::StatusOr<std::string> value = db->Get(key);
        if (!value.ok() || *value != key) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(db->GetStats().live_keys, uint64_t{kThreads * kKeysPerThread});
}

}  // namespace
}  // namespace nvkv
