// The NVMe passthrough backend. Three parts:
//   - NvmeDeviceHostTest runs everywhere: path classification, refusals of non-NVMe paths, and
//     the pure helpers behind open (sysfs/procfs parsing, transfer limit choice);
//   - NvmeDeviceTest needs a real (or QEMU-emulated) NVMe namespace and skips unless
//     NVKV_TEST_NVME names its generic device, e.g. NVKV_TEST_NVME=/dev/ng0n1. It writes over
//     the namespace's contents;
//   - NvmeZonedTest runs instead when NVKV_TEST_ZONED=1 says that namespace is zoned
//     (tests/nvme-vm --config zns): Open refuses it unless zoned_access allows it, which reports it zoned
//     with its zones, and the zone commands (append, reset, finish, report) do what ZNS says.
#include "storage/nvme_device.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "storage/device.h"
#include "storage/nvme_command.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::MakeRequest;
using ::nvkv::testing::StatusIs;

DeviceOptions NvmeOptions() {
  DeviceOptions options;
  options.backend = Backend::kNvmePassthrough;
  options.ring.queue_depth = 64;
  options.buffers.buffer_count = 64;
  options.buffers.chunk_count = 4;
  return options;
}

// --- Runs everywhere ---

TEST(NvmeDeviceHostTest, RegularFileDirectoryAndMissingPathAreNotGeneric) {
  nvkv::testing::TempDir dir;
  const std::string file = dir.File("plain");
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(IsNvmeGenericDevice(file));
  EXPECT_FALSE(IsNvmeGenericDevice(dir.path()));
  EXPECT_FALSE(IsNvmeGenericDevice(dir.File("absent")));
  EXPECT_FALSE(IsNvmeGenericDevice(""));
}

TEST(NvmeDeviceHostTest, OtherCharacterDeviceIsNotGeneric) {
  EXPECT_FALSE(IsNvmeGenericDevice("/dev/null"));
}

TEST(NvmeDeviceHostTest, PassthroughOnRegularFileIsInvalidArgument) {
  nvkv::testing::TempDir dir;
  DeviceOptions file_options;
  file_options.backend = Backend::kDirectFile;
  file_options.create_bytes = 1 << 20;
  ASSERT_THAT(OpenDevice(dir.File("store"), file_options), IsOk());
  EXPECT_THAT(OpenDevice(dir.File("store"), NvmeOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not an NVMe generic character device"));
}

TEST(NvmeDeviceHostTest, PassthroughOnOtherCharacterDeviceIsInvalidArgument) {
  EXPECT_THAT(OpenDevice("/dev/null", NvmeOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "not an NVMe generic character device"));
}

TEST(NvmeDeviceHostTest, PassthroughOnMissingPathIsNotFound) {
  nvkv::testing::TempDir dir;
  EXPECT_THAT(OpenDevice(dir.File("ng9n9"), NvmeOptions()),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(OpenDevice("", NvmeOptions()), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NvmeDeviceHostTest, AutoBackendKeepsRegularFilesOnDirectIo) {
  nvkv::testing::TempDir dir;
  DeviceOptions options;
  options.create_bytes = 1 << 20;
  auto device = OpenDevice(dir.File("store"), options);
  ASSERT_THAT(device, IsOk());
  EXPECT_EQ((*device)->info().kind, DeviceKind::kDirectFile);
}

constexpr char kProcDevices[] =
    "Character devices:\n"
    "  1 mem\n"
    "  4 tty\n"
    "241 nvme-generic\n"
    "242 nvme\n"
    "\n"
    "Block devices:\n"
    "  7 loop\n"
    "240 nvme-generic-lookalike\n"
    "259 blkext\n";

TEST(NvmeDeviceHostTest, FindsCharacterMajorInProcDevices) {
  EXPECT_EQ(FindCharDeviceMajor(kProcDevices, "nvme-generic"), 241u);
  EXPECT_EQ(FindCharDeviceMajor(kProcDevices, "nvme"), 242u);
  EXPECT_EQ(FindCharDeviceMajor(kProcDevices, "mem"), 1u);
}

TEST(NvmeDeviceHostTest, IgnoresBlockSectionAndPrefixes) {
  EXPECT_EQ(FindCharDeviceMajor(kProcDevices, "loop"), std::nullopt);
  EXPECT_EQ(FindCharDeviceMajor(kProcDevices, "nvme-gen"), std::nullopt);
  EXPECT_EQ(FindCharDeviceMajor("Character devices:\n  1 mem\n", "nvme-generic"), std::nullopt);
  EXPECT_EQ(FindCharDeviceMajor("", "nvme-generic"), std::nullopt);
}

TEST(NvmeDeviceHostTest, BlockDeviceNameForGenericName) {
  EXPECT_EQ(BlockDeviceNameForGeneric("ng0n1"), "nvme0n1");
  EXPECT_EQ(BlockDeviceNameForGeneric("ng12n3"), "nvme12n3");
  EXPECT_EQ(BlockDeviceNameForGeneric("nvme0n1"), "");
  EXPECT_EQ(BlockDeviceNameForGeneric("ng"), "");
}

TEST(NvmeDeviceHostTest, TransferLimitIsTheLeastOfMdtsQueueAndSegments) {
  KernelQueueLimits limits;
  limits.max_hw_bytes = 512 << 10;
  limits.max_segments = 127;
  // QEMU's default MDTS 7: 512 KiB; 127 segments of 4 KiB bind first.
  EXPECT_EQ(ChooseMaxTransferBytes(512 << 10, limits, 4096, true), 508u << 10);
  EXPECT_EQ(ChooseMaxTransferBytes(512 << 10, limits, 4096, false), 504u << 10);
  // A small MDTS binds.
  EXPECT_EQ(ChooseMaxTransferBytes(128 << 10, limits, 512, true), 128u << 10);
  EXPECT_EQ(ChooseMaxTransferBytes(128 << 10, limits, 512, false), 128u << 10);
  // The queue's max_hw_sectors binds.
  limits.max_hw_bytes = 256 << 10;
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 4096, true), 256u << 10);
}

// nvme-tcp on Linux 6.1: no MDTS, max_hw_sectors_kb 2147483644, max_segments 65535. A buffer
// that starts mid-page must fit one bio (255 pages); 1.55 MiB from such a buffer failed with
// EINVAL in tests/nvme-vm --config tcp.
TEST(NvmeDeviceHostTest, UnalignedTransferFitsOneBio) {
  KernelQueueLimits limits;
  limits.max_hw_bytes = 2147483644ull * 1024;
  limits.max_segments = 65535;
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 4096, true), 65535u * 4096);
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 4096, false), 255u * 4096);
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 512, false), 255u * 4096);
}

TEST(NvmeDeviceHostTest, TransferLimitWithoutMdtsOrSysfsAssumes127Segments) {
  EXPECT_EQ(ChooseMaxTransferBytes(0, KernelQueueLimits{}, 4096, true), 127u * 4096);
  EXPECT_EQ(ChooseMaxTransferBytes(0, KernelQueueLimits{}, 512, false), 126u * 4096);
}

TEST(NvmeDeviceHostTest, TransferLimitIsWholeBlocks) {
  KernelQueueLimits limits;
  limits.max_segments = 127;  // 508 KiB, not a multiple of 64 KiB blocks
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 64 << 10, true), 448u << 10);
  // A block bigger than every limit still goes out whole.
  limits.max_hw_bytes = 4096;
  EXPECT_EQ(ChooseMaxTransferBytes(0, limits, 8192, true), 8192u);
}

TEST(NvmeDeviceHostTest, MaxSegmentsFollowsSysfsElseTheDriversRule) {
  KernelQueueLimits limits;
  limits.max_segments = 60;
  EXPECT_EQ(EffectiveMaxSegments(128 << 10, limits), 60u);
  EXPECT_EQ(EffectiveMaxSegments(128 << 10, KernelQueueLimits{}), 33u);  // 32 pages + 1
  EXPECT_EQ(EffectiveMaxSegments(512 << 10, KernelQueueLimits{}), 127u);
  EXPECT_EQ(EffectiveMaxSegments(0, KernelQueueLimits{}), 127u);
}

TEST(NvmeDeviceHostTest, SmallMdtsLimitsTransferWithoutSysfs) {
  EXPECT_EQ(ChooseMaxTransferBytes(128 << 10, KernelQueueLimits{}, 4096, true), 128u << 10);
  EXPECT_EQ(ChooseMaxTransferBytes(16 << 10, KernelQueueLimits{}, 512, false), 16u << 10);
}

TEST(NvmeDeviceHostTest, FixedImportCountsPagesToTheRegionEnd) {
  const uint64_t base = 0x7f00'0000'0000ULL;
  const uint64_t end = base + 64 * 4096;  // a 64-page region
  EXPECT_FALSE(FixedBufferImportFits(base, end, 33));             // 64 pages
  EXPECT_TRUE(FixedBufferImportFits(base + 31 * 4096, end, 33));  // last 33 pages
  EXPECT_FALSE(FixedBufferImportFits(base + 31 * 4096 - 4, end, 33));
  EXPECT_TRUE(FixedBufferImportFits(base, end, 127));
  EXPECT_TRUE(FixedBufferImportFits(base + 127 * 4096, base + 254 * 4096, 127));
  EXPECT_FALSE(FixedBufferImportFits(end, end, 127));  // outside the region
}

// The kernel's io_uring_cmd_prep checks our 128-byte SQE (zero __pad1, known uring_cmd_flags)
// before the file is asked to run it. /dev/null then either has no uring_cmd handler
// (-EOPNOTSUPP) or, on recent kernels, a no-op one (0); a malformed SQE never gets that far and
// completes with -EINVAL. Runs without NVMe.
class PassthroughSqeOnDevNullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int ret = io_uring_queue_init(4, &ring_, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
    if (ret != 0) GTEST_SKIP() << "no io_uring with SQE128|CQE32 here: " << strerror(-ret);
    ready_ = true;
    fd_ = open("/dev/null", O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
    memory_ = std::make_unique<HeapPage>();
    iovec region{memory_->bytes, sizeof(memory_->bytes)};
    ASSERT_EQ(io_uring_register_buffers(&ring_, &region, 1), 0);
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // Submits one SQE, prepared by `prepare`, and returns its CQE's res.
  template <typename Prepare>
  int32_t RunOne(Prepare prepare) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    prepare(sqe);
    EXPECT_EQ(io_uring_submit_and_wait(&ring_, 1), 1);
    io_uring_cqe* cqe = nullptr;
    EXPECT_EQ(io_uring_wait_cqe(&ring_, &cqe), 0);
    EXPECT_EQ(cqe->user_data, 99u);
    const int32_t res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return res;
  }

  UringCmdTarget Target(int32_t buf_index) const {
    UringCmdTarget target;
    target.fd = fd_;
    target.buf_index = buf_index;
    target.user_data = 99;
    return target;
  }

  nvme_uring_cmd Read() const {
    BlockTransfer transfer;
    transfer.nsid = 1;
    transfer.lba = 0;
    transfer.lba_count = 1;
    transfer.lba_bytes = 4096;
    transfer.addr = reinterpret_cast<uintptr_t>(memory_->bytes);
    return EncodeRead(transfer);
  }

  struct alignas(4096) HeapPage {
    uint8_t bytes[4096];
  };
  io_uring ring_{};
  bool ready_ = false;
  int fd_ = -1;
  std::unique_ptr<HeapPage> memory_;
};

MATCHER(PassedPrep, "is 0 or -EOPNOTSUPP") { return arg == 0 || arg == -EOPNOTSUPP; }

TEST_F(PassthroughSqeOnDevNullTest, PlainSqePassesKernelChecks) {
  EXPECT_THAT(RunOne([&](io_uring_sqe* sqe) { PrepareNvmeUringCmd(sqe, Read(), Target(-1)); }),
              PassedPrep());
}

TEST_F(PassthroughSqeOnDevNullTest, FixedBufferSqePassesKernelChecks) {
  EXPECT_THAT(RunOne([&](io_uring_sqe* sqe) { PrepareNvmeUringCmd(sqe, Read(), Target(0)); }),
              PassedPrep());
}

TEST_F(PassthroughSqeOnDevNullTest, MalformedSqeIsRejected) {
  // The control: if the kernel did not look at these fields, the two tests above would prove
  // nothing.
  EXPECT_EQ(RunOne([&](io_uring_sqe* sqe) {
              PrepareNvmeUringCmd(sqe, Read(), Target(-1));
              sqe->__pad1 = 1;
            }),
            -EINVAL);
  EXPECT_EQ(RunOne([&](io_uring_sqe* sqe) {
              PrepareNvmeUringCmd(sqe, Read(), Target(-1));
              sqe->uring_cmd_flags = 1u << 15;  // no such flag
            }),
            -EINVAL);
}

// --- Needs a device: NVKV_TEST_NVME=/dev/ngXnY ---

const char* TestDevicePath() { return std::getenv("NVKV_TEST_NVME"); }

// NVKV_TEST_FDP=1: the namespace has flexible data placement enabled (tests/nvme-vm --config fdp).
bool TestNamespaceHasFdp() {
  const char* fdp = std::getenv("NVKV_TEST_FDP");
  return fdp != nullptr && std::strcmp(fdp, "1") == 0;
}

bool TestNamespaceIsZoned() {
  const char* zoned = std::getenv("NVKV_TEST_ZONED");
  return zoned != nullptr && std::strcmp(zoned, "1") == 0;
}

// One line of the namespace's block device in sysfs (queue/zoned, size, ...), found from the
// generic device's name; empty when absent.
std::string BlockSysfs(const std::string& generic_path, const std::string& file) {
  const std::string block =
      BlockDeviceNameForGeneric(std::filesystem::path(generic_path).filename().string());
  std::ifstream in("/sys/class/block/" + block + "/" + file);
  std::string line;
  std::getline(in, line);
  return line;
}

// The transport of the controller behind a generic device ("pcie", "tcp", ...), from sysfs;
// empty when unknown.
std::string ControllerTransport(const std::string& generic_path) {
  namespace fs = std::filesystem;
  const fs::path device =
      fs::path("/sys/class/nvme-generic") / fs::path(generic_path).filename() / "device";
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(device, error)) {
    std::ifstream in(entry.path() / "transport");
    std::string line;
    if (std::getline(in, line)) return line;  // the first controller (nvmeN) of the subsystem
  }
  std::ifstream in(device / "transport");  // no multipath: the device is the controller
  std::string line;
  std::getline(in, line);
  return line;
}

class NvmeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TestDevicePath() != nullptr ? TestDevicePath() : "";
    if (path_.empty()) {
      GTEST_SKIP() << "set NVKV_TEST_NVME to an NVMe generic device (e.g. /dev/ng0n1) to run; "
                      "its contents are overwritten";
    }
    if (TestNamespaceIsZoned()) GTEST_SKIP() << "NVKV_TEST_ZONED=1: NvmeZonedTest covers it";
    auto opened = OpenDevice(path_, NvmeOptions());
    ASSERT_THAT(opened, IsOk());
    device_ = std::move(*opened);
    for (const std::string& note : device_->info().notes) std::printf("note: %s\n", note.c_str());
  }

  Device& device() { return *device_; }
  uint32_t lba_bytes() { return device_->info().lba_bytes; }

  std::string path_;
  std::unique_ptr<Device> device_;
};

void Fill(uint8_t* data, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(rng());
}

bool Matches(const uint8_t* data, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < bytes; ++i) {
    if (data[i] != static_cast<uint8_t>(rng())) return false;
  }
  return true;
}

// Heap memory outside the registered pool (plain addresses, no IORING_URING_CMD_FIXED).
struct HeapBuffer {
  // aligned_alloc wants a size that is a multiple of the alignment.
  explicit HeapBuffer(uint32_t bytes)
      : memory(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))),
        bytes(bytes) {}
  ~HeapBuffer() { std::free(memory); }
  Buffer At(uint32_t offset_bytes) const {
    return Buffer{memory + offset_bytes, bytes - offset_bytes, -1, 0};
  }
  uint8_t* memory;
  uint32_t bytes;
};

TEST_F(NvmeDeviceTest, IdentifyGivesSaneGeometry) {
  const DeviceInfo& info = device().info();
  EXPECT_EQ(info.kind, DeviceKind::kNvmePassthrough);
  EXPECT_EQ(info.path, path_);
  EXPECT_GE(info.nsid, 1u);
  EXPECT_TRUE(info.lba_bytes == 512 || info.lba_bytes == 4096) << info.lba_bytes;
  EXPECT_GT(info.lba_count, 0u);
  EXPECT_GE(info.max_transfer_bytes, info.lba_bytes);
  EXPECT_EQ(info.max_transfer_bytes % info.lba_bytes, 0u);
  // Within what the kernel's queue takes (PCIe: MDTS and 127 segments, 508 KiB under QEMU;
  // nvme-tcp has no MDTS and 65535 segments, so up to 65535 pages).
  const std::string max_hw_kib = BlockSysfs(path_, "queue/max_hw_sectors_kb");
  if (!max_hw_kib.empty()) {
    EXPECT_LE(info.max_transfer_bytes, std::stoull(max_hw_kib) * 1024);
  }
  EXPECT_EQ(info.memory_alignment, 4u);
  EXPECT_FALSE(info.zoned);
  EXPECT_FALSE(info.block_device);
  EXPECT_TRUE(info.ring.sqe128_cqe32);
}

TEST_F(NvmeDeviceTest, PathIsNvmeGenericDevice) { EXPECT_TRUE(IsNvmeGenericDevice(path_)); }

TEST_F(NvmeDeviceTest, FixedBuffersAreRegisteredAndUsed) {
  ASSERT_TRUE(device().info().ring.fixed_buffers);
  Buffer out = device().buffers().GetPage();
  Buffer in = device().buffers().GetPage();
  ASSERT_GE(out.buf_index, 0);
  ASSERT_GE(in.buf_index, 0);
  const uint32_t blocks = out.bytes / lba_bytes();
  Fill(out.data, out.bytes, 11);
  ASSERT_THAT(WriteBlocks(device(), 8, blocks, out), IsOk());
  std::memset(in.data, 0, in.bytes);
  ASSERT_THAT(ReadBlocks(device(), 8, blocks, in), IsOk());
  EXPECT_TRUE(Matches(in.data, in.bytes, 11));
}

// Random LBAs and sizes from registered chunks, page-aligned heap memory and heap memory that
// starts mid-page; sizes past max_transfer_bytes are split into several commands.
TEST_F(NvmeDeviceTest, RandomRoundTripsIncludingSplitRequests) {
  const uint32_t heap_bytes = 2 << 20;
  HeapBuffer heap_out(heap_bytes), heap_in(heap_bytes);
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  bool split_seen = false;
  for (int round = 0; round < 60; ++round) {
    Buffer out, in;
    const int kind = round % 3;
    if (kind == 0) {
      out = device().buffers().GetChunk();
      in = device().buffers().GetChunk();
    } else {
      const uint32_t offset = kind == 1 ? 0 : 512;
      out = heap_out.At(offset);
      in = heap_in.At(offset);
    }
    const uint32_t max_blocks = out.bytes / lba_bytes();
    const uint32_t count = 1 + static_cast<uint32_t>(rng() % max_blocks);
    const uint64_t lba = rng() % (device().info().lba_count - count + 1);
    const uint64_t bytes = uint64_t{count} * lba_bytes();
    split_seen |= bytes > device().info().max_transfer_bytes;
    Fill(out.data, bytes, seed + round);
    ASSERT_THAT(WriteBlocks(device(), lba, count, out), IsOk()) << "round " << round;
    std::memset(in.data, 0, bytes);
    ASSERT_THAT(ReadBlocks(device(), lba, count, in), IsOk()) << "round " << round;
    EXPECT_TRUE(Matches(in.data, bytes, seed + round))
        << "round " << round << " lba " << lba << " count " << count;
    if (kind == 0) {
      device().buffers().PutChunk(out);
      device().buffers().PutChunk(in);
    }
  }
  if (device().info().max_transfer_bytes >= heap_bytes) {
    return;  // nvme-tcp: a page-aligned buffer goes out whole up to 256 MiB, so no split here
  }
  EXPECT_TRUE(split_seen);
  // Split requests post one CQE per command, so there were more CQEs than requests.
  EXPECT_GT(device().stats().completions_reaped, device().stats().requests_completed);
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

TEST_F(NvmeDeviceTest, OneReapHarvests32Reads) {
  const uint32_t blocks = device().buffers().page_bytes() / lba_bytes();
  std::vector<IoRequest> requests(32);
  Counter counter;
  for (uint32_t i = 0; i < requests.size(); ++i) {
    requests[i].op = IoOp::kRead;
    requests[i].lba = uint64_t{i} * blocks;
    requests[i].lba_count = blocks;
    requests[i].buffer = device().buffers().GetPage();
    requests[i].on_done = OnCounted;
    requests[i].context = &counter;
    ASSERT_THAT(device().Enqueue(&requests[i]), IsOk());
  }
  auto pushed = device().Submit();
  ASSERT_THAT(pushed, IsOk());
  EXPECT_EQ(*pushed, 32u);
  EXPECT_EQ(device().stats().enter_syscalls, 1u);
  auto reaped = device().Reap(32);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 32u);
  EXPECT_EQ(counter.done, 32);
  EXPECT_EQ(counter.failed, 0);
  EXPECT_EQ(device().in_flight(), 0u);
}

TEST_F(NvmeDeviceTest, FlushAndFuaWriteSucceed) {
  Buffer page = device().buffers().GetPage();
  Fill(page.data, page.bytes, 3);
  EXPECT_THAT(WriteBlocks(device(), 0, page.bytes / lba_bytes(), page, /*fua=*/true), IsOk());
  EXPECT_THAT(FlushDevice(device()), IsOk());
}

TEST_F(NvmeDeviceTest, ReadBeyondCapacityIsRefusedBeforeSubmit) {
  Buffer page = device().buffers().GetPage();
  const uint64_t end = device().info().lba_count;
  EXPECT_THAT(ReadBlocks(device(), end, 1, page), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(ReadBlocks(device(), end - 1, 2, page), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(device().stats().enter_syscalls, 0u);  // nothing reached the device
}

// Bypasses our validation: a raw read or write past the namespace end on a bare ring, so the
// controller itself fails it, and checks the mapping of its real completion.
void ExpectDeviceReportsLbaOutOfRange(const std::string& path_, const DeviceInfo& info,
                                      NvmeOp op) {
  const int fd = open(path_.c_str(), O_RDWR | O_CLOEXEC);  // the device's flock is advisory
  ASSERT_GE(fd, 0) << strerror(errno);
  io_uring ring;
  ASSERT_EQ(io_uring_queue_init(4, &ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32), 0);
  HeapBuffer page(info.lba_bytes);
  BlockTransfer transfer;
  transfer.nsid = info.nsid;
  transfer.lba = info.lba_count;  // first block past the end
  transfer.lba_count = 1;
  transfer.lba_bytes = info.lba_bytes;
  transfer.addr = reinterpret_cast<uintptr_t>(page.memory);
  UringCmdTarget target;
  target.fd = fd;
  target.user_data = 7;
  PrepareNvmeUringCmd(io_uring_get_sqe(&ring),
                      op == NvmeOp::kRead ? EncodeRead(transfer) : EncodeWrite(transfer, false),
                      target);
  ASSERT_EQ(io_uring_submit_and_wait(&ring, 1), 1);
  io_uring_cqe* cqe = nullptr;
  ASSERT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
  EXPECT_EQ(cqe->user_data, 7u);
  const int32_t res = cqe->res;
  io_uring_cqe_seen(&ring, cqe);
  io_uring_queue_exit(&ring);
  close(fd);
  EXPECT_GT(res, 0) << "expected an NVMe status, got errno " << -res;
  CommandContext context;
  context.op = op;
  context.lba = transfer.lba;
  context.lba_count = 1;
  context.path = path_;
  if (ControllerTransport(path_) == "tcp") {
    // Linux's NVMe target (nvmet) does not check the range itself: the bio fails at the backing
    // device and nvmet reports Internal Error (SC 0x6) instead. The mapping still says where.
    EXPECT_THAT(MapCompletion(res, context), StatusIs(absl::StatusCode::kInternal, "LBA 0x"));
  } else {
    EXPECT_THAT(MapCompletion(res, context),
                StatusIs(absl::StatusCode::kOutOfRange, "LBA Out of Range"));
  }
}

TEST_F(NvmeDeviceTest, DeviceReportsLbaOutOfRange) {
  ExpectDeviceReportsLbaOutOfRange(path_, device().info(), NvmeOp::kRead);
}

TEST_F(NvmeDeviceTest, DeviceReportsLbaOutOfRangeOnAWrite) {
  ExpectDeviceReportsLbaOutOfRange(path_, device().info(), NvmeOp::kWrite);
}

TEST_F(NvmeDeviceTest, SecondOpenIsRefusedWhileFirstIsOpen) {
  EXPECT_THAT(OpenDevice(path_, NvmeOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use"));
  device_.reset();
  EXPECT_THAT(OpenDevice(path_, NvmeOptions()), IsOk());
}

TEST_F(NvmeDeviceTest, SecondQueueSeesTheSameBlocks) {
  auto second = device().OpenSimilarQueue();
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ((*second)->info().lba_count, device().info().lba_count);
  Buffer out = device().buffers().GetPage();
  Fill(out.data, out.bytes, 5);
  const uint32_t blocks = out.bytes / lba_bytes();
  ASSERT_THAT(WriteBlocks(device(), 64, blocks, out), IsOk());
  Buffer in = (*second)->buffers().GetPage();
  ASSERT_THAT(ReadBlocks(**second, 64, blocks, in), IsOk());
  EXPECT_TRUE(Matches(in.data, in.bytes, 5));
}

// --- Needs a zoned namespace: NVKV_TEST_NVME=/dev/ngXnY and NVKV_TEST_ZONED=1 ---

class NvmeZonedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TestDevicePath() != nullptr ? TestDevicePath() : "";
    if (path_.empty() || !TestNamespaceIsZoned()) {
      GTEST_SKIP() << "set NVKV_TEST_NVME to the generic device of a zoned namespace and "
                      "NVKV_TEST_ZONED=1 to run (tests/nvme-vm --config zns)";
    }
  }
  // The namespace through its generic node, zones accepted.
  std::unique_ptr<Device> OpenZoned() {
    DeviceOptions options = NvmeOptions();
    options.zoned_access = ZonedAccess::kGenericNodeOnly;
    auto device = OpenDevice(path_, options);
    EXPECT_THAT(device, IsOk());
    return device.ok() ? std::move(*device) : nullptr;
  }
  std::string path_;
};

TEST_F(NvmeZonedTest, OpenIsUnimplemented) {
  EXPECT_THAT(OpenDevice(path_, NvmeOptions()),
              StatusIs(absl::StatusCode::kUnimplemented, "zoned namespace: not supported yet"));
}

// What `nvkv-cli info` shows: the namespace opens with zoned access and reports itself zoned,
// with the geometry the kernel sees too.
TEST_F(NvmeZonedTest, AllowZonedOpensAndReportsZoned) {
  std::unique_ptr<Device> device = OpenZoned();
  ASSERT_NE(device, nullptr);
  const DeviceInfo& info = device->info();
  EXPECT_TRUE(info.zoned);
  EXPECT_EQ(info.kind, DeviceKind::kNvmePassthrough);
  EXPECT_GE(info.nsid, 1u);
  EXPECT_TRUE(info.lba_bytes == 512 || info.lba_bytes == 4096) << info.lba_bytes;
  EXPECT_GT(info.lba_count, 0u);
  // The kernel agrees (Debian's kernel drives zoned block devices, so the node exists).
  EXPECT_EQ(BlockSysfs(path_, "queue/zoned"), "host-managed");
  EXPECT_EQ(BlockSysfs(path_, "size"), std::to_string(info.capacity_bytes() / 512));
  // Reads may go anywhere in a zone; only writes must land on its write pointer.
  Buffer page = device->buffers().GetPage();
  EXPECT_THAT(ReadBlocks(*device, 0, page.bytes / info.lba_bytes, page), IsOk());
  // Its zones, as the ZNS Identify pages and a report say (tests/nvme-vm's zns configuration
  // has a capacity below the zone size, and open and active limits below the zone count).
  const ZoneModel& zones = info.zones;
  ASSERT_TRUE(zones.zoned());
  EXPECT_EQ(zones.zone_count * zones.zone_blocks, info.lba_count);
  EXPECT_GT(zones.capacity_blocks, 0u);
  EXPECT_LT(zones.capacity_blocks, zones.zone_blocks);
  EXPECT_GT(zones.max_open, 0u);
  EXPECT_GE(zones.max_active, zones.max_open);
  EXPECT_LT(zones.max_active, zones.zone_count);
  EXPECT_GT(zones.max_append_blocks, 0u);
  EXPECT_LE(uint64_t{zones.max_append_blocks} * info.lba_bytes, info.max_transfer_bytes);
}

// The zones from the first on, as the device reports them.
std::vector<ZoneDescriptor> Zones(Device& device) {
  absl::StatusOr<std::vector<ZoneDescriptor>> zones = ReportAllZones(device);
  EXPECT_THAT(zones, IsOk());
  return zones.ok() ? *zones : std::vector<ZoneDescriptor>{};
}

// Empties every zone (the tests share one namespace, in any order).
void ResetAllZones(Device& device) {
  for (uint64_t z = 0; z < device.info().zones.zone_count; ++z) {
    IoRequest reset = MakeRequest(IoOp::kZoneReset, device.info().zones.StartOf(z));
    ASSERT_THAT(RunOne(device, reset), IsOk()) << "zone " << z;
  }
}

// Appends in flight together each land where their completion says, with their own data; a
// write off the write pointer is refused; finish fills a zone, reset empties it.
TEST_F(NvmeZonedTest, ZoneCommandsDoWhatZnsSays) {
  std::unique_ptr<Device> opened = OpenZoned();
  ASSERT_NE(opened, nullptr);
  Device& device = *opened;
  const DeviceInfo& info = device.info();
  ResetAllZones(device);
  const uint64_t start = info.zones.StartOf(1);
  const uint32_t blocks_per_page = device.buffers().page_bytes() / info.lba_bytes;
  constexpr uint32_t kAppends = 8;
  std::vector<Buffer> pages;
  std::vector<IoRequest> appends;
  for (uint32_t i = 0; i < kAppends; ++i) {
    pages.push_back(device.buffers().GetPage());
    Fill(pages.back().data, pages.back().bytes, 40 + i);
    appends.push_back(MakeRequest(IoOp::kZoneAppend, start, blocks_per_page, pages.back()));
  }
  ASSERT_THAT(RunAll(device, appends), IsOk());
  std::set<uint64_t> landed;
  for (uint32_t i = 0; i < kAppends; ++i) {
    ASSERT_THAT(appends[i].status, IsOk()) << i;
    landed.insert(appends[i].appended_lba);
    ASSERT_GE(appends[i].appended_lba, start) << i;
    ASSERT_LT(appends[i].appended_lba, start + kAppends * blocks_per_page) << i;
    ASSERT_EQ((appends[i].appended_lba - start) % blocks_per_page, 0u) << i;
  }
  EXPECT_EQ(landed.size(), kAppends) << "each append has its own place";
  for (uint32_t i = 0; i < kAppends; ++i) {
    std::memset(pages[i].data, 0, pages[i].bytes);
    ASSERT_THAT(ReadBlocks(device, appends[i].appended_lba, blocks_per_page, pages[i]), IsOk());
    EXPECT_TRUE(Matches(pages[i].data, pages[i].bytes, 40 + i)) << i;
  }
  std::vector<ZoneDescriptor> zones = Zones(device);
  ASSERT_EQ(zones.size(), info.zones.zone_count);
  const uint64_t pointer = start + kAppends * blocks_per_page;
  EXPECT_EQ(zones[1].write_pointer, pointer);
  EXPECT_EQ(zones[1].capacity, info.zones.capacity_blocks);
  EXPECT_EQ(zones[1].state, ZoneState::kImplicitlyOpen);
  EXPECT_EQ(zones[2].state, ZoneState::kEmpty);

  // Plain writes: only at the write pointer.
  EXPECT_THAT(WriteBlocks(device, pointer + blocks_per_page, blocks_per_page, pages[0]),
              StatusIs(absl::StatusCode::kFailedPrecondition, "Zone Invalid Write"));
  EXPECT_THAT(WriteBlocks(device, pointer, blocks_per_page, pages[0]), IsOk());
  // Appends larger than the device takes are refused before they reach it.
  IoRequest big =
      MakeRequest(IoOp::kZoneAppend, start, info.zones.max_append_blocks + 1, pages[0]);
  EXPECT_THAT(device.Enqueue(&big), StatusIs(absl::StatusCode::kInvalidArgument));

  IoRequest finish = MakeRequest(IoOp::kZoneFinish, start);
  ASSERT_THAT(RunOne(device, finish), IsOk());
  EXPECT_EQ(Zones(device)[1].state, ZoneState::kFull);
  IoRequest full = MakeRequest(IoOp::kZoneAppend, start, 1, pages[0]);
  EXPECT_THAT(RunOne(device, full),
              StatusIs(absl::StatusCode::kResourceExhausted, "Zone Is Full"));
  IoRequest reset = MakeRequest(IoOp::kZoneReset, start);
  ASSERT_THAT(RunOne(device, reset), IsOk());
  zones = Zones(device);
  EXPECT_EQ(zones[1].state, ZoneState::kEmpty);
  EXPECT_EQ(zones[1].write_pointer, start);
  for (const Buffer& page : pages) device.buffers().PutPage(page);
}

// The device keeps no more zones active than it says: one zone more is refused, and finishing
// one makes room.
TEST_F(NvmeZonedTest, TheActiveLimitIsTheDevicesOwn) {
  std::unique_ptr<Device> opened = OpenZoned();
  ASSERT_NE(opened, nullptr);
  Device& device = *opened;
  const ZoneModel& zones = device.info().zones;
  ASSERT_LT(zones.max_active, zones.zone_count) << "the configuration leaves no zone past it";
  ResetAllZones(device);
  Buffer page = device.buffers().GetPage();
  const uint32_t blocks = page.bytes / device.info().lba_bytes;
  const auto append = [&](uint64_t zone) {
    IoRequest request = MakeRequest(IoOp::kZoneAppend, zones.StartOf(zone), blocks, page);
    return RunOne(device, request);
  };
  for (uint64_t z = 0; z < zones.max_active; ++z) ASSERT_THAT(append(z), IsOk()) << z;
  EXPECT_THAT(append(zones.max_active),
              StatusIs(absl::StatusCode::kResourceExhausted, "Too Many Active Zones"));
  IoRequest finish = MakeRequest(IoOp::kZoneFinish, zones.StartOf(0));
  ASSERT_THAT(RunOne(device, finish), IsOk());
  EXPECT_THAT(append(zones.max_active), IsOk());
  device.buffers().PutPage(page);
  ResetAllZones(device);
}

// The namespace's block device (NVKV_TEST_BLOCK) goes through the file backend, which must see
// the zones too, and refuses them naming the generic node, the only way to Zone Append.
TEST_F(NvmeZonedTest, BlockDeviceIsRefusedNamingTheGenericNodeUnlessAllowed) {
  const char* block = std::getenv("NVKV_TEST_BLOCK");
  if (block == nullptr) GTEST_SKIP() << "set NVKV_TEST_BLOCK to the namespace's block device";
  DeviceOptions options;
  EXPECT_THAT(OpenDevice(block, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("open its NVMe generic node ", path_, " instead")));
  options.zoned_access = ZonedAccess::kAnyNode;
  auto device = OpenDevice(block, options);
  ASSERT_THAT(device, IsOk());
  EXPECT_TRUE((*device)->info().zoned);
  EXPECT_EQ((*device)->info().kind, DeviceKind::kDirectFile);
  EXPECT_TRUE((*device)->info().block_device);
}

// --- Flexible data placement (NVKV_TEST_FDP=1) ---

// A namespace without FDP lists no placement handles, and asking it for their status fails with
// the NVMe status the controller gives (QEMU 7.2: Invalid Command Opcode).
TEST_F(NvmeDeviceTest, WithoutFdpThereAreNoPlacementHandles) {
  if (TestNamespaceHasFdp()) GTEST_SKIP() << "this namespace has FDP";
  EXPECT_TRUE(device().info().placement_ids.empty());
  absl::StatusOr<std::vector<PlacementHandleStatus>> status = ReadPlacementHandleStatus(path_);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.status().message()), ::testing::HasSubstr("placement"));
}

class NvmeFdpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TestDevicePath() != nullptr ? TestDevicePath() : "";
    if (path_.empty() || !TestNamespaceHasFdp()) {
      GTEST_SKIP() << "set NVKV_TEST_NVME to the generic device of a namespace with FDP and "
                      "NVKV_TEST_FDP=1 to run (tests/nvme-vm --config fdp)";
    }
  }
  std::string path_;
};

// Open lists the namespace's placement handles in the order of their status, and each write
// lands in the reclaim unit of the handle it names, every command of a split one included: that
// handle's available writes drop by exactly the blocks written, and no other handle's do.
TEST_F(NvmeFdpTest, WritesLandOnTheHandleTheyName) {
  auto device = OpenDevice(path_, NvmeOptions());
  ASSERT_THAT(device, IsOk());
  const DeviceInfo& info = (*device)->info();
  const std::vector<uint16_t> ids = info.placement_ids;
  ASSERT_GE(ids.size(), 3u) << "tests/nvme-vm gives the namespace 8 handles";
  absl::StatusOr<std::vector<PlacementHandleStatus>> before = ReadPlacementHandleStatus(path_);
  ASSERT_THAT(before, IsOk());
  ASSERT_EQ(before->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*before)[i].placement_id, ids[i]);

  // Handle 1: three blocks with FUA. The last handle: a write that takes several commands.
  const uint32_t split_blocks = 2 * (info.max_transfer_bytes / info.lba_bytes) + 1;
  HeapBuffer data(split_blocks * info.lba_bytes);
  Fill(data.memory, data.bytes, 7);
  ASSERT_THAT(WriteBlocks(**device, 0, 3, data.At(0), /*fua=*/true, /*placement=*/1), IsOk());
  const auto last = static_cast<uint8_t>(ids.size() - 1);
  ASSERT_THAT(WriteBlocks(**device, 64, split_blocks, data.At(0), /*fua=*/false, last), IsOk());
  ASSERT_THAT(FlushDevice(**device), IsOk());

  absl::StatusOr<std::vector<PlacementHandleStatus>> after = ReadPlacementHandleStatus(path_);
  ASSERT_THAT(after, IsOk());
  ASSERT_EQ(after->size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t used = (*before)[i].available_writes - (*after)[i].available_writes;
    const uint64_t expected = i == 1 ? 3 : i == last ? split_blocks : 0;
    EXPECT_EQ(used, expected) << "handle " << i << " (placement identifier " << ids[i] << ")";
  }
  // And the data reads back.
  HeapBuffer back(split_blocks * info.lba_bytes);
  ASSERT_THAT(ReadBlocks(**device, 64, split_blocks, back.At(0)), IsOk());
  EXPECT_TRUE(Matches(back.memory, back.bytes, 7));
}

}  // namespace
}  // namespace nvkv::storage
