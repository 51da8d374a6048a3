// Opening a store: what is refused, with which code, and that a refusal writes nothing; the
// superblock copies repairing each other; force_format, error_if_exists, create_if_missing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kv/engine.h"
#include "kv/page_format.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::MemDevice;
using storage::MemDeviceOptions;
using storage::MemStorage;

constexpr uint32_t kPageBytes = 4096;

MemDeviceOptions MemOptions(uint64_t blocks = 2 + 16 * 64) {
  MemDeviceOptions options;
  options.lba_bytes = 4096;
  options.lba_count = blocks;  // 16 segments of 256 KiB by default
  return options;
}

Options StoreOptions() {
  Options options;
  options.capacity_bytes = 16 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  return options;
}

absl::StatusOr<std::unique_ptr<Engine>> OpenMem(const std::shared_ptr<MemStorage>& storage,
                                                const Options& options,
                                                const MemDeviceOptions& mem = MemOptions()) {
  auto device = MemDevice::Open(storage, mem);
  if (!device.ok()) return device.status();
  return Engine::OpenOnDevice(std::move(*device), options);
}

std::shared_ptr<MemStorage> NewStorage(const MemDeviceOptions& mem = MemOptions()) {
  auto device = MemDevice::Create(mem);
  EXPECT_THAT(device, IsOk());
  return (*device)->storage();
}

std::vector<uint8_t> AllBytes(const MemStorage& storage) {
  return storage.CopyOut(0, static_cast<uint32_t>(storage.lba_count()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), true);
}

// A store on `storage` holding k0..k99.
void MakeStore(const std::shared_ptr<MemStorage>& storage) {
  auto engine = OpenMem(storage, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  for (int i = 0; i < 100; ++i) {
    ASSERT_THAT(Put(**engine, "k" + std::to_string(i), "v" + std::to_string(i)), IsOk());
  }
}

void ExpectStoreIntact(Engine& engine) {
  for (int i = 0; i < 100; ++i) {
    auto got = engine.Get("k" + std::to_string(i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, "v" + std::to_string(i));
  }
}

TEST(OpenTest, ForeignDataIsRefusedAndLeftUntouched) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("not-a-store");
  {
    std::mt19937_64 rng(7);
    std::vector<uint64_t> words((16 << 20) / 8);
    for (uint64_t& w : words) w = rng();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(words.data()), words.size() * 8);
  }
  const std::string before = ReadFile(path);
  EXPECT_THAT(Engine::Open(path, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not an nvkv store"));
  Options create_only = StoreOptions();
  create_only.error_if_exists = true;
  EXPECT_THAT(Engine::Open(path, create_only), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(ReadFile(path) == before) << "a refused open changed the file";

  Options force = StoreOptions();
  force.force_format = true;
  {
    auto engine = Engine::Open(path, force);
    ASSERT_THAT(engine, IsOk());
    EXPECT_THAT((*engine)->Get("anything"), StatusIs(absl::StatusCode::kNotFound));
    ASSERT_THAT(Put(**engine, "key", "value"), IsOk());
  }
  auto engine = Engine::Open(path, StoreOptions());  // a store now, no force needed
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ(*(*engine)->Get("key"), "value");
  EXPECT_EQ((*engine)->Stats().live_keys, 1u);
}

TEST(OpenTest, ForceFormatDoesNotReformatAnExistingStore) {
  auto storage = NewStorage();
  MakeStore(storage);
  Options force = StoreOptions();
  force.force_format = true;
  auto engine = OpenMem(storage, force);
  ASSERT_THAT(engine, IsOk());
  ExpectStoreIntact(**engine);
}

// Each superblock copy is repaired from the other, at open, to the bytes it had.
TEST(OpenTest, DamagedSuperblockCopyIsRepairedFromTheOther) {
  for (uint32_t damaged = 0; damaged < 2; ++damaged) {
    SCOPED_TRACE(::testing::Message() << "copy " << damaged << " damaged");
    auto storage = NewStorage();
    MakeStore(storage);
    const std::vector<uint8_t> good = storage->CopyOut(damaged, 1);
    storage->Corrupt(uint64_t{damaged} * kPageBytes + 40, 1);  // inside the checksummed fields
    ASSERT_NE(storage->CopyOut(damaged, 1), good);
    {
      auto engine = OpenMem(storage, StoreOptions());
      ASSERT_THAT(engine, IsOk());
      ExpectStoreIntact(**engine);
    }
    EXPECT_EQ(storage->CopyOut(damaged, 1), good) << "not repaired";
    // Now the other copy may go bad too, one at a time, and the store still opens.
    storage->Corrupt(uint64_t{1 - damaged} * kPageBytes + 40, 1);
    auto engine = OpenMem(storage, StoreOptions());
    ASSERT_THAT(engine, IsOk());
    ExpectStoreIntact(**engine);
  }
}

TEST(OpenTest, BothSuperblocksDamagedIsDataLossAndWritesNothing) {
  auto storage = NewStorage();
  MakeStore(storage);
  storage->Corrupt(40, 1);
  storage->Corrupt(kPageBytes + 40, 1);
  const std::vector<uint8_t> before = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, StoreOptions()),
              StatusIs(absl::StatusCode::kDataLoss, "both nvkv superblocks are damaged"));
  Options no_create = StoreOptions();
  no_create.create_if_missing = false;
  EXPECT_THAT(OpenMem(storage, no_create), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(AllBytes(*storage) == before) << "a refused open wrote to the device";
}

// Rewrites both superblock copies with `change` made to them (valid checksums).
void RewriteSuperblock(MemStorage& storage, const std::function<void(Superblock&)>& change) {
  std::vector<uint8_t> page = storage.CopyOut(0, 1);
  auto superblock = DecodeSuperblock(page.data(), kPageBytes);
  ASSERT_THAT(superblock, IsOk());
  Superblock rewritten = *superblock;
  change(rewritten);
  for (uint32_t copy = 0; copy < 2; ++copy) {
    rewritten.copy = copy;
    EncodeSuperblock(rewritten, page.data(), kPageBytes);
    storage.Write(copy, 1, page.data());
  }
}

void RewriteFormatVersion(MemStorage& storage, uint32_t version) {
  RewriteSuperblock(storage, [&](Superblock& superblock) { superblock.format_version = version; });
}

// The index mode a store was formatted with is recorded in its superblock and is what an Open
// uses unless it asks for the other one.
TEST(OpenTest, TheIndexModeAStoreWasFormattedWithIsItsDefault) {
  auto storage = NewStorage();
  Options ordered = StoreOptions();
  ordered.index_mode = IndexMode::kOrdered;
  {
    auto engine = OpenMem(storage, ordered);
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT(Put(**engine, "k", "v"), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  const auto mode_of_open = [&](IndexMode asked) {
    Options options = StoreOptions();
    options.index_mode = asked;
    auto engine = OpenMem(storage, options);
    EXPECT_THAT(engine, IsOk());
    if (!engine.ok()) return IndexMode::kAsFormatted;
    EXPECT_THAT((*engine)->Get("k"), IsOk());
    EXPECT_EQ((*engine)->Stats().index_mode, (*engine)->index_mode());
    return (*engine)->index_mode();
  };
  EXPECT_EQ(StoreOptions().index_mode, IndexMode::kAsFormatted);
  EXPECT_EQ(mode_of_open(IndexMode::kAsFormatted), IndexMode::kOrdered);
  EXPECT_EQ(mode_of_open(IndexMode::kHash), IndexMode::kHash);
  EXPECT_EQ(mode_of_open(IndexMode::kAsFormatted), IndexMode::kOrdered);  // still recorded
  // A value no format writes is damage (0 too: every store records its mode).
  const std::vector<uint8_t> copy0 = storage->CopyOut(0, 1), copy1 = storage->CopyOut(1, 1);
  for (const uint32_t mode : {0u, 7u}) {
    RewriteSuperblock(*storage, [&](Superblock& superblock) { superblock.index_mode = mode; });
    EXPECT_THAT(OpenMem(storage, StoreOptions()),
                StatusIs(absl::StatusCode::kDataLoss, absl::StrCat("index mode ", mode)));
    storage->Write(0, 1, copy0.data());
    storage->Write(1, 1, copy1.data());
  }
  // A new store takes the hash index when none is asked for.
  auto fresh = NewStorage();
  auto engine = OpenMem(fresh, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->index_mode(), IndexMode::kHash);
}

TEST(OpenTest, NewerFormatVersionIsRefused) {
  auto storage = NewStorage();
  MakeStore(storage);
  RewriteFormatVersion(*storage, kNewestFormatVersion + 1);  // a format this build does not know
  const std::vector<uint8_t> before = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "format version"));
  // force_format is for data that is not an nvkv store; a newer store is one.
  Options force = StoreOptions();
  force.force_format = true;
  EXPECT_THAT(OpenMem(storage, force),
              StatusIs(absl::StatusCode::kFailedPrecondition, "format version"));
  // Also when the first copy is damaged and only the second says so.
  storage->Corrupt(40, 1);
  const std::vector<uint8_t> damaged = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, force),
              StatusIs(absl::StatusCode::kFailedPrecondition, "format version"));
  EXPECT_TRUE(AllBytes(*storage) == damaged) << "a newer store was overwritten";
  storage->Corrupt(40, 1);
  EXPECT_TRUE(AllBytes(*storage) == before);
}

// A zoned store's superblock (format version 2) on a device without zones is refused, not read
// as a conventional store (its pages lie elsewhere), also with force_format, and left alone.
TEST(OpenTest, AZonedStoreOnADeviceWithoutZonesIsRefusedAndLeftAlone) {
  auto storage = NewStorage();
  MakeStore(storage);
  RewriteSuperblock(*storage, [](Superblock& superblock) {
    const uint64_t blocks_per_page = superblock.page_bytes / superblock.lba_bytes;
    superblock.format_version = kZonedFormatVersion;
    superblock.layout = kSuperblockLayoutZoned;
    superblock.capacity_blocks = superblock.pages_per_segment * blocks_per_page;
    superblock.zone_blocks = 2 * superblock.capacity_blocks;
    superblock.segment_count = 2;
  });
  const std::vector<uint8_t> before = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "formatted for a zoned namespace (format version 2), and this device "
                       "has no zones"));
  Options force = StoreOptions();
  force.force_format = true;
  EXPECT_THAT(OpenMem(storage, force), StatusIs(absl::StatusCode::kFailedPrecondition, "zoned"));
  EXPECT_TRUE(AllBytes(*storage) == before);
}

// A store of a development version (before format version 1: superblock magic "NVKVSB01") is
// refused by name and never formatted over, with or without force_format, also when only its
// second superblock copy can be read.
TEST(OpenTest, ADevelopmentVersionsStoreIsRefusedByNameAndLeftAlone) {
  auto storage = NewStorage();
  MakeStore(storage);
  for (uint32_t copy = 0; copy < 2; ++copy) {
    std::vector<uint8_t> page = storage->CopyOut(copy, 1);
    std::memcpy(page.data() + offsetof(Superblock, magic), &kDevelopmentSuperblockMagic, 8);
    storage->Write(copy, 1, page.data());
  }
  const std::vector<uint8_t> before = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, StoreOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "written by a development version of nvkv"));
  Options force = StoreOptions();
  force.force_format = true;
  EXPECT_THAT(OpenMem(storage, force),
              StatusIs(absl::StatusCode::kFailedPrecondition, "development version"));
  EXPECT_TRUE(AllBytes(*storage) == before) << "a development version's store was overwritten";
  storage->Corrupt(8, 1);  // copy 0's magic: not an nvkv superblock at all now
  const std::vector<uint8_t> damaged = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, force),
              StatusIs(absl::StatusCode::kFailedPrecondition, "development version"));
  EXPECT_TRUE(AllBytes(*storage) == damaged) << "a development version's store was overwritten";
}

TEST(OpenTest, DeviceTooSmallIsAClearError) {
  // 2 superblock pages + 9 segments of 256 KiB: 2 shards need 2 * 2 + 6 = 10 segments.
  auto storage = NewStorage(MemOptions(2 + 9 * 64));
  EXPECT_THAT(OpenMem(storage, StoreOptions(), MemOptions(2 + 9 * 64)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "too small"));
  // Smaller than the superblock probe, smaller than one page of superblocks.
  for (uint64_t blocks : {1, 3, 20}) {
    auto tiny = NewStorage(MemOptions(blocks));
    EXPECT_THAT(OpenMem(tiny, StoreOptions(), MemOptions(blocks)),
                StatusIs(absl::StatusCode::kFailedPrecondition, "too small"))
        << blocks << " blocks";
  }
  // A file store asked for too little capacity.
  nvkv::testing::TempDir dir;
  Options options = StoreOptions();
  options.capacity_bytes = 1 << 20;
  EXPECT_THAT(Engine::Open(dir.File("small"), options),
              StatusIs(absl::StatusCode::kFailedPrecondition, "too small"));
  // The Open created that file to format it: the failed format leaves nothing behind.
  EXPECT_NE(access(dir.File("small").c_str(), F_OK), 0) << "a failed format left its file";
  // A file that was there before stays, untouched.
  {
    std::ofstream existing(dir.File("existing"), std::ios::binary);
    existing << std::string(1 << 20, '\0');
  }
  EXPECT_THAT(Engine::Open(dir.File("existing"), options),
              StatusIs(absl::StatusCode::kFailedPrecondition, "too small"));
  struct stat st;
  ASSERT_EQ(stat(dir.File("existing").c_str(), &st), 0) << "an existing file was removed";
  EXPECT_EQ(st.st_size, 1 << 20);
}

// On zones a segment is a zone: a segment size other than the zones' is refused, and the device
// left untouched (zoned_open_test covers the rest of what a zoned format refuses).
TEST(OpenTest, AZonedDeviceRefusesASegmentSizeNotItsZonesAndIsLeftUntouched) {
  MemDeviceOptions mem = MemOptions(64 * 256);
  SplitIntoWholeZones(&mem, 256);
  auto device = MemDevice::Create(mem);
  ASSERT_THAT(device, IsOk());
  std::shared_ptr<MemStorage> storage = (*device)->storage();
  EXPECT_THAT(Engine::OpenOnDevice(std::move(*device), StoreOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument, "a segment is a zone's writable part"));
  EXPECT_EQ(AllBytes(*storage), std::vector<uint8_t>(storage->capacity_bytes(), 0));
  for (const storage::ZoneDescriptor& zone : storage->Report(0, 64)) {
    EXPECT_EQ(zone.state, storage::ZoneState::kEmpty);
  }
}

TEST(OpenTest, ErrorIfExists) {
  auto storage = NewStorage();
  Options options = StoreOptions();
  options.error_if_exists = true;
  {
    auto engine = OpenMem(storage, options);  // empty device: formats
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT(Put(**engine, "k", "v"), IsOk());
  }
  EXPECT_THAT(OpenMem(storage, options), StatusIs(absl::StatusCode::kAlreadyExists));
  auto engine = OpenMem(storage, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ(*(*engine)->Get("k"), "v");
}

TEST(OpenTest, CreateIfMissingOff) {
  nvkv::testing::TempDir dir;
  Options options = StoreOptions();
  options.create_if_missing = false;
  EXPECT_THAT(Engine::Open(dir.File("missing"), options),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_NE(access(dir.File("missing").c_str(), F_OK), 0) << "a file was created";
  // An existing device holding no store is not formatted either.
  auto storage = NewStorage();
  const std::vector<uint8_t> before = AllBytes(*storage);
  EXPECT_THAT(OpenMem(storage, options), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(AllBytes(*storage) == before);
  // Once there is a store, create_if_missing does not matter.
  MakeStore(storage);
  auto engine = OpenMem(storage, options);
  ASSERT_THAT(engine, IsOk());
  ExpectStoreIntact(**engine);
}

TEST(OpenTest, BadOptionsAreInvalidArgument) {
  auto storage = NewStorage();
  auto bad = [&](auto change) {
    Options options = StoreOptions();
    change(options);
    return OpenMem(storage, options).status();
  };
  EXPECT_THAT(bad([](Options& o) { o.page_bytes = 3000; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.page_bytes = 128 << 10; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.segment_bytes = 100000; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.shard_count = 0; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.shard_count = 65; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.read_queue_depth = 0; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad([](Options& o) { o.page_buffers_per_shard = 2; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A page size the device's blocks do not divide.
  auto big_blocks = NewStorage([] {
    MemDeviceOptions mem = MemOptions();
    mem.lba_bytes = 8192;
    mem.lba_count = 1024;
    return mem;
  }());
  MemDeviceOptions mem = MemOptions();
  mem.lba_bytes = 8192;
  mem.lba_count = 1024;
  EXPECT_THAT(OpenMem(big_blocks, StoreOptions(), mem),
              StatusIs(absl::StatusCode::kInvalidArgument, "multiple"));
  const std::vector<uint8_t> after = AllBytes(*storage);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint8_t b) { return b == 0; }))
      << "a refused open wrote to the device";
}

}  // namespace
}  // namespace nvkv::kv
