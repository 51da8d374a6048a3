// Text encodings of nvkv-cli: the escaped and hex forms of keys and values (command arguments,
// scan and dump output, load input), and counts given on the command line.
//
// Escaped form (the default): printable ASCII (0x20..0x7e) stands for itself, except
//   \\  backslash     \t  tab     \n  line feed     \r  carriage return
//   \xHH  any other byte (two hex digits; written in lower case, read in either case)
// and a '#' that starts a key is written \x23, so that no pair line looks like a comment.
// Decoding accepts exactly these escapes, and any other byte as itself.
//
// Hex form (--hex): two hex digits per byte, written in lower case, read in either case.
#ifndef NVKV_TOOLS_CLI_CODEC_H_
#define NVKV_TOOLS_CLI_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace nvkv::cli {

enum class Encoding { kEscaped, kHex };

// How keys and how values are written: on the command line (--hex, --key-hex, --value-hex) and
// in the dump format (its header line names them).
struct FieldEncodings {
  Encoding key = Encoding::kEscaped;
  Encoding value = Encoding::kEscaped;
};

std::string Escape(std::string_view bytes, bool is_key);
absl::StatusOr<std::string> Unescape(std::string_view text);

std::string ToHex(std::string_view bytes);
// With `skip_space`, ASCII white space between digits is ignored (hex read from stdin, as
// `xxd -p` writes it).
absl::StatusOr<std::string> FromHex(std::string_view text, bool skip_space = false);

inline std::string Encode(std::string_view bytes, Encoding encoding, bool is_key) {
  return encoding == Encoding::kHex ? ToHex(bytes) : Escape(bytes, is_key);
}
inline absl::StatusOr<std::string> Decode(std::string_view text, Encoding encoding) {
  return encoding == Encoding::kHex ? FromHex(text) : Unescape(text);
}

// A decimal count, 0 allowed. (Sizes such as "64m" are util/size_parse.h's.)
absl::StatusOr<uint64_t> ParseCount(std::string_view text);

// "512 B", "4.0 KiB", "1.5 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace nvkv::cli

#endif  // NVKV_TOOLS_CLI_CODEC_H_
