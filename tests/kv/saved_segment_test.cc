// What a checkpoint saves of the segments holding a log (SaveSegments), restored
// (RestoreSavedSegment) and a log head's segment resumed (ResumeSavedHead): the same table and
// key filters, and nothing a checkpoint never gives.
#include "kv/saved_segment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/key_hash.h"
#include "kv/segment_table.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

// A table without a segment map hands out any free segment: Allocate never waits for one.
bool never_awaits_map = false;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;

// A table as recovery starts with it: nothing recovered yet.
std::unique_ptr<SegmentTable> TableToRecover(uint64_t segments) {
  Geometry geometry;
  geometry.page_bytes = kPageBytes;
  geometry.pages_per_segment = kPagesPerSegment;
  geometry.segment_count = segments;
  return std::make_unique<SegmentTable>(geometry, /*reserve_user=*/0);
}

// A table as a freshly formatted store has it: every segment free.
std::unique_ptr<SegmentTable> FreshTable(uint64_t segments) {
  auto table = TableToRecover(segments);
  table->FinishRecovery();
  return table;
}

// Every segment SaveSegments gives, at once.
std::vector<SavedSegment> AllSaved(SegmentTable& table,
                                   const std::vector<uint64_t>& filters_left_out) {
  std::vector<SavedSegment> all;
  uint64_t next = 0;
  EXPECT_TRUE(SaveSegments(table, next, filters_left_out, [&](const SavedSegment& saved) {
    all.push_back(saved);
    return true;
  }));
  return all;
}

// The clean-close checkpoint may leave a log head's key filter out (its puts are in the head's
// summary so far): ResumeSavedHead then makes the same full-size filter of those puts, and
// refuses (changing nothing) puts that are not as many as the segment holds.
TEST(SavedSegmentTest, AResumedHeadsKeyFilterLeftOutIsRebuiltFromItsPuts) {
  auto table = FreshTable(4);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> head =
      table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(head, IsOk());
  std::vector<KeyHash> puts;
  for (uint64_t i = 0; i < 300; ++i) {
    const KeyHash hash = HashKey(absl::StrCat("key", i));
    table->contents().Note(*head, hash, 10 + i, 40, /*is_delete=*/false);
    puts.push_back(hash);
  }
  table->contents().Note(*head, HashKey("gone"), 400, 30, /*is_delete=*/true);
  const std::vector<SavedSegment> whole = AllSaved(*table, {});
  const std::vector<SavedSegment> left_out = AllSaved(*table, {*head});
  ASSERT_EQ(whole.size(), 1u);
  ASSERT_EQ(left_out.size(), 1u);
  ASSERT_FALSE(whole[0].filter.empty());
  EXPECT_TRUE(left_out[0].filter.empty());
  EXPECT_EQ(left_out[0].fields.filter_words, 0u);

  const auto restored = [&](const SavedSegment& saved) {
    auto again = TableToRecover(4);
    EXPECT_THAT(RestoreSavedSegment(*again, saved), IsOk());
    return again;
  };
  // As many puts as it holds, or one fewer, or one more.
  std::vector<KeyHash> fewer(puts.begin(), puts.end() - 1), more = puts;
  more.push_back(HashKey("never put"));
  auto refused = restored(left_out[0]);
  EXPECT_THAT(ResumeSavedHead(*refused, *head, generation, fewer),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(refused->state(*head), SegmentState::kSealed);
  EXPECT_THAT(ResumeSavedHead(*restored(left_out[0]), *head, generation, more),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ResumeSavedHead(*restored(left_out[0]), *head, generation + 1, puts),
              StatusIs(absl::StatusCode::kDataLoss));
  auto again = restored(left_out[0]);
  ASSERT_THAT(ResumeSavedHead(*again, *head, generation, puts), IsOk());
  EXPECT_EQ(again->state(*head), SegmentState::kOpen);
  const std::vector<SavedSegment> rebuilt = AllSaved(*again, {});
  ASSERT_EQ(rebuilt.size(), 1u);
  EXPECT_EQ(rebuilt[0].filter, whole[0].filter) << "not the filter the head had";
  // A saved filter is taken as it is: no puts are needed.
  auto kept = restored(whole[0]);
  ASSERT_THAT(ResumeSavedHead(*kept, *head, generation, {}), IsOk());
}

// Restored key filters share blocks of memory (more than one here): each answers as the filter
// that was saved, and keeps doing so while the segments beside it in its block are freed.
TEST(SavedSegmentTest, RestoredKeyFiltersAreTheSavedOnesAndOutliveTheirNeighbours) {
  Geometry geometry;
  geometry.page_bytes = kPageBytes;
  geometry.pages_per_segment = 256;
  geometry.segment_count = 160;
  auto table = std::make_unique<SegmentTable>(geometry, 0);
  table->FinishRecovery();
  std::vector<uint64_t> segments;
  for (uint64_t s = 0; s < geometry.segment_count; ++s) {
    uint64_t generation = 0;
    absl::StatusOr<uint64_t> segment =
        table->Allocate(SegmentUse::kCompaction, &generation, &never_awaits_map);
    ASSERT_THAT(segment, IsOk());
    for (uint64_t i = 0; i < 5000; ++i) {
      table->contents().Note(*segment, HashKey(absl::StrCat(*segment, "/", i)), 1 + i, 40, false);
    }
    table->AddLive(*segment, 40);
    table->Seal(*segment);
    segments.push_back(*segment);
  }
  const std::vector<SavedSegment> saved = AllSaved(*table, {});
  ASSERT_EQ(saved.size(), segments.size());
  uint64_t filter_bytes = 0;
  for (const SavedSegment& s : saved) filter_bytes += s.filter.size() * 8;
  ASSERT_GT(filter_bytes, uint64_t{2} << 20) << "the filters fit one block";

  auto again = std::make_unique<SegmentTable>(geometry, 0);
  for (const SavedSegment& s : saved) ASSERT_THAT(RestoreSavedSegment(*again, s), IsOk());
  again->FinishRecovery();
  // Half the segments freed (compaction's way): their filters go, the others' memory stays.
  for (size_t i = 0; i < segments.size() / 2; ++i) {
    const std::optional<uint64_t> victim =
        again->PickVictim(CompactionPolicy::kGreedy, 100000, false);
    ASSERT_TRUE(victim.has_value());
    again->Free(*victim);
  }
  const std::vector<SavedSegment> kept = AllSaved(*again, {});
  ASSERT_EQ(kept.size(), saved.size() - segments.size() / 2);
  for (const SavedSegment& k : kept) {
    const auto same = std::find_if(saved.begin(), saved.end(), [&](const auto& s) {
      return s.fields.segment == k.fields.segment;
    });
    ASSERT_NE(same, saved.end());
    EXPECT_EQ(k.filter, same->filter) << "segment " << k.fields.segment;
  }
}

// A checkpoint gives each segment once, within the store, with a log's counts: anything else
// is refused, and the restore set aside.
TEST(SavedSegmentTest, WhatNoCheckpointGivesIsRefused) {
  auto table = FreshTable(4);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> segment =
      table->Allocate(SegmentUse::kUserPut, &generation, &never_awaits_map);
  ASSERT_THAT(segment, IsOk());
  table->contents().Note(*segment, HashKey("a"), 5, 40, /*is_delete=*/false);
  table->Seal(*segment);
  const std::vector<SavedSegment> saved = AllSaved(*table, {});
  ASSERT_EQ(saved.size(), 1u);

  auto again = TableToRecover(4);
  SavedSegment beyond = saved[0];
  beyond.fields.segment = 4;
  EXPECT_THAT(RestoreSavedSegment(*again, beyond),
              StatusIs(absl::StatusCode::kDataLoss, "beyond the store"));
  SavedSegment no_generation = saved[0];
  no_generation.fields.generation = 0;
  EXPECT_THAT(RestoreSavedSegment(*again, no_generation),
              StatusIs(absl::StatusCode::kDataLoss, "counts"));
  SavedSegment long_summary = saved[0];
  long_summary.fields.summary_pages = kPagesPerSegment;
  EXPECT_THAT(RestoreSavedSegment(*again, long_summary),
              StatusIs(absl::StatusCode::kDataLoss, "counts"));
  SavedSegment odd_filter = saved[0];
  odd_filter.filter.resize(3);
  odd_filter.fields.filter_words = 3;
  EXPECT_THAT(RestoreSavedSegment(*again, odd_filter),
              StatusIs(absl::StatusCode::kDataLoss, "key filter"));
  EXPECT_EQ(again->state(*segment), SegmentState::kFree) << "nothing restored";
  ASSERT_THAT(RestoreSavedSegment(*again, saved[0]), IsOk());
  EXPECT_EQ(again->state(*segment), SegmentState::kSealed);
  EXPECT_THAT(RestoreSavedSegment(*again, saved[0]),
              StatusIs(absl::StatusCode::kDataLoss, "given twice"));
}

}  // namespace
}  // namespace nvkv::kv
