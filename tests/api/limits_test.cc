// Tight limits of the environment: a store still opens, reads and writes, and says what it gave
// up. RLIMIT_MEMLOCK bounds what an unprivileged process may lock, and io_uring charges its rings
// and registered buffers to it (root, with CAP_IPC_LOCK, is not bound): each queue that cannot
// have them falls back step by step, and Stats::device.notes says so.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvkv/db.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv {
namespace {

using ::nvkv::testing::IsOk;

Options StoreOptions() {
  Options options;
  options.capacity_bytes = 32 << 20;
  return options;
}

// In a forked child: lowers RLIMIT_MEMLOCK to `limit_bytes`, becomes "nobody" (root is not bound
// by the limit), then puts, gets on this thread and on another one, and reopens. Exit code 0 when
// all of it works; otherwise it prints why to stderr.
[[noreturn]] void UseStoreUnderLimit(const std::string& path, rlim_t limit_bytes) {
  const rlimit limit{limit_bytes, limit_bytes};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) std::_Exit(10);
  if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) std::_Exit(11);
  auto fail = [](const std::string& what, const absl::Status& status) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), status.ToString().c_str());
    std::_Exit(12);
  };
  for (int open = 0; open < 2; ++open) {
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
    if (!db.ok()) fail("open", db.status());
    const std::string key = absl::StrCat("key", open);
    if (absl::Status put = (*db)->Put(key, "value"); !put.ok()) fail("put", put);
    absl::StatusOr<std::string> got = (*db)->Get(key);
    if (!got.ok()) fail("get", got.status());
    absl::Status other_thread;
    std::thread reader([&] {
      absl::StatusOr<std::string> value = (*db)->Get("key0");
      other_thread = value.ok() ? absl::OkStatus() : value.status();
    });
    reader.join();
    if (!other_thread.ok()) fail("get on another thread", other_thread);
    const Stats stats = (*db)->GetStats();
    std::fprintf(stderr, "notes: %s\n", absl::StrJoin(stats.device.notes, " | ").c_str());
    if (limit_bytes < (1 << 20) && stats.device.notes.empty()) {
      fail("stats", absl::InternalError("no note says what was given up"));
    }
    if (absl::Status closed = (*db)->Close(); !closed.ok()) fail("close", closed);
  }
  std::_Exit(0);
}

class LowLockedMemoryTest : public ::testing::TestWithParam<rlim_t> {};

TEST_P(LowLockedMemoryTest, StoreOpensReadsAndWritesAndSaysWhatItGaveUp) {
  nvkv::testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  const std::string path = dir.File("store");
  {
    auto db = DB::Open(StoreOptions(), path);  // created by this (root) process
    ASSERT_THAT(db, IsOk());
  }
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  EXPECT_EXIT(UseStoreUnderLimit(path, GetParam()), ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Limits, LowLockedMemoryTest,
                         ::testing::Values(rlim_t{0}, rlim_t{64} << 10, rlim_t{256} << 10));

}  // namespace
}  // namespace nvkv
