// The text format of `nvkv-cli dump` and `nvkv-cli load` (and the pair lines of `scan`):
//
//   # nvkv-cli dump v1 encoding=escaped      the header line dump writes first: =escaped or
//                                           =hex for both fields, or =KEY,VALUE for each
//                                           (=hex,escaped: hex keys, escaped values)
//   KEY<TAB>VALUE                           one pair per line, in the encodings (codec.h)
//
// Reading: a trailing carriage return is dropped, empty lines are skipped, a line starting with
// '#' is a comment unless it is a header, which switches the encodings of the lines after it.
// A pair line has exactly one tab; its key must not be empty. (The store's own limits on key and
// value sizes are checked by load, which knows the store.)
#ifndef NVKV_TOOLS_CLI_DUMP_FORMAT_H_
#define NVKV_TOOLS_CLI_DUMP_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "tools/cli/codec.h"

namespace nvkv::cli {

// The first line dump writes (without its encoding names); load reads the encodings from it.
inline constexpr char kDumpHeaderPrefix[] = "# nvkv-cli dump v1 encoding=";

// The header line for `encodings`, with its line feed.
std::string DumpHeaderLine(FieldEncodings encodings);

// A pair line of scan and dump, with its line feed.
std::string DumpPairLine(std::string_view key, std::string_view value, FieldEncodings encodings);

// One line of dump text, read.
struct DumpLine {
  bool is_pair = false;  // false: nothing to write (blank, comment or header line)
  std::string key;
  std::string value;
};

// Reads one line (without its line feed) in `*encodings`, which a header line changes.
// kInvalidArgument saying what is wrong ("expected KEY<TAB>VALUE (one tab)", "key: ...",
// "value: ...", "empty key", "unknown encoding '...'"); the caller adds the line number.
absl::Status ParseDumpLine(std::string_view line, FieldEncodings* encodings, DumpLine* out);

}  // namespace nvkv::cli

#endif  // NVKV_TOOLS_CLI_DUMP_FORMAT_H_
