// Options::read_only: readers share a store (a shared lock), none opens beside a writer, and a
// read-only DB writes nothing to the device, at Open (no format, no superblock repair, no
// segment map after a crash) or at Close (no checkpoint). "Nothing" is checked on the bytes of
// the store file, before and after.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nvkv/db.h"
#include "tests/testutil/killed_writer.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kKeys = 3000;

std::string Key(uint32_t i) { return absl::StrCat("key-", 100000 + i); }
std::string Value(uint32_t i) { return absl::StrCat("value of ", i, std::string(i % 200, 'v')); }

Options WriterOptions(IndexMode mode = IndexMode::kAsFormatted) {
  Options options;
  options.capacity_bytes = 32 << 20;
  options.index_mode = mode;
  return options;
}

Options ReaderOptions() {
  Options options;
  options.read_only = true;
  options.lock_wait_ms = 200;
  return options;
}

// The store file's bytes, read through the page cache (O_DIRECT writes invalidate it).
std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteKeys(const std::string& path, IndexMode mode) {
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(WriterOptions(mode), path);
  ASSERT_THAT(db, IsOk());
  for (uint32_t i = 0; i < kKeys; ++i) ASSERT_THAT((*db)->Put(Key(i), Value(i)), IsOk());
  ASSERT_THAT((*db)->Delete(Key(7)), IsOk());
  ASSERT_THAT((*db)->Close(), IsOk());
}

void ExpectEveryKey(DB& db) {
  for (uint32_t i = 0; i < kKeys; ++i) {
    absl::StatusOr<std::string> got = db.Get(Key(i));
    if (i == 7) {
      EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound));
      continue;
    }
    ASSERT_THAT(got, IsOk()) << Key(i);
    EXPECT_EQ(*got, Value(i));
  }
}

class ReadOnlyTest : public ::testing::TestWithParam<IndexMode> {
 protected:
  nvkv::testing::TempDir dir_;
  std::string path_ = dir_.File("store");
};

// Two readers at once (here in one process; flock locks each open file, so two processes are
// alike), each with everything; their Gets, MultiGets, Check, scans and Closes change no byte,
// and the writer opens once they are gone.
TEST_P(ReadOnlyTest, ReadersShareTheStoreAndWriteNothing) {
  WriteKeys(path_, GetParam());
  const std::string before = FileBytes(path_);
  {
    absl::StatusOr<std::unique_ptr<DB>> first = DB::Open(ReaderOptions(), path_);
    ASSERT_THAT(first, IsOk());
    absl::StatusOr<std::unique_ptr<DB>> second = DB::Open(ReaderOptions(), path_);
    ASSERT_THAT(second, IsOk());
    EXPECT_EQ((*first)->GetStats().index_mode, GetParam());
    ExpectEveryKey(**first);
    ExpectEveryKey(**second);
    const std::vector<std::string_view> keys = {"key-100001", "key-100007", "missing"};
    std::vector<absl::StatusOr<std::string>> values = (*second)->MultiGet(keys);
    ASSERT_EQ(values.size(), 3u);
    EXPECT_THAT(values[0], IsOk());
    EXPECT_THAT(values[1], StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(values[2], StatusIs(absl::StatusCode::kNotFound));
    if (GetParam() == IndexMode::kOrdered) {
      std::vector<std::pair<std::string, std::string>> range;
      ASSERT_THAT((*first)->Scan(Key(0), Key(10), 100, &range), IsOk());
      EXPECT_EQ(range.size(), 9u);  // key 7 is deleted
    }
    absl::StatusOr<CheckReport> report = (*second)->Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->ok()) << report->problems.front();
    EXPECT_EQ(report->live_keys_checked, kKeys - 1);
    ASSERT_THAT((*first)->Close(), IsOk());
    ASSERT_THAT((*second)->Close(), IsOk());
  }
  EXPECT_TRUE(FileBytes(path_) == before) << "a reader wrote to the store";
  absl::StatusOr<std::unique_ptr<DB>> writer = DB::Open(WriterOptions(), path_);
  ASSERT_THAT(writer, IsOk());
  ExpectEveryKey(**writer);
}

TEST_P(ReadOnlyTest, WritesOnAReaderFailAndChangeNothing) {
  WriteKeys(path_, GetParam());
  const std::string before = FileBytes(path_);
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(ReaderOptions(), path_);
  ASSERT_THAT(db, IsOk());
  DB& reader = **db;
  const auto refused = StatusIs(absl::StatusCode::kFailedPrecondition, "read-only");
  EXPECT_THAT(reader.Put(Key(1), "new"), refused);
  EXPECT_THAT(reader.Put("a new key", "new"), refused);
  EXPECT_THAT(reader.Delete(Key(2)), refused);
  WriteBatch batch;
  batch.Put(Key(3), "new");
  batch.Delete(Key(4));
  EXPECT_THAT(reader.Write(batch), refused);
  bool called = false;
  EXPECT_THAT(reader.PutAsync(Key(5), "new", [&called](absl::Status) { called = true; }), refused);
  EXPECT_THAT(reader.DeleteAsync(Key(5), [&called](absl::Status) { called = true; }), refused);
  EXPECT_THAT(reader.Poll(0), IsOk());
  EXPECT_FALSE(called);
  EXPECT_EQ(reader.PendingWrites(), 0u);
  EXPECT_THAT(reader.CompactAll(), refused);
  EXPECT_THAT(reader.Checkpoint(), refused);
  EXPECT_THAT(reader.Flush(), IsOk());  // nothing is unwritten
  ExpectEveryKey(reader);
  EXPECT_EQ(reader.GetStats().puts, 0u);
  ASSERT_THAT(reader.Close(), IsOk());
  EXPECT_TRUE(FileBytes(path_) == before) << "a reader wrote to the store";
}

// A writer keeps readers off and readers keep a writer off: a reader beside a writer would read
// a log that changes under it.
TEST_P(ReadOnlyTest, AReaderAndAWriterKeepEachOtherOff) {
  WriteKeys(path_, GetParam());
  Options writer_options = WriterOptions();
  writer_options.lock_wait_ms = 200;
  {
    absl::StatusOr<std::unique_ptr<DB>> writer = DB::Open(writer_options, path_);
    ASSERT_THAT(writer, IsOk());
    EXPECT_THAT(DB::Open(ReaderOptions(), path_),
                StatusIs(absl::StatusCode::kFailedPrecondition, "in use by another opener"));
  }
  absl::StatusOr<std::unique_ptr<DB>> reader = DB::Open(ReaderOptions(), path_);
  ASSERT_THAT(reader, IsOk());
  EXPECT_THAT(DB::Open(writer_options, path_),
              StatusIs(absl::StatusCode::kFailedPrecondition, "in use by another opener"));
  ASSERT_THAT((*reader)->Close(), IsOk());
  EXPECT_THAT(DB::Open(writer_options, path_), IsOk());
}

// In a forked child: writes durably, telling the parent each acknowledged index, until killed.
[[noreturn]] void WriteUntilKilled(const std::string& path, int ack_fd) {
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(WriterOptions(), path);
  if (!db.ok()) std::_Exit(20);
  WriteOptions durable;
  durable.durable = true;
  for (uint32_t i = 0;; ++i) {
    if (!(*db)->Put(absl::StrCat("crash-", i), Value(i), durable).ok()) std::_Exit(21);
    if (write(ack_fd, &i, sizeof(i)) != sizeof(i)) std::_Exit(22);
  }
}

// A store whose writer was killed: a reader recovers it in memory (every acknowledged write is
// there) and writes nothing of what a writer's Open writes (the segment map, a flush), so a
// second reader recovers the same, and the writer after them too.
TEST_P(ReadOnlyTest, AReaderOfACrashedStoreRecoversInMemoryOnly) {
  WriteKeys(path_, GetParam());
  absl::StatusOr<int64_t> killed = nvkv::testing::KillWriterAfter(
      300, [this](int ack_fd) { WriteUntilKilled(path_, ack_fd); });
  ASSERT_THAT(killed, IsOk());
  const int64_t acknowledged = *killed;

  // The dead writer's rings hold the lock until the kernel has torn them down: once it is
  // free, no write of the writer can still land, and the bytes are the crash's.
  const int lock_fd = open(path_.c_str(), O_RDONLY);
  ASSERT_GE(lock_fd, 0);
  for (int waited_ms = 0; flock(lock_fd, LOCK_SH | LOCK_NB) != 0; waited_ms += 5) {
    ASSERT_LT(waited_ms, 5000) << "the dead writer's lock is still held";
    usleep(5000);
  }
  const std::string before = FileBytes(path_);
  close(lock_fd);
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(absl::StrCat("reader ", pass));
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(ReaderOptions(), path_);
    ASSERT_THAT(db, IsOk());
    EXPECT_NE((*db)->GetStats().recovery_start, RecoveryStart::kCleanClose);  // the log was read
    ExpectEveryKey(**db);
    for (uint32_t i = 0; i <= acknowledged; ++i) {
      absl::StatusOr<std::string> got = (*db)->Get(absl::StrCat("crash-", i));
      ASSERT_THAT(got, IsOk()) << "acknowledged write " << i << " of " << acknowledged;
      EXPECT_EQ(*got, Value(i));
    }
    ASSERT_THAT((*db)->Close(), IsOk());
    EXPECT_TRUE(FileBytes(path_) == before) << "a reader wrote to the store";
  }
  absl::StatusOr<std::unique_ptr<DB>> writer = DB::Open(WriterOptions(), path_);
  ASSERT_THAT(writer, IsOk());
  ExpectEveryKey(**writer);
  for (uint32_t i = 0; i <= acknowledged; ++i) {
    EXPECT_THAT((*writer)->Get(absl::StrCat("crash-", i)), IsOk());
  }
}

INSTANTIATE_TEST_SUITE_P(BothIndexModes, ReadOnlyTest,
                         ::testing::Values(IndexMode::kHash, IndexMode::kOrdered),
                         [](const ::testing::TestParamInfo<IndexMode>& info) {
                           return info.param == IndexMode::kHash ? "Hash" : "Ordered";
                         });

// Where there is no store, a reader makes none: a missing file stays missing, an empty one
// stays empty.
TEST(ReadOnlyOpenTest, FormatsAndCreatesNothing) {
  nvkv::testing::TempDir dir;
  const std::string missing = dir.File("missing");
  EXPECT_THAT(DB::Open(ReaderOptions(), missing), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_NE(access(missing.c_str(), F_OK), 0);
  const std::string empty = dir.File("empty");
  {
    std::ofstream out(empty, std::ios::binary);
    out << std::string(8 << 20, '\0');
  }
  EXPECT_THAT(DB::Open(ReaderOptions(), empty),
              StatusIs(absl::StatusCode::kNotFound, "a read-only open formats nothing"));
  EXPECT_EQ(FileBytes(empty), std::string(8 << 20, '\0'));
}

// A damaged superblock copy: a reader opens from the other and leaves it (Check says so); the
// writer repairs it.
TEST(ReadOnlyOpenTest, LeavesADamagedSuperblockCopyToTheWriter) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  WriteKeys(path, IndexMode::kHash);
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char junk[] = "not a superblock";
  ASSERT_EQ(pwrite(fd, junk, sizeof(junk), 4096 + 64), static_cast<ssize_t>(sizeof(junk)));
  close(fd);
  const std::string damaged = FileBytes(path);
  {
    absl::StatusOr<std::unique_ptr<DB>> reader = DB::Open(ReaderOptions(), path);
    ASSERT_THAT(reader, IsOk());
    ExpectEveryKey(**reader);
    absl::StatusOr<CheckReport> report = (*reader)->Check();
    ASSERT_THAT(report, IsOk());
    ASSERT_FALSE(report->ok());
    EXPECT_NE(report->problems.front().find("superblock copy 1"), std::string::npos)
        << report->problems.front();
  }
  EXPECT_TRUE(FileBytes(path) == damaged) << "a reader repaired the superblock";
  {
    absl::StatusOr<std::unique_ptr<DB>> writer = DB::Open(WriterOptions(), path);
    ASSERT_THAT(writer, IsOk());
    absl::StatusOr<CheckReport> report = (*writer)->Check();
    ASSERT_THAT(report, IsOk());
    EXPECT_TRUE(report->ok()) << report->problems.front();
  }
}

// A store file the user may only read (mode 0444, and the process not root): a reader opens it;
// a writer is told it needs write access. Run as root, the open happens in a child that has
// become nobody (root ignores file modes).
TEST(ReadOnlyOpenTest, AReaderOpensAFileItMayOnlyRead) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  WriteKeys(path, IndexMode::kHash);
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  auto try_both = [&path]() -> int {
    Options writer_options = WriterOptions();
    writer_options.create_if_missing = false;
    if (DB::Open(writer_options, path).status().code() != absl::StatusCode::kPermissionDenied) {
      return 30;
    }
    absl::StatusOr<std::unique_ptr<DB>> reader = DB::Open(ReaderOptions(), path);
    if (!reader.ok()) return 31;
    absl::StatusOr<std::string> got = (*reader)->Get(Key(11));
    if (!got.ok() || *got != Value(11)) return 32;
    if (!(*reader)->Close().ok()) return 33;
    return 0;
  };
  if (geteuid() != 0) {
    EXPECT_EQ(try_both(), 0);
    return;
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    constexpr uid_t kNobody = 65534;
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) std::_Exit(40);
    std::_Exit(try_both());
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status)) << wait_status;
  EXPECT_EQ(WEXITSTATUS(wait_status), 0)
      << "30: the writer was not refused; 31-33: the reader failed; 40: no setuid";
}

}  // namespace
}  // namespace nvkv
