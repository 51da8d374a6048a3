#include "tests/testutil/json_check.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace nvkv::testing {
namespace {

// Appends code point `cp` (<= U+10FFFF, no surrogate) as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    if (!ParseValue(&value, 0)) return Error();
    SkipSpace();
    if (at_ != text_.size()) {
      why_ = "text after the value";
      return Error();
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrCat("not JSON at offset ", at_, ": ", why_));
  }
  bool Fail(const char* why) {
    why_ = why;
    return false;
  }
  void SkipSpace() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' ||
                                  text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }
  bool Take(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  bool ParseValue(JsonValue* value, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    SkipSpace();
    if (at_ == text_.size()) return Fail("a value is missing");
    const char c = text_[at_];
    if (c == '{') return ParseObject(value, depth);
    if (c == '[') return ParseArray(value, depth);
    if (c == '"') {
      value->type = JsonValue::Type::kString;
      return ParseString(&value->text);
    }
    for (const bool truth : {true, false}) {
      if (Take(truth ? "true" : "false")) {
        value->type = JsonValue::Type::kBool;
        value->boolean = truth;
        return true;
      }
    }
    if (Take("null")) {
      value->type = JsonValue::Type::kNull;
      return true;
    }
    return ParseNumber(value);
  }

  bool ParseObject(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kObject;
    ++at_;  // '{'
    SkipSpace();
    if (Take("}")) return true;
    while (true) {
      SkipSpace();
      if (at_ == text_.size() || text_[at_] != '"') return Fail("expected a member name");
      std::string name;
      if (!ParseString(&name)) return false;
      SkipSpace();
      if (!Take(":")) return Fail("expected ':'");
      JsonValue member;
      if (!ParseValue(&member, depth + 1)) return false;
      value->members.push_back(JsonMember{std::move(name), std::move(member)});
      SkipSpace();
      if (Take("}")) return true;
      if (!Take(",")) return Fail("expected ',' or '}'");
    }
  }

  bool ParseArray(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kArray;
    ++at_;  // '['
    SkipSpace();
    if (Take("]")) return true;
    while (true) {
      JsonValue item;
      if (!ParseValue(&item, depth + 1)) return false;
      value->items.push_back(std::move(item));
      SkipSpace();
      if (Take("]")) return true;
      if (!Take(",")) return Fail("expected ',' or ']'");
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool ParseNumber(JsonValue* value) {
    const size_t start = at_;
    const auto digits = [this] {
      const size_t first = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - first;
    };
    Take("-");
    if (Take("0")) {
      // no more integer digits after a leading zero
    } else if (digits() == 0) {
      return Fail("expected a value");
    }
    if (Take(".") && digits() == 0) return Fail("expected digits after '.'");
    if (Take("e") || Take("E")) {
      if (!Take("+")) Take("-");
      if (digits() == 0) return Fail("expected exponent digits");
    }
    value->type = JsonValue::Type::kNumber;
    value->text = std::string(text_.substr(start, at_ - start));
    return true;
  }

  bool ParseHex4(uint32_t* unit) {
    if (text_.size() - at_ < 4) return Fail("\\u needs four hex digits");
    *unit = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[at_++];
      uint32_t digit;
      if (c >= '0' && c <= '9') digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      else return Fail("\\u needs four hex digits");
      *unit = *unit * 16 + digit;
    }
    return true;
  }

  // A string literal; raw bytes must be valid UTF-8 (checked on the whole text up front).
  bool ParseString(std::string* out) {
    ++at_;  // '"'
    while (true) {
      if (at_ == text_.size()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[at_++]);
      if (c == '"') return true;
      if (c < 0x20) return Fail("unescaped control character in a string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (at_ == text_.size()) return Fail("unterminated escape");
      const char e = text_[at_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t unit;
          if (!ParseHex4(&unit)) return false;
          if (unit >= 0xdc00 && unit <= 0xdfff) return Fail("lone low surrogate");
          if (unit >= 0xd800 && unit <= 0xdbff) {
            uint32_t low;
            if (!Take("\\u") || !ParseHex4(&low) || low < 0xdc00 || low > 0xdfff) {
              return Fail("high surrogate without a low one");
            }
            unit = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
          }
          AppendUtf8(unit, out);
          break;
        }
        default:
          return Fail("unknown escape");
      }
    }
  }

  std::string_view text_;
  size_t at_ = 0;
  const char* why_ = "";
};

}  // namespace

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t length;
    uint32_t cp;
    if (lead < 0x80) {
      length = 1;
      cp = lead;
    } else if ((lead & 0xe0) == 0xc0) {
      length = 2;
      cp = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3;
      cp = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4;
      cp = lead & 0x07;
    } else {
      return false;
    }
    if (text.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3f);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kSmallest[length]) return false;  // overlong
    if (cp >= 0xd800 && cp <= 0xdfff) return false;
    if (cp > 0x10ffff) return false;
    i += length;
  }
  return true;
}

const JsonValue* JsonValue::Find(std::string_view name) const {
  for (const auto& [member_name, member] : members) {
    if (member_name == name) return &member;
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(std::string_view text) {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("not JSON: not valid UTF-8");
  return Parser(text).ParseDocument();
}

}  // namespace nvkv::testing
