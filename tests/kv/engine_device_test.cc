// The engine on a real NVMe namespace, through both nodes Linux gives it:
//   Passthrough  NVKV_TEST_NVME=/dev/ngXnY   generic char device, NVMe commands on io_uring
//   Block        NVKV_TEST_BLOCK=/dev/nvmeXnY the same namespace's block device, O_DIRECT
// Each test skips unless the variable of its path is set; the cross-backend tests need both and
// open the two nodes one after the other; NamespaceTest checks that they cannot be open together
// (the claim is on the namespace, storage/device_lock.h). With NVKV_TEST_ZONED=1 the namespace
// is zoned: EngineDeviceTest's behaviour tests run through the generic node (a segment is then a
// zone's writable part), and EngineZonedTest checks a store on the zones and the block node
// refused naming the generic node.
// tests/nvme-vm runs this binary in QEMU. It formats over whatever the namespace holds.
// Random tests print their seed; NVKV_TEST_SEED=<seed> replays one.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kv/engine.h"
#include "storage/base/status_macros.h"
#include "storage/device.h"
#include "storage/nvme_device.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::DeviceKind;
using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

enum class NodeKind { kPassthrough, kBlock };

void PrintTo(NodeKind kind, std::ostream* os) {
  *os << (kind == NodeKind::kPassthrough ? "Passthrough" : "Block");
}

const char* EnvVarOf(NodeKind kind) {
  return kind == NodeKind::kPassthrough ? "NVKV_TEST_NVME" : "NVKV_TEST_BLOCK";
}

std::string PathOf(NodeKind kind) {
  const char* path = std::getenv(EnvVarOf(kind));
  return path != nullptr ? path : "";
}

// NVKV_TEST_FDP=1: the namespace has flexible data placement enabled (tests/nvme-vm --config fdp).
bool NamespaceHasFdp() {
  const char* fdp = std::getenv("NVKV_TEST_FDP");
  return fdp != nullptr && std::strcmp(fdp, "1") == 0;
}

bool NamespaceIsZoned() {
  const char* zoned = std::getenv("NVKV_TEST_ZONED");
  return zoned != nullptr && std::strcmp(zoned, "1") == 0;
}

uint64_t TestSeed() {
  const char* seed = std::getenv("NVKV_TEST_SEED");
  return seed != nullptr ? std::strtoull(seed, nullptr, 0) : std::random_device{}();
}

// The kernel's logical block size of block device `path` (sysfs), 0 when unknown.
uint32_t KernelLogicalBlockBytes(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  std::ifstream in("/sys/class/block/" + name + "/queue/logical_block_size");
  uint32_t bytes = 0;
  in >> bytes;
  return bytes;
}

// `bytes` on a conventional namespace; on a zoned one a segment is a zone's writable part (0).
uint32_t SegmentBytes(uint32_t bytes) { return NamespaceIsZoned() ? 0 : bytes; }

// A store on the whole namespace. Small segments keep compaction and recovery cheap under QEMU.
Options DeviceStore() {
  Options options;
  options.force_format = true;
  options.segment_bytes = SegmentBytes(256 << 10);
  options.shard_count = 2;
  return options;
}

// Opening an existing store only: fails rather than format.
Options ExistingStore() {
  Options options = DeviceStore();
  options.force_format = false;
  options.create_if_missing = false;
  return options;
}

// Writes a pattern over the first 128 KiB (both superblock copies at any page size; on zones,
// over the start of the first metadata zone, the second one reset), so the next Open finds data
// that is not an nvkv store: a test starts from a fresh format, not from the store an earlier
// test left.
absl::Status ScribbleOverSuperblocks(const std::string& path) {
  storage::DeviceOptions options;
  options.buffers.buffer_count = 1;
  options.buffers.chunk_count = 1;
  options.ring.queue_depth = 4;
  options.zoned_access = storage::ZonedAccess::kGenericNodeOnly;
  absl::StatusOr<std::unique_ptr<storage::Device>> device = storage::OpenDevice(path, options);
  if (!device.ok()) return device.status();
  const storage::ZoneModel& zones = (*device)->info().zones;
  uint64_t bytes = 128 << 10;
  if (zones.zoned()) {
    for (uint64_t zone : {0, 1}) {
      storage::IoRequest reset;
      reset.op = storage::IoOp::kZoneReset;
      reset.lba = zones.StartOf(zone);
      NVKV_RETURN_IF_ERROR(storage::RunOne(**device, reset));
    }
    bytes = std::min<uint64_t>(bytes, zones.capacity_blocks * (*device)->info().lba_bytes);
  }
  const uint32_t lba_count = static_cast<uint32_t>(bytes / (*device)->info().lba_bytes);
  return nvkv::testing::WritePattern(**device, 0, lba_count, /*seed=*/0x5c71bb1e, /*fua=*/true);
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value,
                 bool durable = true) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

absl::Status Delete(Engine& engine, std::string_view key) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), true);
}

// `bytes` bytes that depend on `key` and `version`, so a stale or misplaced value shows.
std::string ValueOf(std::string_view key, uint64_t version, size_t bytes) {
  std::mt19937_64 rng(std::hash<std::string_view>{}(key) ^ (version * 0x9e3779b97f4a7c15ULL));
  std::string value(bytes, '\0');
  for (char& c : value) c = static_cast<char>(rng());
  return value;
}

// The store holds exactly `model`: every key reads back its value (Get and MultiGet), `absent`
// keys are not found, and the live key count matches.
void ExpectStoreHolds(Engine& engine, const std::map<std::string, std::string>& model,
                      const std::vector<std::string>& absent) {
  for (const auto& [key, value] : model) {
    absl::StatusOr<std::string> got = engine.Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    EXPECT_EQ(got->size(), value.size()) << key;
    EXPECT_TRUE(*got == value) << key;
  }
  for (const std::string& key : absent) {
    EXPECT_THAT(engine.Get(key), StatusIs(absl::StatusCode::kNotFound)) << key;
  }
  std::vector<std::string_view> keys;
  for (const auto& entry : model) keys.push_back(entry.first);
  std::vector<absl::StatusOr<std::string>> values;
  engine.MultiGet(keys, &values);
  ASSERT_EQ(values.size(), keys.size());
  size_t i = 0;
  for (const auto& entry : model) {
    ASSERT_THAT(values[i], IsOk()) << entry.first;
    EXPECT_TRUE(*values[i] == entry.second) << entry.first;
    ++i;
  }
  EXPECT_EQ(engine.Stats().live_keys, model.size());
}

class EngineDeviceTest : public ::testing::TestWithParam<NodeKind> {
 protected:
  void SetUp() override {
    path_ = PathOf(GetParam());
    if (path_.empty()) {
      GTEST_SKIP() << "set " << EnvVarOf(GetParam()) << " to run (tests/nvme-vm sets it); the "
                   << "namespace's contents are overwritten";
    }
    if (NamespaceIsZoned() && GetParam() == NodeKind::kBlock) {
      GTEST_SKIP() << "a zoned namespace takes no store through its block node (EngineZonedTest)";
    }
    ASSERT_THAT(ScribbleOverSuperblocks(path_), IsOk());
  }

  std::unique_ptr<Engine> Open(const Options& options = DeviceStore()) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path_, options);
    EXPECT_THAT(engine, IsOk()) << path_;
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  std::string path_;
};

TEST_P(EngineDeviceTest, ForeignDataNeedsForceFormat) {
  Options options = DeviceStore();
  options.force_format = false;
  EXPECT_THAT(Engine::Open(path_, options),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not an nvkv store"));
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(Put(*engine, "k", "v"), IsOk());
  engine.reset();
  engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(*engine->Get("k"), "v");
}

TEST_P(EngineDeviceTest, PathPicksTheBackend) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  const EngineStats stats = engine->Stats();
  for (const std::string& note : stats.device.notes) std::printf("note: %s\n", note.c_str());
  EXPECT_EQ(stats.device.path, path_);
  if (GetParam() == NodeKind::kPassthrough) {
    EXPECT_EQ(stats.device.kind, DeviceKind::kNvmePassthrough)
        << static_cast<int>(stats.device.kind);
    EXPECT_FALSE(stats.device.block_device);
    EXPECT_GE(stats.device.nsid, 1u);
    EXPECT_TRUE(stats.device.ring.sqe128_cqe32);
  } else {
    EXPECT_EQ(stats.device.kind, DeviceKind::kDirectFile) << static_cast<int>(stats.device.kind);
    EXPECT_TRUE(stats.device.block_device);
  }
  EXPECT_EQ(stats.device.zoned, NamespaceIsZoned());
  // Both nodes see the namespace's own block size (512 in tests/nvme-vm's "512" config), and a
  // page spans page_bytes / lba_bytes of its blocks.
  const std::string block = PathOf(NodeKind::kBlock);
  if (!block.empty() && KernelLogicalBlockBytes(block) != 0) {
    EXPECT_EQ(stats.device.lba_bytes, KernelLogicalBlockBytes(block));
  }
  EXPECT_EQ(stats.page_bytes % stats.device.lba_bytes, 0u);
  EXPECT_EQ(stats.segments_free, stats.segments_total);
  EXPECT_GT(stats.segments_total, 0u);
  EXPECT_LE(stats.capacity_bytes, stats.device.capacity_bytes);
}

TEST_P(EngineDeviceTest, PutGetDeleteAcrossReopen) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->Get("a"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(Put(*engine, "a", "1"), IsOk());
  ASSERT_THAT(Put(*engine, "b", "2"), IsOk());
  EXPECT_EQ(*engine->Get("a"), "1");
  ASSERT_THAT(Put(*engine, "a", "3"), IsOk());
  EXPECT_EQ(*engine->Get("a"), "3");
  ASSERT_THAT(Delete(*engine, "b"), IsOk());
  EXPECT_THAT(engine->Get("b"), StatusIs(absl::StatusCode::kNotFound));
  for (int i = 0; i < 300; ++i) {
    ASSERT_THAT(Put(*engine, "n" + std::to_string(i), std::to_string(i), i % 2 == 0), IsOk());
  }
  ASSERT_THAT(engine->Close(), IsOk());
  engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(*engine->Get("a"), "3");
  EXPECT_THAT(engine->Get("b"), StatusIs(absl::StatusCode::kNotFound));
  for (int i = 0; i < 300; ++i) EXPECT_EQ(*engine->Get("n" + std::to_string(i)), std::to_string(i));
  EXPECT_EQ(engine->Stats().live_keys, 301u);
}

// Readers of the namespace (Options::read_only: the node opened O_RDONLY, a shared claim)
// open it together and read from the device; a writer waits for them, and they for it.
TEST_P(EngineDeviceTest, ReadersShareTheNamespace) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_THAT(Put(*engine, "r" + std::to_string(i), ValueOf("r", i, 300)), IsOk());
  }
  Options reader = ExistingStore();
  reader.read_only = true;
  reader.lock_wait_ms = 100;
  EXPECT_THAT(Engine::Open(path_, reader),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use by another opener"));
  ASSERT_THAT(engine->Close(), IsOk());
  engine.reset();
  auto first = Open(reader);
  ASSERT_NE(first, nullptr);
  auto second = Open(reader);
  ASSERT_NE(second, nullptr);
  Options writer = ExistingStore();
  writer.lock_wait_ms = 100;
  EXPECT_THAT(Engine::Open(path_, writer),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use by another opener"));
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(*first->Get("r" + std::to_string(i)), ValueOf("r", i, 300));
    EXPECT_EQ(*second->Get("r" + std::to_string(i)), ValueOf("r", i, 300));
  }
  EXPECT_THAT(Put(*first, "new", "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(first->Close(), IsOk());
  ASSERT_THAT(second->Close(), IsOk());
  engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().live_keys, 200u);
}

TEST_P(EngineDeviceTest, BatchIsAppliedWholeAcrossReopen) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(Put(*engine, "gone", "x"), IsOk());
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back("batch" + std::to_string(i));
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(ValueOf(key, 1, 100 + key.size() * 37));
  std::vector<WriteOp> ops;
  for (size_t i = 0; i < keys.size(); ++i) ops.push_back(WriteOp{false, keys[i], values[i]});
  ops.push_back(WriteOp{true, "gone", {}});
  ops.push_back(WriteOp{false, "batch0", "last-wins"});
  ASSERT_THAT(engine->Write(ops, true), IsOk());
  engine.reset();
  engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(*engine->Get("batch0"), "last-wins");
  for (size_t i = 1; i < keys.size(); ++i) EXPECT_EQ(*engine->Get(keys[i]), values[i]) << keys[i];
  EXPECT_THAT(engine->Get("gone"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(engine->Stats().live_keys, keys.size());
}

// Values from a few bytes to the largest the store takes, which spans many pages (and, on
// 512-byte namespaces, many blocks per page).
TEST_P(EngineDeviceTest, LargeValuesAcrossReopen) {
  auto engine = Open();
  ASSERT_NE(engine, nullptr);
  const uint32_t max = engine->max_value_bytes();
  std::map<std::string, std::string> model;
  for (const size_t bytes : {size_t{1}, size_t{4000}, size_t{4096}, size_t{10000}, size_t{40000},
                             size_t{max / 2}, size_t{max - 1}, size_t{max}}) {
    const std::string key = "large" + std::to_string(bytes);
    model[key] = ValueOf(key, 1, bytes);
    ASSERT_THAT(Put(*engine, key, model[key]), IsOk()) << bytes;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));
  engine.reset();
  engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));
}

// After a reopen every read goes to the device: MultiGet keeps them all in flight at once, and
// GetAsync runs callbacks only inside Poll.
TEST_P(EngineDeviceTest, MultiGetAndAsyncReadFromTheDevice) {
  {
    auto engine = Open();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 500; ++i) {
      const std::string key = "m" + std::to_string(i);
      ASSERT_THAT(Put(*engine, key, ValueOf(key, 1, 50 + i * 7), false), IsOk());
    }
    ASSERT_THAT(engine->Flush(), IsOk());
  }
  auto engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  const uint64_t reads_before = engine->Stats().page_reads;
  std::vector<std::string> keys;
  for (int i = 0; i < 510; ++i) keys.push_back("m" + std::to_string(i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<absl::StatusOr<std::string>> values;
  engine->MultiGet(views, &values);
  ASSERT_EQ(values.size(), keys.size());
  for (int i = 0; i < 500; ++i) {
    ASSERT_THAT(values[i], IsOk()) << keys[i];
    EXPECT_EQ(*values[i], ValueOf(keys[i], 1, 50 + i * 7)) << keys[i];
  }
  for (int i = 500; i < 510; ++i) EXPECT_THAT(values[i], StatusIs(absl::StatusCode::kNotFound));
  EXPECT_GT(engine->Stats().page_reads, reads_before);

  int done = 0, wrong = 0;
  for (int i = 0; i < 60; ++i) {
    ASSERT_THAT(engine->GetAsync(keys[i], [&done, &wrong, &keys, i](absl::StatusOr<std::string> v) {
      if (!v.ok() || *v != ValueOf(keys[i], 1, 50 + i * 7)) ++wrong;
      ++done;
    }), IsOk());
  }
  EXPECT_EQ(done, 0);  // callbacks only run inside Poll
  while (engine->pending_reads() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
  EXPECT_EQ(done, 60);
  EXPECT_EQ(wrong, 0);
}

// One thread keeps asynchronous reads and durable writes in flight together: on the passthrough
// node, Poll waits on a ring of big SQEs with the write listener's eventfd read armed in it, and
// the log writer's own ring carries its wake event the same way.
TEST_P(EngineDeviceTest, AsynchronousDurableWritesAndReadsInOneLoop) {
  Options options = DeviceStore();
  options.cache_bytes = 0;  // reads go to the device
  {
    auto engine = Open(options);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 200; ++i) {
      const std::string key = "w" + std::to_string(i);
      ASSERT_THAT(Put(*engine, key, ValueOf(key, 1, 100), false), IsOk());
    }
    ASSERT_THAT(engine->Flush(), IsOk());
    int reads_ok = 0, writes_ok = 0, failed = 0;
    std::vector<std::string> keys, values;
    for (int i = 0; i < 200; ++i) {
      keys.push_back("w" + std::to_string(i));
      values.push_back(ValueOf(keys.back(), 2, 100 + i));
    }
    for (int i = 0; i < 200; ++i) {
      while (engine->pending_reads() + engine->pending_writes() >= 32) {
        ASSERT_THAT(engine->Poll(1), IsOk());
      }
      if (i % 2 == 0) {
        ASSERT_THAT(engine->GetAsync(keys[i], [&, i](absl::StatusOr<std::string> v) {
          if (v.ok() && *v == ValueOf(keys[i], 1, 100)) {
            ++reads_ok;
          } else {
            ++failed;
          }
        }), IsOk());
      } else {
        WriteOp op{false, keys[i], values[i]};
        ASSERT_THAT(engine->WriteAsync(std::span<const WriteOp>(&op, 1), true,
                                       [&](absl::Status status) {
                                         if (status.ok()) {
                                           ++writes_ok;
                                         } else {
                                           ++failed;
                                         }
                                       }),
                    IsOk());
      }
    }
    while (engine->pending_reads() + engine->pending_writes() > 0) {
      ASSERT_THAT(engine->Poll(1), IsOk());
    }
    EXPECT_EQ(reads_ok, 100);
    EXPECT_EQ(writes_ok, 100);
    EXPECT_EQ(failed, 0);
  }
  auto engine = Open(ExistingStore());
  ASSERT_NE(engine, nullptr);
  for (int i = 1; i < 200; i += 2) {
    EXPECT_EQ(engine->Get("w" + std::to_string(i)).value_or("?"),
              ValueOf("w" + std::to_string(i), 2, 100 + i));
  }
}

// Random puts (some large), deletes, batches and reads checked against a std::map, with
// reopens (alternating the index mode, which is not part of the format) in between.
TEST_P(EngineDeviceTest, MatchesMapModelAcrossReopens) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("NVKV_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::map<std::string, std::string> model;
  Options options = DeviceStore();
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  constexpr int kSteps = 4000;
  for (int step = 0; step < kSteps; ++step) {
    const std::string key = "k" + std::to_string(rng() % 400);
    const int action = static_cast<int>(rng() % 100);
    if (action < 50) {
      size_t bytes = rng() % 600;
      if (rng() % 40 == 0) {  // spans pages, up to the store's value limit
        bytes = std::min<size_t>(5000 + rng() % 60000, engine->max_value_bytes());
      }
      std::string value = ValueOf(key, step, bytes);
      ASSERT_THAT(Put(*engine, key, value, rng() % 2 == 0), IsOk()) << "step " << step;
      model[key] = std::move(value);
    } else if (action < 65) {
      ASSERT_THAT(Delete(*engine, key), IsOk()) << "step " << step;
      model.erase(key);
    } else if (action < 72) {
      std::vector<std::string> keys, values;
      for (int i = 0; i < 6; ++i) {
        keys.push_back("k" + std::to_string(rng() % 400));
        values.push_back(ValueOf(keys.back(), step * 8 + i, rng() % 200));
      }
      std::vector<WriteOp> ops;
      for (int i = 0; i < 6; ++i) ops.push_back(WriteOp{rng() % 4 == 0, keys[i], values[i]});
      ASSERT_THAT(engine->Write(ops, rng() % 2 == 0), IsOk()) << "step " << step;
      for (const WriteOp& op : ops) {
        if (op.is_delete) {
          model.erase(std::string(op.key));
        } else {
          model[std::string(op.key)] = std::string(op.value);
        }
      }
    } else {
      absl::StatusOr<std::string> value = engine->Get(key);
      auto it = model.find(key);
      if (it == model.end()) {
        ASSERT_THAT(value, StatusIs(absl::StatusCode::kNotFound)) << "step " << step << " " << key;
      } else {
        ASSERT_THAT(value, IsOk()) << "step " << step << " " << key;
        ASSERT_TRUE(*value == it->second) << "step " << step << " " << key;
      }
    }
    if (step % 1000 == 999) {  // reopen; non-durable writes are flushed by the clean close
      ASSERT_THAT(engine->Close(), IsOk());
      engine.reset();
      options.index_mode =
          options.index_mode == IndexMode::kHash ? IndexMode::kOrdered : IndexMode::kHash;
      engine = Open(options);
      ASSERT_NE(engine, nullptr);
      ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {})) << "after step " << step;
    }
  }
}

// Small segments and repeated overwrites of a few keys: the background cleaner must reclaim
// segments before the store fills, then CompactAll cleans what garbage is left, and every key
// still reads its newest value, before and after a reopen.
TEST_P(EngineDeviceTest, CompactionReclaimsOverwrittenSegments) {
  // Background cleaning starts near full: on zones (segments of whole zones) that is most of the
  // namespace to write under QEMU's emulation. EngineZonedTest compacts there, by CompactAll.
  if (NamespaceIsZoned()) GTEST_SKIP() << "fills the namespace: too slow on QEMU's zones";
  Options options = DeviceStore();
  options.segment_bytes = 64 << 10;  // 16 pages of 4 KiB
  auto engine = Open(options);
  ASSERT_NE(engine, nullptr);
  const uint64_t capacity = engine->Stats().capacity_bytes;
  constexpr int kKeys = 64;
  constexpr size_t kValueBytes = 12 << 10;
  std::map<std::string, std::string> model;
  uint64_t written = 0;
  int round = 0;
  // Enough to fill the store twice over: without cleaning the writes would fail.
  for (; written < 2 * capacity && engine->Stats().segments_cleaned == 0; ++round) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "c" + std::to_string(k);
      model[key] = ValueOf(key, round, kValueBytes);
      ASSERT_THAT(Put(*engine, key, model[key], /*durable=*/false), IsOk())
          << "round " << round << " after " << written << " bytes";
      written += kValueBytes;
    }
  }
  ASSERT_THAT(engine->Flush(), IsOk());
  EngineStats before = engine->Stats();
  std::printf("background cleaning after %d rounds, %llu bytes written: %llu segments cleaned\n",
              round, static_cast<unsigned long long>(written),
              static_cast<unsigned long long>(before.segments_cleaned));
  EXPECT_GT(before.segments_cleaned, 0u) << written << " bytes written into " << capacity;
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));

  ASSERT_THAT(engine->CompactAll(), IsOk());
  const EngineStats after = engine->Stats();
  EXPECT_GT(after.segments_cleaned, before.segments_cleaned);
  EXPECT_GE(after.segments_free, before.segments_free);
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));
  ASSERT_THAT(engine->Close(), IsOk());
  engine = Open(options);
  ASSERT_NE(engine, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));
}

TEST_P(EngineDeviceTest, LargerPagesAcrossReopen) {
  Options options = DeviceStore();
  options.page_bytes = 16384;
  options.segment_bytes = SegmentBytes(512 << 10);
  std::map<std::string, std::string> model;
  {
    auto engine = Open(options);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(engine->Stats().page_bytes, 16384u);
    for (int i = 0; i < 200; ++i) {
      const std::string key = "p" + std::to_string(i);
      model[key] = ValueOf(key, 1, (i * 997) % 40000);
      ASSERT_THAT(Put(*engine, key, model[key], i % 10 == 0), IsOk());
    }
  }
  auto engine = Open(ExistingStore());  // the page size comes from the superblock
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().page_bytes, 16384u);
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(*engine, model, {}));
}

INSTANTIATE_TEST_SUITE_P(Nodes, EngineDeviceTest,
                         ::testing::Values(NodeKind::kPassthrough, NodeKind::kBlock),
                         [](const auto& info) {
                           return info.param == NodeKind::kPassthrough ? "Passthrough" : "Block";
                         });

// --- Both nodes of one namespace: a store written through one reads back through the other ---

// Formats through `first` and fills the store, then reopens it through `second` (without
// format permission) and checks every key, changes it there, and checks again through `first`.
void WriteThroughOneReadThroughOther(NodeKind first, NodeKind second) {
  const std::string first_path = PathOf(first), second_path = PathOf(second);
  if (first_path.empty() || second_path.empty()) {
    GTEST_SKIP() << "set NVKV_TEST_NVME and NVKV_TEST_BLOCK to two nodes of one namespace";
  }
  if (NamespaceIsZoned()) GTEST_SKIP() << "NVKV_TEST_ZONED=1: EngineZonedTest covers it";
  ASSERT_THAT(ScribbleOverSuperblocks(first_path), IsOk());
  const uint64_t seed = TestSeed();
  SCOPED_TRACE("NVKV_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::map<std::string, std::string> model;
  std::vector<std::string> absent;
  {
    auto engine = Engine::Open(first_path, DeviceStore());
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < 400; ++i) {
      const std::string key = "x" + std::to_string(i);
      size_t bytes = rng() % 3000;
      if (i % 50 == 0) bytes = 20000 + rng() % 40000;
      model[key] = ValueOf(key, 1, bytes);
      ASSERT_THAT(Put(**engine, key, model[key], i % 3 == 0), IsOk());
    }
    for (int i = 0; i < 400; i += 7) {
      const std::string key = "x" + std::to_string(i);
      ASSERT_THAT(Delete(**engine, key), IsOk());
      model.erase(key);
      absent.push_back(key);
    }
    std::vector<WriteOp> batch;
    for (int i = 0; i < 20; ++i) {
      const std::string key = "y" + std::to_string(i);
      model[key] = ValueOf(key, 1, 300);
      batch.push_back(WriteOp{false, model.find(key)->first, model.find(key)->second});
    }
    ASSERT_THAT((*engine)->Write(batch, true), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  {
    auto engine = Engine::Open(second_path, ExistingStore());
    ASSERT_THAT(engine, IsOk()) << "the store written through " << first_path;
    ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(**engine, model, absent));
    for (int i = 1; i < 400; i += 5) {
      const std::string key = "x" + std::to_string(i);
      if (i % 7 == 0) continue;
      model[key] = ValueOf(key, 2, 100 + rng() % 5000);
      ASSERT_THAT(Put(**engine, key, model[key]), IsOk());
    }
    ASSERT_THAT(Delete(**engine, "y0"), IsOk());
    model.erase("y0");
    absent.push_back("y0");
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = Engine::Open(first_path, ExistingStore());
  ASSERT_THAT(engine, IsOk());
  ASSERT_NO_FATAL_FAILURE(ExpectStoreHolds(**engine, model, absent));
}

// --- A namespace whose writes all fail (tests/nvme-vm: a read-only image behind it) ---

// Formatting it fails with the device's own error, named in one line: the NVMe status through
// passthrough, the block layer's errno and what it means through the block node.
void FormatOfUnwritableNamespaceNamesTheError(const char* env, const char* named) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set " << env << " to a namespace that fails writes (tests/nvme-vm's 4k)";
  }
  auto engine = Engine::Open(path, DeviceStore());
  ASSERT_THAT(engine, StatusIs(absl::StatusCode::kDataLoss, named)) << path;
  EXPECT_EQ(engine.status().ToString().find('\n'), std::string::npos) << engine.status();
  std::printf("%s: %s\n", path, engine.status().ToString().c_str());
}

TEST(UnwritableNamespaceTest, PassthroughFormatNamesTheNvmeStatus) {
  FormatOfUnwritableNamespaceNamesTheError("NVKV_TEST_NVME_READONLY", "Write Fault");
}

TEST(UnwritableNamespaceTest, BlockNodeFormatNamesTheMediumError) {
  FormatOfUnwritableNamespaceNamesTheError("NVKV_TEST_BLOCK_READONLY", "medium error");
}

// --- The two nodes of one namespace are one device ---

// While the namespace is open through `first`, Open through `second` is refused as in use (both
// would write the same segments); once `first` is closed, `second` opens and finds the store.
void OtherNodeIsRefusedWhileOneIsOpen(NodeKind first, NodeKind second) {
  const std::string first_path = PathOf(first), second_path = PathOf(second);
  if (first_path.empty() || second_path.empty()) {
    GTEST_SKIP() << "set NVKV_TEST_NVME and NVKV_TEST_BLOCK to two nodes of one namespace";
  }
  if (NamespaceIsZoned()) GTEST_SKIP() << "NVKV_TEST_ZONED=1: EngineZonedTest covers it";
  ASSERT_THAT(ScribbleOverSuperblocks(first_path), IsOk());
  {
    auto engine = Engine::Open(first_path, DeviceStore());
    ASSERT_THAT(engine, IsOk());
    for (const std::string& note : (*engine)->Stats().device.notes) {
      EXPECT_EQ(note.find("not kept off"), std::string::npos) << note;
    }
    ASSERT_THAT(Put(**engine, "held", "by the first node"), IsOk());
    Options other = ExistingStore();
    other.lock_wait_ms = 200;
    auto refused = Engine::Open(second_path, other);
    ASSERT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition))
        << second_path << " opened while " << first_path << " had the namespace";
    EXPECT_NE(refused.status().message().find("in use"), std::string_view::npos)
        << refused.status();
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = Engine::Open(second_path, ExistingStore());
  ASSERT_THAT(engine, IsOk());
  auto value = (*engine)->Get("held");
  ASSERT_THAT(value, IsOk());
  EXPECT_EQ(*value, "by the first node");
}

TEST(NamespaceTest, BlockNodeIsRefusedWhilePassthroughHasTheNamespace) {
  OtherNodeIsRefusedWhileOneIsOpen(NodeKind::kPassthrough, NodeKind::kBlock);
}

TEST(NamespaceTest, PassthroughIsRefusedWhileBlockNodeHasTheNamespace) {
  OtherNodeIsRefusedWhileOneIsOpen(NodeKind::kBlock, NodeKind::kPassthrough);
}

TEST(CrossBackendTest, WrittenThroughPassthroughReadsThroughBlockDevice) {
  WriteThroughOneReadThroughOther(NodeKind::kPassthrough, NodeKind::kBlock);
}

TEST(CrossBackendTest, WrittenThroughBlockDeviceReadsThroughPassthrough) {
  WriteThroughOneReadThroughOther(NodeKind::kBlock, NodeKind::kPassthrough);
}

// --- A namespace with flexible data placement (NVKV_TEST_FDP=1) ---

// The store's log fills the reclaim units of the namespace's first placement handle and its
// metadata those of the second, and no write names another: the device's own count of what each
// handle's reclaim unit may still take says so. Through the block node (no FDP in Linux 6.1's
// block layer) the store names none.
TEST(EngineFdpTest, TheLogAndTheMetadataFillTheirOwnHandles) {
  const std::string path = PathOf(NodeKind::kPassthrough);
  if (path.empty() || !NamespaceHasFdp()) {
    GTEST_SKIP() << "set NVKV_TEST_NVME to a namespace with FDP and NVKV_TEST_FDP=1 "
                    "(tests/nvme-vm --config fdp)";
  }
  ASSERT_THAT(ScribbleOverSuperblocks(path), IsOk());
  absl::StatusOr<std::vector<storage::PlacementHandleStatus>> before =
      storage::ReadPlacementHandleStatus(path);
  ASSERT_THAT(before, IsOk());
  ASSERT_GE(before->size(), 3u);
  {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path, DeviceStore());
    ASSERT_THAT(engine, IsOk());
    const EngineStats stats = (*engine)->Stats();
    ASSERT_EQ(stats.device.placement.ids.size(), before->size());
    EXPECT_EQ(stats.device.placement.log_id, (*before)[0].placement_id);
    EXPECT_EQ(stats.device.placement.metadata_id, (*before)[1].placement_id);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 400; ++i) {
        const std::string key = "k" + std::to_string(i);
        ASSERT_THAT(Put(**engine, key, ValueOf(key, round, 900), i % 8 == 0), IsOk());
      }
    }
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    ASSERT_THAT((*engine)->Checkpoint(), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  absl::StatusOr<std::vector<storage::PlacementHandleStatus>> after =
      storage::ReadPlacementHandleStatus(path);
  ASSERT_THAT(after, IsOk());
  ASSERT_EQ(after->size(), before->size());
  std::vector<uint64_t> used;
  for (size_t i = 0; i < after->size(); ++i) {
    used.push_back((*before)[i].available_writes - (*after)[i].available_writes);
    std::printf("placement handle %zu (identifier %u): %llu blocks written\n", i,
                (*after)[i].placement_id, static_cast<unsigned long long>(used.back()));
  }
  EXPECT_GT(used[0], used[1]) << "the log outweighs the metadata";
  EXPECT_GT(used[1], 0u) << "superblocks, the segment map and a checkpoint";
  for (size_t i = 2; i < used.size(); ++i) EXPECT_EQ(used[i], 0u) << "handle " << i;
  // What the store wrote reads back.
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path, ExistingStore());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ(*(*engine)->Get("k17"), ValueOf("k17", 2, 900));
  EXPECT_EQ((*engine)->Stats().live_keys, 400u);
}

// --- A zoned namespace (NVKV_TEST_ZONED=1): the engine refuses it through either node ---

class EngineZonedTest : public ::testing::TestWithParam<NodeKind> {
 protected:
  void SetUp() override {
    path_ = PathOf(GetParam());
    if (path_.empty() || !NamespaceIsZoned()) {
      GTEST_SKIP() << "set " << EnvVarOf(GetParam())
                   << " and NVKV_TEST_ZONED=1 for a zoned namespace (tests/nvme-vm --config zns)";
    }
  }
  std::string path_;
};

// Through the block node the engine never lays a store on zones (no Zone Append there), and the
// error names the generic node.
TEST_P(EngineZonedTest, TheBlockNodeIsRefusedNamingTheGenericNode) {
  if (GetParam() == NodeKind::kPassthrough) GTEST_SKIP() << "the generic node takes a store";
  const std::string generic = PathOf(NodeKind::kPassthrough);
  EXPECT_THAT(Engine::Open(path_, DeviceStore()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       generic.empty() ? "zoned" : "open its NVMe generic node " + generic));
}

// The device layer opens the block node when asked to (for reports); the engine still refuses
// it, as it cannot send zone commands there.
TEST_P(EngineZonedTest, AZonedBlockNodeOpenedForReportsIsRefused) {
  if (GetParam() == NodeKind::kPassthrough) GTEST_SKIP() << "the generic node takes a store";
  storage::DeviceOptions device_options;
  device_options.zoned_access = storage::ZonedAccess::kAnyNode;
  device_options.buffers.buffer_count = 1;
  device_options.buffers.chunk_count = 0;
  device_options.ring.queue_depth = 4;
  auto device = storage::OpenDevice(path_, device_options);
  ASSERT_THAT(device, IsOk());
  EXPECT_THAT(Engine::OpenOnDevice(std::move(*device), DeviceStore()),
              StatusIs(absl::StatusCode::kInvalidArgument, "open the namespace's NVMe generic"));
}

// A namespace whose open or active limits cannot hold the store (a zone per shard, one for the
// segment map, a spare) is refused with the numbers, before zones as such are.
TEST_P(EngineZonedTest, TooFewZonesForTheShardsAreRefusedWithTheNumbers) {
  if (GetParam() == NodeKind::kBlock) GTEST_SKIP() << "the block node has no zone limits to read";
  absl::StatusOr<::nvkv::DeviceStats> device = Engine::InspectDevice(path_);
  ASSERT_THAT(device, IsOk());
  const uint32_t open = device->zones.max_open;
  const uint32_t active = device->zones.max_active;
  ASSERT_GT(open, 2u) << "the zns configuration holds a store of at least one shard";
  const uint32_t budget = active == 0 ? open : std::min(open, active);
  // The limit named is the open one only when it is below the active one (or alone).
  const bool open_limits = active == 0 || open < active;
  Options options = DeviceStore();
  options.shard_count = budget;  // needs budget + 2
  EXPECT_THAT(Engine::Open(path_, options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("zoned namespace: it keeps at most ", budget, " zones ",
                                    open_limits ? "open" : "active", "; ", budget,
                                    " shards need ", budget + 2, " (one a shard, one for the "
                                    "segment map, one spare): open with at most ",
                                    budget - 2)));
  options.shard_count = budget - 2;  // fits
  options.segment_bytes = 0;          // a segment is a zone's writable part
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path_, options);
  EXPECT_THAT(engine, IsOk());
}

// The device the engine refuses can still be described: its zone model through the generic
// node (the test configuration's capacity is below the zone size, with open and active limits),
// and every zone counted in one state.
TEST_P(EngineZonedTest, InspectDeviceShowsTheZones) {
  absl::StatusOr<::nvkv::DeviceStats> device = Engine::InspectDevice(path_);
  ASSERT_THAT(device, IsOk());
  EXPECT_TRUE(device->zoned);
  const ::nvkv::ZoneStats& zones = device->zones;
  if (GetParam() == NodeKind::kBlock) {
    EXPECT_EQ(zones.zone_count, 0u) << "the block node has no zone model of its own";
    return;
  }
  ASSERT_GT(zones.zone_count, 0u);
  EXPECT_EQ(zones.zone_count * zones.zone_bytes, device->capacity_bytes);
  EXPECT_GT(zones.zone_capacity_bytes, 0u);
  EXPECT_LT(zones.zone_capacity_bytes, zones.zone_bytes);
  EXPECT_GT(zones.max_open, 0u);
  EXPECT_GE(zones.max_active, zones.max_open);
  EXPECT_GE(zones.max_append_bytes, device->lba_bytes);
  ASSERT_TRUE(zones.states_reported);
  EXPECT_EQ(zones.empty + zones.open + zones.closed + zones.full + zones.read_only +
                zones.offline,
            zones.zone_count);
}

// A store on the zones through the generic node: its log by Zone Append through passthrough,
// reopened from the zone report and the pages' positions, compacted by zone resets, within the
// namespace's open and active limits, on Linux's driver and QEMU's zoned namespace.
TEST_P(EngineZonedTest, AStoreOnTheZonesWritesCompactsAndReopens) {
  if (GetParam() == NodeKind::kBlock) GTEST_SKIP() << "the block node has no Zone Append";
  Options options = DeviceStore();
  options.segment_bytes = 0;  // a segment is a zone's writable part
  options.force_format = false;
  std::map<std::string, std::string> model;
  {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path_, options);
    ASSERT_THAT(engine, IsOk());
    const EngineStats opened = (*engine)->Stats();
    EXPECT_EQ(opened.device.kind, DeviceKind::kNvmePassthrough);
    EXPECT_TRUE(opened.device.zoned);
    // 3,000 puts over 400 keys, every 10th a value of several pages: about 11 MiB.
    for (uint64_t i = 0; i < 3000; ++i) {
      const std::string key = absl::StrCat("zoned-", i % 400);
      const std::string value = ValueOf(key, i, i % 10 == 0 ? 40000 : 2000);
      ASSERT_THAT(Put(**engine, key, value, /*durable=*/i % 100 == 0), IsOk()) << i;
      model[key] = value;
    }
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    const EngineStats stats = (*engine)->Stats();
    EXPECT_GT(stats.device.zones.resets, 0u);
    std::printf("zones reset %llu, place runs %llu\n",
                static_cast<unsigned long long>(stats.device.zones.resets),
                static_cast<unsigned long long>(stats.device.zones.place_runs));
    for (const auto& [key, value] : model) {
      absl::StatusOr<std::string> got = (*engine)->Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      ASSERT_TRUE(*got == value) << key;
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(path_, options);
  ASSERT_THAT(engine, IsOk());
  for (const auto& [key, value] : model) {
    absl::StatusOr<std::string> got = (*engine)->Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    ASSERT_TRUE(*got == value) << key;
  }
  absl::StatusOr<::nvkv::DeviceStats> device = Engine::InspectDevice(path_);
  EXPECT_FALSE(device.ok()) << "the store holds the namespace";
}

INSTANTIATE_TEST_SUITE_P(Nodes, EngineZonedTest,
                         ::testing::Values(NodeKind::kPassthrough, NodeKind::kBlock),
                         [](const auto& info) {
                           return info.param == NodeKind::kPassthrough ? "Passthrough" : "Block";
                         });

}  // namespace
}  // namespace nvkv::kv
