#include "util/size_parse.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace nvkv::util {
namespace {

// Debian's Abseil has its own string_view type: views cross over explicitly.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status NotASize(std::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", Av(text), "' is not a size (examples: 4096, 64k, 64m, 1g)"));
}

// The power of two that `unit` (lower case) stands for, or -1 when it is no unit.
int UnitShift(std::string_view unit) {
  if (unit.empty() || unit == "b") return 0;
  int shift;
  switch (unit.front()) {
    case 'k':
      shift = 10;
      break;
    case 'm':
      shift = 20;
      break;
    case 'g':
      shift = 30;
      break;
    case 't':
      shift = 40;
      break;
    default:
      return -1;
  }
  unit.remove_prefix(1);
  if (unit.empty() || unit == "b" || unit == "ib") return shift;
  return -1;
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  size_t digits = 0;
  uint64_t number = 0;
  bool overflow = false;
  for (; digits < text.size() && absl::ascii_isdigit(text[digits]); ++digits) {
    const uint64_t digit = static_cast<uint64_t>(text[digits] - '0');
    if (number > (kMax - digit) / 10) overflow = true;  // keep reading: the suffix may be bad
    number = number * 10 + digit;
  }
  if (digits == 0) return NotASize(text);
  const int shift = UnitShift(absl::AsciiStrToLower(Av(text.substr(digits))));
  if (shift < 0) return NotASize(text);
  if (overflow || number > (kMax >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(text), "' is too large: a size must be below 16 EiB (2^64 bytes)"));
  }
  return number << shift;
}

absl::StatusOr<uint64_t> ParsePositiveSize(std::string_view text) {
  absl::StatusOr<uint64_t> size = ParseSize(text);
  if (size.ok() && *size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(text), "' is not a size: it must be at least one byte"));
  }
  return size;
}

}  // namespace nvkv::util
