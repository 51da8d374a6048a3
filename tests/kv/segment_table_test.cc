// SegmentTable: the reserve each SegmentUse must leave, live-byte and pending-page accounting,
// victim choice (greedy and LFS cost-benefit), Unpick/Free, the tombstone floor
// (MinSequenceExcept), and held segments.
#include "kv/segment_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/key_hash.h"
#include "kv/segment_map.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

// A table without a segment map hands out any free segment: Allocate never waits for one.
bool never_awaits_map = false;

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

// Segments of 16 pages of 4 KiB: 64 KiB, of which 16 x 4056 bytes hold records.
constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr int64_t kSegmentBytes = kPageBytes * kPagesPerSegment;
constexpr int64_t kPayloadBytes = kPageBytes - sizeof(PageHeader);
// Records a head packs into a segment (about 98% of the payload with ~130-byte records).
constexpr int64_t kDenseBytes = kPagesPerSegment * kPayloadBytes * 98 / 100;

// A table as a freshly formatted store has it: every segment free.
std::unique_ptr<SegmentTable> FreshTable(uint64_t segments, uint32_t reserve_user) {
  Geometry geometry;
  geometry.page_bytes = kPageBytes;
  geometry.pages_per_segment = kPagesPerSegment;
  geometry.segment_count = segments;
  auto table = std::make_unique<SegmentTable>(geometry, reserve_user);
  table->FinishRecovery();
  return table;
}

// What a head left in a segment it filled.
struct Contents {
  int64_t live_bytes = 0;       // of puts still current
  int64_t record_bytes = -1;    // every record written; -1: as many as live_bytes + tombstones
  int64_t tombstone_bytes = 0;  // of deletes (never live)
  uint64_t min_sequence = 1;
  uint64_t max_sequence = 1;
  std::string put_key = "put";              // the key of the puts
  std::string tombstone_key = "tombstone";  // the key of the deletes
};

// Allocates a segment for a head, appends records as `contents` says and seals it.
uint64_t FilledSegment(SegmentTable& table, const Contents& contents) {
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> segment = table.Allocate(SegmentUse::kCompaction, &generation, &never_awaits_map);
  EXPECT_THAT(segment, IsOk());
  const int64_t records = contents.record_bytes >= 0
                              ? contents.record_bytes
                              : contents.live_bytes + contents.tombstone_bytes;
  const int64_t puts = records - contents.tombstone_bytes;
  table.contents().Note(*segment, HashKey(contents.put_key), contents.min_sequence,
                        static_cast<uint32_t>(puts), false);
  table.contents().Note(*segment, HashKey(contents.tombstone_key), contents.max_sequence,
                        static_cast<uint32_t>(contents.tombstone_bytes), true);
  table.AddLive(*segment, contents.live_bytes);
  table.Seal(*segment);
  return *segment;
}

// A segment a head packed full, `live_bytes` of it still live, records [min, max].
uint64_t FilledSegment(SegmentTable& table, int64_t live_bytes, uint64_t min_sequence,
                       uint64_t max_sequence) {
  return FilledSegment(table, {.live_bytes = live_bytes,
                               .record_bytes = std::max(live_bytes, kDenseBytes),
                               .min_sequence = min_sequence,
                               .max_sequence = max_sequence});
}

TEST(SegmentTableTest, AllocateLeavesTheReserveOfEachUse) {
  // 8 segments; user puts leave 3 free, deletes leave 1, compaction may take the last one.
  auto table = FreshTable(8, 3);
  uint64_t generation = 0;
  std::set<uint64_t> taken;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<uint64_t> segment = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
    ASSERT_THAT(segment, IsOk()) << i;
    taken.insert(*segment);
  }
  EXPECT_EQ(table->free_count(), 3u);
  EXPECT_THAT(table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map),
              StatusIs(absl::StatusCode::kResourceExhausted, "store full"));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<uint64_t> segment = table->Allocate(SegmentUse::kUserDelete, &generation, &never_awaits_map);
    ASSERT_THAT(segment, IsOk()) << i;
    taken.insert(*segment);
  }
  EXPECT_EQ(table->free_count(), 1u);
  EXPECT_THAT(table->Allocate(SegmentUse::kUserDelete, &generation, &never_awaits_map),
              StatusIs(absl::StatusCode::kResourceExhausted));
  absl::StatusOr<uint64_t> last = table->Allocate(SegmentUse::kCompaction, &generation, &never_awaits_map);
  ASSERT_THAT(last, IsOk());
  taken.insert(*last);
  EXPECT_EQ(table->free_count(), 0u);
  EXPECT_THAT(table->Allocate(SegmentUse::kCompaction, &generation, &never_awaits_map),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // Every segment was handed out exactly once, and each is now open.
  EXPECT_EQ(taken.size(), 8u);
  for (uint64_t s : taken) EXPECT_EQ(table->state(s), SegmentState::kOpen) << s;
}

TEST(SegmentTableTest, AllocateFillsFromTheFrontWithFreshGenerations) {
  auto table = FreshTable(4, 0);
  table->SetNextGeneration(41);
  uint64_t generation = 0;
  for (uint64_t want = 0; want < 4; ++want) {
    absl::StatusOr<uint64_t> segment = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
    ASSERT_THAT(segment, IsOk());
    EXPECT_EQ(*segment, want);
    EXPECT_EQ(generation, 41 + want);
  }
}

TEST(SegmentTableTest, LiveBytesAreCountedAndResetWhenASegmentIsReused) {
  auto table = FreshTable(4, 0);
  const uint64_t a = FilledSegment(*table, 1000, 1, 10);
  const uint64_t b = FilledSegment(*table, 500, 11, 20);
  EXPECT_EQ(table->live_bytes(a), 1000);
  EXPECT_EQ(table->live_bytes_total(), 1500u);
  table->AddLive(a, -400);  // a record of `a` was overwritten
  table->AddLive(b, 400);   // ... by one that went to `b`
  EXPECT_EQ(table->live_bytes(a), 600);
  EXPECT_EQ(table->live_bytes(b), 900);
  EXPECT_EQ(table->live_bytes_total(), 1500u);

  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 30, false);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, a);
  table->AddLive(a, -600);  // compaction moved its live records out
  table->Free(a);
  EXPECT_EQ(table->live_bytes(a), 0);
  EXPECT_EQ(table->state(a), SegmentState::kFree);
  // Reused: it starts empty, whatever was counted against it before.
  table->AddLive(a, 77);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> again = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(table->live_bytes(*again), 0);
}

TEST(SegmentTableTest, SegmentsWithPagesInFlightAreNotVictims) {
  auto table = FreshTable(4, 0);
  const uint64_t a = FilledSegment(*table, 0, 1, 1);
  table->AddPending(a, 3);  // three page writes not completed yet
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 10, true).has_value());
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kCostBenefit, 10, true).has_value());
  table->AddPending(a, -2);
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 10, true).has_value());
  table->AddPending(a, -1);
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 10, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, a);
}

TEST(SegmentTableTest, OnlySealedSegmentsAreVictimsAndUnpickReturnsThem) {
  auto table = FreshTable(4, 0);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> open = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(open, IsOk());
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 10, false).has_value())
      << "an open segment (a head is filling it) was chosen";
  const uint64_t sealed = FilledSegment(*table, 100, 1, 2);
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 10, false);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, sealed);
  EXPECT_EQ(table->state(sealed), SegmentState::kCompacting);
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 10, false).has_value())
      << "a segment being cleaned was chosen twice";
  table->Unpick(sealed);
  EXPECT_EQ(table->state(sealed), SegmentState::kSealed);
  victim = table->PickVictim(CompactionPolicy::kGreedy, 10, false);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, sealed);
  const uint64_t free_before = table->free_count();
  table->Free(sealed);
  EXPECT_EQ(table->free_count(), free_before + 1);
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 10, false).has_value());
}

TEST(SegmentTableTest, GreedyPicksFewestLiveBytes) {
  auto table = FreshTable(6, 0);
  FilledSegment(*table, 40000, 1, 1);
  FilledSegment(*table, 9000, 2, 2);
  const uint64_t emptiest = FilledSegment(*table, 3000, 3, 3);
  FilledSegment(*table, 20000, 4, 4);
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 100, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, emptiest);
}

TEST(SegmentTableTest, CostBenefitPrefersOldColdSegmentsAtEqualUtilisation) {
  auto table = FreshTable(6, 0);
  // Same live bytes; the later segment (so a tie would not pick it) holds older records.
  const int64_t live = kSegmentBytes / 2;
  FilledSegment(*table, live, 900, 1000);
  const uint64_t cold = FilledSegment(*table, live, 10, 20);
  FilledSegment(*table, live, 500, 600);
  auto victim = table->PickVictim(CompactionPolicy::kCostBenefit, 1001, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, cold);
}

TEST(SegmentTableTest, CostBenefitTradesLiveBytesAgainstAge) {
  auto table = FreshTable(6, 0);
  // Greedy takes the young 40%-live segment; cost-benefit the old 60%-live one, whose free
  // space has stayed free for much longer (LFS: (1-u)*age/(1+u) = 0.25*990 vs 0.43*10).
  const uint64_t young = FilledSegment(*table, kSegmentBytes * 4 / 10, 990, 1000);
  const uint64_t old = FilledSegment(*table, kSegmentBytes * 6 / 10, 1, 10);
  auto greedy = table->PickVictim(CompactionPolicy::kGreedy, 1010, true);
  ASSERT_TRUE(greedy.has_value());
  EXPECT_EQ(*greedy, young);
  table->Unpick(*greedy);
  auto cost_benefit = table->PickVictim(CompactionPolicy::kCostBenefit, 1010, true);
  ASSERT_TRUE(cost_benefit.has_value());
  EXPECT_EQ(*cost_benefit, old);
}

TEST(SegmentTableTest, OnlyWithGarbageSkipsFullSegments) {
  auto table = FreshTable(4, 0);
  const uint64_t full = FilledSegment(*table, kSegmentBytes, 1, 5);
  for (CompactionPolicy policy : {CompactionPolicy::kGreedy, CompactionPolicy::kCostBenefit}) {
    EXPECT_FALSE(table->PickVictim(policy, 100, /*only_with_garbage=*/true).has_value());
  }
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 100, /*only_with_garbage=*/false);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, full);
}

// A segment whose records are all live is "full" although page headers and the slack at the end
// of each page keep its live bytes ~2% under its size: cleaning it would only rewrite it (on a
// full store, forever). Less than a page of dead records gains nothing either.
TEST(SegmentTableTest, OnlyWithGarbageSkipsSegmentsThatCleaningWouldNotShrink) {
  auto table = FreshTable(4, 0);
  const uint64_t all_live = FilledSegment(*table, {.live_bytes = kDenseBytes});
  FilledSegment(*table, {.live_bytes = kDenseBytes - 1000, .record_bytes = kDenseBytes});
  for (CompactionPolicy policy : {CompactionPolicy::kGreedy, CompactionPolicy::kCostBenefit}) {
    EXPECT_FALSE(table->PickVictim(policy, 100, /*only_with_garbage=*/true).has_value());
  }
  // Overwrites kill two pages' worth of its records: now it is worth cleaning.
  table->AddLive(all_live, -2 * kPayloadBytes);
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 100, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, all_live);
}

// Durable writes, one after another, each seal a page holding one record: a segment of such
// pages has no dead record, yet its records repack into a page or two.
TEST(SegmentTableTest, OnlyWithGarbageCleansSparseSegmentsWithoutDeadRecords) {
  auto table = FreshTable(4, 0);
  const uint64_t sparse = FilledSegment(*table, {.live_bytes = kPagesPerSegment * 150});
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 100, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, sparse);
}

// Tombstones are not live bytes, but compaction copies them while an older record of their key
// may remain elsewhere. A segment of such tombstones is not empty: cleaning it frees nothing,
// and a greedy cleaner that took it for empty would pick it (and its copy) again and again.
TEST(SegmentTableTest, TombstonesCountAsKeptWhileOlderRecordsRemain) {
  auto table = FreshTable(5, 0);
  // Old puts, half dead; then deletes (newer) filling a segment.
  const uint64_t old_puts =
      FilledSegment(*table, {.live_bytes = kDenseBytes / 2, .record_bytes = kDenseBytes,
                             .min_sequence = 1, .max_sequence = 1000, .put_key = "k"});
  const uint64_t tombstones =
      FilledSegment(*table, {.tombstone_bytes = kDenseBytes, .min_sequence = 1001,
                             .max_sequence = 2000, .tombstone_key = "k"});
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 3000, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, old_puts);
  EXPECT_FALSE(table->PickVictim(CompactionPolicy::kGreedy, 3000, true).has_value())
      << "the tombstones must stay while older records remain";
  // Once the older records are gone, every tombstone may be dropped: all of it is garbage.
  table->AddLive(old_puts, -kDenseBytes / 2);
  table->Free(old_puts);
  victim = table->PickVictim(CompactionPolicy::kGreedy, 3000, true);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, tombstones);
}

// Only the keys of older records matter: a cold segment of other keys (older than everything,
// fully live, never cleaned) does not make tombstones count as kept.
TEST(SegmentTableTest, TombstonesOfKeysNoOlderSegmentHoldsAreGarbage) {
  auto table = FreshTable(5, 0);
  FilledSegment(*table, {.live_bytes = kDenseBytes, .min_sequence = 1, .max_sequence = 1000,
                         .put_key = "cold"});
  const uint64_t tombstones =
      FilledSegment(*table, {.tombstone_bytes = kDenseBytes, .min_sequence = 1001,
                             .max_sequence = 2000, .tombstone_key = "deleted"});
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 3000, true);
  ASSERT_TRUE(victim.has_value()) << "a segment of droppable tombstones looks full";
  EXPECT_EQ(*victim, tombstones);
}

// MayHoldOlder: a segment may hide a key when it is in use, is not the one asked about, holds
// records older than the tombstone and noted the key; its filter, folded when the segment is
// sealed, still knows every key noted.
TEST(SegmentTableTest, MayHoldOlderFindsEveryKeyOfOlderSegmentsInUse) {
  auto table = FreshTable(5, 0);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> old_segment = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(old_segment, IsOk());
  constexpr uint64_t kKeys = 2000;
  for (uint64_t i = 0; i < kKeys; ++i) {
    table->contents().Note(*old_segment, HashKey(absl::StrCat("key", i)), 100 + i, 30, false);
  }
  absl::StatusOr<uint64_t> victim = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(victim, IsOk());
  table->contents().Note(*victim, HashKey("key0"), 5000, 30, true);
  // Open, then sealed (its filter folded): every key is found.
  for (int sealed = 0; sealed < 2; ++sealed) {
    for (uint64_t i = 0; i < kKeys; ++i) {
      ASSERT_TRUE(table->contents().MayHoldOlder(HashKey(absl::StrCat("key", i)), 5000, *victim))
          << "key" << i << (sealed ? " (sealed)" : " (open)");
    }
    if (!sealed) table->Seal(*old_segment);
  }
  // A few false positives at most among keys it never held.
  uint64_t false_positives = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    false_positives +=
        table->contents().MayHoldOlder(HashKey(absl::StrCat("other", i)), 5000, *victim);
  }
  EXPECT_LT(false_positives, kKeys / 20);
  // Not when its records are all newer than the tombstone, nor for the segment asked about.
  EXPECT_FALSE(table->contents().MayHoldOlder(HashKey("key0"), 100, *victim));
  EXPECT_FALSE(table->contents().MayHoldOlder(HashKey("key0"), 5000, *old_segment));
  // Not once it is freed.
  table->Seal(*victim);
  auto picked = table->PickVictim(CompactionPolicy::kGreedy, 6000, false);
  ASSERT_TRUE(picked.has_value());
  ASSERT_EQ(*picked, *old_segment);
  table->Free(*old_segment);
  EXPECT_FALSE(table->contents().MayHoldOlder(HashKey("key0"), 5000, *victim));
}

TEST(SegmentTableTest, MinSequenceExceptIgnoresFreeSegmentsAndTheVictim) {
  auto table = FreshTable(5, 0);
  EXPECT_EQ(table->contents().MinSequenceExcept(0), UINT64_MAX);
  const uint64_t a = FilledSegment(*table, 10, 5, 50);
  const uint64_t b = FilledSegment(*table, 10, 30, 40);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> open = table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(open, IsOk());
  table->contents().Note(*open, HashKey("a"), 70, 100, false);
  // Out of order: compaction copies keep their old sequence.
  table->contents().Note(*open, HashKey("b"), 60, 100, false);
  EXPECT_EQ(table->contents().MinSequenceExcept(b), 5u);
  EXPECT_EQ(table->contents().MinSequenceExcept(a), 30u);
  // The open segment counts too: a tombstone must not be dropped while a head holds older data.
  table->contents().Note(*open, HashKey("c"), 2, 100, false);
  EXPECT_EQ(table->contents().MinSequenceExcept(a), 2u);
  // A freed segment no longer holds anything.
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 100, false);
  ASSERT_TRUE(victim.has_value());
  table->Free(*victim);
  const uint64_t other = *victim == a ? b : a;
  EXPECT_EQ(table->contents().MinSequenceExcept(*open), other == a ? 5u : 30u);
}

TEST(SegmentTableTest, RecoveredSegmentsKeepStateAndSequences) {
  Geometry geometry;
  geometry.page_bytes = kPageBytes;
  geometry.pages_per_segment = kPagesPerSegment;
  geometry.segment_count = 4;
  SegmentTable table(geometry, 0);
  table.RecoverSegment(0, {.in_use = true, .generation = 1, .min_sequence = 7, .max_sequence = 9, .summary = {}});
  table.RecoverSegment(1, {});
  table.RecoverSegment(2, {.in_use = true, .generation = 2, .min_sequence = 3, .max_sequence = 4, .summary = {}});
  table.RecoverSegment(3, {});
  table.FinishRecovery();
  EXPECT_EQ(table.free_count(), 2u);
  EXPECT_EQ(table.state(0), SegmentState::kSealed);
  EXPECT_EQ(table.state(1), SegmentState::kFree);
  EXPECT_EQ(table.contents().MinSequenceExcept(2), 7u);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> first = table.Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(*first, 1u);  // the lowest free segment first
}

TEST(SegmentTableTest, WaitForFreeWakesWhenASegmentIsFreed) {
  auto table = FreshTable(2, 0);
  const uint64_t a = FilledSegment(*table, 10, 1, 1);
  FilledSegment(*table, 10, 2, 2);
  EXPECT_FALSE(table->WaitForFree(SegmentUse::kCompaction, absl::Milliseconds(20)));
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 10, false);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(*victim, a);
  std::thread cleaner([&] {
    absl::SleepFor(absl::Milliseconds(50));
    table->Free(a);
  });
  EXPECT_TRUE(table->WaitForFree(SegmentUse::kCompaction, absl::Seconds(10)));
  cleaner.join();
  EXPECT_EQ(table->free_count(), 1u);
}

// A writer that found the store full wakes compaction and then waits. When compaction frees
// what it needs before the wait begins, the wait must not sleep through its whole timeout.
TEST(SegmentTableTest, WaitForFreeSeesSegmentsFreedBeforeItStarted) {
  auto table = FreshTable(3, 1);
  FilledSegment(*table, 10, 1, 1);
  FilledSegment(*table, 10, 2, 2);
  uint64_t generation = 0;
  EXPECT_THAT(table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map),
              StatusIs(absl::StatusCode::kResourceExhausted));
  auto victim = table->PickVictim(CompactionPolicy::kGreedy, 10, false);
  ASSERT_TRUE(victim.has_value());
  table->Free(*victim);  // compaction ran between the failed Allocate and the wait
  const absl::Time start = absl::Now();
  EXPECT_TRUE(table->WaitForFree(SegmentUse::kUserPut, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // Not enough for a put (it must leave one), but enough for a delete: no wait either way.
  EXPECT_THAT(table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map), IsOk());
  EXPECT_FALSE(table->WaitForFree(SegmentUse::kUserPut, absl::Milliseconds(10)));
  EXPECT_FALSE(table->WaitForFree(SegmentUse::kUserDelete, absl::Milliseconds(10)));
  EXPECT_TRUE(table->WaitForFree(SegmentUse::kCompaction, absl::Milliseconds(10)));
}

// A table with a segment map (KeepHeld names the kept set in it), every segment free.
struct MappedTable {
  explicit MappedTable(uint64_t segments) {
    geometry.page_bytes = kPageBytes;
    geometry.pages_per_segment = kPagesPerSegment;
    geometry.segment_count = segments;
    map = std::make_unique<SegmentMap>(geometry, /*store_seed=*/7);
    table = std::make_unique<SegmentTable>(geometry, /*reserve_user=*/3, map.get(),
                                           &next_sequence);
    table->FinishRecovery();
  }
  Geometry geometry;
  std::atomic<uint64_t> next_sequence{1};
  std::unique_ptr<SegmentMap> map;
  std::unique_ptr<SegmentTable> table;
};

// Held segments (a checkpoint's) leave the free list, the highest numbers first (heads take the
// lowest), and only as many as leave `keep` free; given back, they are free again.
TEST(SegmentTableTest, HeldSegmentsLeaveTheFreeListUntilGivenBack) {
  MappedTable mapped(8);
  SegmentTable& table = *mapped.table;
  std::vector<uint64_t> held;
  EXPECT_FALSE(table.Hold(3, /*keep=*/6, &held));  // 8 free: 3 held would leave 5
  EXPECT_TRUE(held.empty());
  ASSERT_TRUE(table.Hold(2, /*keep=*/6, &held));
  EXPECT_EQ(held, (std::vector<uint64_t>{7, 6}));
  EXPECT_EQ(table.free_count(), 6u);
  for (const uint64_t s : held) EXPECT_EQ(table.state(s), SegmentState::kHeld) << s;
  table.Unhold(held);
  for (const uint64_t s : held) EXPECT_EQ(table.state(s), SegmentState::kFree) << s;
  EXPECT_EQ(table.free_count(), 8u);
  EXPECT_EQ(table.kept_count(), 0u);
}

// A kept set is replaced whole: the one kept before is free again. Puts may not fill its room.
TEST(SegmentTableTest, AKeptSetReplacesTheOneBeforeAndIsNotRoomForPuts) {
  MappedTable mapped(8);
  SegmentTable& table = *mapped.table;
  const uint64_t usable_all = table.usable_bytes();
  const std::vector<uint32_t> pages = {kPagesPerSegment - 1, 3};
  std::vector<uint64_t> first, second;
  ASSERT_TRUE(table.Hold(2, 0, &first));
  EXPECT_EQ(table.KeepHeld(first, pages, MapState::kBaseCheckpoint).size(), 2u);
  EXPECT_EQ(table.kept_count(), 2u);
  const uint64_t per_segment = usable_all / (8 - 3);  // all but the 3 reserved
  EXPECT_EQ(table.usable_bytes(), usable_all - 2 * per_segment);
  ASSERT_TRUE(table.Hold(2, 0, &second));
  table.KeepHeld(second, pages, MapState::kCheckpoint);
  EXPECT_EQ(table.kept_count(), 2u);
  for (const uint64_t s : first) EXPECT_EQ(table.state(s), SegmentState::kFree) << s;
  for (const uint64_t s : second) EXPECT_EQ(table.state(s), SegmentState::kHeld) << s;
  EXPECT_EQ(table.free_count(), 6u);
}

// A full store refuses a put and leaves the kept set alone; a delete, which is how a full store
// makes room again, takes the kept set back rather than be refused.
TEST(SegmentTableTest, AFullStoreTakesTheKeptSetBackForADeleteNotForAPut) {
  MappedTable mapped(8);
  SegmentTable& table = *mapped.table;
  std::vector<uint64_t> kept, filler;
  ASSERT_TRUE(table.Hold(2, 0, &kept));
  table.KeepHeld(kept, std::vector<uint32_t>{1, 1}, MapState::kBaseCheckpoint);
  ASSERT_TRUE(table.Hold(5, 0, &filler));  // one segment left free
  EXPECT_THAT(table.CheckReserve(SegmentUse::kUserPut),
              StatusIs(absl::StatusCode::kResourceExhausted, "2 hold the checkpoint"));
  EXPECT_EQ(table.kept_count(), 2u);
  EXPECT_THAT(table.CheckReserve(SegmentUse::kUserDelete), IsOk());
  EXPECT_EQ(table.kept_count(), 0u);
  EXPECT_EQ(table.free_count(), 3u);
  for (const uint64_t s : kept) EXPECT_EQ(table.state(s), SegmentState::kFree) << s;
}

}  // namespace
}  // namespace nvkv::kv
