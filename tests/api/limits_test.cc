// Tight limits of the environment: a store still opens, reads and writes, and says what it gave
// up. RLIMIT_MEMLOCK bounds what an unprivileged process may lock, and io_uring charges its rings
// and registered buffers to it (root, with CAP_IPC_LOCK, is not bound): each queue that cannot
// have them falls back step by step, and Stats::device.notes says so.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nvkv/db.h"
#include "tests/testutil/killed_writer.h"
#include "tests/testutil/process_memory.h"
#include "tests/testutil/sanitizers.h"
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

// ----- No thread to be had (ulimit -u) -----

// In a forked child: becomes "nobody" (root is not bound by the limit) with RLIMIT_NPROC at 1,
// this process itself, and opens the store at `path` to write through `backend`. Exit code 0
// when the open fails with kResourceExhausted containing `says`. Through pread and pwrite the
// engine's own threads (the writer's, compaction's) cannot start; through io_uring its worker
// threads cannot either, and the first flush it must hand to one comes back cancelled.
[[noreturn]] void OpenWithNoThreadToBeHad(const std::string& path, Backend backend,
                                          const std::string& says) {
  const rlimit limit{1, 1};
  if (setrlimit(RLIMIT_NPROC, &limit) != 0) std::_Exit(10);
  if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) std::_Exit(11);
  Options options = StoreOptions();
  options.backend = backend;
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  std::fprintf(stderr, "open: %s\n", db.status().ToString().c_str());
  if (db.ok() || !absl::IsResourceExhausted(db.status())) std::_Exit(12);
  if (db.status().message().find(says) == std::string::npos) std::_Exit(13);
  std::_Exit(0);
}

TEST(ThreadLimitTest, AnOpenThatCannotStartItsThreadsSaysSo) {
  nvkv::testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  const std::string path = dir.File("store");
  {
    auto db = DB::Open(StoreOptions(), path);  // created by this (root) process
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Put("key", "value"), IsOk());
  }
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  EXPECT_EXIT(OpenWithNoThreadToBeHad(path, Backend::kSyncFile,
                                      "cannot start the log writer thread"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(OpenWithNoThreadToBeHad(path, Backend::kDirectFile, "ulimit -u"),
              ::testing::ExitedWithCode(0), "");
  // Nothing was lost: the store opens as before.
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
  ASSERT_THAT(db, IsOk());
  EXPECT_EQ((*db)->Get("key").value_or(""), "value");
}

// ----- Few file descriptors (ulimit -n) -----

// File descriptors the calling process has open.
int OpenDescriptors() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
    count -= 3;  // ".", ".." and the directory's own descriptor
  }
  return count;
}

// In a forked child: allows `more` descriptors beyond those open, then opens the store at `path`,
// puts and closes. Exit code 0 when that works, or when what fails names the open-files limit.
[[noreturn]] void UseStoreWithFewDescriptors(const std::string& path, int more) {
  const rlim_t allowed = static_cast<rlim_t>(OpenDescriptors() + more);
  const rlimit limit{allowed, allowed};
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) std::_Exit(10);
  const auto check = [](const char* what, const absl::Status& status) {
    if (status.ok()) return;
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::_Exit(status.message().find("ulimit -n") != std::string::npos ? 0 : 12);
  };
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), path);
  check("open", db.status());
  check("put", (*db)->Put("few-descriptors", "value"));
  check("close", (*db)->Close());
  std::_Exit(0);
}

// With each number of descriptors left from none to 24, using the store works or fails saying
// which limit to raise: never a bare "Too many open files" from a call the user never made.
TEST(DescriptorLimitTest, UsingTheStoreWithFewDescriptorsWorksOrNamesTheLimit) {
#if defined(NVKV_UNDER_ASAN)
  // UBSan (built with ASan) opens files of its own to check a pointer's type, and with no
  // descriptor left reports every virtual call as one through an invalid vptr.
  GTEST_SKIP() << "the sanitizers need file descriptors of their own";
#endif
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  ASSERT_THAT(DB::Open(StoreOptions(), path), IsOk());
  for (int more = 0; more <= 24; ++more) {
    SCOPED_TRACE(absl::StrCat(more, " descriptors left"));
    EXPECT_EXIT(UseStoreWithFewDescriptors(path, more), ::testing::ExitedWithCode(0), "");
  }
}

// ----- A tight address space (ulimit -v) -----

// A writer that creates the store at `path` (of `capacity_bytes`) and puts durably until it is
// killed, sending each write's index to `ack_fd`.
[[noreturn]] void PutUntilKilled(const std::string& path, uint64_t capacity_bytes, int ack_fd) {
  Options options = StoreOptions();
  options.capacity_bytes = capacity_bytes;
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  if (!db.ok()) std::_Exit(20);
  const std::string value(200, 'v');
  for (uint32_t i = 0;; ++i) {
    // A sixth of the writes overwrite earlier keys: recovery's tables sort out the newest.
    const uint32_t key = i % 6 == 5 ? i / 2 : i;
    WriteOptions options;
    options.durable = i % 500 == 499;  // the rest reach the device as pages fill
    if (!(*db)->Put(absl::StrCat("key-", key), value, options).ok()) std::_Exit(21);
    if (write(ack_fd, &i, sizeof(i)) != sizeof(i)) std::_Exit(22);
  }
}

// Creates the store at `path` (of `capacity_bytes`) and puts into it from a child process killed
// after `writes` acknowledged writes, then waits until the store can be opened again (the dead
// writer's rings hold its lock until the kernel has torn them down). The store has no
// checkpoint (no Close, and too little log for one while running): Open reads the log.
void MakeKilledStore(const std::string& path, uint64_t capacity_bytes, uint32_t writes) {
  ASSERT_THAT(nvkv::testing::KillWriterAfter(
                  writes, [&](int ack_fd) { PutUntilKilled(path, capacity_bytes, ack_fd); }),
              IsOk());
  for (int waited_ms = 0;; waited_ms += 5) {
    Options reader = StoreOptions();
    reader.read_only = true;
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(reader, path);
    if (db.ok()) {
      ASSERT_NE((*db)->GetStats().recovery_start, RecoveryStart::kCleanClose);  // the log is read
      ASSERT_NE((*db)->GetStats().recovery_start, RecoveryStart::kBaseCheckpoint);
      ASSERT_EQ((*db)->GetStats().recovery_passes, 1u);
      return;
    }
    ASSERT_LT(waited_ms, 5000) << db.status();
    usleep(5000);
  }
}

// In a forked child: caps the address space at what the process maps now plus `extra_bytes`
// and opens the store at `path` (`read_only`, or to write: then a put too, which starts the
// writer's and compaction's threads). Exit code 0 when that works, or fails with a status that
// says why; an abort, std::thread's exception or a signal ends the child otherwise.
[[noreturn]] void OpenUnderAddressSpaceLimit(const std::string& path, bool read_only,
                                             uint64_t extra_bytes) {
  if (!nvkv::testing::LimitAddressSpaceTo(extra_bytes)) std::_Exit(10);
  Options options = StoreOptions();
  options.read_only = read_only;
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  if (!db.ok()) {
    const bool says_why = !db.status().message().empty();
    std::fprintf(stderr, "open: %s\n", db.status().ToString().c_str());
    std::_Exit(says_why ? 0 : 12);
  }
  if (!read_only) {
    const absl::Status put = (*db)->Put("under-the-limit", "value");
    if (!put.ok()) std::fprintf(stderr, "put: %s\n", put.ToString().c_str());
    if (!put.ok() && put.message().empty()) std::_Exit(13);
  }
  std::_Exit(0);
}

// Under every address-space limit from what the process maps to 48 MiB more, an Open of a
// store whose writer was killed (recovery reads its log: tables of newest records, key filters)
// and of one closed cleanly (the checkpoint's filters, then the writer's and compaction's
// threads, whose stacks take 8 MiB each) either works or returns an error: none ends the process.
TEST(AddressSpaceLimitTest, AnOpenUnderAnyLimitWorksOrSaysWhyItCannot) {
#if defined(NVKV_UNDER_ASAN) || defined(NVKV_UNDER_TSAN)
  GTEST_SKIP() << "a sanitizer maps terabytes of shadow memory: no address-space limit fits";
#endif
  nvkv::testing::TempDir dir;
  const std::string killed = dir.File("killed"), closed = dir.File("closed");
  ASSERT_NO_FATAL_FAILURE(MakeKilledStore(killed, StoreOptions().capacity_bytes, 6000));
  {
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(), closed);
    ASSERT_THAT(db, IsOk());
    for (int i = 0; i < 6000; ++i) {
      ASSERT_THAT((*db)->Put(absl::StrCat("key-", i), "value"), IsOk());
    }
  }
  for (uint64_t extra = 0; extra <= (uint64_t{48} << 20); extra += uint64_t{1} << 20) {
    SCOPED_TRACE(absl::StrCat(extra >> 20, " MiB above what is mapped"));
    EXPECT_EXIT(OpenUnderAddressSpaceLimit(killed, /*read_only=*/true, extra),
                ::testing::ExitedWithCode(0), "");
    EXPECT_EXIT(OpenUnderAddressSpaceLimit(closed, /*read_only=*/false, extra),
                ::testing::ExitedWithCode(0), "");
  }
}

// ----- A tight data limit (ulimit -d) -----

// How OpenUnderDataLimit's child ended.
enum DataLimitOutcome : int {
  kOpenedInOnePass = 0,
  kOpenedInPasses = 1,
  kRefusedSayingWhy = 2,
};

// In a forked child: caps the data at what the process holds now plus `extra_bytes`, opens the
// store at `path` read-only and reads its first key. Exits with a DataLimitOutcome, or another
// code when something else went wrong.
[[noreturn]] void OpenUnderDataLimit(const std::string& path, uint64_t extra_bytes) {
  if (!nvkv::testing::LimitDataTo(extra_bytes)) std::_Exit(10);
  Options options = StoreOptions();
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  if (!db.ok()) {
    std::fprintf(stderr, "open: %s\n", db.status().ToString().c_str());
    std::_Exit(db.status().message().empty() ? 12 : kRefusedSayingWhy);
  }
  if ((*db)->Get("key-0").value_or("") != std::string(200, 'v')) std::_Exit(13);
  std::_Exit((*db)->GetStats().recovery_passes > 1 ? kOpenedInPasses : kOpenedInOnePass);
}

// A store whose writer was killed, opened under data limits from what the process holds to
// 16 MiB above: works or says why, never ends the process. Recovery's tables are mapped memory,
// which RLIMIT_DATA counts: their budget knows the limit, and a table that cannot grow all the
// same makes recovery start again in more passes, so that some limits open in passes. (Few
// enough keys that their tables fit the default budget whole: the larger limits open in one.)
TEST(DataLimitTest, AnOpenUnderAnyDataLimitWorksOrSaysWhyItCannot) {
#if defined(NVKV_UNDER_ASAN) || defined(NVKV_UNDER_TSAN)
  GTEST_SKIP() << "a sanitizer's own allocations are not the program's: no data limit fits";
#endif
  nvkv::testing::TempDir dir;
  const std::string killed = dir.File("killed");
  ASSERT_NO_FATAL_FAILURE(MakeKilledStore(killed, 128 << 20, 6000));
  std::map<int, int> outcomes;  // DataLimitOutcome: how many children ended so
  for (uint64_t extra = 0; extra <= (uint64_t{16} << 20); extra += uint64_t{64} << 10) {
    SCOPED_TRACE(absl::StrCat(extra >> 10, " KiB above what the process holds"));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) OpenUnderDataLimit(killed, extra);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
    const int outcome = WEXITSTATUS(status);
    ASSERT_TRUE(outcome == kOpenedInOnePass || outcome == kOpenedInPasses ||
                outcome == kRefusedSayingWhy)
        << "exit code " << outcome;
    ++outcomes[outcome];
  }
  EXPECT_GT(outcomes[kRefusedSayingWhy], 0);
  EXPECT_GT(outcomes[kOpenedInPasses], 0);
  EXPECT_GT(outcomes[kOpenedInOnePass], 0);
}

}  // namespace
}  // namespace nvkv
