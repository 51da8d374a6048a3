// Index: Insert/Find/Replace/Erase for both implementations; the hash index's tag collisions,
// resizing, backward-shift deletion and page limit; the ordered index's Scan; memory reporting.
//
// Hashes are synthetic: the tests choose which keys share a tag (hash bits 0..31, the part the
// hash index keeps; see kv/hash_index.h).
#include "kv/index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kv/ordered_index.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

// A hash for test key number `i`: random-looking high bits, and low 32 bits (the tag) distinct
// for every i < 2^32 (multiplication by an odd constant is a bijection mod 2^32).
uint64_t SyntheticHash(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  z ^= z >> 31;
  return (z & 0xffffffff00000000) | static_cast<uint32_t>(i * 0x9e3779b9U);
}

// A hash whose tag bits are `tag` and whose other bits are `high`.
uint64_t HashWithTag(uint32_t tag, uint32_t high) { return (uint64_t{high} << 32) | tag; }

std::string Key(uint64_t i) { return absl::StrFormat("key%012d", i); }

// Find's candidates, sorted so tests can compare them exactly.
std::vector<uint64_t> FindPages(const Index& index, uint64_t hash, std::string_view key) {
  std::vector<uint64_t> pages;
  index.Find(hash, key, &pages);
  std::sort(pages.begin(), pages.end());
  return pages;
}

// ---- Both implementations ----

struct IndexKind {
  const char* name;
  std::unique_ptr<Index> (*make)();
};

void PrintTo(const IndexKind& kind, std::ostream* os) { *os << kind.name; }

class IndexTest : public ::testing::TestWithParam<IndexKind> {
 protected:
  std::unique_ptr<Index> index_ = GetParam().make();
};

INSTANTIATE_TEST_SUITE_P(Kinds, IndexTest,
                         ::testing::Values(IndexKind{"Hash", &NewHashIndex},
                                           IndexKind{"Ordered", &NewOrderedIndex}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(IndexTest, EmptyIndexFindsNothing) {
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), IsEmpty());
}

TEST_P(IndexTest, EmptyIndexReportsNoEntriesAndNoMemory) {
  EXPECT_EQ(index_->stats().entries, 0u);
  EXPECT_EQ(index_->stats().memory_bytes, 0u);
}

TEST_P(IndexTest, FindReturnsInsertedPage) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), ElementsAre(42u));
}

TEST_P(IndexTest, FindOfAnotherKeyReturnsNothing) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(2), Key(2)), IsEmpty());
}

TEST_P(IndexTest, FindClearsPagesFirst) {
  std::vector<uint64_t> pages = {7, 8, 9};
  index_->Find(SyntheticHash(1), Key(1), &pages);
  EXPECT_THAT(pages, IsEmpty());
}

TEST_P(IndexTest, FindReusesCapacityOfPages) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  std::vector<uint64_t> pages;
  pages.reserve(4);
  const uint64_t* data = pages.data();
  index_->Find(SyntheticHash(1), Key(1), &pages);
  EXPECT_EQ(pages.data(), data);
  EXPECT_EQ(pages.capacity(), 4u);
}

TEST_P(IndexTest, ReplaceMovesEntryToNewPage) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_TRUE(index_->Replace(SyntheticHash(1), Key(1), 42, 43));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), ElementsAre(43u));
}

TEST_P(IndexTest, ReplaceFromWrongPageChangesNothing) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_FALSE(index_->Replace(SyntheticHash(1), Key(1), 41, 43));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), ElementsAre(42u));
}

TEST_P(IndexTest, ReplaceOfAbsentKeyReturnsFalse) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_FALSE(index_->Replace(SyntheticHash(2), Key(2), 42, 43));
  EXPECT_EQ(index_->stats().entries, 1u);
}

TEST_P(IndexTest, EraseRemovesEntry) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_TRUE(index_->Erase(SyntheticHash(1), Key(1), 42));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), IsEmpty());
  EXPECT_EQ(index_->stats().entries, 0u);
}

TEST_P(IndexTest, EraseAtWrongPageKeepsEntry) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  EXPECT_FALSE(index_->Erase(SyntheticHash(1), Key(1), 41));
  EXPECT_THAT(FindPages(*index_, SyntheticHash(1), Key(1)), ElementsAre(42u));
}

TEST_P(IndexTest, SecondEraseReturnsFalse) {
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 42));
  ASSERT_TRUE(index_->Erase(SyntheticHash(1), Key(1), 42));
  EXPECT_FALSE(index_->Erase(SyntheticHash(1), Key(1), 42));
}

TEST_P(IndexTest, StatsCountLiveEntries) {
  for (uint64_t i = 0; i < 3; ++i) NVKV_ASSERT_OK(index_->Insert(SyntheticHash(i), Key(i), i));
  ASSERT_TRUE(index_->Erase(SyntheticHash(1), Key(1), 1));
  EXPECT_EQ(index_->stats().entries, 2u);
}

TEST_P(IndexTest, ChangesCountEveryChangedEntryAndNothingElse) {
  EXPECT_EQ(index_->changes(), 0u);
  NVKV_ASSERT_OK(index_->Insert(SyntheticHash(1), Key(1), 10));
  EXPECT_EQ(index_->changes(), 1u);
  EXPECT_TRUE(index_->Replace(SyntheticHash(1), Key(1), 10, 11));
  EXPECT_EQ(index_->changes(), 2u);
  // Failed changes, lookups and growth change nothing a Find returns.
  EXPECT_FALSE(index_->Replace(SyntheticHash(1), Key(1), 10, 12));
  EXPECT_FALSE(index_->Erase(SyntheticHash(2), Key(2), 11));
  std::vector<uint64_t> pages;
  index_->Find(SyntheticHash(1), Key(1), &pages);
  index_->Reserve(10'000);
  EXPECT_EQ(index_->changes(), 2u);
  EXPECT_TRUE(index_->Erase(SyntheticHash(1), Key(1), 11));
  EXPECT_EQ(index_->changes(), 3u);
}

TEST_P(IndexTest, ResizePreservesEveryEntry) {
  constexpr uint64_t kEntries = 1'000'000;
  for (uint64_t i = 0; i < kEntries; ++i) {
    ASSERT_THAT(index_->Insert(SyntheticHash(i), Key(i), i * 3), IsOk()) << "entry " << i;
  }
  ASSERT_EQ(index_->stats().entries, kEntries);
  std::vector<uint64_t> pages;
  for (uint64_t i = 0; i < kEntries; ++i) {
    index_->Find(SyntheticHash(i), Key(i), &pages);
    ASSERT_THAT(pages, ElementsAre(i * 3)) << "entry " << i;
  }
}

// A checkpoint walks the index in pieces, letting its lock go between them (SaveSome): the
// pieces, whatever their sizes, give the entries of one walk, in its order, each once, and the
// walk ends where the entries do (an index stopped at its last entry is done).
TEST_P(IndexTest, ASavedWalkInPiecesGivesTheWholeWalk) {
  for (uint64_t i = 0; i < 5000; ++i) {
    ASSERT_THAT(index_->Insert(SyntheticHash(i), Key(i), i * 3), IsOk());
  }
  for (uint64_t i = 0; i < 5000; i += 7) index_->Erase(SyntheticHash(i), Key(i), i * 3);
  std::vector<std::pair<std::string, uint64_t>> whole;
  index_->ForEachSaved(
      [&](std::string_view key, uint64_t word) { whole.emplace_back(std::string(key), word); });
  ASSERT_EQ(whole.size(), index_->stats().entries);
  for (const size_t piece : {size_t{1}, size_t{2}, size_t{999}, whole.size() - 1, whole.size()}) {
    SCOPED_TRACE(absl::StrFormat("pieces of %d", piece));
    std::vector<std::pair<std::string, uint64_t>> pieces;
    Index::SaveCursor cursor;
    size_t calls = 0;
    bool done = false;
    while (!done && calls <= whole.size() + 1) {
      ++calls;
      size_t in_piece = 0;
      done = index_->SaveSome(cursor, [&](std::string_view key, uint64_t word) {
        pieces.emplace_back(std::string(key), word);
        return ++in_piece < piece;
      });
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(pieces, whole);
    EXPECT_EQ(calls, (whole.size() + piece - 1) / piece);
  }
}

TEST_P(IndexTest, ReserveKeepsExistingEntries) {
  for (uint64_t i = 0; i < 100; ++i) NVKV_ASSERT_OK(index_->Insert(SyntheticHash(i), Key(i), i));
  index_->Reserve(100'000);
  EXPECT_EQ(index_->stats().entries, 100u);
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_THAT(FindPages(*index_, SyntheticHash(i), Key(i)), ElementsAre(i)) << "entry " << i;
  }
}

// ---- Hash index ----

TEST(HashIndexTest, CandidatesAreNotExact) {
  EXPECT_FALSE(NewHashIndex()->exact());
  EXPECT_FALSE(NewHashIndex()->ordered());
}

TEST(HashIndexTest, MakeRoomForGrowsOnceAheadOfTheInserts) {
  auto index = NewHashIndex();
  for (uint64_t i = 0; i < 1000; ++i) NVKV_ASSERT_OK(index->Insert(SyntheticHash(i), Key(i), i));
  NVKV_ASSERT_OK(index->MakeRoomFor(50'000));
  const uint64_t grown = index->stats().memory_bytes;
  EXPECT_GE(grown, 51'000 * sizeof(uint64_t));  // at most 0.9 full after the inserts
  for (uint64_t i = 1000; i < 51'000; ++i) {
    ASSERT_THAT(index->Insert(SyntheticHash(i), Key(i), i), IsOk()) << "entry " << i;
    ASSERT_EQ(index->stats().memory_bytes, grown) << "the table grew again at entry " << i;
  }
  NVKV_ASSERT_OK(index->MakeRoomFor(0));
  EXPECT_EQ(index->stats().memory_bytes, grown);
  for (uint64_t i = 0; i < 51'000; i += 999) {
    EXPECT_THAT(FindPages(*index, SyntheticHash(i), Key(i)), ElementsAre(i)) << "entry " << i;
  }
}

TEST(HashIndexTest, MakeRoomForMoreThanATableCanHoldChangesNothing) {
  auto index = NewHashIndex();
  for (uint64_t i = 0; i < 100; ++i) NVKV_ASSERT_OK(index->Insert(SyntheticHash(i), Key(i), i));
  const IndexStats before = index->stats();
  EXPECT_THAT(index->MakeRoomFor(uint64_t{1} << 32),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(index->stats().memory_bytes, before.memory_bytes);
  EXPECT_EQ(index->stats().entries, 100u);
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_THAT(FindPages(*index, SyntheticHash(i), Key(i)), ElementsAre(i)) << "entry " << i;
  }
}

TEST(HashIndexTest, ScanIsUnimplemented) {
  auto index = NewHashIndex();
  std::vector<std::pair<std::string, uint64_t>> out = {{"x", 1}};
  EXPECT_THAT(index->Scan("", false, 10, &out), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(out, IsEmpty());
}

TEST(HashIndexTest, KeysSharingATagAreBothCandidates) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 10));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 20));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 1), "a"), ElementsAre(10u, 20u));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 2), "b"), ElementsAre(10u, 20u));
}

TEST(HashIndexTest, HashesDifferingInTagBitsAreNotCandidates) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 10));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcc, 1), "b"), IsEmpty());
}

TEST(HashIndexTest, ReplaceOfSharedTagChangesOnlyEntryAtOldPage) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 10));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 20));
  EXPECT_TRUE(index->Replace(HashWithTag(0xabcd, 2), "b", 20, 30));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 1), "a"), ElementsAre(10u, 30u));
}

TEST(HashIndexTest, EraseOfSharedTagRemovesOnlyEntryAtPage) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 10));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 20));
  EXPECT_TRUE(index->Erase(HashWithTag(0xabcd, 1), "a", 10));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 2), "b"), ElementsAre(20u));
}

TEST(HashIndexTest, SameTagOnSamePageGivesOneCandidatePerEntry) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 7));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 7));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 1), "a"), ElementsAre(7u, 7u));
}

TEST(HashIndexTest, ReplaceOfDuplicateEntryChangesExactlyOne) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 7));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 7));
  EXPECT_TRUE(index->Replace(HashWithTag(0xabcd, 2), "b", 7, 8));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 1), "a"), ElementsAre(7u, 8u));
}

TEST(HashIndexTest, EraseOfDuplicateEntryRemovesExactlyOne) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 1), "a", 7));
  NVKV_ASSERT_OK(index->Insert(HashWithTag(0xabcd, 2), "b", 7));
  EXPECT_TRUE(index->Erase(HashWithTag(0xabcd, 1), "a", 7));
  EXPECT_THAT(FindPages(*index, HashWithTag(0xabcd, 2), "b"), ElementsAre(7u));
  EXPECT_EQ(index->stats().entries, 1u);
}

TEST(HashIndexTest, EntriesOfOneTagComeNewestFirstThroughGrowthAndErase) {
  auto index = NewHashIndex();
  for (uint32_t i = 0; i < 5; ++i) {
    NVKV_ASSERT_OK(index->Insert(HashWithTag(0x5555, i), "", 100 + i));
  }
  // Many other entries: the table grows several times, moving every entry.
  for (uint32_t i = 0; i < 5000; ++i) {
    NVKV_ASSERT_OK(index->Insert(SyntheticHash(i), Key(i), i));
  }
  std::vector<uint64_t> pages;
  index->Find(HashWithTag(0x5555, 0), "", &pages);
  EXPECT_THAT(pages, ElementsAre(104u, 103u, 102u, 101u, 100u));
  EXPECT_TRUE(index->Replace(HashWithTag(0x5555, 0), "", 102, 7));
  EXPECT_TRUE(index->Erase(HashWithTag(0x5555, 0), "", 103));
  index->Find(HashWithTag(0x5555, 0), "", &pages);
  EXPECT_THAT(pages, ElementsAre(104u, 7u, 101u, 100u));
}

// The checkpoint saves the table's slot words (ForEachSaved) and Open restores them one by one
// (RestoreEntry), into a table reserved for that many entries: a table of another size than the
// saved one. Restored, it answers every Find as the saved one did, candidates in the same order
// (a tag's newest entry first), whatever the sizes, with tags shared by several entries and holes
// left by erases.
TEST(HashIndexTest, RestoredSavedEntriesAnswerAsTheSavedTable) {
  std::mt19937_64 random(7);
  for (const uint64_t keys : {1u, 10u, 1000u, 20000u}) {
    SCOPED_TRACE(absl::StrFormat("%d keys", keys));
    auto saved = NewHashIndex();
    std::vector<uint64_t> hashes;
    for (uint64_t i = 0; i < keys; ++i) {
      // One in eight shares its tag with an earlier key.
      uint64_t hash = SyntheticHash(i);
      if (i % 8 == 7) hash = HashWithTag(static_cast<uint32_t>(hashes[random() % i]), 1);
      hashes.push_back(hash);
      ASSERT_THAT(saved->Insert(hash, Key(i), 2 * i + 1), IsOk());
    }
    for (uint64_t i = 0; i < keys; i += 5) saved->Erase(hashes[i], Key(i), 2 * i + 1);
    std::vector<uint64_t> words;
    saved->ForEachSaved([&](std::string_view, uint64_t word) { words.push_back(word); });
    ASSERT_EQ(words.size(), saved->stats().entries);
    // The same words in another order that keeps each tag's in theirs (RestoreEntry's contract):
    // the restore must not count on the saved order.
    std::vector<uint64_t> scrambled = words;
    std::shuffle(scrambled.begin(), scrambled.end(), random);
    std::map<uint32_t, std::vector<uint64_t>> by_tag;  // each tag's words in the saved order
    for (const uint64_t word : words) by_tag[static_cast<uint32_t>(word >> 32)].push_back(word);
    std::map<uint32_t, size_t> next_of_tag;
    for (uint64_t& word : scrambled) {
      const uint32_t tag = static_cast<uint32_t>(word >> 32);
      word = by_tag[tag][next_of_tag[tag]++];
    }
    // Reserved as Open does, smaller (it grows while restoring) and larger; then scrambled.
    struct Restore {
      uint64_t reserve;
      const std::vector<uint64_t>* order;
    };
    for (const Restore& r : {Restore{words.size(), &words}, Restore{words.size() / 3, &words},
                             Restore{words.size() * 3, &words},
                             Restore{words.size(), &scrambled}}) {
      const uint64_t reserve = r.reserve;
      auto restored = NewHashIndex();
      restored->Reserve(reserve);
      for (const uint64_t word : *r.order) {
        ASSERT_THAT(restored->RestoreEntry({}, word), IsOk());
      }
      EXPECT_EQ(restored->stats().entries, words.size());
      std::vector<uint64_t> want, got;
      for (uint64_t i = 0; i < keys; ++i) {
        saved->Find(hashes[i], Key(i), &want);
        restored->Find(hashes[i], Key(i), &got);
        ASSERT_EQ(got, want) << "key " << i << ", reserved for " << reserve
                             << (r.order == &words ? "" : ", scrambled");
      }
      std::vector<uint64_t> again;
      restored->ForEachSaved([&](std::string_view, uint64_t word) { again.push_back(word); });
      std::vector<uint64_t> sorted_again = again, sorted_words = words;
      std::sort(sorted_again.begin(), sorted_again.end());
      std::sort(sorted_words.begin(), sorted_words.end());
      EXPECT_EQ(sorted_again, sorted_words);
    }
  }
}

// Two entries with one home, restored larger tag first: the second must go before the first,
// not after it where the restore's shortcut would put an entry that comes in order.
TEST(HashIndexTest, AnEntryRestoredOutOfOrderGoesInItsPlace) {
  // The slot word (tag, page) of each hash, as ForEachSaved gives it.
  const auto word_of = [](uint64_t hash) {
    auto index = NewHashIndex();
    EXPECT_THAT(index->Insert(hash, "", 1), IsOk());
    uint64_t word = 0;
    index->ForEachSaved([&](std::string_view, uint64_t w) { word = w; });
    return word;
  };
  // A small table (16 slots) homes a tag by its top 4 bits: find two hashes sharing them.
  const uint64_t first = SyntheticHash(0);
  const uint64_t first_word = word_of(first);
  uint64_t second = 0, second_word = 0;
  for (uint64_t i = 1; second_word == 0; ++i) {
    const uint64_t word = word_of(SyntheticHash(i));
    if (word >> 60 == first_word >> 60 && word >> 32 != first_word >> 32) {
      second = SyntheticHash(i);
      second_word = word;
    }
  }
  const bool first_smaller = first_word < second_word;
  const uint64_t smaller = first_smaller ? first : second;
  const uint64_t larger = first_smaller ? second : first;
  const uint64_t smaller_word = std::min(first_word, second_word) + 10;  // pages 11
  const uint64_t larger_word = std::max(first_word, second_word) + 20;   // and 21
  auto restored = NewHashIndex();
  restored->Reserve(4);
  ASSERT_THAT(restored->RestoreEntry({}, larger_word), IsOk());
  ASSERT_THAT(restored->RestoreEntry({}, smaller_word), IsOk());
  EXPECT_THAT(FindPages(*restored, smaller, ""), ElementsAre(11u));
  EXPECT_THAT(FindPages(*restored, larger, ""), ElementsAre(21u));
}

TEST(HashIndexTest, ThousandKeysSharingOneTagAreAllCandidates) {
  auto index = NewHashIndex();
  std::vector<uint64_t> expected;
  for (uint32_t i = 0; i < 1000; ++i) {
    NVKV_ASSERT_OK(index->Insert(HashWithTag(0x12345678, i), Key(i), 1000 + i));
    expected.push_back(1000 + i);
  }
  EXPECT_EQ(FindPages(*index, HashWithTag(0x12345678, 0), Key(0)), expected);
}

TEST(HashIndexTest, LargestPageBelowLimitIsStored) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(SyntheticHash(1), Key(1), kHashIndexPageLimit - 1));
  EXPECT_THAT(FindPages(*index, SyntheticHash(1), Key(1)), ElementsAre(kHashIndexPageLimit - 1));
}

TEST(HashIndexTest, InsertOfPageAtLimitFailsWithInvalidArgument) {
  auto index = NewHashIndex();
  EXPECT_THAT(index->Insert(SyntheticHash(1), Key(1), kHashIndexPageLimit),
              StatusIs(absl::StatusCode::kInvalidArgument, "31-bit page numbers"));
  EXPECT_EQ(index->stats().entries, 0u);
}

TEST(HashIndexTest, ReplaceToPageAtLimitReturnsFalseAndKeepsEntry) {
  auto index = NewHashIndex();
  NVKV_ASSERT_OK(index->Insert(SyntheticHash(1), Key(1), 5));
  EXPECT_FALSE(index->Replace(SyntheticHash(1), Key(1), 5, kHashIndexPageLimit));
  EXPECT_THAT(FindPages(*index, SyntheticHash(1), Key(1)), ElementsAre(5u));
}

TEST(HashIndexTest, ReservedTableTakesReservedEntriesWithoutGrowing) {
  auto index = NewHashIndex();
  index->Reserve(1'000'000);
  const uint64_t reserved_bytes = index->stats().memory_bytes;
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    ASSERT_THAT(index->Insert(SyntheticHash(i), Key(i), i), IsOk()) << "entry " << i;
  }
  EXPECT_EQ(index->stats().memory_bytes, reserved_bytes);
  // ceil(1,000,000 / 0.9) = 1,111,112 slots of 8 bytes: 8.9 bytes per key.
  EXPECT_EQ(reserved_bytes, 1'111'112u * 8);
}

TEST(HashIndexTest, GrownTableUsesBetween8And12BytesPerKey) {
  auto index = NewHashIndex();
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    ASSERT_THAT(index->Insert(SyntheticHash(i), Key(i), i), IsOk()) << "entry " << i;
  }
  // Load stays in [0.9 / 1.3, 0.9] once grown: 8.9 to 11.6 bytes per 8-byte slot.
  const double bytes_per_key = static_cast<double>(index->stats().memory_bytes) / 1'000'000;
  EXPECT_GE(bytes_per_key, 8.0 / 0.9);
  EXPECT_LE(bytes_per_key, 8.0 * 1.3 / 0.9 + 0.01);
}

// Random Insert/Erase/Replace/Find against a multimap from tag bits to pages. Few tags and few
// pages make long runs, duplicates and (in the small tables of early rounds) runs that wrap
// past the last slot, so backward-shift deletion is exercised at every position.
TEST(HashIndexTest, RandomOperationsMatchMultimapModel) {
  uint64_t seed = std::random_device()();
  if (const char* env = std::getenv("NVKV_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  SCOPED_TRACE(absl::StrFormat("seed %d (replay with NVKV_TEST_SEED=%d)", seed, seed));
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  std::vector<uint32_t> hot_tags(64);
  for (uint32_t& tag : hot_tags) tag = static_cast<uint32_t>(rng());
  auto random_tag = [&] {
    return uniform(2) == 0 ? hot_tags[uniform(hot_tags.size())] : static_cast<uint32_t>(rng());
  };
  auto hash_of = [&](uint32_t tag) { return HashWithTag(tag, static_cast<uint32_t>(rng())); };
  // The model keeps each tag's entries in insertion order; Find returns them newest first.
  using Model = std::map<uint32_t, std::vector<uint64_t>>;
  auto check_tag = [](const Index& index, const Model& model, uint32_t tag, uint32_t high) {
    std::vector<uint64_t> expected;
    if (auto it = model.find(tag); it != model.end()) {
      expected.assign(it->second.rbegin(), it->second.rend());
    }
    std::vector<uint64_t> found;
    index.Find(HashWithTag(tag, high), "", &found);
    return found == expected;
  };
  auto model_size = [](const Model& model) {
    size_t n = 0;
    for (const auto& [tag, pages] : model) n += pages.size();
    return n;
  };

  for (int round = 0; round < 40; ++round) {
    auto index = NewHashIndex();
    Model model;
    const uint64_t target_entries = 1 + uniform(round < 20 ? 60 : 3000);
    for (int op = 0; op < 20'000; ++op) {
      const uint64_t dice = uniform(100);
      const bool grow = model_size(model) < target_entries;
      if (dice < (grow ? 60u : 35u)) {
        const uint32_t tag = random_tag();
        const uint64_t page = uniform(16);
        ASSERT_THAT(index->Insert(hash_of(tag), "", page), IsOk()) << "round " << round;
        model[tag].push_back(page);
      } else if (dice < 85) {
        // Erase or Replace an existing entry (or, one time in eight, a random one). Of equal
        // entries either may go: they are alike.
        uint32_t tag = random_tag();
        uint64_t page = uniform(16);
        if (!model.empty() && uniform(8) != 0) {
          auto it = std::next(model.begin(), static_cast<long>(uniform(model.size())));
          tag = it->first;
          page = it->second[uniform(it->second.size())];
        }
        std::vector<uint64_t>& pages = model[tag];
        auto found = std::find(pages.begin(), pages.end(), page);
        if (dice < 70) {
          ASSERT_EQ(index->Erase(hash_of(tag), "", page), found != pages.end())
              << "round " << round;
          if (found != pages.end()) pages.erase(found);
        } else {
          const uint64_t new_page = uniform(16);
          ASSERT_EQ(index->Replace(hash_of(tag), "", page, new_page), found != pages.end())
              << "round " << round;
          if (found != pages.end()) *found = new_page;
        }
        if (pages.empty()) model.erase(tag);
      } else {
        const uint32_t tag = random_tag();
        ASSERT_TRUE(check_tag(*index, model, tag, static_cast<uint32_t>(rng())))
            << "round " << round << " op " << op << " tag " << tag;
      }
      ASSERT_EQ(index->stats().entries, model_size(model)) << "round " << round << " op " << op;
    }
    for (const auto& [tag, pages] : model) {
      ASSERT_TRUE(check_tag(*index, model, tag, 0)) << "round " << round;
    }
  }
}

// ---- Ordered index ----

class OrderedIndexTest : public ::testing::Test {
 protected:
  void InsertKeys(std::initializer_list<std::string_view> keys) {
    uint64_t page = 100;
    for (std::string_view key : keys) NVKV_ASSERT_OK(index_->Insert(0, key, page++));
  }
  std::vector<std::pair<std::string, uint64_t>> ScanOrDie(std::string_view start, bool exclusive,
                                                          size_t limit) {
    std::vector<std::pair<std::string, uint64_t>> out;
    EXPECT_THAT(index_->Scan(start, exclusive, limit, &out), IsOk());
    return out;
  }

  std::unique_ptr<Index> index_ = NewOrderedIndex();
};

TEST_F(OrderedIndexTest, CandidatesAreExactAndOrdered) {
  EXPECT_TRUE(index_->exact());
  EXPECT_TRUE(index_->ordered());
}

TEST_F(OrderedIndexTest, FindIgnoresOtherKeysWithTheSameHash) {
  NVKV_ASSERT_OK(index_->Insert(5, "a", 1));
  NVKV_ASSERT_OK(index_->Insert(5, "b", 2));
  EXPECT_THAT(FindPages(*index_, 5, "a"), ElementsAre(1u));
}

TEST_F(OrderedIndexTest, InsertOfExistingKeyFailsAndKeepsEntry) {
  NVKV_ASSERT_OK(index_->Insert(0, "a", 1));
  EXPECT_THAT(index_->Insert(0, "a", 2), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(FindPages(*index_, 0, "a"), ElementsAre(1u));
}

TEST_F(OrderedIndexTest, StoresPagesBeyondHashIndexLimit) {
  NVKV_ASSERT_OK(index_->Insert(0, "a", uint64_t{1} << 40));
  EXPECT_THAT(FindPages(*index_, 0, "a"), ElementsAre(uint64_t{1} << 40));
}

TEST_F(OrderedIndexTest, ScanReturnsKeysFromStartInOrder) {
  InsertKeys({"c", "a", "d", "b"});  // pages 100..103
  EXPECT_THAT(ScanOrDie("b", false, 10),
              ElementsAre(Pair("b", 103u), Pair("c", 100u), Pair("d", 102u)));
}

TEST_F(OrderedIndexTest, ExclusiveScanSkipsStartKey) {
  InsertKeys({"a", "b", "c"});
  EXPECT_THAT(ScanOrDie("b", true, 10), ElementsAre(Pair("c", 102u)));
}

TEST_F(OrderedIndexTest, ExclusiveScanFromAbsentKeyStartsAtNextKey) {
  InsertKeys({"a", "b", "c"});
  EXPECT_THAT(ScanOrDie("bb", true, 10), ElementsAre(Pair("c", 102u)));
}

TEST_F(OrderedIndexTest, ScanStopsAtLimit) {
  InsertKeys({"a", "b", "c", "d"});
  EXPECT_THAT(ScanOrDie("", false, 2), ElementsAre(Pair("a", 100u), Pair("b", 101u)));
}

TEST_F(OrderedIndexTest, ScanWithZeroLimitReturnsNothing) {
  InsertKeys({"a", "b"});
  EXPECT_THAT(ScanOrDie("", false, 0), IsEmpty());
}

TEST_F(OrderedIndexTest, ScanPastLastKeyReturnsNothing) {
  InsertKeys({"a", "b"});
  EXPECT_THAT(ScanOrDie("c", false, 10), IsEmpty());
}

TEST_F(OrderedIndexTest, ScanClearsOutFirst) {
  InsertKeys({"a"});
  std::vector<std::pair<std::string, uint64_t>> out = {{"z", 1}};
  NVKV_ASSERT_OK(index_->Scan("a", false, 10, &out));
  EXPECT_THAT(out, ElementsAre(Pair("a", 100u)));
}

TEST_F(OrderedIndexTest, ScanOrdersKeysAsUnsignedBytes) {
  const std::string nul_key("a\0b", 3);
  InsertKeys({"\xff", "\x01", "\x80", "a", nul_key});
  EXPECT_THAT(ScanOrDie("", false, 10),
              ElementsAre(Pair("\x01", 101u), Pair("a", 103u), Pair(nul_key, 104u),
                          Pair("\x80", 102u), Pair("\xff", 100u)));
}

TEST_F(OrderedIndexTest, ScanSkipsErasedKeys) {
  InsertKeys({"a", "b", "c"});
  ASSERT_TRUE(index_->Erase(0, "b", 101));
  EXPECT_THAT(ScanOrDie("", false, 10), ElementsAre(Pair("a", 100u), Pair("c", 102u)));
}

// Same insertion order gives the same tree and table shape, so the difference is the entries:
// a 100-byte key's entry is a 116-byte request (128-byte malloc chunk), a 12-byte key's 28 (48).
TEST_F(OrderedIndexTest, MemoryCountsEntryBytesOfKeys) {
  auto long_keys = NewOrderedIndex();
  for (uint64_t i = 0; i < 10'000; ++i) {
    NVKV_ASSERT_OK(index_->Insert(0, absl::StrFormat("%012d", i), i));
    NVKV_ASSERT_OK(long_keys->Insert(0, absl::StrFormat("%0100d", i), i));
  }
  EXPECT_EQ(MallocChunkBytes(16 + 100), 128u);
  EXPECT_EQ(MallocChunkBytes(16 + 12), 48u);
  EXPECT_EQ(long_keys->stats().memory_bytes - index_->stats().memory_bytes,
            10'000u * (128 - 48));
}

// Emptied, the index keeps only its hash table's array (room made for inserts stays made): 9
// bytes a slot, at most 16/7 slots per key it held.
TEST_F(OrderedIndexTest, MemoryReturnsToTheTablesArrayWhenEmptied) {
  for (uint64_t i = 0; i < 10'000; ++i) NVKV_ASSERT_OK(index_->Insert(0, Key(i), i));
  const uint64_t full = index_->stats().memory_bytes;
  for (uint64_t i = 0; i < 10'000; ++i) ASSERT_TRUE(index_->Erase(0, Key(i), i));
  EXPECT_GT(index_->stats().memory_bytes, 0u);
  EXPECT_LE(index_->stats().memory_bytes, 10'000u * 9 * 16 / 7 + 64);
  EXPECT_LT(index_->stats().memory_bytes, full / 4);
}

TEST_F(OrderedIndexTest, MemoryPerKeyIsEntryTreeAndTableShare) {
  for (uint64_t i = 0; i < 100'000; ++i) {  // 20-byte keys in random order
    NVKV_ASSERT_OK(index_->Insert(0, absl::StrFormat("%020d", SyntheticHash(i)), i));
  }
  // A 36-byte entry (48-byte chunk), an 8-byte tree slot in nodes 1/2 to full plus internal
  // nodes (8-20 bytes), a 9-byte table slot at a load of 7/16 to 7/8 (10-21 bytes): between 66
  // and 89 bytes per key.
  const double bytes_per_key = static_cast<double>(index_->stats().memory_bytes) / 100'000;
  EXPECT_GE(bytes_per_key, 66.0);
  EXPECT_LE(bytes_per_key, 89.0);
}

// Erases and inserts at a steady number of keys: the hash table's erased slots are reused or
// cleared in place, so it keeps finding every key and does not grow with the churn.
TEST_F(OrderedIndexTest, ChurnAtASteadySizeFindsEveryKeyAndDoesNotGrow) {
  std::map<std::string, uint64_t> model;
  uint64_t next = 0;
  auto insert_new = [&] {
    const std::string key = absl::StrFormat("k%d", SyntheticHash(next) % 1'000'000'007);
    NVKV_ASSERT_OK(index_->Insert(0, key, next));
    model[key] = next++;
  };
  for (int i = 0; i < 3'000; ++i) insert_new();
  const uint64_t memory_before = index_->stats().memory_bytes;
  for (int round = 0; round < 100'000; ++round) {
    auto victim = model.lower_bound(absl::StrFormat("k%d", SyntheticHash(round) % 1'000'000'007));
    if (victim == model.end()) victim = model.begin();
    ASSERT_TRUE(index_->Erase(0, victim->first, victim->second));
    model.erase(victim);
    insert_new();
  }
  ASSERT_EQ(index_->stats().entries, model.size());
  for (const auto& [key, page] : model) ASSERT_THAT(FindPages(*index_, 0, key), ElementsAre(page));
  EXPECT_THAT(FindPages(*index_, 0, "absent"), IsEmpty());
  EXPECT_LT(index_->stats().memory_bytes, memory_before * 2);
}

// Find answers from the hash table and Scan from the tree: after many inserts, replaces and
// erases in scattered order the two agree with a plain map.
TEST_F(OrderedIndexTest, FindAndScanAgreeWithAMap) {
  std::map<std::string, uint64_t> model;
  for (uint64_t i = 0; i < 20'000; ++i) {
    const std::string key = absl::StrFormat("%d", SyntheticHash(i % 5'000) % 100'000);
    auto it = model.find(key);
    if (it == model.end()) {
      NVKV_ASSERT_OK(index_->Insert(0, key, i));
      model[key] = i;
    } else if (i % 3 == 0) {
      ASSERT_TRUE(index_->Erase(0, key, it->second));
      model.erase(it);
    } else {
      ASSERT_TRUE(index_->Replace(0, key, it->second, i));
      it->second = i;
    }
  }
  ASSERT_EQ(index_->stats().entries, model.size());
  for (const auto& [key, page] : model) ASSERT_THAT(FindPages(*index_, 0, key), ElementsAre(page));
  const std::vector<std::pair<std::string, uint64_t>> expected(model.begin(), model.end());
  EXPECT_EQ(ScanOrDie("", false, model.size() + 1), expected);
}

}  // namespace
}  // namespace nvkv::kv
