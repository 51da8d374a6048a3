#include "tools/cli/codec.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace nvkv::cli {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// SimpleAtoi alone would take signs and surrounding white space.
bool AllDigits(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

std::string Escape(std::string_view bytes, bool is_key) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    switch (c) {
      case '\\':
        out += "\\\\";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      default:
        break;
    }
    const bool comment_start = is_key && i == 0 && c == '#';
    if (c >= 0x20 && c < 0x7f && !comment_start) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHexDigits[c >> 4];
      out += kHexDigits[c & 0xf];
    }
  }
  return out;
}

absl::StatusOr<std::string> Unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (i + 1 == text.size()) {
      return absl::InvalidArgumentError("a lone backslash ends the text (write \\\\)");
    }
    const char e = text[++i];
    switch (e) {
      case '\\':
        out += '\\';
        break;
      case 't':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 'x': {
        const int high = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
        const int low = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
        if (high < 0 || low < 0) {
          return absl::InvalidArgumentError("\\x needs two hex digits");
        }
        out += static_cast<char>(high * 16 + low);
        i += 2;
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown escape \\", Escape(std::string_view(&e, 1), false),
            " (known: \\\\ \\t \\n \\r \\xHH)"));
    }
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out += kHexDigits[c >> 4];
    out += kHexDigits[c & 0xf];
  }
  return out;
}

absl::StatusOr<std::string> FromHex(std::string_view text, bool skip_space) {
  std::string out;
  out.reserve(text.size() / 2);
  int high = -1;
  for (const char c : text) {
    if (skip_space && absl::ascii_isspace(static_cast<unsigned char>(c))) continue;
    const int value = HexValue(c);
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("not hex: '", Escape(std::string_view(&c, 1), false), "'"));
    }
    if (high < 0) {
      high = value;
    } else {
      out += static_cast<char>(high * 16 + value);
      high = -1;
    }
  }
  if (high >= 0) return absl::InvalidArgumentError("odd number of hex digits");
  return out;
}

absl::StatusOr<uint64_t> ParseCount(std::string_view text) {
  uint64_t value = 0;
  if (text.empty() || !AllDigits(text) ||
      !absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' is not a count"));
  }
  return value;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace nvkv::cli
