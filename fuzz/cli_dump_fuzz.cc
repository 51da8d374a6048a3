// The text format of `nvkv-cli dump` / `load` (tools/cli/dump_format.h) and its encodings
// (tools/cli/codec.h) on arbitrary text.
//
// Input: byte 0 picks the encodings the text starts in (bit 0: keys in hex, bit 1: values in
// hex, else escaped), the rest is the text, read line by line as load reads it. Properties: a
// refused line has a message; a pair read back is what dump writes for it, in each of the four
// pairs of field encodings (write the pair, read the line: the same key and value; and a header
// line switches to its encodings); the pairs of the whole text, dumped and loaded again, are
// the same pairs; an escaped line never holds a tab, line
// feed or carriage return and a key never starts with '#'; and the encoders and decoders of
// codec.h are inverse on every line's bytes. util::ParsePositiveSize (the CLI's sizes) and
// ParseCount must not crash, and a size accepted is not zero.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "tools/cli/codec.h"
#include "tools/cli/dump_format.h"
#include "util/size_parse.h"

namespace nvkv::cli {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

// Every pair of field encodings: keys and values each escaped or hex.
constexpr FieldEncodings kAllEncodings[] = {{Encoding::kEscaped, Encoding::kEscaped},
                                            {Encoding::kHex, Encoding::kEscaped},
                                            {Encoding::kEscaped, Encoding::kHex},
                                            {Encoding::kHex, Encoding::kHex}};

bool Same(FieldEncodings a, FieldEncodings b) { return a.key == b.key && a.value == b.value; }

// Both fields in the other encoding.
FieldEncodings Flipped(FieldEncodings e) {
  auto flip = [](Encoding x) { return x == Encoding::kHex ? Encoding::kEscaped : Encoding::kHex; };
  return {flip(e.key), flip(e.value)};
}

// Reads `text` as load does; false at the first refused line.
bool Load(std::string_view text, FieldEncodings encodings, Pairs* pairs) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    DumpLine parsed;
    absl::Status status = ParseDumpLine(line, &encodings, &parsed);
    if (!status.ok()) {
      FUZZ_REQUIRE(absl::IsInvalidArgument(status) && !status.message().empty(), "%s",
                   status.ToString().c_str());
      return false;
    }
    if (parsed.is_pair) {
      FUZZ_REQUIRE(!parsed.key.empty());
      pairs->emplace_back(std::move(parsed.key), std::move(parsed.value));
    }
  }
  return true;
}

void CheckPairLine(const std::string& key, const std::string& value, FieldEncodings encodings) {
  const std::string line = DumpPairLine(key, value, encodings);
  FUZZ_REQUIRE(!line.empty() && line.back() == '\n');
  const std::string_view body(line.data(), line.size() - 1);
  FUZZ_REQUIRE(body.find('\n') == std::string_view::npos);
  FUZZ_REQUIRE(body.find('\r') == std::string_view::npos);
  FUZZ_REQUIRE(!body.empty() && body.front() != '#', "a pair line reads as a comment");
  // Read back in the encodings the header line sets.
  FieldEncodings other = Flipped(encodings);
  DumpLine header;
  const std::string header_line = DumpHeaderLine(encodings);
  FUZZ_REQUIRE(ParseDumpLine(std::string_view(header_line).substr(0, header_line.size() - 1),
                             &other, &header)
                   .ok());
  FUZZ_REQUIRE(Same(other, encodings) && !header.is_pair);
  DumpLine parsed;
  absl::Status status = ParseDumpLine(body, &other, &parsed);
  FUZZ_REQUIRE(status.ok(), "a dumped pair does not load: %s", status.ToString().c_str());
  FUZZ_REQUIRE(parsed.is_pair && parsed.key == key && parsed.value == value,
               "a dumped pair loads as another");
}

void Run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const FieldEncodings start = kAllEncodings[data[0] & 3];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  Pairs pairs;
  Load(text, start, &pairs);
  for (const FieldEncodings encodings : kAllEncodings) {
    std::string dumped = DumpHeaderLine(encodings);
    for (const auto& [key, value] : pairs) {
      CheckPairLine(key, value, encodings);
      dumped += DumpPairLine(key, value, encodings);
    }
    Pairs again;
    // The dump's header sets the encodings, whatever load starts with.
    FUZZ_REQUIRE(Load(dumped, {Encoding::kHex, Encoding::kHex}, &again), "a dump does not load");
    FUZZ_REQUIRE(again == pairs, "a dump loads as other pairs");
  }

  // The codecs, on each line's raw bytes.
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    for (bool is_key : {false, true}) {
      const std::string escaped = Escape(line, is_key);
      if (is_key && !escaped.empty()) FUZZ_REQUIRE(escaped.front() != '#');
      for (char c : escaped) FUZZ_REQUIRE(c >= 0x20 && c <= 0x7e, "escaped byte %d", c);
      absl::StatusOr<std::string> back = Unescape(escaped);
      FUZZ_REQUIRE(back.ok() && *back == line, "Unescape(Escape(x)) != x");
    }
    absl::StatusOr<std::string> hex = FromHex(ToHex(line));
    FUZZ_REQUIRE(hex.ok() && *hex == line, "FromHex(ToHex(x)) != x");
    // A line that decodes: encoding it again decodes to the same bytes.
    if (absl::StatusOr<std::string> decoded = Unescape(line); decoded.ok()) {
      absl::StatusOr<std::string> again = Unescape(Escape(*decoded, false));
      FUZZ_REQUIRE(again.ok() && *again == *decoded);
    }
    if (absl::StatusOr<std::string> decoded = FromHex(line, /*skip_space=*/true); decoded.ok()) {
      FUZZ_REQUIRE(decoded->size() * 2 <= line.size());
    }
    absl::StatusOr<uint64_t> size_value = util::ParsePositiveSize(line);
    if (size_value.ok()) FUZZ_REQUIRE(*size_value != 0, "ParsePositiveSize accepted zero");
    (void)ParseCount(line);
  }
}

}  // namespace
}  // namespace nvkv::cli

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nvkv::cli::Run(data, size);
  return 0;
}
