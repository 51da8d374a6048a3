// Checks for JSON output, written apart from util/json_writer so that a test does not grade the
// writer with its own rules:
//   IsValidUtf8(text)  well-formed UTF-8 (RFC 3629), by decoding each code point and checking
//                      it was encoded in its shortest form, is no surrogate and is <= U+10FFFF;
//   ParseJson(text)    a strict RFC 8259 reader of one value (no trailing text), which keeps
//                      the decoded strings and object members for the test to look at.
#ifndef NVKV_TESTS_TESTUTIL_JSON_CHECK_H_
#define NVKV_TESTS_TESTUTIL_JSON_CHECK_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace nvkv::testing {

bool IsValidUtf8(std::string_view text);

struct JsonMember;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // a string's decoded UTF-8, or a number as written
  std::vector<JsonValue> items;                              // kArray
  // kObject, in order. Not std::pair: a pair needs JsonValue complete here (clang refuses).
  std::vector<JsonMember> members;

  // The member named `name` of an object, or nullptr.
  const JsonValue* Find(std::string_view name) const;
};

struct JsonMember {
  std::string name;
  JsonValue value;
};

// kInvalidArgument naming the offset of the first thing that is not JSON.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_JSON_CHECK_H_
