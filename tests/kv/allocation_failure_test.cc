// What the engine and its tables do when the allocator refuses them memory (a process under
// ulimit -v or -d, where an allocation fails instead of the process being killed): a table that
// cannot grow says so and stays whole; a write whose plan, index room or new segment cannot be
// had is refused with kResourceExhausted, not thrown; nothing acknowledged is lost, and the
// writes go on once the memory is back. (Not every allocation of a write is covered yet: some
// inside its critical section still throw.) This binary replaces the global operator new
// (tests/testutil/replaced_operator_new.h) so that the test's own thread can make large
// allocations fail.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "kv/index.h"
#include "kv/key_hash.h"
#include "kv/ordered_index.h"
#include "kv/record_cache.h"
#include "storage/base/status_macros.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/replaced_operator_new.h"
#include "tests/testutil/status_matchers.h"

namespace {

// Allocations of at least this many bytes fail on this thread (SIZE_MAX: none).
thread_local size_t refuse_from_bytes = SIZE_MAX;

}  // namespace

void* nvkv::testing::TestAllocate(size_t bytes, size_t alignment) {
  return bytes >= refuse_from_bytes ? nullptr : SystemAllocate(bytes, alignment);
}

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

std::string KeyNumber(int i) { return absl::StrCat("key", int64_t{i} * 7919); }

// Inserts keys first, first + 1, ... below `end` the way the write path does (room first, then the
// entry) until one is refused; returns the first key not inserted.
int InsertUntilRefused(Index& index, int first, int end, absl::Status* refusal) {
  for (int i = first; i < end; ++i) {
    const std::string key = KeyNumber(i);
    const absl::Status room = index.MakeRoomFor(1);
    if (!room.ok()) {
      *refusal = room;
      return i;
    }
    const absl::Status inserted = index.Insert(HashKey(key).lo, key, 1000 + i);
    if (!inserted.ok()) {
      *refusal = inserted;
      return i;
    }
  }
  return end;
}

void ExpectEveryKeyFound(const Index& index, int keys) {
  std::vector<uint64_t> pages;
  int missing = 0;
  for (int i = 0; i < keys; ++i) {
    const std::string key = KeyNumber(i);
    index.Find(HashKey(key).lo, key, &pages);
    bool found = false;
    for (uint64_t page : pages) found |= page == static_cast<uint64_t>(1000 + i);
    if (!found) ++missing;
  }
  EXPECT_EQ(missing, 0) << "of " << keys << " keys";
  EXPECT_EQ(index.stats().entries, static_cast<uint64_t>(keys));
}

// The ordered index's hash table is on the heap (the hash index's slots are mapped by ZeroedBlock,
// which this replacement does not reach; its growth allocates before it changes anything).
TEST(OrderedIndexAllocationFailureTest, ATableThatCannotGrowRefusesTheKeyAndKeepsEveryEntry) {
  auto index = std::make_unique<OrderedIndex>();
  absl::Status refusal;
  ASSERT_EQ(InsertUntilRefused(*index, 0, 3000, &refusal), 3000) << refusal;
  // From here on the table's array (tens of KiB) cannot be allocated anew; an entry or a tree node
  // (well under 4 KiB) can.
  refuse_from_bytes = 4096;
  const int inserted = InsertUntilRefused(*index, 3000, 1'000'000, &refusal);
  refuse_from_bytes = SIZE_MAX;
  ASSERT_LT(inserted, 1'000'000) << "the table never had to grow";
  EXPECT_EQ(refusal.code(), absl::StatusCode::kResourceExhausted) << refusal;
  ExpectEveryKeyFound(*index, inserted);
  // With memory back, the table grows and takes the rest.
  for (int i = inserted; i < inserted + 20000; ++i) {
    const std::string key = KeyNumber(i);
    ASSERT_THAT(index->MakeRoomFor(1), IsOk());
    ASSERT_THAT(index->Insert(HashKey(key).lo, key, 1000 + i), IsOk());
  }
  ExpectEveryKeyFound(*index, inserted + 20000);
}

// Room made for an insert stays made when erases in between empty the index: a batch may delete
// a shard's last key before it inserts a new one, and its room was made before either.
TEST(OrderedIndexAllocationFailureTest, RoomMadeStaysMadeThroughErasesThatEmptyTheIndex) {
  OrderedIndex index;
  ASSERT_THAT(index.Insert(0, "a", 1), IsOk());
  ASSERT_THAT(index.MakeRoomFor(1), IsOk());
  // An entry and a one-key tree node still fit; the table's array of 16 slots does not.
  refuse_from_bytes = 128;
  const bool erased = index.Erase(0, "a", 1);
  const absl::Status inserted = index.Insert(0, "b", 2);
  refuse_from_bytes = SIZE_MAX;
  EXPECT_TRUE(erased);
  EXPECT_THAT(inserted, IsOk());
  std::vector<uint64_t> pages;
  index.Find(0, "b", &pages);
  EXPECT_EQ(pages, std::vector<uint64_t>{2});
}

// An engine on a 64 MiB in-memory device, without background compaction: conventional, or zoned
// (zones of 1 MiB, the size of the segments the conventional store takes).
absl::StatusOr<std::unique_ptr<Engine>> OpenOnMemDevice(IndexMode mode, Layout layout) {
  storage::MemDeviceOptions mem;
  mem.lba_bytes = 4096;
  mem.lba_count = (64 << 20) / mem.lba_bytes;
  if (layout == Layout::kZoned) SplitIntoWholeZones(&mem, 256);
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<storage::MemDevice> device,
                        storage::MemDevice::Create(mem));
  Options options;
  options.index_mode = mode;
  options.background_compaction = false;
  return Engine::OpenOnDevice(std::move(device), options);
}

// A batch whose plan the engine cannot allocate (before it locks anything) is refused whole with
// kResourceExhausted, not thrown at the caller; nothing acknowledged before is lost, and the same
// batch goes in once the memory is back. Each index mode on a thread of its own, whose write plan
// has not grown yet.
void WriteABatchWithoutMemoryForItsPlan(IndexMode mode, Layout layout) {
  auto engine = OpenOnMemDevice(mode, layout);
  ASSERT_THAT(engine, IsOk());
  for (int i = 0; i < 100; ++i) {
    const std::string key = KeyNumber(i);
    WriteOp op{false, key, "before"};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), true), IsOk());
  }
  // 400 ops of 100-byte values: their plan takes tens of KiB.
  const std::string value(100, 'b');
  std::vector<std::string> keys;
  for (int i = 0; i < 400; ++i) keys.push_back(KeyNumber(i));
  std::vector<WriteOp> batch;
  for (const std::string& key : keys) batch.push_back(WriteOp{false, key, value});
  refuse_from_bytes = 16 << 10;
  absl::Status refused;
  try {
    refused = (*engine)->Write(batch, true);
  } catch (const std::bad_alloc&) {
    refused = absl::InternalError("Write threw std::bad_alloc");
  }
  refuse_from_bytes = SIZE_MAX;
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<std::string> got = (*engine)->Get(keys[i]);
    if (i < 100) {
      ASSERT_THAT(got, IsOk()) << i;
      EXPECT_EQ(*got, "before") << i;
    } else {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << i;
    }
  }
  ASSERT_THAT((*engine)->Write(batch, true), IsOk());
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<std::string> got = (*engine)->Get(keys[i]);
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, value) << i;
  }
  ASSERT_THAT((*engine)->Close(), IsOk());
}

// Runs `body` for each layout and index mode, each on a thread of its own (whose write plan and
// queue have not grown yet).
void OnEachLayoutAndMode(void (*body)(IndexMode, Layout)) {
  for (const Layout layout : {Layout::kConventional, Layout::kZoned}) {
    for (const IndexMode mode : {IndexMode::kHash, IndexMode::kOrdered}) {
      SCOPED_TRACE(
          absl::StrCat(LayoutName(layout), mode == IndexMode::kHash ? " hash" : " ordered"));
      std::thread thread(body, mode, layout);
      thread.join();
    }
  }
}

TEST(EngineAllocationFailureTest, ABatchWithoutMemoryForItsPlanIsRefusedWholeAndLosesNothing) {
  OnEachLayoutAndMode(WriteABatchWithoutMemoryForItsPlan);
}

// The record cache's key map that cannot grow: Put keeps no key it has no room for and throws
// nothing, every entry it keeps says what was put, and the cache grows again once the memory is
// back.
TEST(RecordCacheAllocationFailureTest, AMapThatCannotGrowSkipsKeysAndThrowsNothing) {
  RecordCache cache(4 << 20);  // far more than 4 KiB of map slots can serve: nothing is evicted
  const std::string value(100, 'v');
  auto put = [&](int i) {
    const std::string key = KeyNumber(i);
    cache.Put(key, HashKey(key).lo, value + std::to_string(i), Location{.page = uint64_t(i)});
  };
  auto expect_kept_entries_right = [&](int keys) {
    int kept = 0;
    for (int i = 0; i < keys; ++i) {
      const RecordCache::Entry* entry = cache.Peek(KeyNumber(i));
      if (entry == nullptr) continue;
      ++kept;
      EXPECT_EQ(entry->value, value + std::to_string(i));
      EXPECT_EQ(entry->location.page, uint64_t(i));
    }
    EXPECT_EQ(cache.counters().entries, uint64_t(kept));
    return kept;
  };
  refuse_from_bytes = 4096;
  bool threw = false;
  try {
    for (int i = 0; i < 60'000; ++i) put(i);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  refuse_from_bytes = SIZE_MAX;
  ASSERT_FALSE(threw) << "Put threw std::bad_alloc";
  const int kept_without_memory = expect_kept_entries_right(60'000);
  EXPECT_GT(kept_without_memory, 0);
  EXPECT_LT(kept_without_memory, 500) << "4 KiB of map slots hold fewer keys";
  for (int i = 60'000; i < 120'000; ++i) put(i);
  EXPECT_GT(expect_kept_entries_right(120'000), 10 * kept_without_memory);
}

// The ghost that cannot grow (its ring of 64 hashes is had, the next 128 are not) while a small
// cache evicts thousands of keys: it forgets the oldest sooner, and Put throws nothing.
TEST(RecordCacheAllocationFailureTest, AGhostThatCannotGrowForgetsSoonerAndThrowsNothing) {
  RecordCache cache(64 << 10);  // some 40 entries of 1.5 KiB; a ghost of up to 136 hashes
  const std::string value(1500, 'g');
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(KeyNumber(i));
  refuse_from_bytes = 2048;  // the entries' bytes fit; the ghost's set of 256 slots does not
  bool threw = false;
  try {
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 5000; ++i) {
        cache.Put(keys[i], HashKey(keys[i]).lo, value, Location{.page = uint64_t(i)});
      }
    }
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  refuse_from_bytes = SIZE_MAX;
  ASSERT_FALSE(threw) << "Put threw std::bad_alloc";
  EXPECT_GT(cache.counters().evictions, 5000u);
  // At most the 64 hashes of the ring it had, beside the entries.
  EXPECT_LE(cache.counters().bytes, (64u << 10) - 136 * 24 + 64 * 24);
  int kept = 0;
  for (int i = 0; i < 5000; ++i) {
    const RecordCache::Entry* entry = cache.Peek(keys[i]);
    if (entry == nullptr) continue;
    ++kept;
    EXPECT_EQ(entry->location.page, uint64_t(i));
  }
  EXPECT_GT(kept, 0);
}

// Single puts while large allocations fail, until a head needs a new segment, whose key filter
// (128 KiB or more) cannot be had: the put is refused with kResourceExhausted before a segment is
// taken, every put acknowledged before reads back, and the puts go on once memory is back.
void PutUntilASegmentCannotBeTaken(IndexMode mode, Layout layout) {
  auto engine = OpenOnMemDevice(mode, layout);
  ASSERT_THAT(engine, IsOk());
  const std::string value(100, 'p');
  // Warm: what the puts grow (the thread's plan and queue, the index) has grown.
  int acknowledged = 0;
  for (; acknowledged < 20'000; ++acknowledged) {
    const std::string key = KeyNumber(acknowledged);
    WriteOp op{false, key, value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk());
  }
  refuse_from_bytes = 64 << 10;
  absl::Status refused;
  try {
    for (; acknowledged < 200'000; ++acknowledged) {
      const std::string key = KeyNumber(acknowledged);
      WriteOp op{false, key, value};
      refused = (*engine)->Write(std::span<const WriteOp>(&op, 1), false);
      if (!refused.ok()) break;
    }
  } catch (const std::bad_alloc&) {
    refused = absl::InternalError("Write threw std::bad_alloc");
  }
  refuse_from_bytes = SIZE_MAX;
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  // The hash index's table is mapped (ZeroedBlock), out of this refusal's reach, so a new
  // segment's filter is what fails; the ordered index's table may fail first, as it should.
  if (mode == IndexMode::kHash) {
    EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("key filter"));
  }
  for (int i = 0; i < acknowledged; ++i) {
    absl::StatusOr<std::string> got = (*engine)->Get(KeyNumber(i));
    ASSERT_THAT(got, IsOk()) << i;
    ASSERT_EQ(*got, value) << i;
  }
  for (int i = acknowledged; i < acknowledged + 20'000; ++i) {
    const std::string key = KeyNumber(i);
    WriteOp op{false, key, value};
    ASSERT_THAT((*engine)->Write(std::span<const WriteOp>(&op, 1), false), IsOk()) << i;
  }
  ASSERT_THAT((*engine)->Close(), IsOk());
}

TEST(EngineAllocationFailureTest, APutThatNeedsASegmentWithoutMemoryIsRefusedAndLosesNothing) {
  OnEachLayoutAndMode(PutUntilASegmentCannotBeTaken);
}

}  // namespace
}  // namespace nvkv::kv
