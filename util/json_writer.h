// JSON text: string literals that are valid UTF-8 whatever bytes they are given, and a builder
// for one object. The one JSON writer of the project: Stats::ToJson (api/stats.cc, and so
// `nvkv-cli stats --json` and nvkv_stats), nvkv-ycsb's report line and nvkv-iobench's summary.
//
// Why util/: api/ needs it, and so do bench/ and tools/, which must not include kv/ or storage/
// (tests/check_layering.sh). util/ sits below every layer, includes only the standard library
// and Abseil, and every layer, tool and benchmark may include it.
//
// String literals (RFC 8259 section 7) are always valid UTF-8 (RFC 3629):
//   - `"` and `\` are written \" and \\, line feed and tab \n and \t, and every other byte
//     below 0x20 \u00XX (lower-case hex);
//   - a well-formed UTF-8 sequence is copied as it is (DEL and U+2028/U+2029 too: JSON allows
//     them unescaped);
//   - every other byte becomes \ufffd, the replacement character, one per byte, and reading
//     resumes at the next byte. Such a byte is a stray continuation byte (80..BF), a lead byte
//     never used (C0, C1, F5..FF), or the start of a sequence that is cut short, overlong
//     (E0 80..9F, F0 80..8F), a UTF-16 surrogate (ED A0..BF) or above U+10FFFF (F4 90..BF).
//     Examples: "a\xffb" -> "a\ufffdb"; "\xe2\x82" (a euro sign cut short) and "\xc0\xaf"
//     (an overlong '/') -> "\ufffd\ufffd".
// Why U+FFFD and not \u00XX of the byte: \u00ff reads back as U+00FF, a real character that
// the text never held; U+FFFD says that a byte that was not text stood there.
//
// Thread contract: plain functions; a JsonObject belongs to one thread.
#ifndef NVKV_UTIL_JSON_WRITER_H_
#define NVKV_UTIL_JSON_WRITER_H_

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nvkv::util {

// Whether `text` is well-formed UTF-8 throughout: a JSON string of it reads back as the same
// bytes (no byte becomes U+FFFD).
bool IsWellFormedUtf8(std::string_view text);

// Appends `text` to *out as a JSON string literal, quotes included (rules above).
void AppendJsonString(std::string_view text, std::string* out);
std::string JsonString(std::string_view text);

// JSON has no NaN or infinity: those are written null.
// "%.6g" (Stats::ToJson's numbers).
std::string JsonNumber(double value);
// "%.*f" with `decimals` digits after the point (the benchmarks' numbers).
std::string JsonFixed(double value, int decimals);

// One JSON object, fields in the order they are added (no check for repeated names):
//   JsonObject json(JsonObject::Style::kSpaced);
//   json.Add("tool", "nvkv-iobench").Add("bs", 4096).AddFixed("iops", 57731.49, 1);
//   json.Finish()  ->  {"tool": "nvkv-iobench", "bs": 4096, "iops": 57731.5}
class JsonObject {
 public:
  // kCompact: {"a":1,"b":[2,3]} (Stats::ToJson). kSpaced: {"a": 1, "b": [2, 3]} (the
  // benchmarks; scripts such as bench/compare_fio.sh match `"name": value` in it).
  enum class Style { kCompact, kSpaced };

  explicit JsonObject(Style style = Style::kCompact) : style_(style) {}

  // A string. (const char* has its own overload so that a literal is not taken for a bool.)
  JsonObject& Add(std::string_view name, std::string_view value);
  JsonObject& Add(std::string_view name, const char* value) {
    return Add(name, std::string_view(value));
  }
  JsonObject& Add(std::string_view name, bool value) {
    return AddRaw(name, value ? "true" : "false");
  }
  // Any integer, in decimal.
  template <std::integral Integer>
    requires(!std::same_as<Integer, bool> && !std::same_as<Integer, char>)
  JsonObject& Add(std::string_view name, Integer value) {
    return AddRaw(name, absl::StrCat(value));
  }
  JsonObject& Add(std::string_view name, double value) { return AddRaw(name, JsonNumber(value)); }
  JsonObject& AddFixed(std::string_view name, double value, int decimals) {
    return AddRaw(name, JsonFixed(value, decimals));
  }
  // An array of strings.
  JsonObject& AddStrings(std::string_view name, const std::vector<std::string>& values);
  // `json` is written as it is: it must be one JSON value, e.g. a nested JsonObject's Finish().
  JsonObject& AddRaw(std::string_view name, std::string_view json);
  // The next field starts a new line indented by one space (nvkv-iobench's layout).
  JsonObject& BreakLine() {
    break_line_ = true;
    return *this;
  }

  // The object's text: "{}" when no field was added.
  std::string Finish() const { return text_.empty() ? "{}" : text_ + "}"; }

 private:
  // ", " or "," (or the line break asked for) between items, by style.
  std::string_view Separator() const { return style_ == Style::kSpaced ? ", " : ","; }

  Style style_;
  bool break_line_ = false;
  std::string text_;  // "{" and the fields so far, without the closing brace
};

}  // namespace nvkv::util

#endif  // NVKV_UTIL_JSON_WRITER_H_
