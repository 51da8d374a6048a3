// The YCSB property parser (bench/ycsb/properties.h) on arbitrary property-file text.
//
// Properties: a refused text gives kInvalidArgument naming the source and line; an accepted one
// yields names that are not empty, carry no blank at either end, no '=' or ':' (the separator is
// the first of those) and no line feed, and do not start with '#' or '!' (such a line is a
// comment); values carry no blank at either end and no line feed; written out again as
// `name=value` lines the settings parse back to the same ones; and the typed getters refuse or
// accept each value without crashing, a whole number reading the same through GetUint and
// GetBytes.
#include <cstdint>
#include <string>
#include <string_view>

#include "bench/ycsb/properties.h"
#include "fuzz/fuzz_check.h"

namespace nvkv::ycsb {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
                              c == '\v'; }

void Run(std::string_view text) {
  Properties properties;
  absl::Status status = properties.ParseText(text, "fuzz.properties");
  if (!status.ok()) {
    FUZZ_REQUIRE(absl::IsInvalidArgument(status), "%s", status.ToString().c_str());
    // Debian's Abseil has its own string_view type.
    const std::string message(status.message().data(), status.message().size());
    FUZZ_REQUIRE(message.starts_with("fuzz.properties:"), "%s",
                 status.ToString().c_str());
    return;
  }
  std::string written;
  for (const auto& [name, value] : properties.all()) {
    FUZZ_REQUIRE(!name.empty());
    FUZZ_REQUIRE(!IsBlank(name.front()) && !IsBlank(name.back()), "name '%s'", name.c_str());
    FUZZ_REQUIRE(name.find_first_of("=:\n") == std::string::npos, "name '%s'", name.c_str());
    FUZZ_REQUIRE(name.front() != '#' && name.front() != '!', "name '%s'", name.c_str());
    FUZZ_REQUIRE(value.empty() || (!IsBlank(value.front()) && !IsBlank(value.back())),
                 "value '%s'", value.c_str());
    FUZZ_REQUIRE(value.find('\n') == std::string::npos);
    std::string line = name + "=" + value;
    // A value that ends in a backslash is written as a continuation onto an empty line.
    if (line.back() == '\\') line += "\\\n";
    written += line + "\n";

    absl::StatusOr<uint64_t> as_uint = properties.GetUint(name, 0);
    absl::StatusOr<uint64_t> as_bytes = properties.GetBytes(name, 0);
    (void)properties.GetDouble(name, 0);
    (void)properties.GetBool(name, false);
    FUZZ_REQUIRE(properties.GetString(name, "") == value);
    if (as_uint.ok() && !value.empty() &&
        value.find_first_not_of("0123456789") == std::string::npos) {
      FUZZ_REQUIRE(as_bytes.ok() && *as_bytes == *as_uint, "'%s' reads as two numbers",
                   value.c_str());
    }
  }
  Properties again;
  status = again.ParseText(written, "again");
  FUZZ_REQUIRE(status.ok(), "written settings do not parse: %s", status.ToString().c_str());
  FUZZ_REQUIRE(again.all() == properties.all(), "written settings parse as others");
}

}  // namespace
}  // namespace nvkv::ycsb

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nvkv::ycsb::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
