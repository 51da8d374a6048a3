// A store is opened again at once after its writer was killed: kill -9, then Open right away,
// finds every acknowledged durable write. The dead process's io_uring rings are torn down by the
// kernel after the process is gone, holding the device file (and its lock) meanwhile: Open waits
// for the lock, a bounded time (Options::lock_wait_ms).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nvkv/db.h"
#include "tests/testutil/killed_writer.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

std::string Key(uint32_t round, uint32_t i) { return absl::StrCat("r", round, "-k", i); }
std::string Value(uint32_t round, uint32_t i) { return absl::StrCat("value ", round, " ", i); }

Options StoreOptions() {
  Options options;
  options.capacity_bytes = 32 << 20;
  return options;
}

// In a forked child: writes durably, telling the parent each acknowledged index, until killed.
[[noreturn]] void WriteUntilKilled(const std::string& path, uint32_t round, int ack_fd) {
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
  if (!db.ok()) std::_Exit(20);
  WriteOptions durable;
  durable.durable = true;
  for (uint32_t i = 0;; ++i) {
    if (!(*db)->Put(Key(round, i), Value(round, i), durable).ok()) std::_Exit(21);
    if (write(ack_fd, &i, sizeof(i)) != sizeof(i)) std::_Exit(22);
  }
}

TEST(RestartTest, OpenRightAfterKillNineFindsEveryAcknowledgedWrite) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  {
    auto db = DB::Open(StoreOptions(), path);  // created once, outside the rounds
    ASSERT_THAT(db, IsOk());
  }
  constexpr uint32_t kRounds = 20;
  absl::Duration slowest_open;
  for (uint32_t round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    // Let it write a few (a varying number), then kill it mid-write.
    const uint32_t wanted = 5 + round * 7 % 40;
    absl::StatusOr<int64_t> killed = nvkv::testing::KillWriterAfter(
        wanted, [&path, round](int ack_fd) { WriteUntilKilled(path, round, ack_fd); });
    ASSERT_THAT(killed, IsOk());
    const int64_t acknowledged = *killed;
    ASSERT_GE(acknowledged + 1, wanted);

    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
    slowest_open = std::max(slowest_open, absl::Now() - start);
    ASSERT_THAT(db, IsOk());
    for (uint32_t i = 0; i <= acknowledged; ++i) {
      auto got = (*db)->Get(Key(round, i));
      ASSERT_THAT(got, IsOk()) << "acknowledged write " << i << " of " << acknowledged;
      EXPECT_EQ(*got, Value(round, i));
    }
    ASSERT_THAT((*db)->Close(), IsOk());
  }
  std::printf("slowest open after a kill: %s\n", absl::FormatDuration(slowest_open).c_str());
}

// While another opener holds the store, Open waits lock_wait_ms, then says so.
// In a forked child: writes kEarlier keys, then (with `checkpoint`) DB::Checkpoint, then durably
// as WriteUntilKilled. No checkpoint while running but the one asked for.
constexpr uint32_t kEarlier = 3000;
[[noreturn]] void WriteCheckpointThenUntilKilled(const std::string& path, bool checkpoint,
                                                 int ack_fd) {
  Options options = StoreOptions();
  options.checkpoint_log_ratio = 0;
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  if (!db.ok()) std::_Exit(20);
  for (uint32_t i = 0; i < kEarlier; ++i) {
    if (!(*db)->Put(Key(0, i), Value(0, i), WriteOptions{}).ok()) std::_Exit(21);
  }
  if (checkpoint && !(*db)->Checkpoint().ok()) std::_Exit(23);
  WriteOptions durable;
  durable.durable = true;
  for (uint32_t i = 0;; ++i) {
    if (!(*db)->Put(Key(1, i), Value(1, i), durable).ok()) std::_Exit(21);
    if (write(ack_fd, &i, sizeof(i)) != sizeof(i)) std::_Exit(22);
  }
}

// DB::Checkpoint: an Open after a kill reads the checkpoint and only the log written after it;
// without it (and none while running), the log since the Close that created the store.
TEST(RestartTest, AnOpenAfterAKillReadsOnlyTheLogAfterTheCheckpointAskedFor) {
  for (const bool checkpoint : {true, false}) {
    SCOPED_TRACE(checkpoint ? "DB::Checkpoint" : "no checkpoint");
    nvkv::testing::TempDir dir;
    const std::string path = dir.File("store");
    ASSERT_THAT(DB::Open(StoreOptions(), path), IsOk());  // created, closed: an empty checkpoint
    absl::StatusOr<int64_t> killed = nvkv::testing::KillWriterAfter(
        20, [&path, checkpoint](int ack_fd) {
          WriteCheckpointThenUntilKilled(path, checkpoint, ack_fd);
        });
    ASSERT_THAT(killed, IsOk());
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
    ASSERT_THAT(db, IsOk());
    const Stats stats = (*db)->GetStats();
    EXPECT_EQ(stats.recovery_start, RecoveryStart::kBaseCheckpoint)
        << stats.recovery_checkpoint_unused_why;
    if (checkpoint) {
      EXPECT_LT(stats.recovery_records, kEarlier / 2) << "the keys before the checkpoint were read";
    } else {
      EXPECT_GE(stats.recovery_records, kEarlier);
    }
    for (uint32_t i = 0; i < kEarlier; ++i) {
      auto got = (*db)->Get(Key(0, i));
      ASSERT_THAT(got, IsOk()) << i;
      EXPECT_EQ(*got, Value(0, i));
    }
    for (uint32_t i = 0; i <= *killed; ++i) {
      auto got = (*db)->Get(Key(1, i));
      ASSERT_THAT(got, IsOk()) << "acknowledged write " << i << " of " << *killed;
      EXPECT_EQ(*got, Value(1, i));
    }
  }
}

TEST(RestartTest, OpenOfAStoreInUseWaitsThenSaysHowLong) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  auto first = DB::Open(StoreOptions(), path);
  ASSERT_THAT(first, IsOk());
  Options options = StoreOptions();
  options.lock_wait_ms = 300;
  const absl::Time start = absl::Now();
  auto second = DB::Open(options, path);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition, "waited 300 ms"));
  EXPECT_GE(waited, absl::Milliseconds(300));
  EXPECT_LT(waited, absl::Seconds(5));
  options.lock_wait_ms = 0;  // no wait at all
  EXPECT_THAT(DB::Open(options, path), StatusIs(absl::StatusCode::kFailedPrecondition, "in use"));
}

}  // namespace
}  // namespace nvkv
