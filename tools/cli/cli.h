// What the commands of nvkv-cli share: exit codes, the outcome a command ends with, and the
// context it runs in (parsed command line, environment). tools/nvkv_cli.cc parses the command
// line and dispatches; tools/cli/*_commands.cc hold the commands. Everything here uses only the
// public API (nvkv/*.h).
#ifndef NVKV_TOOLS_CLI_CLI_H_
#define NVKV_TOOLS_CLI_CLI_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nvkv/db.h"
#include "tools/cli/codec.h"

namespace nvkv::cli {

// Exit codes (documented in `nvkv-cli --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitNotFound = 1,  // get, del: the key is not in the store
  kExitUsage = 2,     // bad command line, or a key or value the store refuses
  kExitFailure = 3,   // anything else that failed
  kExitDamage = 4,    // check found problems
};

// How a command ends: its exit code and, unless it succeeded, one line for stderr.
struct Outcome {
  int exit_code = kExitOk;
  std::string message;
};

inline Outcome Ok() { return Outcome{}; }
Outcome Usage(std::string message);
Outcome NotFound(std::string message);
Outcome Failure(std::string message);
// The status's message on one line; kInvalidArgument (a key or value the store refuses) is a
// usage error, anything else a failure.
Outcome FromStatus(const absl::Status& status);

// The command line and environment a command runs with.
struct Context {
  std::string command;
  std::vector<std::string> args;               // operands after the command
  std::map<std::string, std::string> options;  // the command's own options: "--limit" -> "10"
  std::string db_path;
  IndexMode index_mode = IndexMode::kAsFormatted;  // --ordered, --hash, else the store's
  FieldEncodings encodings;  // --hex (both), --key-hex, --value-hex; else escaped
  Backend backend = Backend::kAuto;
  bool degraded = false;  // --degraded: Options::open_degraded
  uint32_t shard_count = 0;  // --shards: Options::shard_count; 0: its default

  bool Has(const std::string& option) const { return options.count(option) != 0; }
  const std::string& Get(const std::string& option) const { return options.at(option); }

  // What a command does with the store it opens.
  enum class Use {
    kRead,     // read-only (Options::read_only): a shared lock, so readers run side by side
    kWrite,    // background compaction on: writes may need the space it frees
    kCompact,  // CompactAll, on this thread alone (see RunCompact)
  };
  // The options a command of `use` opens the store with (the index mode, backend, and no
  // store created), and the store opened with them. A missing store is an error that says how
  // to create one (only `format` creates).
  Options OptionsFor(Use use) const;
  absl::StatusOr<std::unique_ptr<DB>> Open(Use use) const { return Open(OptionsFor(use)); }
  absl::StatusOr<std::unique_ptr<DB>> Open(const Options& options) const;
  // A key, or a value, given on the command line: as it is, or decoded from hex (encodings).
  absl::StatusOr<std::string> DecodeKey(std::string_view text) const {
    return DecodeArgument(text, encodings.key);
  }
  absl::StatusOr<std::string> DecodeValue(std::string_view text) const {
    return DecodeArgument(text, encodings.value);
  }

 private:
  static absl::StatusOr<std::string> DecodeArgument(std::string_view text, Encoding encoding);
};

// Writes to stdout; false when stdout failed (see StdoutOutcome).
bool WriteOut(std::string_view bytes);
// Flushes stdout: Ok, or a failure naming the error.
Outcome FinishStdout();

// One line: newlines and other control characters of `text` become spaces.
std::string OneLine(absl::string_view text);

// The commands.
Outcome RunFormat(const Context& context);
Outcome RunPut(const Context& context);
Outcome RunGet(const Context& context);
Outcome RunDel(const Context& context);
Outcome RunScan(const Context& context);
Outcome RunLoad(const Context& context);
Outcome RunDump(const Context& context);
Outcome RunStats(const Context& context);
Outcome RunCheck(const Context& context);
Outcome RunCompact(const Context& context);
Outcome RunInfo(const Context& context);
Outcome RunResize(const Context& context);

}  // namespace nvkv::cli

#endif  // NVKV_TOOLS_CLI_CLI_H_
