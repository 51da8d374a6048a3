// The index when memory runs out: a hash table that cannot grow refuses the write that needed
// the room with kResourceExhausted, before anything of it is appended, and the store stays
// whole: the refused write is absent (all of a batch), every acknowledged one is there, the
// same write succeeds once memory is back, and a reopen finds exactly what was acknowledged.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "kv/engine.h"
#include "storage/mem_device.h"

namespace nvkv::kv {
namespace {

// The process's address space in use now, in bytes (/proc/self/statm counts pages).
uint64_t AddressSpaceBytes() {
  long pages = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
  std::fclose(statm);
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

std::string Key(uint64_t i) {
  char key[32];
  std::snprintf(key, sizeof(key), "key%012llu", static_cast<unsigned long long>(i));
  return key;
}

std::string Value(uint64_t i) { return "v" + std::to_string(i); }

storage::MemDeviceOptions Device() {
  storage::MemDeviceOptions mem;
  mem.lba_bytes = 4096;
  mem.lba_count = (128 << 20) / mem.lba_bytes;
  mem.volatile_write_cache = false;
  return mem;
}

// Reopens rebuild the index from the log, not from the clean-close checkpoint.
constexpr EngineSeams kSeams{.checkpoint_at_close = false};

Options StoreOptions() {
  Options options;
  options.shard_count = 1;  // one table, so its size is the index_bytes of Stats
  options.background_compaction = false;
  return options;
}

// In a forked child, so that the address-space cap and any abort stay there. Exit codes: 0 all
// well; others name the step that went wrong (and stderr says more).
[[noreturn]] void RunOutOfIndexMemory() {
  auto device = storage::MemDevice::Create(Device());
  if (!device.ok()) std::_Exit(10);
  std::shared_ptr<storage::MemStorage> bytes = (*device)->storage();
  auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(), kSeams);
  if (!engine.ok()) std::_Exit(11);
  auto put = [&](uint64_t i) {
    const std::string key = Key(i), value = Value(i);
    const WriteOp op{false, key, value};
    return (*engine)->Write({&op, 1}, /*durable=*/false);
  };
  // Fill until the table has just grown past 8 MiB: its next growth needs ~10 MiB at once.
  uint64_t next = 0;
  while ((*engine)->Stats().index_bytes < (uint64_t{8} << 20)) {
    for (int i = 0; i < 1024; ++i) {
      if (!put(next++).ok()) std::_Exit(12);
    }
  }
  const uint64_t table_bytes = (*engine)->Stats().index_bytes;
  // Room for half a table more: small allocations go on, the table's growth cannot.
  const rlimit cap{AddressSpaceBytes() + table_bytes / 2, RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &cap) != 0) std::_Exit(13);
  // The table is at most 0.9 full before it grows, and 1.3 times as large as the one before,
  // whose 0.9 filled it: it grows within 0.9 - 0.9 / 1.3 of its slots (+1 for rounding).
  const uint64_t acknowledged_limit = next + table_bytes / 8 * 21 / 100 + 1;
  absl::Status refused;
  while (refused.ok() && next <= acknowledged_limit) {
    refused = put(next);
    if (refused.ok()) ++next;
  }
  const uint64_t refused_key = next;  // keys [0, next) are acknowledged
  if (refused.ok()) std::_Exit(14);   // the table grew beyond the cap?
  if (!absl::IsResourceExhausted(refused) || !absl::StrContains(refused.message(), "index")) {
    std::fprintf(stderr, "refused put: %s\n", refused.ToString().c_str());
    std::_Exit(15);
  }
  // A batch with a new key needs the room too: refused whole, before any of it is appended.
  const std::string batch_key = Key(refused_key + 1), batch_value = Value(refused_key + 1);
  const std::string old_key = Key(0), old_value = "overwritten";
  const WriteOp batch[] = {{false, old_key, old_value}, {false, batch_key, batch_value}};
  const absl::Status batch_refused = (*engine)->Write(batch, /*durable=*/false);
  if (!absl::IsResourceExhausted(batch_refused)) {
    std::fprintf(stderr, "refused batch: %s\n", batch_refused.ToString().c_str());
    std::_Exit(16);
  }
  // Overwrites and deletes of present keys need no new entry and still work.
  const std::string overwrite = Value(1) + "-again";
  const std::string key1 = Key(1), key2 = Key(2);
  const WriteOp overwrite_op{false, key1, overwrite};
  const WriteOp delete_op{true, key2, {}};
  if (!(*engine)->Write({&overwrite_op, 1}, false).ok()) std::_Exit(17);
  if (!(*engine)->Write({&delete_op, 1}, false).ok()) std::_Exit(18);
  const rlimit lifted{RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &lifted) != 0) std::_Exit(19);

  // Nothing of the refused writes is there.
  if (!absl::IsNotFound((*engine)->Get(Key(refused_key)).status())) std::_Exit(20);
  if (!absl::IsNotFound((*engine)->Get(batch_key).status())) std::_Exit(21);
  auto first = (*engine)->Get(old_key);
  if (!first.ok() || *first != Value(0)) std::_Exit(22);
  // With memory back, the refused put goes through. The batch stays refused (never retried).
  if (!put(refused_key).ok()) std::_Exit(23);
  if (!(*engine)->Close().ok()) std::_Exit(24);

  // Reopened: exactly what was acknowledged.
  auto reopened_device = storage::MemDevice::Open(bytes, Device());
  if (!reopened_device.ok()) std::_Exit(25);
  auto reopened = Engine::OpenOnDevice(std::move(*reopened_device), StoreOptions(), kSeams);
  if (!reopened.ok()) std::_Exit(26);
  for (uint64_t i = 0; i <= refused_key; i += (i < 16 || i + 16 > refused_key) ? 1 : 97) {
    auto value = (*reopened)->Get(Key(i));
    const std::string expected = i == 1 ? overwrite : Value(i);
    if (i == 2 ? !absl::IsNotFound(value.status()) : (!value.ok() || *value != expected)) {
      std::fprintf(stderr, "key %llu after reopen: %s\n", static_cast<unsigned long long>(i),
                   value.ok() ? value->c_str() : value.status().ToString().c_str());
      std::_Exit(27);
    }
  }
  if (!absl::IsNotFound((*reopened)->Get(batch_key).status())) std::_Exit(28);
  if ((*reopened)->Stats().live_keys != refused_key) std::_Exit(29);  // + refused - deleted
  std::_Exit(0);
}

TEST(IndexMemoryTest, TableThatCannotGrowRefusesTheWriteAndLosesNothing) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot cap it";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot cap it";
#endif
#endif
  EXPECT_EXIT(RunOutOfIndexMemory(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nvkv::kv
