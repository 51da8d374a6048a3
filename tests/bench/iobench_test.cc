// nvkv-iobench run as a subprocess on a small file in a fresh directory: its JSON summary (read
// by bench/compare_fio.sh) and its option checks. Short runs only (--number-ios).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testutil/json_check.h"
#include "tests/testutil/temp_dir.h"

#ifndef NVKV_IOBENCH_PATH
#error "NVKV_IOBENCH_PATH must name the nvkv-iobench binary"
#endif

extern char** environ;

namespace nvkv {
namespace {

using ::nvkv::testing::JsonValue;

struct IobenchRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

class IobenchTest : public ::testing::Test {
 protected:
  // Runs nvkv-iobench with `args` in the test's directory; output goes through files.
  IobenchRun Iobench(const std::vector<std::string>& args) {
    const std::string out_path = dir_.File(".stdout"), err_path = dir_.File(".stderr");
    std::vector<std::string> argv_strings = {NVKV_IOBENCH_PATH};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addchdir_np(&actions, dir_.path().c_str());
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    IobenchRun run;
    if (spawned != 0) {
      ADD_FAILURE() << "posix_spawn: " << strerror(spawned);
      return run;
    }
    // A run that hangs is killed and fails the test instead of stopping the suite.
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        ADD_FAILURE() << absl::StrJoin(args, " ") << ": still running after 60 s; killed";
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_TRUE(WIFEXITED(status)) << "killed by a signal: " << status;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = ReadFile(out_path);
    run.err = ReadFile(err_path);
    return run;
  }

  testing::TempDir dir_;
};

// The file name holds bytes that are not UTF-8: the summary is still valid UTF-8 and parses,
// in the layout bench/README.md shows (seven lines) and with every field the docs name.
TEST_F(IobenchTest, JsonSummaryIsValidUtf8WithEveryField) {
  const IobenchRun run = Iobench({"--filename=io\xff\xc0.dat", "--size=1m", "--rw=read", "--bs=4k",
                           "--number-ios=64", "--output-format=json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_TRUE(testing::IsValidUtf8(run.out)) << run.out;
  absl::StatusOr<JsonValue> json = testing::ParseJson(run.out);
  ASSERT_TRUE(json.ok()) << json.status() << " in " << run.out;
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 7) << run.out;
  EXPECT_NE(run.out.find("\"iops\": "), std::string::npos) << run.out;  // compare_fio.sh

  const auto field = [&json](const char* name) -> const JsonValue& {
    static const JsonValue kMissing;
    const JsonValue* value = json->Find(name);
    EXPECT_NE(value, nullptr) << name;
    return value != nullptr ? *value : kMissing;
  };
  EXPECT_EQ(field("tool").text, "nvkv-iobench");
  EXPECT_EQ(field("filename").text, "io\xef\xbf\xbd\xef\xbf\xbd.dat");
  EXPECT_EQ(field("rw").text, "read");
  EXPECT_EQ(field("bs").text, "4096");
  EXPECT_EQ(field("iodepth").text, "1");
  EXPECT_EQ(field("ios").text, "64");
  EXPECT_EQ(field("errors").text, "0");
  for (const char* name : {"backend", "submit_batch", "reap_batch", "lba_bytes", "iops",
                           "bw_bytes", "runtime_s", "ios_per_syscall", "enter_syscalls",
                           "reap_calls"}) {
    field(name);
  }
  std::vector<std::string> latency;
  for (const auto& [name, value] : field("lat_ns").members) latency.push_back(name);
  EXPECT_EQ(latency, (std::vector<std::string>{"mean", "p50", "p90", "p99", "p99_9", "max"}));
  EXPECT_EQ(field("cpu").members.size(), 3u);
  EXPECT_EQ(field("ring").members.size(), 10u);
  ASSERT_EQ(field("notes").type, JsonValue::Type::kArray);
  ASSERT_FALSE(field("notes").items.empty());
  EXPECT_EQ(field("notes").items[0].text.rfind("file created", 0), 0u);
}

// Sizes follow util/size_parse.h: units in any case, "kb" and "kib" too; a bad one exits 2 with
// one line naming the option.
TEST_F(IobenchTest, SizesTakeBinaryUnitsAndBadOnesExitTwo) {
  const IobenchRun good = Iobench({"--filename=io.dat", "--size=1MB", "--rw=write", "--bs=4KiB",
                                   "--number-ios=8", "--output-format=json"});
  ASSERT_EQ(good.exit_code, 0) << good.err;
  absl::StatusOr<JsonValue> json = testing::ParseJson(good.out);
  ASSERT_TRUE(json.ok()) << json.status() << " in " << good.out;
  ASSERT_NE(json->Find("bs"), nullptr);
  EXPECT_EQ(json->Find("bs")->text, "4096");
  struct {
    const char* option;
    const char* message;
  } const bad[] = {
      {"--size=0", "nvkv-iobench: --size=0: '0' is not a size: it must be at least one byte\n"},
      {"--size=1.5g",
       "nvkv-iobench: --size=1.5g: '1.5g' is not a size (examples: 4096, 64k, 64m, 1g)\n"},
      {"--size=16777216t", "nvkv-iobench: --size=16777216t: '16777216t' is too large: a size "
                           "must be below 16 EiB (2^64 bytes)\n"},
      {"--bs=4ki", "nvkv-iobench: --bs=4ki: '4ki' is not a size (examples: 4096, 64k, 64m, 1g)\n"},
      {"--bs=1000", "nvkv-iobench: --bs=1000: expected a multiple of 512 bytes up to 508k\n"},
  };
  for (const auto& [option, message] : bad) {
    const IobenchRun run = Iobench({"--filename=io.dat", option, "--number-ios=8"});
    EXPECT_EQ(run.exit_code, 2) << option;
    EXPECT_EQ(run.err, message) << option;
    EXPECT_EQ(run.out, "") << option;
  }
}

}  // namespace
}  // namespace nvkv
