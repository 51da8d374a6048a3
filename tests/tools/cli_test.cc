// nvkv-cli, run as a subprocess exactly as a user runs it: each test has a fresh directory, the
// tool's working directory, with small stores in it (format --capacity 64m).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/temp_dir.h"

#ifndef NVKV_CLI_PATH
#error "NVKV_CLI_PATH must name the nvkv-cli binary"
#endif

extern char** environ;

namespace nvkv {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

using CliResult = testing::ProcessRun;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Escaped dump fields, decoded independently of the tool's own code (tools/cli/codec.cc).
std::string Unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    const char e = text[++i];
    if (e == 'x') {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += e == 't' ? '\t' : e == 'n' ? '\n' : e == 'r' ? '\r' : e;
    }
  }
  return out;
}

std::string Hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

// key -> value from dump output (escaped, with its header line).
std::map<std::string, std::string> ParseDump(const std::string& text) {
  std::map<std::string, std::string> pairs;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    const size_t tab = line.find('\t');
    EXPECT_NE(tab, absl::string_view::npos) << line;
    EXPECT_EQ(line.find('\t', tab + 1), absl::string_view::npos) << line;
    const std::string key = Unescape(std::string(line.substr(0, tab)));
    EXPECT_EQ(pairs.count(key), 0u) << "twice: " << line;
    pairs[key] = Unescape(std::string(line.substr(tab + 1)));
  }
  return pairs;
}

class CliTest : public ::testing::Test {
 protected:
  // How long one run of the tool may take (the slowest here take a few seconds under ASan).
  static constexpr absl::Duration kRunLimit = absl::Seconds(60);

  // Runs nvkv-cli with `args` in the test's directory, `input` on stdin, and the environment
  // without NVKV_DB and NVKV_ORDERED plus `env`. Output goes through files, so nothing blocks.
  CliResult Cli(const std::vector<std::string>& args, const std::string& input = "",
          const std::vector<std::string>& env = {}) {
    testing::ProcessOptions options;
    options.dir = dir_.path();
    options.input = input;
    options.stderr_fd = stderr_fd_;
    options.limit = kRunLimit;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry = *e;
      if (entry.starts_with("NVKV_DB=") || entry.starts_with("NVKV_ORDERED=")) continue;
      options.env.emplace_back(entry);
    }
    options.env.insert(options.env.end(), env.begin(), env.end());
    std::vector<std::string> argv = {NVKV_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProcess(argv, options);
  }

  // Runs with --db at the test's store; expects success.
  CliResult Ok(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {"--db", db_});
    CliResult run = Cli(args, input);
    EXPECT_EQ(run.exit_code, 0) << absl::StrJoin(args, " ") << "\nstderr: " << run.err;
    EXPECT_THAT(run.err, IsEmpty());
    return run;
  }

  CliResult Db(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {"--db", db_});
    return Cli(args, input);
  }

  void Format() { Ok({"format", "--capacity", "64m"}); }

  // An error: `code`, one line on stderr naming the tool, nothing on stdout.
  static void ExpectError(const CliResult& run, int code, const std::string& part) {
    EXPECT_EQ(run.exit_code, code) << run.err;
    EXPECT_THAT(run.err, StartsWith("nvkv-cli: "));
    EXPECT_THAT(run.err, EndsWith("\n"));
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr(part));
  }

  testing::TempDir dir_;
  std::string db_ = dir_.File("store.db");
  int stderr_fd_ = -1;  // when set, the child's stderr (a terminal in the progress test)
};

// ----- Help and usage -----

TEST_F(CliTest, HelpDescribesCommandsDumpFormatAndExitCodes) {
  const CliResult run = Cli({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.err, IsEmpty());
  EXPECT_THAT(run.out, StartsWith("Usage: nvkv-cli [OPTIONS] COMMAND"));
  for (const char* command : {"format", "put", "get", "del", "scan", "load", "dump", "stats",
                              "check", "compact", "info", "resize"}) {
    EXPECT_THAT(run.out, HasSubstr(absl::StrCat("\n  ", command, " "))) << command;
  }
  EXPECT_THAT(run.out, HasSubstr("# nvkv-cli dump v1 encoding=escaped"));
  EXPECT_THAT(run.out, HasSubstr("Exit status: 0 success; 1 key not found"));
  EXPECT_EQ(Cli({"help"}).out, run.out);
}

TEST_F(CliTest, EveryCommandHasHelp) {
  for (const char* command : {"format", "put", "get", "del", "scan", "load", "dump", "stats",
                              "check", "compact", "info", "resize"}) {
    const CliResult run = Cli({command, "--help"});
    EXPECT_EQ(run.exit_code, 0) << command;
    EXPECT_THAT(run.out, StartsWith(absl::StrCat("Usage: nvkv-cli [OPTIONS] ", command)));
    EXPECT_EQ(Cli({"help", command}).out, run.out);
    EXPECT_EQ(Cli({"-h", command}).out, run.out);
  }
  EXPECT_THAT(Cli({"scan", "--help"}).out, HasSubstr("--limit N"));
}

TEST_F(CliTest, UsageErrorsExitTwoWithOneLineOnStderr) {
  ExpectError(Cli({}), 2, "no command given");
  ExpectError(Cli({"frobnicate"}), 2, "unknown command 'frobnicate'");
  ExpectError(Cli({"get"}), 2, "missing operand; usage: nvkv-cli get KEY");
  ExpectError(Cli({"get", "a", "b"}), 2, "too many operands");
  ExpectError(Cli({"--bogus", "get", "k"}), 2, "unknown option '--bogus'");
  ExpectError(Cli({"get", "--limit", "3", "k"}), 2, "unknown option '--limit'");
  ExpectError(Cli({"--limit", "3", "scan"}), 2, "a command's options go after it");
  ExpectError(Cli({"scan", "--ordered", "--limit"}), 2, "--limit needs a value");
  ExpectError(Cli({"get", "-k"}), 2, "goes after '--'");
  ExpectError(Cli({"--hex", "get", "zz"}), 2, "KEY: not hex");
  ExpectError(Cli({"--hex", "get", "abc"}), 2, "odd number of hex digits");
  ExpectError(Cli({"put", "", "v"}), 2, "empty key");
  ExpectError(Cli({"--backend", "floppy", "get", "k"}), 2, "--backend");
  ExpectError(Cli({"format", "--capacity", "12q"}), 2, "is not a size");
  ExpectError(Cli({"--ordered=yes", "get", "k"}), 2, "--ordered takes no value");
  ExpectError(Cli({"help", "nothing"}), 2, "unknown command 'nothing'");
  for (const CliResult& run : {Cli({}), Cli({"get"})}) EXPECT_THAT(run.out, IsEmpty());
}

TEST_F(CliTest, VersionPrintsTheVersion) {
  const CliResult run = Cli({"--version"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, ContainsRegex("^nvkv-cli [0-9]+\\.[0-9]+\\.[0-9]+\n$"));
}

// ----- format -----

TEST_F(CliTest, FormatCreatesAStoreAndRefusesToOverwriteOneWithoutForce) {
  const CliResult formatted = Ok({"format", "--capacity", "64m", "--segment-bytes", "512k"});
  EXPECT_THAT(formatted.out, HasSubstr("64.0 MiB"));
  EXPECT_THAT(formatted.out, HasSubstr("512.0 KiB segments"));
  Ok({"put", "k", "v"});
  ExpectError(Db({"format", "--capacity", "64m"}), 3, "already holds an nvkv store; add --force");
  EXPECT_EQ(Ok({"get", "k"}).out, "v");  // untouched
  Ok({"format", "--force"});
  ExpectError(Db({"get", "k"}), 1, "key not found");
  EXPECT_THAT(Ok({"info"}).out, HasSubstr("64.0 MiB"));  // --force kept the file's size
}

// A format that fails (here: too small for a store) leaves no file behind.
TEST_F(CliTest, AFailedFormatLeavesNoFile) {
  ExpectError(Db({"format", "--capacity", "300k"}), 3, "too small");
  EXPECT_NE(access(db_.c_str(), F_OK), 0) << "the failed format left " << db_;
}

TEST_F(CliTest, FormatRefusesDataThatIsNotAStoreWithoutForce) {
  WriteFile(db_, std::string(64 << 20, 'x'));
  ExpectError(Db({"format"}), 3, "not an nvkv store");
  EXPECT_EQ(ReadFile(db_).substr(0, 4), "xxxx");
  Ok({"format", "--force", "--capacity", "32m"});
  EXPECT_THAT(Ok({"info"}).out, HasSubstr("32.0 MiB"));
}

// --force overrides only what stands in a format's way on the device (a store, foreign data):
// a store in use is not suggested it.
TEST_F(CliTest, FormatOfAStoreInUseSaysSoAndDoesNotSuggestForce) {
  Format();
  const int holder = open(db_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(flock(holder, LOCK_EX), 0);  // another opener, as far as nvkv can tell
  const CliResult refused = Db({"format"});
  close(holder);
  ExpectError(refused, 3, "in use by another opener");
  EXPECT_THAT(refused.err, Not(HasSubstr("--force")));
}

// The commands that only read (get, scan, dump, check, stats, info) open the store read-only:
// they run while another reader has it (a shared lock, here held as a reader holds it), write
// no byte of it, and leave it to a writer only when no reader has it.
TEST_F(CliTest, ReadCommandsShareTheStoreAndWriteNothing) {
  Ok({"format", "--capacity", "64m", "--ordered"});
  Ok({"load", "-"}, "a\t1\nb\t2\nc\t3\n");
  const std::string before = ReadFile(db_);
  const int reader = open(db_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  ASSERT_EQ(flock(reader, LOCK_SH), 0);  // another reader, as far as nvkv can tell
  EXPECT_EQ(Ok({"get", "b"}).out, "2");
  EXPECT_EQ(Ok({"scan", "--from", "a", "--to", "c"}).out, "a\t1\nb\t2\n");
  EXPECT_THAT(Ok({"dump"}).out, HasSubstr("c\t3\n"));
  EXPECT_THAT(Ok({"check"}).out, HasSubstr("no problems"));
  EXPECT_THAT(Ok({"stats"}).out, ContainsRegex("live keys +3\n"));
  EXPECT_THAT(Ok({"info"}).out, HasSubstr("index     ordered"));
  ExpectError(Db({"put", "d", "4"}), 3, "in use by another opener");
  ExpectError(Db({"del", "a"}), 3, "in use by another opener");
  ExpectError(Db({"compact"}), 3, "in use by another opener");
  close(reader);
  EXPECT_TRUE(ReadFile(db_) == before) << "a read command wrote to the store";
  Ok({"put", "d", "4"});
  EXPECT_EQ(Ok({"get", "d"}).out, "4");
}

// resize grows a store file to --capacity (never shrinks it), keeping every key, and takes a
// file extended by other means; the new room is the store's from then on.
TEST_F(CliTest, ResizeGrowsAStoreFileAndKeepsItsData) {
  Ok({"format", "--capacity", "16m"});
  Ok({"load", "-"}, "a\t1\nb\t2\n");
  EXPECT_THAT(Ok({"resize"}).out, HasSubstr("unchanged"));
  ExpectError(Db({"resize", "--capacity", "8m"}), 2, "a store never shrinks");
  EXPECT_THAT(Ok({"resize", "--capacity", "64m"}).out,
              ContainsRegex("resized .*: 15.8 MiB -> 63.8 MiB for the log \\(63 -> 255 "
                            "segments\\), every key kept\n"));
  EXPECT_EQ(Ok({"get", "b"}).out, "2");
  EXPECT_THAT(Ok({"info"}).out, HasSubstr("255 segments"));
  ASSERT_EQ(truncate(db_.c_str(), 128 << 20), 0);
  EXPECT_THAT(Ok({"resize"}).out, HasSubstr("(255 -> 511 segments)"));
  EXPECT_THAT(Ok({"check"}).out, HasSubstr("no problems"));
  EXPECT_EQ(Ok({"get", "a"}).out, "1");
}

// Only format creates a store: a data command given a path without one (a typo, say) says how
// to make one, and leaves nothing there (put and load used to create a 1 GiB file).
TEST_F(CliTest, EveryCommandButFormatNeedsAStore) {
  const std::string hint = absl::StrCat("no store at ", db_, "; create one with 'nvkv-cli --db ",
                                        db_, " format'");
  ExpectError(Db({"put", "k", "v"}), 3, hint);
  ExpectError(Db({"load", "-"}, "k\tv\n"), 3, hint);
  ExpectError(Db({"get", "k"}), 3, hint);
  ExpectError(Db({"del", "k"}), 3, hint);
  ExpectError(Db({"check"}), 3, hint);
  EXPECT_NE(access(db_.c_str(), F_OK), 0);  // nothing was created
  Format();
  Ok({"put", "k", "v"});
  EXPECT_EQ(Ok({"get", "k"}).out, "v");
}

// ----- put, get, del -----

// Errors speak the tool's words: a backend named as --backend takes it, not as the library's enum.
TEST_F(CliTest, PassthroughOnAFileSaysWhichBackendAFileTakes) {
  Format();
  const CliResult run = Db({"--backend", "nvme", "info"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("not an NVMe generic character device"));
  EXPECT_THAT(run.err, HasSubstr("the direct backend"));
  EXPECT_THAT(run.err, Not(HasSubstr("Backend::")));
}

TEST_F(CliTest, PutGetDelAndTheirExitCodes) {
  Format();
  EXPECT_THAT(Ok({"put", "greeting", "hello world"}).out, IsEmpty());
  EXPECT_EQ(Ok({"get", "greeting"}).out, "hello world");
  Ok({"put", "greeting", ""});
  EXPECT_EQ(Ok({"get", "greeting"}).out, "");
  Ok({"del", "greeting"});
  const CliResult missing = Db({"get", "greeting"});
  ExpectError(missing, 1, "");
  EXPECT_EQ(missing.err, "nvkv-cli: get: key not found: greeting\n");
  Ok({"del", "greeting"});  // absent: still success (as ldb), nothing to say
  Ok({"put", "--", "-dash", "v"});
  EXPECT_EQ(Ok({"get", "--", "-dash"}).out, "v");
}

// --degraded (Options::open_degraded) changes nothing on a store whose pages all read: what a
// page that fails to read does to an Open is unread_pages_test.cc's (a file gives no such page).
TEST_F(CliTest, DegradedOpensASoundStoreLikeAPlainOpen) {
  Format();
  Ok({"put", "k", "v"});
  EXPECT_EQ(Ok({"--degraded", "get", "k"}).out, "v");
  Ok({"--degraded", "check"});
  EXPECT_THAT(Ok({"--degraded", "dump"}).out, HasSubstr("k"));
}

TEST_F(CliTest, PutReadsTheValueFromStdin) {
  Format();
  std::string value;
  for (int i = 0; i < 256; ++i) value += static_cast<char>(i);
  value += "\n\nend";
  Ok({"put", "k", "-"}, value);
  EXPECT_EQ(Ok({"get", "k"}).out, value);
}

TEST_F(CliTest, HexKeysAndValuesGoInAndComeOutAsHex) {
  Format();
  Ok({"--hex", "put", "00ff0a", "DEADbeef"});
  EXPECT_EQ(Ok({"--hex", "get", "00ff0a"}).out, "deadbeef\n");
  EXPECT_EQ(Ok({"get", "--hex", "00ff0a"}).out, "deadbeef\n");  // options go anywhere
  Ok({"--hex", "put", "01", "-"}, "00 11\n22\t33\n");
  EXPECT_EQ(Ok({"get", "\x01"}).out, std::string("\x00\x11\x22\x33", 4));
  Ok({"--hex", "put", "02", ""});
  EXPECT_EQ(Ok({"--hex", "get", "02"}).out, "\n");
}

// --key-hex and --value-hex: one field in hex, the other as it is; scan and dump write each
// field in its own encoding, and dump's header names both, so that load reads them back
// whatever load's own flags.
TEST_F(CliTest, KeyHexAndValueHexEncodeOneFieldEach) {
  Ok({"format", "--capacity", "64m", "--ordered"});
  Ok({"--key-hex", "put", "00ff", "plain value"});
  Ok({"--value-hex", "put", "plain key", "00ff"});
  EXPECT_EQ(Ok({"--key-hex", "get", "00ff"}).out, "plain value");
  EXPECT_EQ(Ok({"--value-hex", "get", "plain key"}).out, "00ff\n");
  EXPECT_EQ(Ok({"get", "plain key"}).out, std::string("\x00\xff", 2));
  EXPECT_EQ(Ok({"--key-hex", "get", "--json", "00ff"}).out,
            "{\"key_hex\":\"00ff\",\"value\":\"plain value\"}\n");
  Ok({"--value-hex", "put", "stdin key", "-"}, "61 62\n63\n");
  EXPECT_EQ(Ok({"get", "stdin key"}).out, "abc");
  EXPECT_EQ(Ok({"--key-hex", "scan", "--to", "01"}).out, "00ff\tplain value\n");
  EXPECT_EQ(Ok({"--key-hex", "scan", "--keys-only"}).out,
            "00ff\n706c61696e206b6579\n737464696e206b6579\n");
  const std::string dump = Ok({"--key-hex", "dump"}).out;
  EXPECT_EQ(dump,
            "# nvkv-cli dump v1 encoding=hex,escaped\n"
            "00ff\tplain value\n"
            "706c61696e206b6579\t\\x00\\xff\n"
            "737464696e206b6579\tabc\n");
  EXPECT_EQ(Ok({"--value-hex", "dump"}).out,
            "# nvkv-cli dump v1 encoding=escaped,hex\n"
            "\\x00\\xff\t706c61696e2076616c7565\n"
            "plain key\t00ff\n"
            "stdin key\t616263\n");
  // Loaded into another store with no flag: the header decides.
  const std::string copy = dir_.File("copy.db");
  ASSERT_EQ(Cli({"--db", copy, "format", "--capacity", "64m"}).exit_code, 0);
  const CliResult loaded = Cli({"--db", copy, "load", "-"}, dump);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_EQ(Cli({"--db", copy, "--value-hex", "get", "plain key"}).out, "00ff\n");
  EXPECT_EQ(Cli({"--db", copy, "--key-hex", "get", "00ff"}).out, "plain value");
  ExpectError(Cli({"--db", copy, "load", "-"}, "# nvkv-cli dump v1 encoding=hex,base64\n"), 3,
              "unknown encoding 'hex,base64'");
}

TEST_F(CliTest, StorePathComesFromDbThenNvkvDbThenTheDefault) {
  ASSERT_EQ(Cli({"format", "--capacity", "64m"}).exit_code, 0);  // ./nvkv.db
  EXPECT_EQ(access(dir_.File("nvkv.db").c_str(), F_OK), 0);
  ASSERT_EQ(Cli({"put", "where", "default"}).exit_code, 0);
  const std::string env = absl::StrCat("NVKV_DB=", db_);
  ASSERT_EQ(Cli({"format", "--capacity", "64m"}, "", {env}).exit_code, 0);
  ASSERT_EQ(Cli({"put", "where", "env"}, "", {env}).exit_code, 0);
  EXPECT_EQ(Cli({"get", "where"}, "", {env}).out, "env");
  EXPECT_EQ(Cli({"get", "where"}).out, "default");
  EXPECT_EQ(Cli({"--db", "nvkv.db", "get", "where"}, "", {env}).out, "default");
}

// ----- scan -----

TEST_F(CliTest, ScanNeedsTheOrderedIndexAndPrintsARange) {
  Format();
  for (const char* key : {"d", "a", "c", "b", "e"}) Ok({"put", key, absl::StrCat("v", key)});
  // A hash store opens with the hash index unless asked for the ordered one.
  ExpectError(Db({"scan"}), 2, "was formatted with the hash index; add --ordered");
  EXPECT_EQ(Ok({"--ordered", "scan"}).out, "a\tva\nb\tvb\nc\tvc\nd\tvd\ne\tve\n");
  EXPECT_EQ(Ok({"--ordered", "scan", "--from", "b", "--to", "d"}).out, "b\tvb\nc\tvc\n");
  EXPECT_EQ(Ok({"--ordered", "scan", "--from=b", "--limit=1"}).out, "b\tvb\n");
  EXPECT_EQ(Ok({"--ordered", "scan", "--keys-only", "--to", "c"}).out, "a\nb\n");
  EXPECT_EQ(Ok({"--ordered", "--hex", "scan", "--from", "65"}).out, "65\t7665\n");
  EXPECT_EQ(Cli({"--db", db_, "scan", "--limit", "1"}, "", {"NVKV_ORDERED=1"}).out, "a\tva\n");
}

// The index mode a store was formatted with is recorded: every later command opens with it, and
// --hash or --ordered asks for the other one for that command only.
TEST_F(CliTest, AStoreFormattedOrderedOpensOrderedWithoutAFlag) {
  Ok({"--ordered", "format", "--capacity", "64m"});
  for (const char* key : {"d", "a", "c", "b"}) Ok({"put", key, absl::StrCat("v", key)});
  EXPECT_EQ(Ok({"scan"}).out, "a\tva\nb\tvb\nc\tvc\nd\tvd\n");
  EXPECT_THAT(Ok({"info"}).out, HasSubstr("index     ordered"));
  // Its dump is in key order, as an ordered store's is.
  EXPECT_EQ(Ok({"dump"}).out, "# nvkv-cli dump v1 encoding=escaped\na\tva\nb\tvb\nc\tvc\nd\tvd\n");
  EXPECT_THAT(Ok({"--hash", "info"}).out, HasSubstr("index     hash"));
  ExpectError(Db({"--hash", "scan"}), 2, "--hash asks for the other one");
  ExpectError(Db({"--hash", "--ordered", "get", "a"}), 2, "give one");
  EXPECT_EQ(Ok({"--hash", "get", "b"}).out, "vb");
  // The recorded mode stays what format said, whatever mode a command asked for.
  EXPECT_EQ(Ok({"scan", "--keys-only"}).out, "a\nb\nc\nd\n");
}

// ----- dump and load -----

TEST_F(CliTest, DumpThenLoadRoundTripsAnyBytes) {
  std::map<std::string, std::string> pairs;
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += static_cast<char>(i);
  pairs[all_bytes] = all_bytes + all_bytes;
  pairs["tab\there"] = "new\nline";
  pairs["back\\slash"] = "\\x41 is not an escape";
  pairs["#hash-first"] = "#";
  pairs["empty-value"] = "";
  pairs["crlf"] = "ends with\r\n";
  pairs[std::string(1024, 'K')] = "the longest key";
  std::string large(120000, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131 + 7);
  pairs["large"] = large;
  for (int i = 0; i < 500; ++i) pairs[absl::StrFormat("key%04d", i)] = absl::StrCat("value", i);

  // Into store A from a hex dump written here, then A's dump into a fresh store B.
  std::string hex_dump = "# nvkv-cli dump v1 encoding=hex\n";
  for (const auto& [key, value] : pairs) {
    absl::StrAppend(&hex_dump, Hex(key), "\t", Hex(value), "\n");
  }
  WriteFile(dir_.File("input.hex"), hex_dump);
  Format();
  Ok({"load", "input.hex"});
  const CliResult dump_a = Ok({"dump"});
  EXPECT_THAT(dump_a.out, StartsWith("# nvkv-cli dump v1 encoding=escaped\n"));
  EXPECT_EQ(ParseDump(dump_a.out), pairs);

  db_ = dir_.File("copy.db");
  Format();
  Ok({"load", "-"}, dump_a.out);
  EXPECT_EQ(ParseDump(Ok({"dump"}).out), pairs);
  EXPECT_EQ(Ok({"get", "tab\there"}).out, "new\nline");
  // In key order with --ordered: the same text for the same pairs.
  const CliResult ordered = Ok({"--ordered", "dump"});
  EXPECT_EQ(ParseDump(ordered.out), pairs);
  std::vector<std::string> lines = absl::StrSplit(ordered.out, '\n', absl::SkipEmpty());
  EXPECT_TRUE(std::is_sorted(lines.begin() + 1, lines.end(), [](const auto& a, const auto& b) {
    return Unescape(a.substr(0, a.find('\t'))) < Unescape(b.substr(0, b.find('\t')));
  }));
  // A hex dump loads too, header or --hex deciding.
  const CliResult hex = Ok({"--hex", "dump"});
  EXPECT_THAT(hex.out, StartsWith("# nvkv-cli dump v1 encoding=hex\n"));
  db_ = dir_.File("third.db");
  Format();
  Ok({"--hex", "load", "-"}, hex.out.substr(hex.out.find('\n') + 1));
  EXPECT_EQ(ParseDump(Ok({"dump"}).out), pairs);
}

TEST_F(CliTest, LoadStopsAtTheFirstBadLineAndKeepsTheLinesBefore) {
  Format();
  ExpectError(Db({"load", "-"}, "k1\tv1\n\n# a comment\nno tab here\nk2\tv2\n"), 3,
              "load: line 4: expected KEY<TAB>VALUE (one tab)");
  EXPECT_EQ(Ok({"get", "k1"}).out, "v1");
  ExpectError(Db({"get", "k2"}), 1, "not found");
  ExpectError(Db({"load", "-"}, "k\\q\tv\n"), 3, "line 1: key: unknown escape \\q");
  ExpectError(Db({"load", "-"}, "\tv\n"), 3, "line 1: empty key");
  ExpectError(Db({"load", "missing-file"}), 3, "missing-file: No such file or directory");
}

// load packs small pairs into batches of up to max_batch_bytes(). Three 1,000-byte values fill
// a page, so a batch at the old limit (~105 KB, ~101 pairs) needed 34 pages, more than a shard
// owns (32), and the load waited for them forever.
TEST_F(CliTest, LoadOfManyThousandByteValuesFinishes) {
  Format();
  std::string input;
  for (int i = 0; i < 20000; ++i) {
    absl::StrAppendFormat(&input, "key%06d\t%s\n", i, std::string(1000, 'a' + i % 26));
  }
  Ok({"load", "-"}, input);
  EXPECT_THAT(Ok({"stats"}).out, ContainsRegex("live keys +20000\n"));
  EXPECT_EQ(Ok({"get", "key019999"}).out, std::string(1000, 'a' + 19999 % 26));
}

TEST_F(CliTest, DumpOfAnEmptyStoreIsItsHeader) {
  Format();
  EXPECT_EQ(Ok({"dump"}).out, "# nvkv-cli dump v1 encoding=escaped\n");
}

// ----- check -----

TEST_F(CliTest, CheckNamesADamagedPageAndExitsFour) {
  Format();
  // One load: one session, so the pairs fill consecutive pages of one log, and the needle's
  // page has more of its log after it.
  std::string input;
  for (int i = 0; i < 3000; ++i) {
    absl::StrAppendFormat(&input, "key%05d\t%s\n", i,
                          i == 100 ? "needle-0f3e9a7c" : std::string(40, 'a' + i % 26));
  }
  Ok({"load", "-"}, input);
  const CliResult healthy = Ok({"check"});
  EXPECT_THAT(healthy.out, HasSubstr("3000 live keys read back and compared"));
  EXPECT_THAT(healthy.out, HasSubstr("result: no problems found"));

  const std::string bytes = ReadFile(db_);
  const size_t at = bytes.find("needle-0f3e9a7c");
  ASSERT_NE(at, std::string::npos);
  const uint64_t page = at / 4096;
  {
    std::fstream file(db_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(at));
    file.write("X", 1);
  }
  const CliResult damaged = Db({"check"});
  // The hole, and the index entries (restored by the clean-close checkpoint) of the records the
  // log reading drops with it.
  ExpectError(damaged, 4, absl::StrFormat("check: found 2 problems (listed on stdout); the first: "
                                          "segment %d page %d (page %d, LBA 0x",
                                          (page - 2) / 256, (page - 2) % 256, page));
  EXPECT_THAT(damaged.out,
              ContainsRegex(absl::StrFormat("problem: segment [0-9]+ page [0-9]+ \\(page %d, LBA "
                                            "0x[0-9a-f]+\\): checksum mismatch; a hole in the log",
                                            page)));
  EXPECT_THAT(damaged.out, HasSubstr("index entries point at pages without their record"));
  EXPECT_THAT(damaged.out, HasSubstr("result: DAMAGED, 2 problems"));
  // The same as one JSON object, and the same exit status.
  const CliResult json = Db({"check", "--json"});
  EXPECT_EQ(json.exit_code, 4) << json.err;
  EXPECT_THAT(json.err, HasSubstr("found 2 problems (in the JSON on stdout)"));
  EXPECT_THAT(json.out, AllOf(StartsWith("{\"store\":"), HasSubstr("\"ok\":false"),
                              HasSubstr("\"pages_in_holes\":1,"),
                              HasSubstr("\"problems\":[\"segment "), EndsWith("}\n")));
}

// check --json of a sound store: "ok" true, exit status 0.
TEST_F(CliTest, CheckJsonOfASoundStore) {
  Format();
  for (int i = 0; i < 5; ++i) Ok({"put", absl::StrCat("k", i), "v"});
  const CliResult json = Ok({"check", "--json"});
  EXPECT_THAT(json.out, AllOf(HasSubstr("\"ok\":true"), HasSubstr("\"live_keys_checked\":5,"),
                              HasSubstr("\"problems\":[]"), EndsWith("}\n")));
}

// get --json gives the key and the value as JSON strings when they are UTF-8 text, and in hex
// (key_hex, value_hex) when they are not, or with --hex: no byte is lost either way.
TEST_F(CliTest, GetJsonKeepsEveryByte) {
  Format();
  Ok({"put", "greeting", "h\u00e9llo \"world\"\n"});
  EXPECT_EQ(Ok({"get", "--json", "greeting"}).out,
            "{\"key\":\"greeting\",\"value\":\"h\u00e9llo \\\"world\\\"\\n\"}\n");
  Ok({"put", "bin", "-"}, std::string("\xff\x00" "a", 3));
  EXPECT_EQ(Ok({"get", "--json", "bin"}).out, "{\"key\":\"bin\",\"value_hex\":\"ff0061\"}\n");
  EXPECT_EQ(Ok({"--hex", "get", "--json", "62696e"}).out,
            "{\"key_hex\":\"62696e\",\"value_hex\":\"ff0061\"}\n");
  ExpectError(Db({"get", "--json", "absent"}), 1, "key not found");
}

// ----- stats, info, compact -----

TEST_F(CliTest, StatsInfoAndCompactDescribeTheStore) {
  Format();
  for (int i = 0; i < 3; ++i) Ok({"put", absl::StrCat("k", i), "v"});
  Ok({"put", "k0", "again"});
  // That overwrite (a new process: k0 not cached) was written blind. Its stale entry stays in the
  // index, which each Close checkpoints as it is, until compaction settles it.
  const CliResult stats = Ok({"stats"});
  EXPECT_THAT(stats.out, ContainsRegex("live keys +3 \\(and 1 stale index entries\\)\n"));
  EXPECT_THAT(stats.out, HasSubstr("recovery           from the clean-close checkpoint"));
  const CliResult json = Ok({"stats", "--json"});
  EXPECT_THAT(json.out, AllOf(StartsWith("{\"live_keys\":3,"), EndsWith("}\n")));
  const CliResult info = Ok({"info"});
  EXPECT_THAT(info.out, AllOf(HasSubstr("backend   direct-file"), HasSubstr("4096-byte pages"),
                              HasSubstr("hash (the store's unless --ordered or --hash"), HasSubstr("ring "),
                              HasSubstr("durable   ")));
  EXPECT_THAT(Ok({"--ordered", "info"}).out, HasSubstr("index     ordered"));
  EXPECT_THAT(Ok({"info", "--json"}).out,
              AllOf(StartsWith("{\"max_key_bytes\":1024,\"max_value_bytes\":"),
                    HasSubstr(",\"store\":{\"live_keys\":3,"), HasSubstr("\"index_mode\":\"hash\""),
                    EndsWith("}}\n")));
  const CliResult compact = Ok({"compact"});
  EXPECT_THAT(compact.out,
              ContainsRegex("compacted .*: [0-9.]+ [KMG]?i?B reclaimed \\([1-9][0-9]* segments "
                            "cleaned, [0-9]+ more free: [0-9]+ of [0-9]+ free now\\); .* of live "
                            "data kept\n"));
  EXPECT_EQ(Ok({"get", "k0"}).out, "again");
  EXPECT_THAT(Ok({"stats"}).out, ContainsRegex("live keys +3\n"));
}

// ----- progress -----

TEST_F(CliTest, ProgressBarsGoToATerminalOnly) {
  Format();
  Ok({"put", "k", "v"});
  for (const char* command : {"check", "dump", "compact"}) {
    EXPECT_THAT(Db({command}).err, IsEmpty()) << command;  // stderr is a file here
  }
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const int terminal = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  stderr_fd_ = terminal;
  const CliResult run = Db({"check"});
  stderr_fd_ = -1;
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("result: no problems found"));  // stdout is unaffected
  std::string drawn;
  char buffer[4096];
  fcntl(master, F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = read(master, buffer, sizeof(buffer))) > 0;) drawn.append(buffer, n);
  close(terminal);
  close(master);
  EXPECT_THAT(drawn, HasSubstr("check ["));
  EXPECT_THAT(drawn, HasSubstr("segments"));
  EXPECT_THAT(drawn, EndsWith("\r\033[K"));  // erased at the end
}

}  // namespace
}  // namespace nvkv
