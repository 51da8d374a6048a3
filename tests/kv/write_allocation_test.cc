// A single Put allocates nothing on the calling thread once the store is warm: overwrites of
// cached keys, blind overwrites of uncached ones (hash mode), ordered-mode overwrites, durable
// or not. What may still allocate is amortized growth (a new segment's bookkeeping, a table that
// grows), a small fraction of the puts; before, every put allocated one to three times. This
// binary replaces the global operator new (tests/testutil/replaced_operator_new.h) to count the
// allocations the test's own thread makes. On a conventional device and on a zoned one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "storage/mem_device.h"
#include "tests/kv/engine_ops.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/replaced_operator_new.h"
#include "tests/testutil/sanitizers.h"
#include "tests/testutil/status_matchers.h"

namespace {

thread_local bool counting = false;
thread_local uint64_t allocations = 0;

}  // namespace

void* nvkv::testing::TestAllocate(size_t bytes, size_t alignment) {
  if (counting) ++allocations;
  return SystemAllocate(bytes, alignment);
}

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

struct WriteSetup {
  const char* name;
  IndexMode mode;
  uint64_t cache_bytes;  // 0: hash-mode overwrites are written blind
  bool durable;
  Layout layout = Layout::kConventional;  // zoned: zones of 1 MiB, the segments' size here
};

class WriteAllocationTest : public ::testing::TestWithParam<WriteSetup> {};

TEST_P(WriteAllocationTest, WarmSinglePutsAllocateNothing) {
#ifdef NVKV_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer allocates on its own account";
#endif
  const WriteSetup& setup = GetParam();
  storage::MemDeviceOptions mem;
  mem.lba_bytes = 4096;
  mem.lba_count = (64 << 20) / mem.lba_bytes;
  mem.volatile_write_cache = true;
  if (setup.layout == Layout::kZoned) SplitIntoWholeZones(&mem, 256);  // 1 MiB zones
  auto device = storage::MemDevice::Create(mem);
  ASSERT_THAT(device, IsOk());
  Options options;
  options.index_mode = setup.mode;
  options.cache_bytes = setup.cache_bytes;
  options.background_compaction = false;
  auto engine = Engine::OpenOnDevice(std::move(*device), options);
  ASSERT_THAT(engine, IsOk());
  constexpr int kKeys = 2000;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(absl::StrCat("user", 1'000'003 * i));
  const std::string value(100, 'v');
  // Load, then overwrite every key twice: what grows with use (index, maps, pages' tag lists,
  // the thread's queue) has grown.
  for (int round = 0; round < 3; ++round) {
    for (const std::string& key : keys) ASSERT_THAT(Put(**engine, key, value, false), IsOk());
  }
  if (setup.cache_bytes == 0 && setup.mode == IndexMode::kHash) {
    // Blind overwrites need the keys' pages on the device, not in memory.
    ASSERT_THAT((*engine)->Flush(), IsOk());
  }
  constexpr int kPuts = 4 * kKeys;
  counting = true;
  allocations = 0;
  for (int i = 0; i < kPuts; ++i) {
    const absl::Status put = Put(**engine, keys[(i * 7) % kKeys], value, setup.durable);
    if (!put.ok()) {
      counting = false;
      FAIL() << put;
    }
  }
  counting = false;
  const EngineStats stats = (*engine)->Stats();
  if (setup.cache_bytes == 0 && setup.mode == IndexMode::kHash) {
    EXPECT_GT(stats.blind_writes, 0u) << "the puts were meant to be blind overwrites";
  }
  std::printf("%s: %llu allocations in %d puts\n", setup.name,
              static_cast<unsigned long long>(allocations), kPuts);
  // Amortized growth only: a few allocations per segment the puts fill (a durable put fills a
  // page alone: 8,000 pages are 31 segments).
  EXPECT_LE(allocations, kPuts / 50u)
      << allocations << " allocations in " << kPuts << " puts on the calling thread";
}

INSTANTIATE_TEST_SUITE_P(
    Writes, WriteAllocationTest,
    ::testing::Values(WriteSetup{"HashCached", IndexMode::kHash, 32 << 20, false},
                      WriteSetup{"HashBlind", IndexMode::kHash, 0, false},
                      WriteSetup{"HashCachedDurable", IndexMode::kHash, 32 << 20, true},
                      WriteSetup{"Ordered", IndexMode::kOrdered, 32 << 20, false},
                      WriteSetup{"ZonedHashCached", IndexMode::kHash, 32 << 20, false,
                                 Layout::kZoned},
                      WriteSetup{"ZonedHashBlind", IndexMode::kHash, 0, false, Layout::kZoned},
                      WriteSetup{"ZonedHashCachedDurable", IndexMode::kHash, 32 << 20, true,
                                 Layout::kZoned},
                      WriteSetup{"ZonedOrdered", IndexMode::kOrdered, 32 << 20, false,
                                 Layout::kZoned}),
    [](const ::testing::TestParamInfo<WriteSetup>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace nvkv::kv
