#include "util/json_writer.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace nvkv::util {
namespace {

// The length of the well-formed UTF-8 sequence that starts text[i], or 0 when none does
// (Unicode 15 table 3-7: the second byte's range depends on the lead byte, which rules out
// overlong forms, surrogates and code points above U+10FFFF; later bytes are 80..BF).
size_t WellFormedLength(std::string_view text, size_t i) {
  const auto byte = [text](size_t at) { return static_cast<unsigned char>(text[at]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char second_low = 0x80;
  unsigned char second_high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) second_low = 0xa0;   // below: overlong (fits in two bytes)
    if (lead == 0xed) second_high = 0x9f;  // above: U+D800..U+DFFF, surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) second_low = 0x90;   // below: overlong (fits in three bytes)
    if (lead == 0xf4) second_high = 0x8f;  // above: beyond U+10FFFF
  } else {
    return 0;  // a continuation byte, or C0, C1, F5..FF, which no well-formed text holds
  }
  if (text.size() - i < length) return 0;
  if (byte(i + 1) < second_low || byte(i + 1) > second_high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

bool IsWellFormedUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = WellFormedLength(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

void AppendJsonString(std::string_view text, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = WellFormedLength(text, i);
      if (length == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

std::string JsonString(std::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

std::string JsonFixed(double value, int decimals) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.*f", decimals, value);
}

JsonObject& JsonObject::Add(std::string_view name, std::string_view value) {
  std::string literal;
  AppendJsonString(value, &literal);
  return AddRaw(name, literal);
}

JsonObject& JsonObject::AddStrings(std::string_view name, const std::vector<std::string>& values) {
  std::string array = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) array.append(Separator());
    AppendJsonString(values[i], &array);
  }
  array.push_back(']');
  return AddRaw(name, array);
}

JsonObject& JsonObject::AddRaw(std::string_view name, std::string_view json) {
  if (text_.empty()) {
    text_.push_back('{');
  } else if (break_line_) {
    text_.append(",\n ");
  } else {
    text_.append(Separator());
  }
  break_line_ = false;
  AppendJsonString(name, &text_);
  text_.append(style_ == Style::kSpaced ? ": " : ":");
  text_.append(json);
  return *this;
}

}  // namespace nvkv::util
