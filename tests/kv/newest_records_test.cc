// NewestRecords: what recovery keeps of each key while it scans the log.
#include "kv/newest_records.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tests/testutil/process_memory.h"
#include "tests/testutil/sanitizers.h"

namespace nvkv::kv {
namespace {

using Record = NewestRecords::Record;
using Kept = NewestRecords::Kept;

Record At(uint64_t sequence, uint64_t page, uint32_t bytes = 40, bool is_delete = false) {
  return Record{sequence, page, bytes, is_delete};
}

// Every key held, by hash.lo (the tests give each key its own lo unless they say otherwise).
std::map<uint64_t, Record> Held(const NewestRecords& table) {
  std::map<uint64_t, Record> held;
  table.ForEach([&](uint64_t lo, const Record& record) {
    EXPECT_TRUE(held.emplace(lo, record).second) << "lo " << lo << " visited twice";
  });
  return held;
}

TEST(NewestRecordsTest, KeepsTheHighestSequenceWhateverTheOrder) {
  NewestRecords table;
  const KeyHash key{7, 9};
  EXPECT_EQ(table.KeepIfNewer(key, At(5, 100)), Kept::kNewest);
  EXPECT_EQ(table.KeepIfNewer(key, At(3, 200)), Kept::kOlder);  // older: ignored
  EXPECT_EQ(table.KeepIfNewer(key, At(8, 300, 77, true)), Kept::kNewest);  // newer delete wins
  EXPECT_EQ(table.KeepIfNewer(key, At(8, 400)), Kept::kOlder);  // same sequence: a copy
  EXPECT_EQ(table.size(), 1u);
  const std::map<uint64_t, Record> held = Held(table);
  ASSERT_EQ(held.size(), 1u);
  const Record& newest = held.at(7);
  EXPECT_EQ(newest.sequence, 8u);
  EXPECT_EQ(newest.page, 300u);
  EXPECT_EQ(newest.record_bytes, 77u);
  EXPECT_TRUE(newest.is_delete);
}

TEST(NewestRecordsTest, FieldsRoundTripAtTheirLimits) {
  NewestRecords table;
  const KeyHash key{~uint64_t{0}, ~uint64_t{0}};
  const Record record{NewestRecords::kSequenceLimit - 1, NewestRecords::kPageLimit - 1,
                      NewestRecords::kRecordBytesLimit - 1, true};
  EXPECT_EQ(table.KeepIfNewer(key, record), Kept::kNewest);
  const Record held = Held(table).at(key.lo);
  EXPECT_EQ(held.sequence, record.sequence);
  EXPECT_EQ(held.page, record.page);
  EXPECT_EQ(held.record_bytes, record.record_bytes);
  EXPECT_TRUE(held.is_delete);
}

TEST(NewestRecordsTest, RefusesSequencesItCannotHold) {
  NewestRecords table;
  EXPECT_EQ(table.KeepIfNewer({1, 1}, At(0, 1)), Kept::kRefused);
  EXPECT_EQ(table.KeepIfNewer({1, 1}, At(NewestRecords::kSequenceLimit, 1)), Kept::kRefused);
  EXPECT_EQ(table.size(), 0u);
}

// Keys with one hash.lo are told apart by the bits of hash.hi the table compares: those that
// choose the sub-table (0..3) and the check bits (4..13 and 23..31: NewestRecords::kHiBitsKept).
TEST(NewestRecordsTest, KeysDifferingOnlyInComparedHighBitsStayApart) {
  NewestRecords table;
  const uint64_t lo = 0x1234'5678'9abc'def0;
  std::set<uint64_t> expected = {99};
  for (int bit = 0; bit < 32; ++bit) {
    if (((NewestRecords::kHiBitsKept >> bit) & 1) == 0) continue;
    ASSERT_EQ(table.KeepIfNewer({lo, uint64_t{1} << bit}, At(100 + bit, bit)), Kept::kNewest);
    expected.insert(bit);
  }
  ASSERT_EQ(table.KeepIfNewer({lo, 0}, At(1, 99)), Kept::kNewest);
  EXPECT_EQ(table.size(), 24u);
  std::set<uint64_t> pages;
  table.ForEach([&](uint64_t held_lo, const Record& record) {
    EXPECT_EQ(held_lo, lo);
    pages.insert(record.page);
  });
  EXPECT_EQ(pages, expected);
}

// Many keys with random hashes and several versions each, in random order, against a map.
TEST(NewestRecordsTest, MatchesAMapOverManyKeysAndVersions) {
  std::mt19937_64 random(42);
  constexpr int kKeys = 50'000;
  std::vector<KeyHash> keys(kKeys);
  for (KeyHash& key : keys) key = {random(), random()};
  std::map<uint64_t, Record> expected;
  NewestRecords table;
  for (int round = 0; round < 4 * kKeys; ++round) {
    const KeyHash& key = keys[random() % kKeys];
    const Record record = At(1 + random() % 1'000'000, random() % (uint64_t{1} << 31),
                             static_cast<uint32_t>(random() % (1 << 21)), random() % 3 == 0);
    auto [it, inserted] = expected.emplace(key.lo, record);
    const bool newer = inserted || it->second.sequence < record.sequence;
    ASSERT_EQ(table.KeepIfNewer(key, record), newer ? Kept::kNewest : Kept::kOlder);
    if (newer) it->second = record;
  }
  EXPECT_EQ(table.size(), expected.size());
  const std::map<uint64_t, Record> held = Held(table);
  ASSERT_EQ(held.size(), expected.size());
  for (const auto& [lo, record] : expected) {
    const Record& got = held.at(lo);
    EXPECT_EQ(got.sequence, record.sequence);
    EXPECT_EQ(got.page, record.page);
    EXPECT_EQ(got.record_bytes, record.record_bytes);
    EXPECT_EQ(got.is_delete, record.is_delete);
  }
  // 24-byte entries at a load of at least 0.7 (7/8 before a growth by 1.25x), in 16 sub-tables.
  EXPECT_LE(table.allocated_bytes(), held.size() * 24 / 0.7 + 16 * 24 * 8);
  table.Clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.allocated_bytes(), 0u);
  EXPECT_TRUE(Held(table).empty());
}

// EraseIf drops the keys it is told to, by what an entry keeps of the hash (hash.lo and
// hash.hi's bits kHiBitsKept), and every other key is still found (an erased slot in the middle of a
// probe run must not hide the keys after it: many keys share their home slots at a high load),
// and new keys go in as before; the sub-tables shrink to what is left.
TEST(NewestRecordsTest, EraseIfDropsThoseKeysAndFindsTheRest) {
  std::mt19937_64 random(7);
  constexpr int kKeys = 40'000;
  std::vector<KeyHash> keys(kKeys);
  NewestRecords table;
  for (int i = 0; i < kKeys; ++i) {
    // Few distinct home slots (hash.lo's top bits), so that probe runs are long.
    keys[i] = {(random() % 4096) << 52 | static_cast<uint64_t>(i), random()};
    ASSERT_EQ(table.KeepIfNewer(keys[i], At(10, i)), Kept::kNewest);
  }
  const uint64_t bytes_before = table.allocated_bytes();
  constexpr uint64_t kKept = NewestRecords::kHiBitsKept;
  // Doomed: bit 27 of hash.hi (a check bit, one of recovery's pass bits) set.
  const auto doomed = [](const KeyHash& hash) { return (hash.hi >> 27) & 1; };
  uint64_t visits = 0;
  table.EraseIf([&](const KeyHash& hash) {
    ++visits;
    EXPECT_EQ(hash.hi & ~kKept, 0u);
    return doomed(hash);
  });
  EXPECT_GE(visits, static_cast<uint64_t>(kKeys));
  uint64_t left = 0;
  for (int i = 0; i < kKeys; ++i) {
    const KeyHash kept_bits{keys[i].lo, keys[i].hi & kKept};
    if (doomed(kept_bits)) continue;
    ++left;
    // Still held: an older version is ignored.
    EXPECT_EQ(table.KeepIfNewer(keys[i], At(5, i)), Kept::kOlder) << "key " << i;
  }
  EXPECT_EQ(table.size(), left);
  EXPECT_LT(left, kKeys * 6 / 10u);
  EXPECT_GT(left, kKeys * 4 / 10u);
  EXPECT_LT(table.allocated_bytes(), bytes_before * 7 / 10);
  for (int i = 0; i < kKeys; ++i) {
    const KeyHash kept_bits{keys[i].lo, keys[i].hi & kKept};
    if (!doomed(kept_bits)) continue;
    EXPECT_EQ(table.KeepIfNewer(keys[i], At(5, i)), Kept::kNewest) << "key " << i;
  }
  EXPECT_EQ(table.size(), static_cast<uint64_t>(kKeys));
  const std::map<uint64_t, Record> held = Held(table);
  for (int i = 0; i < kKeys; ++i) {
    const KeyHash kept_bits{keys[i].lo, keys[i].hi & kKept};
    EXPECT_EQ(held.at(keys[i].lo).sequence, doomed(kept_bits) ? 5u : 10u);
  }
}

// Recovery reserves room for the keys the summaries name: filling that many keys then grows no
// sub-table (each growth would copy one), and every key is held.
TEST(NewestRecordsTest, ReservedRoomHoldsThatManyKeysWithoutGrowing) {
  NewestRecords table;
  constexpr uint64_t kKeys = 100000;
  table.Reserve(kKeys);
  const uint64_t reserved = table.allocated_bytes();
  EXPECT_GE(reserved, kKeys * 24);
  for (uint64_t k = 0; k < kKeys; ++k) {
    NewestRecords::Record record;
    record.sequence = k + 1;
    record.page = k;
    ASSERT_EQ(table.KeepIfNewer(HashKey(std::to_string(k)), record), NewestRecords::Kept::kNewest);
  }
  EXPECT_EQ(table.size(), kKeys);
  EXPECT_EQ(table.allocated_bytes(), reserved) << "a sub-table grew";
  uint64_t pages = 0;
  table.ForEach([&](uint64_t, const NewestRecords::Record& r) { pages += r.page; });
  EXPECT_EQ(pages, kKeys * (kKeys - 1) / 2);
}

// In a forked child whose address space is capped 64 MiB above what it maps: a table that cannot
// grow says kNoMemory and keeps what it held; a Reserve beyond the limit leaves it as it was.
[[noreturn]] void FillUntilNoMemory() {
  if (!nvkv::testing::LimitAddressSpaceTo(uint64_t{64} << 20)) std::_Exit(10);
  NewestRecords table;
  table.Reserve(uint64_t{1} << 30);  // 24 GiB of slots: refused, nothing changes
  if (table.allocated_bytes() != 0) std::_Exit(11);
  uint64_t kept = 0;
  for (;; ++kept) {
    const Kept result = table.KeepIfNewer(KeyHash{kept * 0x9e3779b97f4a7c15ull, kept}, At(1, 1));
    if (result == Kept::kNoMemory) break;
    if (result != Kept::kNewest || kept > (uint64_t{1} << 24)) std::_Exit(12);
  }
  if (kept < 100000 || table.size() != kept) std::_Exit(13);
  // What it held is intact, and an older record of a held key is still told apart.
  if (table.KeepIfNewer(KeyHash{0, 0}, At(1, 2)) != Kept::kOlder) std::_Exit(14);
  uint64_t visited = 0;
  table.ForEach([&](uint64_t, const Record&) { ++visited; });
  if (visited != kept) std::_Exit(15);
  std::_Exit(0);
}

TEST(NewestRecordsTest, ATableWithoutMemoryToGrowSaysSoAndKeepsWhatItHeld) {
#if defined(NVKV_UNDER_ASAN) || defined(NVKV_UNDER_TSAN)
  GTEST_SKIP() << "a sanitizer maps terabytes of shadow memory: no address-space limit fits";
#endif
  EXPECT_EXIT(FillUntilNoMemory(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nvkv::kv
