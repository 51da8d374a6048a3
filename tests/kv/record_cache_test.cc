// RecordCache: what it returns, what it keeps within its bytes, and that a scan does not flush
// its hot keys (S3-FIFO).
#include "kv/record_cache.h"

#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil/process_memory.h"
#include "tests/testutil/sanitizers.h"

namespace nvkv::kv {
namespace {

uint64_t HashOf(std::string_view key) { return std::hash<std::string_view>{}(key); }

void Put(RecordCache& cache, const std::string& key, const std::string& value, uint64_t page) {
  cache.Put(key, HashOf(key), value, Location{page, 0});
}

std::string ValueOf(RecordCache& cache, const std::string& key) {
  const RecordCache::Entry* entry = cache.Find(key);
  return entry == nullptr ? "<miss>" : entry->value;
}

TEST(RecordCacheTest, PutThenFindGivesTheValueAndLocation) {
  RecordCache cache(1 << 20);
  Put(cache, "k", "v1", 7);
  const RecordCache::Entry* entry = cache.Find("k");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->value, "v1");
  EXPECT_EQ(entry->location, (Location{7, 0}));
  EXPECT_EQ(cache.Find("absent"), nullptr);
  EXPECT_EQ(cache.counters().hits, 1u);
  EXPECT_EQ(cache.counters().misses, 1u);
}

TEST(RecordCacheTest, OverwriteReplacesValueAndLocation) {
  RecordCache cache(1 << 20);
  Put(cache, "k", "old", 7);
  Put(cache, "k", "a much longer new value", 9);
  EXPECT_EQ(ValueOf(cache, "k"), "a much longer new value");
  EXPECT_EQ(cache.Peek("k")->location, (Location{9, 0}));
  EXPECT_EQ(cache.counters().entries, 1u);
}

TEST(RecordCacheTest, EraseForgetsTheKey) {
  RecordCache cache(1 << 20);
  Put(cache, "k", "v", 7);
  cache.Erase("k");
  EXPECT_EQ(cache.Find("k"), nullptr);
  EXPECT_EQ(cache.counters().entries, 0u);
  cache.Erase("never there");  // nothing happens
}

TEST(RecordCacheTest, MoveFollowsOnlyFromTheLocationItHolds) {
  RecordCache cache(1 << 20);
  Put(cache, "k", "v", 7);
  cache.Move("k", Location{8, 0}, Location{20, 0});  // a copy of an older record: ignored
  EXPECT_EQ(cache.Peek("k")->location, (Location{7, 0}));
  cache.Move("k", Location{7, 0}, Location{21, 0});
  EXPECT_EQ(cache.Peek("k")->location, (Location{21, 0}));
  EXPECT_EQ(cache.Peek("k")->value, "v");
  cache.Move("absent", Location{7, 0}, Location{22, 0});  // no entry appears
  EXPECT_EQ(cache.Peek("absent"), nullptr);
}

TEST(RecordCacheTest, StaysWithinItsBytes) {
  const uint64_t capacity = 64 << 10;
  RecordCache cache(capacity);
  const std::string value(100, 'x');
  for (int i = 0; i < 10000; ++i) {
    Put(cache, absl::StrCat("key", i), value, i);
    ASSERT_LE(cache.counters().bytes, capacity) << "after " << i;
  }
  EXPECT_GT(cache.counters().evictions, 0u);
  // Most of the budget is in use, not a sliver of it.
  EXPECT_GT(cache.counters().bytes, capacity / 2);
  // The newest key is there; the first ones are long gone.
  EXPECT_EQ(ValueOf(cache, "key9999"), value);
  EXPECT_EQ(cache.Find("key0"), nullptr);
}

TEST(RecordCacheTest, ValueLargerThanTheSmallQueueIsNotCachedAndDropsTheOldOne) {
  RecordCache cache(64 << 10);
  Put(cache, "k", "small", 1);
  Put(cache, "k", std::string(16 << 10, 'x'), 2);
  EXPECT_EQ(cache.Find("k"), nullptr);  // never the stale "small"
}

TEST(RecordCacheTest, ZeroCapacityHoldsNothing) {
  RecordCache cache(0);
  Put(cache, "k", "v", 1);
  EXPECT_EQ(cache.Find("k"), nullptr);
  EXPECT_EQ(cache.counters().bytes, 0u);
}

TEST(RecordCacheTest, OneLongScanDoesNotFlushTheHotKeys) {
  const uint64_t capacity = 256 << 10;
  RecordCache cache(capacity);
  const std::string value(200, 'v');
  // A hot set that fits well within the cache, read repeatedly.
  const int hot = 200;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < hot; ++i) {
      const std::string key = absl::StrCat("hot", i);
      if (cache.Find(key) == nullptr) Put(cache, key, value, i);
    }
  }
  // A scan over ten times the cache's size, each key once.
  for (int i = 0; i < 20000; ++i) Put(cache, absl::StrCat("scan", i), value, 100000 + i);
  int still_hot = 0;
  for (int i = 0; i < hot; ++i) still_hot += cache.Peek(absl::StrCat("hot", i)) != nullptr;
  EXPECT_EQ(still_hot, hot);
}

TEST(RecordCacheTest, AKeyEvictedOnceGoesToTheMainQueueWhenItComesBack) {
  // Keys evicted from the small queue are remembered (by hash); one that comes back skips the
  // small queue, so a scan right after does not evict it again.
  const uint64_t capacity = 128 << 10;
  RecordCache cache(capacity);
  const std::string value(200, 'v');
  Put(cache, "returning", value, 1);
  // Enough keys to evict it (the cache holds some 350 of these), too few for the ghost (273
  // hashes here) to forget it.
  for (int i = 0; i < 500; ++i) Put(cache, absl::StrCat("a", i), value, 10 + i);
  ASSERT_EQ(cache.Peek("returning"), nullptr);
  Put(cache, "returning", value, 2);
  for (int i = 0; i < 5000; ++i) Put(cache, absl::StrCat("b", i), value, 10000 + i);
  EXPECT_NE(cache.Peek("returning"), nullptr);
}

TEST(RecordCacheTest, AKeyTheGhostHasForgottenStartsInTheSmallQueueAgain) {
  // The same as above with a scan long enough for the ghost to forget the key: it comes back
  // as a new key, and the next scan evicts it.
  RecordCache cache(128 << 10);
  const std::string value(200, 'v');
  Put(cache, "returning", value, 1);
  for (int i = 0; i < 5000; ++i) Put(cache, absl::StrCat("a", i), value, 10 + i);
  Put(cache, "returning", value, 2);
  for (int i = 0; i < 5000; ++i) Put(cache, absl::StrCat("b", i), value, 10000 + i);
  EXPECT_EQ(cache.Peek("returning"), nullptr);
}

// In a forked child whose address space is capped 64 MiB above what it maps: a cache far larger
// than that takes 1 MiB values until the system has no memory for one more. Put neither throws
// nor keeps a key it could not store (a new one, or an overwrite: the old value would be
// stale); what it held before is intact.
[[noreturn]] void PutUntilNoMemory() {
  const std::string value(1 << 20, 'v'), larger(2 << 20, 'w');  // before the limit
  if (!nvkv::testing::LimitAddressSpaceTo(uint64_t{64} << 20)) std::_Exit(10);
  RecordCache cache(uint64_t{64} << 30);
  int stored = 0;
  try {
    for (;; ++stored) {
      const std::string key = absl::StrCat("key-", stored);
      Put(cache, key, value, static_cast<uint64_t>(stored));
      if (cache.Peek(key) == nullptr) break;  // not stored: no memory for it
      if (stored > 1000) std::_Exit(11);
    }
    if (stored < 8) std::_Exit(12);
    // An overwrite with a value larger than the old one cannot be stored either: the key goes.
    Put(cache, "key-0", larger, 999);
    if (cache.Peek("key-0") != nullptr) std::_Exit(13);
    for (int i = 1; i < stored; ++i) {
      const RecordCache::Entry* entry = cache.Peek(absl::StrCat("key-", i));
      if (entry == nullptr || entry->value != value || entry->location.page != uint64_t(i)) {
        std::_Exit(14);
      }
    }
  } catch (const std::bad_alloc&) {
    std::_Exit(15);
  }
  std::_Exit(0);
}

TEST(RecordCacheTest, PutWithoutMemoryCachesNothingAndThrowsNothing) {
#if defined(NVKV_UNDER_ASAN) || defined(NVKV_UNDER_TSAN)
  GTEST_SKIP() << "a sanitizer maps terabytes of shadow memory: no address-space limit fits";
#endif
  EXPECT_EXIT(PutUntilNoMemory(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nvkv::kv
