// Close always finishes, whatever the background threads are doing when it is called; on a
// MemDevice whose segment-sized reads (compaction reading its victim) can be slowed down on
// demand, through the Device seam. Conventional and zoned.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kv/engine.h"
#include "storage/base/check.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using storage::MemDevice;
using storage::MemDeviceOptions;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint64_t kSegments = 32;

// Shared by a SlowSegmentReads queue and every queue opened from it.
struct SlowReadControl {
  std::atomic<bool> armed{false};
  absl::Duration delay = absl::Milliseconds(500);
  std::atomic<bool> started{false};
  absl::Notification slow_read_started;  // the first delayed read began
};

// Forwards to a MemDevice queue; once armed, holds every read of a whole segment (only
// compaction reads that much at once after Open) for `delay` before it is queued.
class SlowSegmentReads final : public storage::Device {
 public:
  SlowSegmentReads(std::unique_ptr<storage::Device> inner,
                   std::shared_ptr<SlowReadControl> control)
      : inner_(std::move(inner)), control_(std::move(control)) {}

  const storage::DeviceInfo& info() const override { return inner_->info(); }
  storage::BufferPool& buffers() override { return inner_->buffers(); }
  absl::Status Enqueue(storage::IoRequest* request) override {
    if (control_->armed.load() && request->op == storage::IoOp::kRead &&
        request->lba_count >= kPagesPerSegment) {
      if (!control_->started.exchange(true)) control_->slow_read_started.Notify();
      absl::SleepFor(control_->delay);
    }
    return inner_->Enqueue(request);
  }
  absl::StatusOr<uint32_t> Submit() override { return inner_->Submit(); }
  absl::StatusOr<uint32_t> Reap(uint32_t min_complete) override {
    return inner_->Reap(min_complete);
  }
  uint32_t in_flight() const override { return inner_->in_flight(); }
  const storage::IoStats& stats() const override { return inner_->stats(); }
  absl::StatusOr<std::unique_ptr<storage::Device>> OpenQueue(
      const storage::QueueOptions& options) override {
    auto queue = inner_->OpenQueue(options);
    if (!queue.ok()) return queue.status();
    return std::unique_ptr<storage::Device>(
        new SlowSegmentReads(std::move(*queue), control_));
  }

 private:
  std::unique_ptr<storage::Device> inner_;
  std::shared_ptr<SlowReadControl> control_;
};

// kSegments segments: conventional, or zoned (a zone of twice a segment's pages per segment,
// beside the metadata zones).
MemDeviceOptions MemOptions(Layout layout) {
  MemDeviceOptions options;
  options.lba_bytes = kPageBytes;
  options.lba_count = 2 + kSegments * kPagesPerSegment;
  if (layout == Layout::kZoned) return ZonedMemStoreOptions(kSegments, kPagesPerSegment);
  return options;
}

Options StoreOptions(bool background_compaction) {
  Options options;
  options.segment_bytes = kPageBytes * kPagesPerSegment;
  options.shard_count = 2;
  options.background_compaction = background_compaction;
  options.compaction_policy = CompactionPolicy::kGreedy;
  return options;
}

std::string Key(int i) { return "key" + std::to_string(i); }
std::string Value(int i, int version) {
  std::string value = Key(i) + "#" + std::to_string(version) + "#";
  value.resize(200, static_cast<char>('a' + version));
  return value;
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/false);
}

// Compaction is cleaning a victim with live records when Close begins. The writer thread used
// to exit as soon as it had nothing to do, while compaction went on copying the victim's live
// records and then waited for them to become durable (Flush): with no writer left, forever.
// Close joined the compaction thread, so Close never returned (nvkv-cli put hung, one run in
// fifteen, on a small store). Here the victim's read is held for longer than the writer's idle
// wait, so the old code hangs every time.
class CloseTest : public ::testing::TestWithParam<Layout> {};

TEST_P(CloseTest, CloseFinishesWhileCompactionCopiesLiveRecords) {
  auto mem = MemDevice::Create(MemOptions(GetParam()));
  ASSERT_THAT(mem, IsOk());
  std::shared_ptr<storage::MemStorage> bytes = (*mem)->storage();
  mem->reset();
  auto control = std::make_shared<SlowReadControl>();
  auto open = [&](bool background_compaction) -> absl::StatusOr<std::unique_ptr<Engine>> {
    auto device = MemDevice::Open(bytes, MemOptions(GetParam()));
    if (!device.ok()) return device.status();
    return Engine::OpenOnDevice(
        std::make_unique<SlowSegmentReads>(std::move(*device), control),
        StoreOptions(background_compaction));
  };

  // Fill segments without compaction until fewer are free than compaction's mark: keys in
  // pairs, the first of each pair written again after the second, so that every sealed segment
  // holds both live and dead records.
  int keys = 0;
  {
    auto engine = open(/*background_compaction=*/false);
    ASSERT_THAT(engine, IsOk());
    while ((*engine)->Stats().segments_free > 5) {
      ASSERT_THAT(Put(**engine, Key(keys), Value(keys, 0)), IsOk()) << keys;
      ASSERT_THAT(Put(**engine, Key(keys + 1), Value(keys + 1, 0)), IsOk()) << keys;
      ASSERT_THAT(Put(**engine, Key(keys), Value(keys, 1)), IsOk()) << keys;
      keys += 2;
    }
    ASSERT_THAT((*engine)->Close(), IsOk());
  }

  // Reopen with background compaction: free segments are below its mark, so it starts
  // cleaning. Its first victim read is held until Close has begun.
  auto engine = open(/*background_compaction=*/true);
  ASSERT_THAT(engine, IsOk());
  control->armed.store(true);
  ASSERT_TRUE(control->slow_read_started.WaitForNotificationWithTimeout(absl::Seconds(20)))
      << "compaction never started; free segments: " << (*engine)->Stats().segments_free;

  // Close on another thread, bounded: a Close that hangs fails the test (its thread and the
  // engine are abandoned, so that the rest of the suite can run).
  auto closed = std::make_shared<absl::Notification>();
  auto status = std::make_shared<absl::Status>();
  Engine* raw = engine->release();
  std::thread closer([raw, closed, status, control] {
    *status = raw->Close();
    closed->Notify();
  });
  if (!closed->WaitForNotificationWithTimeout(absl::Seconds(20))) {
    closer.detach();
    FAIL() << "Close did not return within 20 s";
  }
  closer.join();
  EXPECT_THAT(*status, IsOk());
  delete raw;

  // Everything acknowledged is there after the reopen.
  control->armed.store(false);
  auto reopened = open(/*background_compaction=*/false);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ((*reopened)->Stats().live_keys, static_cast<uint64_t>(keys));
  for (int i = 0; i < keys; ++i) {
    auto got = (*reopened)->Get(Key(i));
    ASSERT_THAT(got, IsOk()) << Key(i);
    EXPECT_EQ(*got, Value(i, i % 2 == 0 ? 1 : 0)) << Key(i);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CloseTest,
                         ::testing::Values(Layout::kConventional, Layout::kZoned),
                         [](const auto& info) { return std::string(LayoutName(info.param)); });

}  // namespace
}  // namespace nvkv::kv
