// Optional ring features: each is probed at open, reported in DeviceInfo::ring, and either works
// or falls back with a note; none makes open fail.
#include <gtest/gtest.h>

#include <cstring>

#include "storage/device.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;

DeviceOptions Options() {
  DeviceOptions options;
  options.backend = Backend::kDirectFile;
  options.create_bytes = 4 << 20;
  options.ring.queue_depth = 16;
  options.buffers.buffer_count = 8;
  options.buffers.chunk_count = 0;
  return options;
}

void ExpectRoundTrip(Device& device) {
  Buffer out = device.buffers().GetPage();
  Buffer in = device.buffers().GetPage();
  ASSERT_TRUE(out.valid() && in.valid());
  for (uint32_t i = 0; i < out.bytes; ++i) out.data[i] = static_cast<uint8_t>(i * 13 + 1);
  const uint32_t blocks = out.bytes / device.info().lba_bytes;
  ASSERT_THAT(WriteBlocks(device, blocks, blocks, out), IsOk());
  ASSERT_THAT(ReadBlocks(device, blocks, blocks, in), IsOk());
  EXPECT_EQ(std::memcmp(in.data, out.data, out.bytes), 0);
}

TEST(RingOptionsTest, DefaultsAreSingleIssuerWithDeferredTaskRunOnThisKernel) {
  nvkv::testing::TempDir dir;
  auto device = OpenDevice(dir.File("f"), Options());
  ASSERT_THAT(device, IsOk());
  const RingFeatures& ring = (*device)->info().ring;
  EXPECT_EQ(ring.queue_depth, 16u);
  EXPECT_GE(ring.sq_entries, 16u);
  // Either DEFER_TASKRUN (6.1+) or the COOP_TASKRUN fallback, never neither without a note.
  EXPECT_TRUE(ring.defer_taskrun || ring.coop_taskrun || !(*device)->info().notes.empty());
  EXPECT_TRUE(ring.registered_file);
  EXPECT_TRUE(ring.fixed_buffers);
  ExpectRoundTrip(**device);
}

TEST(RingOptionsTest, EverythingOffStillWorks) {
  nvkv::testing::TempDir dir;
  DeviceOptions options = Options();
  options.ring.single_issuer = false;
  options.ring.register_ring_fd = false;
  options.ring.register_file = false;
  options.ring.fixed_buffers = false;
  auto device = OpenDevice(dir.File("f"), options);
  ASSERT_THAT(device, IsOk());
  const RingFeatures& ring = (*device)->info().ring;
  EXPECT_FALSE(ring.single_issuer);
  EXPECT_FALSE(ring.defer_taskrun);
  EXPECT_FALSE(ring.registered_file);
  EXPECT_FALSE(ring.fixed_buffers);
  EXPECT_FALSE(ring.registered_ring_fd);
  EXPECT_EQ((*device)->buffers().GetPage().buf_index, -1);
  ExpectRoundTrip(**device);
}

TEST(RingOptionsTest, SqpollIsUsedOrRefusedWithANote) {
  nvkv::testing::TempDir dir;
  DeviceOptions options = Options();
  options.ring.sqpoll = true;
  auto device = OpenDevice(dir.File("f"), options);
  ASSERT_THAT(device, IsOk());
  const DeviceInfo& info = (*device)->info();
  if (!info.ring.sqpoll) {
    bool noted = false;
    for (const std::string& note : info.notes) noted |= note.find("SQPOLL") != std::string::npos;
    EXPECT_TRUE(noted) << "SQPOLL dropped without a note";
  }
  EXPECT_FALSE(info.ring.defer_taskrun);  // the kernel does not combine the two
  ExpectRoundTrip(**device);
}

TEST(RingOptionsTest, QueueDepthOutOfRangeIsInvalidArgument) {
  nvkv::testing::TempDir dir;
  DeviceOptions options = Options();
  options.ring.queue_depth = 0;
  EXPECT_THAT(OpenDevice(dir.File("f"), options),
              ::nvkv::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  options.ring.queue_depth = 5000;
  EXPECT_THAT(OpenDevice(dir.File("g"), options),
              ::nvkv::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace nvkv::storage
