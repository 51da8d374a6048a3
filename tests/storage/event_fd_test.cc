// EventFd and IoOp::kWaitEvent: a thread blocked in Reap for its own I/O wakes when another
// thread signals; queues that are not io_uring refuse the wait, and their owner waits on the
// eventfd itself.
#include "storage/event_fd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "storage/device.h"
#include "storage/mem_device.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

std::unique_ptr<Device> OpenRingQueue(const std::string& path, bool single_issuer) {
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = 1 << 20;
  options.ring.queue_depth = 4;
  options.ring.single_issuer = single_issuer;
  options.allow_sync_fallback = false;
  options.buffers.buffer_count = 4;
  options.buffers.chunk_count = 0;
  auto opened = OpenDevice(path, options);
  EXPECT_THAT(opened, IsOk());
  return opened.ok() ? std::move(*opened) : nullptr;
}

class EventFdRingTest : public ::testing::TestWithParam<bool> {};

TEST_P(EventFdRingTest, ASignalFromAnotherThreadEndsABlockingReap) {
  nvkv::testing::TempDir dir;
  auto event = EventFd::Create();
  ASSERT_THAT(event, IsOk());
  std::unique_ptr<Device> queue = OpenRingQueue(dir.File("store"), /*single_issuer=*/GetParam());
  ASSERT_NE(queue, nullptr);
  ASSERT_TRUE((*event)->ArmOn(*queue));
  ASSERT_TRUE((*event)->ArmOn(*queue));  // armed once
  EXPECT_EQ(queue->in_flight(), 1u);
  // Nothing signalled yet: a reap that does not wait finds nothing.
  auto reaped = queue->Reap(0);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 0u);
  EXPECT_FALSE((*event)->TakeSignal());

  std::atomic<bool> signalled{false};
  std::thread signaller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    signalled.store(true);
    (*event)->Signal();
  });
  reaped = queue->Reap(1);  // blocks until the signal
  signaller.join();
  ASSERT_THAT(reaped, IsOk());
  EXPECT_EQ(*reaped, 1u);
  EXPECT_TRUE(signalled.load());
  EXPECT_FALSE((*event)->armed());
  EXPECT_TRUE((*event)->TakeSignal());
  EXPECT_FALSE((*event)->TakeSignal());  // reported once
}

TEST_P(EventFdRingTest, AReadCompletesBesideAnArmedWait) {
  nvkv::testing::TempDir dir;
  auto event = EventFd::Create();
  ASSERT_THAT(event, IsOk());
  std::unique_ptr<Device> queue = OpenRingQueue(dir.File("store"), GetParam());
  ASSERT_NE(queue, nullptr);
  ASSERT_TRUE((*event)->ArmOn(*queue));
  Buffer page = queue->buffers().GetPage();
  IoRequest read;
  read.op = IoOp::kRead;
  read.lba = 0;
  read.lba_count = page.bytes / queue->info().lba_bytes;
  read.buffer = page;
  bool read_done = false;
  read.context = &read_done;
  read.on_done = [](IoRequest* request) { *static_cast<bool*>(request->context) = true; };
  ASSERT_THAT(queue->Enqueue(&read), IsOk());
  while (!read_done) ASSERT_THAT(queue->Reap(1), IsOk());
  EXPECT_THAT(read.status, IsOk());
  EXPECT_TRUE((*event)->armed());  // the wait is still in flight
  EXPECT_EQ(queue->in_flight(), 1u);
  // A signal before the queue goes: its destructor would wait for the armed read otherwise.
  (*event)->Signal();
  queue.reset();
}

INSTANTIATE_TEST_SUITE_P(SingleIssuerOrNot, EventFdRingTest, ::testing::Bool());

// An IOPOLL ring cannot read an eventfd: the wait fails at once. ArmOn must then refuse, or a
// caller that arms before each blocking Reap would spin.
TEST(EventFdTest, AWaitTheRingCannotDoIsNotArmedAgain) {
  nvkv::testing::TempDir dir;
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = 1 << 20;
  options.ring.queue_depth = 4;
  options.ring.iopoll = true;
  options.allow_sync_fallback = false;
  options.buffers.buffer_count = 4;
  options.buffers.chunk_count = 0;
  auto queue = OpenDevice(dir.File("store"), options);
  if (!queue.ok() || !(*queue)->info().ring.iopoll) {
    GTEST_SKIP() << "no IOPOLL ring on this file system";
  }
  auto event = EventFd::Create();
  ASSERT_THAT(event, IsOk());
  if (!(*event)->ArmOn(**queue)) GTEST_SKIP() << "the ring refused the wait outright";
  // Nothing signals for 200 ms: a wait that completes before that failed (EOPNOTSUPP).
  std::atomic<bool> signalled{false};
  std::thread safety([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    signalled.store(true);
    (*event)->Signal();
  });
  while ((*event)->armed()) ASSERT_THAT((*queue)->Reap(1), IsOk());
  const bool failed_at_once = !signalled.load();
  safety.join();
  if (!failed_at_once) GTEST_SKIP() << "this kernel's IOPOLL ring reads an eventfd";
  EXPECT_FALSE((*event)->ArmOn(**queue)) << "armed again a wait the ring cannot do";
  EXPECT_FALSE((*event)->armed());
}

TEST(EventFdTest, QueuesWithoutIoUringRefuseTheWaitAndTheOwnerWaitsItself) {
  auto event = EventFd::Create();
  ASSERT_THAT(event, IsOk());
  auto mem = MemDevice::Create(MemDeviceOptions{});
  ASSERT_THAT(mem, IsOk());
  EXPECT_FALSE((*event)->ArmOn(**mem));
  EXPECT_FALSE((*event)->armed());
  IoRequest wait;
  wait.op = IoOp::kWaitEvent;
  wait.event_fd = 0;
  EXPECT_THAT((*mem)->Enqueue(&wait), StatusIs(absl::StatusCode::kUnimplemented));

  std::thread signaller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (*event)->Signal();
  });
  (*event)->Wait();
  signaller.join();
  EXPECT_FALSE((*event)->TakeSignal());
  // Signals before a wait are kept, and several count as one.
  (*event)->Signal();
  (*event)->Signal();
  EXPECT_TRUE((*event)->TakeSignal());
  EXPECT_FALSE((*event)->TakeSignal());
}

}  // namespace
}  // namespace nvkv::storage
