// nvkv-iobench run as a subprocess on a small file in a fresh directory: its JSON summary (read
// by bench/compare_fio.sh) and its option checks. Short runs only (--number-ios).

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tests/testutil/json_check.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/temp_dir.h"

#ifndef NVKV_IOBENCH_PATH
#error "NVKV_IOBENCH_PATH must name the nvkv-iobench binary"
#endif

namespace nvkv {
namespace {

using ::nvkv::testing::JsonValue;

using IobenchRun = testing::ProcessRun;

class IobenchTest : public ::testing::Test {
 protected:
  // Runs nvkv-iobench with `args` in the test's directory; output goes through files.
  IobenchRun Iobench(const std::vector<std::string>& args) {
    testing::ProcessOptions options;
    options.dir = dir_.path();
    std::vector<std::string> argv = {NVKV_IOBENCH_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv, options);
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

// Zone Append needs a zoned namespace: on a file it is refused by name before any I/O (the
// zoned runs themselves are in tests/nvme-vm's zns configuration: bench/compare_zoned.sh).
TEST_F(IobenchTest, ZoneAppendOnAFileSaysItNeedsAZonedNamespace) {
  const IobenchRun run = Iobench({"--filename=io.dat", "--size=1MB", "--rw=zoneappend",
                                  "--number-ios=8"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--rw=zoneappend needs a zoned namespace's generic device"),
            std::string::npos)
      << run.err;
  const IobenchRun zero = Iobench({"--filename=io.dat", "--rw=zoneappend", "--zones=0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--zones=0"), std::string::npos) << zero.err;
}

}  // namespace
}  // namespace nvkv
