// The io_uring file backend through the Device seam: round trips, batching, back-pressure,
// flush and every input error.
#include "storage/direct_file_device.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "storage/device.h"
#include "storage/file_open.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint64_t kFileBytes = 16 << 20;

DeviceOptions FileOptions() {
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = kFileBytes;
  options.ring.queue_depth = 32;
  options.buffers.buffer_count = 64;
  options.buffers.chunk_count = 2;
  return options;
}

void Fill(const Buffer& buffer, uint32_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  for (uint32_t i = 0; i < bytes; ++i) buffer.data[i] = static_cast<uint8_t>(rng());
}

bool Matches(const Buffer& buffer, uint32_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  for (uint32_t i = 0; i < bytes; ++i) {
    if (buffer.data[i] != static_cast<uint8_t>(rng())) return false;
  }
  return true;
}

TEST(DirectFileDeviceTest, CreatesFileOfRequestedSize) {
  nvkv::testing::TempDir dir;
  auto device = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(device, IsOk());
  const DeviceInfo& info = (*device)->info();
  EXPECT_EQ(info.kind, DeviceKind::kDirectFile);
  EXPECT_EQ(info.capacity_bytes(), kFileBytes);
  EXPECT_GE(info.lba_bytes, 512u);
  EXPECT_TRUE(info.ring.fixed_buffers);
  struct stat st;
  ASSERT_EQ(stat(dir.File("store").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kFileBytes);
}

TEST(DirectFileDeviceTest, RandomRoundTripsVerifyData) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  const uint32_t lba_bytes = device.info().lba_bytes;
  const uint32_t max_blocks = device.buffers().chunk_bytes() / lba_bytes;
  std::mt19937_64 rng(42);
  for (int round = 0; round < 50; ++round) {
    const uint32_t count = 1 + static_cast<uint32_t>(rng() % max_blocks);
    const uint64_t lba = rng() % (device.info().lba_count - count + 1);
    Buffer out = device.buffers().GetChunk();
    Buffer in = device.buffers().GetChunk();
    ASSERT_TRUE(out.valid() && in.valid());
    Fill(out, count * lba_bytes, round);
    ASSERT_THAT(WriteBlocks(device, lba, count, out), IsOk());
    std::memset(in.data, 0, in.bytes);
    ASSERT_THAT(ReadBlocks(device, lba, count, in), IsOk());
    EXPECT_TRUE(Matches(in, count * lba_bytes, round)) << "round " << round << " lba " << lba;
    device.buffers().PutChunk(out);
    device.buffers().PutChunk(in);
  }
}

struct Counter {
  int done = 0;
  int failed = 0;
};

void OnCounted(IoRequest* request) {
  auto* counter = static_cast<Counter*>(request->context);
  ++counter->done;
  if (!request->status.ok()) ++counter->failed;
}

TEST(DirectFileDeviceTest, OneReapHarvestsManyCompletions) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  const uint32_t blocks = device.buffers().page_bytes() / device.info().lba_bytes;
  std::vector<IoRequest> requests(32);
  Counter counter;
  for (uint32_t i = 0; i < requests.size(); ++i) {
    requests[i].op = IoOp::kRead;
    requests[i].lba = i * blocks;
    requests[i].lba_count = blocks;
    requests[i].buffer = device.buffers().GetPage();
    requests[i].on_done = OnCounted;
    requests[i].context = &counter;
    ASSERT_THAT(device.Enqueue(&requests[i]), IsOk());
  }
  auto pushed = device.Submit();
  ASSERT_THAT(pushed, IsOk());
  EXPECT_EQ(*pushed, 32u);
  EXPECT_EQ(device.stats().enter_syscalls, 1u);
  auto reaped = device.Reap(32);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 32u);
  EXPECT_EQ(counter.done, 32);
  EXPECT_EQ(counter.failed, 0);
  // All 32 completions were taken in at most a few passes, not one pass per I/O.
  EXPECT_LE(device.stats().reap_calls, 4u);
  EXPECT_GE(device.stats().max_completions_per_reap, 8u);
  EXPECT_EQ(device.in_flight(), 0u);
}

TEST(DirectFileDeviceTest, FullQueueRefusesWithUnavailable) {
  nvkv::testing::TempDir dir;
  DeviceOptions options = FileOptions();
  options.ring.queue_depth = 4;
  auto opened = OpenDevice(dir.File("store"), options);
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  const uint32_t blocks = device.buffers().page_bytes() / device.info().lba_bytes;
  std::vector<IoRequest> requests(5);
  Counter counter;
  for (auto& r : requests) {
    r.op = IoOp::kRead;
    r.lba_count = blocks;
    r.buffer = device.buffers().GetPage();
    r.on_done = OnCounted;
    r.context = &counter;
  }
  for (int i = 0; i < 4; ++i) ASSERT_THAT(device.Enqueue(&requests[i]), IsOk());
  EXPECT_THAT(device.Enqueue(&requests[4]), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(device.in_flight(), 4u);
  ASSERT_THAT(device.Reap(1), IsOk());
  EXPECT_GE(counter.done, 1);
  EXPECT_THAT(device.Enqueue(&requests[4]), IsOk());
  ASSERT_THAT(device.Reap(device.in_flight()), IsOk());
  EXPECT_EQ(counter.done, 5);
}

TEST(DirectFileDeviceTest, FlushAndFuaWriteSucceed) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  Buffer page = device.buffers().GetPage();
  Fill(page, page.bytes, 7);
  const uint32_t blocks = page.bytes / device.info().lba_bytes;
  EXPECT_THAT(WriteBlocks(device, 0, blocks, page, /*fua=*/true), IsOk());
  EXPECT_THAT(FlushDevice(device), IsOk());
}

TEST(DirectFileDeviceTest, WritesSurviveReopen) {
  nvkv::testing::TempDir dir;
  {
    auto opened = OpenDevice(dir.File("store"), FileOptions());
    ASSERT_THAT(opened, IsOk());
    Buffer page = (*opened)->buffers().GetPage();
    Fill(page, page.bytes, 99);
    ASSERT_THAT(WriteBlocks(**opened, 16, page.bytes / (*opened)->info().lba_bytes, page),
                IsOk());
    ASSERT_THAT(FlushDevice(**opened), IsOk());
  }
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Buffer page = (*opened)->buffers().GetPage();
  ASSERT_THAT(ReadBlocks(**opened, 16, page.bytes / (*opened)->info().lba_bytes, page), IsOk());
  EXPECT_TRUE(Matches(page, page.bytes, 99));
}

TEST(DirectFileDeviceTest, IoBeyondCapacityIsOutOfRange) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  Buffer page = device.buffers().GetPage();
  const uint64_t last = device.info().lba_count;
  EXPECT_THAT(ReadBlocks(device, last, 1, page), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(ReadBlocks(device, last - 1, 2, page), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(DirectFileDeviceTest, MisalignedBufferAndShortBufferAreInvalid) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  Buffer page = device.buffers().GetPage();
  Buffer shifted = page;
  shifted.data += 1;
  shifted.bytes -= 1;
  EXPECT_THAT(ReadBlocks(device, 0, 1, shifted), StatusIs(absl::StatusCode::kInvalidArgument));
  const uint32_t blocks = page.bytes / device.info().lba_bytes;
  EXPECT_THAT(ReadBlocks(device, 0, blocks + 1, page),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadBlocks(device, 0, 0, page), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DirectFileDeviceTest, MissingPathIsNotFound) {
  nvkv::testing::TempDir dir;
  DeviceOptions options = FileOptions();
  options.create_bytes = 0;
  EXPECT_THAT(OpenDevice(dir.File("absent"), options), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(OpenDevice(dir.File("no/such/dir/store"), FileOptions()),
              StatusIs(absl::StatusCode::kNotFound));
}

// A device path that does not exist must not become a store file in /dev (devtmpfs, in memory):
// "nvkv-cli --db /dev/ng9n9 format" would format a RAM file. Also through a symbolic link.
TEST(DirectFileDeviceTest, MissingDeviceUnderDevIsNotFoundAndNothingIsCreated) {
  nvkv::testing::TempDir dir;
  const std::string name = "nvkv-test-absent-" + std::to_string(getpid());
  ASSERT_EQ(symlink("/dev", dir.File("devlink").c_str()), 0);
  for (const std::string& path : {"/dev/" + name, "/dev/../dev/" + name,
                                  dir.File("devlink") + "/" + name}) {
    SCOPED_TRACE(path);
    auto opened = OpenDevice(path, FileOptions());
    const bool created = access(("/dev/" + name).c_str(), F_OK) == 0;
    if (created) unlink(("/dev/" + name).c_str());
    EXPECT_FALSE(created) << "a store file was created in /dev";
    EXPECT_THAT(opened, StatusIs(absl::StatusCode::kNotFound, "no such device"));
  }
}

TEST(DirectFileDeviceTest, DirectoryIsInvalidArgument) {
  nvkv::testing::TempDir dir;
  for (const bool read_only : {false, true}) {
    DeviceOptions options = FileOptions();
    options.read_only = read_only;
    options.create_bytes = 0;
    EXPECT_THAT(OpenDevice(dir.path(), options),
                StatusIs(absl::StatusCode::kInvalidArgument, "is a directory"));
  }
}

// A character device other than an NVMe generic one says so, whichever way it is opened (O_DIRECT
// refuses it before the type is looked at).
TEST(DirectFileDeviceTest, OtherCharacterDeviceIsInvalidArgument) {
  for (const bool read_only : {false, true}) {
    DeviceOptions options = FileOptions();
    options.read_only = read_only;
    options.create_bytes = 0;
    EXPECT_THAT(OpenDevice("/dev/null", options),
                StatusIs(absl::StatusCode::kInvalidArgument, "is a character device"));
  }
}

// Runs in a forked child: opening the FIFO at `path`, which no process has open, must fail at
// once (no writer will ever come); SIGALRM ends a child that waits.
[[noreturn]] void OpenFifo(const std::string& path, bool read_only) {
  alarm(10);
  DeviceOptions options = FileOptions();
  options.read_only = read_only;
  options.create_bytes = 0;
  auto opened = OpenDevice(path, options);
  if (!absl::IsInvalidArgument(opened.status())) std::_Exit(11);
  if (opened.status().message().find("is a FIFO") == absl::string_view::npos) std::_Exit(12);
  std::_Exit(0);
}

TEST(DirectFileDeviceTest, FifoIsInvalidArgumentAndDoesNotWait) {
  nvkv::testing::TempDir dir;
  ASSERT_EQ(mkfifo(dir.File("fifo").c_str(), 0644), 0);
  EXPECT_EXIT(OpenFifo(dir.File("fifo"), /*read_only=*/true), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(OpenFifo(dir.File("fifo"), /*read_only=*/false), ::testing::ExitedWithCode(0), "");
}

// Runs in a forked child under a file size limit (ulimit -f) of `limit` bytes: creating a store
// file of kFileBytes, and growing one to that, must fail with an error naming the limit, where
// the kernel would end the process with SIGXFSZ. Nothing is left created.
[[noreturn]] void CreateUnderFileSizeLimit(const std::string& dir, uint64_t limit) {
  const struct rlimit rlimit = {limit, limit};
  if (setrlimit(RLIMIT_FSIZE, &rlimit) != 0) std::_Exit(10);
  auto created = OpenDevice(dir + "/new", FileOptions());
  if (!absl::IsResourceExhausted(created.status())) std::_Exit(11);
  if (created.status().message().find("file size limit") == absl::string_view::npos) {
    std::_Exit(12);
  }
  if (access((dir + "/new").c_str(), F_OK) == 0) std::_Exit(13);
  DeviceOptions small = FileOptions();
  small.create_bytes = limit;
  auto opened = OpenDevice(dir + "/small", small);
  if (!opened.ok()) std::_Exit(14);
  const absl::Status grown = (*opened)->GrowFile(kFileBytes);
  if (!absl::IsResourceExhausted(grown)) std::_Exit(15);
  if (grown.message().find("file size limit") == absl::string_view::npos) std::_Exit(16);
  if ((*opened)->info().capacity_bytes() != limit) std::_Exit(17);
  std::_Exit(0);
}

TEST(DirectFileDeviceTest, FileSizeLimitIsAnErrorNotASignal) {
  nvkv::testing::TempDir dir;
  EXPECT_EXIT(CreateUnderFileSizeLimit(dir.path(), 1 << 20), ::testing::ExitedWithCode(0), "");
}

// Runs in a forked child: as an unprivileged user, opening a file it may not write must fail
// with kPermissionDenied.
[[noreturn]] void OpenAsNobody(const std::string& path) {
  if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) std::_Exit(10);
  auto opened = OpenDevice(path, FileOptions());
  if (!absl::IsPermissionDenied(opened.status())) std::_Exit(11);
  if (opened.status().message().find("permission denied") == absl::string_view::npos) {
    std::_Exit(12);
  }
  std::_Exit(0);
}

TEST(DirectFileDeviceTest, UnwritableFileIsPermissionDenied) {
  nvkv::testing::TempDir dir;
  ASSERT_THAT(OpenDevice(dir.File("store"), FileOptions()), IsOk());
  ASSERT_EQ(chmod(dir.File("store").c_str(), 0444), 0);
  // Root bypasses file modes, so the check runs as "nobody" in a child process.
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  EXPECT_EXIT(OpenAsNobody(dir.File("store")), ::testing::ExitedWithCode(0), "");
}

TEST(DirectFileDeviceTest, TooSmallDeviceIsRefused) {
  nvkv::testing::TempDir dir;
  ASSERT_THAT(OpenDevice(dir.File("store"), FileOptions()), IsOk());
  DeviceOptions options = FileOptions();
  options.min_bytes = kFileBytes * 2;
  EXPECT_THAT(OpenDevice(dir.File("store"), options),
              StatusIs(absl::StatusCode::kFailedPrecondition, "too small"));
}

TEST(DirectFileDeviceTest, SecondOpenIsRefusedWhileFirstIsOpen) {
  nvkv::testing::TempDir dir;
  auto first = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(OpenDevice(dir.File("store"), FileOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use"));
  first->reset();
  EXPECT_THAT(OpenDevice(dir.File("store"), FileOptions()), IsOk());
}

TEST(DirectFileDeviceTest, ShortFileReadIsDataLoss) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  // Shrink the file under the open device: the read past the new end comes back short.
  ASSERT_EQ(truncate(dir.File("store").c_str(), 4096), 0);
  Buffer page = (*opened)->buffers().GetPage();
  EXPECT_THAT(ReadBlocks(**opened, 8192 / (*opened)->info().lba_bytes,
                         page.bytes / (*opened)->info().lba_bytes, page),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DirectFileDeviceTest, SecondQueueSharesTheFile) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), FileOptions());
  ASSERT_THAT(opened, IsOk());
  auto second = (*opened)->OpenQueue(QueueOptions{});
  ASSERT_THAT(second, IsOk());
  Buffer out = (*opened)->buffers().GetPage();
  Fill(out, out.bytes, 5);
  const uint32_t blocks = out.bytes / (*opened)->info().lba_bytes;
  ASSERT_THAT(WriteBlocks(**opened, 0, blocks, out), IsOk());
  Buffer in = (*second)->buffers().GetPage();
  ASSERT_THAT(ReadBlocks(**second, 0, blocks, in), IsOk());
  EXPECT_TRUE(Matches(in, in.bytes, 5));
}

}  // namespace
// The errno of a failed bio says what the drive reported: named in the message, with a code
// that does not make a medium error look like a missing key.
TEST(FileIoErrorTest, BlockDeviceErrnoNamesWhatTheDriveReported) {
  DeviceInfo info;
  info.path = "/dev/nvme0n1";
  info.block_device = true;
  IoRequest write;
  write.op = IoOp::kWrite;
  write.lba = 16;
  write.lba_count = 8;
  EXPECT_THAT(FileIoError(ENODATA, "write", write, info),
              StatusIs(absl::StatusCode::kDataLoss, "write 8 blocks at LBA 16 of /dev/nvme0n1"));
  EXPECT_THAT(FileIoError(ENODATA, "write", write, info),
              StatusIs(absl::StatusCode::kDataLoss, "Write Fault"));
  EXPECT_THAT(FileIoError(ENOSPC, "write", write, info),
              StatusIs(absl::StatusCode::kResourceExhausted, "Capacity Exceeded"));
  EXPECT_THAT(FileIoError(EREMOTEIO, "write", write, info),
              StatusIs(absl::StatusCode::kUnknown, "LBA Out of Range"));
  IoRequest flush;
  flush.op = IoOp::kFlush;
  EXPECT_EQ(FileIoError(EIO, "flush", flush, info).message().find("flush of /dev/nvme0n1"), 0u);
}

TEST(FileIoErrorTest, RegularFileErrnoIsPlain) {
  DeviceInfo info;
  info.path = "/data/store";
  IoRequest write;
  write.op = IoOp::kWrite;
  write.lba = 1;
  write.lba_count = 2;
  EXPECT_THAT(FileIoError(ENOSPC, "write", write, info),
              StatusIs(absl::StatusCode::kResourceExhausted, "no space left"));
  EXPECT_EQ(FileIoError(ENOSPC, "write", write, info).message().find("Capacity"),
            std::string_view::npos);
  EXPECT_EQ(FileIoError(EIO, "write", write, info).message().find("("), std::string_view::npos);
}

}  // namespace nvkv::storage
