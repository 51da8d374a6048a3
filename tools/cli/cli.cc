#include "tools/cli/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace nvkv::cli {

Outcome Usage(std::string message) { return Outcome{kExitUsage, std::move(message)}; }
Outcome NotFound(std::string message) { return Outcome{kExitNotFound, std::move(message)}; }
Outcome Failure(std::string message) { return Outcome{kExitFailure, std::move(message)}; }

Outcome FromStatus(const absl::Status& status) {
  if (status.ok()) return Ok();
  const std::string message = OneLine(status.message());
  return absl::IsInvalidArgument(status) ? Usage(message) : Failure(message);
}

std::string OneLine(absl::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return out;
}

Options Context::OptionsFor(Use use) const {
  // Only `format` creates a store (it opens with options of its own): a data command given a
  // wrong path says so instead of making a 1 GiB file there.
  Options options;
  options.create_if_missing = false;
  options.read_only = use == Use::kRead;
  options.background_compaction = use == Use::kWrite;
  options.index_mode = index_mode;
  options.backend = backend;
  options.open_degraded = degraded;
  if (shard_count != 0) options.shard_count = shard_count;
  return options;
}

absl::StatusOr<std::unique_ptr<DB>> Context::Open(const Options& options) const {
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, db_path);
  if (absl::IsNotFound(db.status())) {
    return absl::NotFoundError(absl::StrCat("no store at ", db_path, "; create one with 'nvkv-cli --db ",
                                            db_path, " format'"));
  }
  return db;
}

absl::StatusOr<std::string> Context::DecodeArgument(std::string_view text, Encoding encoding) {
  if (encoding == Encoding::kHex) return FromHex(text);
  return std::string(text);
}

bool WriteOut(std::string_view bytes) {
  return bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size();
}

Outcome FinishStdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    return Failure(absl::StrCat("writing to stdout failed: ", std::strerror(errno)));
  }
  return Ok();
}

}  // namespace nvkv::cli
