// The pread/pwrite fallback: chosen explicitly, and chosen automatically when io_uring_setup is
// refused (simulated with a seccomp filter in a child process, as Docker's default profile does).
#include "storage/sync_file_device.h"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "storage/device.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

DeviceOptions SyncOptions() {
  DeviceOptions options;
  options.backend = Backend::kSyncFile;
  options.create_bytes = 4 << 20;
  options.ring.queue_depth = 8;
  options.buffers.buffer_count = 16;
  options.buffers.chunk_count = 1;
  return options;
}

TEST(SyncFileDeviceTest, RoundTripAndFlush) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), SyncOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  EXPECT_EQ(device.info().kind, DeviceKind::kSyncFile);
  Buffer out = device.buffers().GetPage();
  Buffer in = device.buffers().GetPage();
  for (uint32_t i = 0; i < out.bytes; ++i) out.data[i] = static_cast<uint8_t>(i * 7);
  const uint32_t blocks = out.bytes / device.info().lba_bytes;
  ASSERT_THAT(WriteBlocks(device, 3 * blocks, blocks, out), IsOk());
  ASSERT_THAT(FlushDevice(device), IsOk());
  ASSERT_THAT(ReadBlocks(device, 3 * blocks, blocks, in), IsOk());
  EXPECT_EQ(std::memcmp(in.data, out.data, out.bytes), 0);
}

int g_completions = 0;
void OnCompletion(IoRequest*) { ++g_completions; }

TEST(SyncFileDeviceTest, BatchCompletesInOneReapAndBackPressureHolds) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), SyncOptions());
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  const uint32_t blocks = device.buffers().page_bytes() / device.info().lba_bytes;
  std::vector<IoRequest> requests(9);
  g_completions = 0;
  for (uint32_t i = 0; i < 9; ++i) {
    requests[i].op = IoOp::kRead;
    requests[i].lba = i * blocks;
    requests[i].lba_count = blocks;
    requests[i].buffer = device.buffers().GetPage();
    requests[i].on_done = OnCompletion;
  }
  for (uint32_t i = 0; i < 8; ++i) ASSERT_THAT(device.Enqueue(&requests[i]), IsOk());
  EXPECT_THAT(device.Enqueue(&requests[8]), StatusIs(absl::StatusCode::kUnavailable));
  auto reaped = device.Reap(8);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 8u);
  EXPECT_EQ(g_completions, 8);
  EXPECT_EQ(device.stats().reap_calls, 1u);
  EXPECT_EQ(device.in_flight(), 0u);
}

TEST(SyncFileDeviceTest, BeyondCapacityIsOutOfRange) {
  nvkv::testing::TempDir dir;
  auto opened = OpenDevice(dir.File("store"), SyncOptions());
  ASSERT_THAT(opened, IsOk());
  Buffer page = (*opened)->buffers().GetPage();
  EXPECT_THAT(ReadBlocks(**opened, (*opened)->info().lba_count, 1, page),
              StatusIs(absl::StatusCode::kOutOfRange));
}

// Makes io_uring_setup fail with `err` for this process, as a container's seccomp profile does.
bool DenyIoUringSetup(int err) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Runs in a forked child: exits 0 when OpenDevice fell back to the sync backend and works.
[[noreturn]] void OpenWithIoUringDenied(const std::string& path, int err) {
  if (!DenyIoUringSetup(err)) std::_Exit(10);
  DeviceOptions options = SyncOptions();
  options.backend = Backend::kAuto;
  auto opened = OpenDevice(path, options);
  if (!opened.ok()) std::_Exit(11);
  if ((*opened)->info().kind != DeviceKind::kSyncFile) std::_Exit(12);
  if ((*opened)->info().notes.empty()) std::_Exit(13);
  Buffer page = (*opened)->buffers().GetPage();
  if (!WriteBlocks(**opened, 0, page.bytes / (*opened)->info().lba_bytes, page).ok()) {
    std::_Exit(14);
  }
  std::_Exit(0);
}

TEST(SyncFileDeviceTest, FallsBackWhenIoUringIsDeniedWithEperm) {
  nvkv::testing::TempDir dir;
  EXPECT_EXIT(OpenWithIoUringDenied(dir.File("store"), EPERM), ::testing::ExitedWithCode(0),
              "io_uring unavailable");
}

TEST(SyncFileDeviceTest, FallsBackWhenKernelLacksIoUring) {
  nvkv::testing::TempDir dir;
  EXPECT_EXIT(OpenWithIoUringDenied(dir.File("store"), ENOSYS), ::testing::ExitedWithCode(0),
              "io_uring unavailable");
}

[[noreturn]] void OpenWithoutFallbackAllowed(const std::string& path) {
  if (!DenyIoUringSetup(EPERM)) std::_Exit(10);
  DeviceOptions options = SyncOptions();
  options.backend = Backend::kAuto;
  options.allow_sync_fallback = false;
  auto opened = OpenDevice(path, options);
  std::_Exit(absl::IsPermissionDenied(opened.status()) ? 0 : 1);
}

TEST(SyncFileDeviceTest, NoFallbackWhenDisallowed) {
  nvkv::testing::TempDir dir;
  EXPECT_EXIT(OpenWithoutFallbackAllowed(dir.File("store")), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nvkv::storage
