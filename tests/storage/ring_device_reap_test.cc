// Reap's promise to push what is still queued ("Submits anything still queued first",
// storage/device.h), checked on a ring where completions become visible without entering the
// kernel: single_issuer off gives COOP_TASKRUN, whose completion work runs on any return from a
// system call.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "storage/device.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;

// True once `bytes` at `offset` of `path`, read through the page cache by a second opener,
// equal `expected`; gives up after two seconds.
bool FileShowsWithin2s(const std::string& path, uint64_t offset, const uint8_t* expected,
                       uint32_t bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::vector<uint8_t> seen(bytes);
  bool matched = false;
  for (int attempt = 0; attempt < 200 && !matched; ++attempt) {
    if (pread(fd, seen.data(), bytes, static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes)) {
      matched = std::memcmp(seen.data(), expected, bytes) == 0;
    }
    if (!matched) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close(fd);
  return matched;
}

TEST(RingDeviceReapTest, ReapSubmitsQueuedRequestsWhenCompletionsAreAlreadyVisible) {
  nvkv::testing::TempDir dir;
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = 1 << 20;
  options.ring.queue_depth = 4;
  options.ring.single_issuer = false;  // COOP_TASKRUN: completions posted without our entering
  options.buffers.buffer_count = 4;
  options.buffers.chunk_count = 0;
  auto opened = OpenDevice(dir.File("store"), options);
  ASSERT_THAT(opened, IsOk());
  Device& device = **opened;
  ASSERT_FALSE(device.info().ring.defer_taskrun);
  const uint32_t lba_bytes = device.info().lba_bytes;
  const uint32_t page_bytes = device.buffers().page_bytes();
  const uint32_t lba_count = page_bytes / lba_bytes;

  // A read goes out and completes; sleeping (a system call) lets its completion be posted.
  IoRequest read;
  read.op = IoOp::kRead;
  read.lba = 0;
  read.lba_count = lba_count;
  read.buffer = device.buffers().GetPage();
  ASSERT_THAT(device.Enqueue(&read), IsOk());
  ASSERT_THAT(device.Submit(), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  // A write is queued, then Reap(1) finds the read already done. It must still push the write.
  IoRequest write;
  write.op = IoOp::kWrite;
  write.lba = lba_count;  // the second page
  write.lba_count = lba_count;
  write.buffer = device.buffers().GetPage();
  std::memset(write.buffer.data, 0xa5, page_bytes);
  ASSERT_THAT(device.Enqueue(&write), IsOk());
  auto reaped = device.Reap(1);
  ASSERT_THAT(reaped, IsOk());
  EXPECT_GE(*reaped, 1u);

  // No further Submit or Reap: the write reaches the file only if that Reap submitted it.
  EXPECT_TRUE(FileShowsWithin2s(dir.File("store"), uint64_t{lba_count} * lba_bytes,
                                write.buffer.data, page_bytes));
  while (device.in_flight() > 0) ASSERT_THAT(device.Reap(device.in_flight()), IsOk());
  EXPECT_THAT(write.status, IsOk());
}

// A queue destroyed with requests still in flight waits for them (the kernel must not write
// into its buffers once they are freed) and runs none of their callbacks.
TEST(RingDeviceReapTest, DestroyingAQueueWithReadsInFlightWaitsForThemWithoutCallbacks) {
  nvkv::testing::TempDir dir;
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = 1 << 20;
  options.ring.queue_depth = 8;
  options.buffers.buffer_count = 8;
  options.buffers.chunk_count = 0;
  auto opened = OpenDevice(dir.File("store"), options);
  ASSERT_THAT(opened, IsOk());
  auto queue = (*opened)->OpenSimilarQueue();
  ASSERT_THAT(queue, IsOk());
  const uint32_t lba_count = (*queue)->buffers().page_bytes() / (*queue)->info().lba_bytes;
  int callbacks = 0;
  std::vector<IoRequest> reads(8);
  for (uint32_t i = 0; i < reads.size(); ++i) {
    reads[i].op = IoOp::kRead;
    reads[i].lba = i * lba_count;
    reads[i].lba_count = lba_count;
    reads[i].buffer = (*queue)->buffers().GetPage();
    reads[i].context = &callbacks;
    reads[i].on_done = [](IoRequest* request) { ++*static_cast<int*>(request->context); };
    ASSERT_THAT((*queue)->Enqueue(&reads[i]), IsOk());
  }
  ASSERT_THAT((*queue)->Submit(), IsOk());
  queue->reset();
  EXPECT_EQ(callbacks, 0);
}

}  // namespace
}  // namespace nvkv::storage
