// util/json_writer: escapes, the replacement of bytes that are not UTF-8, and the object
// builder's two layouts. Every output is checked with tests/testutil/json_check, a validator and
// reader written apart from the writer.
#include "util/json_writer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/base/split_mix64.h"
#include "tests/testutil/json_check.h"

namespace nvkv::util {
namespace {

using ::nvkv::testing::IsValidUtf8;
using ::nvkv::testing::JsonValue;
using ::nvkv::testing::ParseJson;

// The string `literal` decodes to, or a failure naming why it is not a JSON string.
std::string Decode(const std::string& literal) {
  EXPECT_TRUE(IsValidUtf8(literal)) << literal;
  absl::StatusOr<JsonValue> value = ParseJson(literal);
  EXPECT_TRUE(value.ok()) << value.status() << " in " << literal;
  if (!value.ok()) return "";
  EXPECT_EQ(value->type, JsonValue::Type::kString) << literal;
  return value->text;
}

// The checks below are only as good as the checker: it must refuse what is not UTF-8 or JSON.
TEST(JsonCheckTest, RefusesWhatIsNotUtf8OrNotJson) {
  for (const char* bad : {"\xff", "\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xe2\x82", "a\xe2\x82" "b"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << bad;
    EXPECT_FALSE(ParseJson(absl::StrCat("\"", bad, "\"")).ok()) << bad;
  }
  for (const char* bad : {"", "\"a", "\"a\nb\"", "\"\\x\"", "\"\\ud800\"",
                          "\"\\udc00\"", "{\"a\" 1}", "{\"a\":1,}", "[1,]", "01",
                          "1.", "nul", "{} {}", "{a:1}"}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xf4\x8f\xbf\xbf"));
  absl::StatusOr<JsonValue> good =
      ParseJson(" {\"a\": [1, -2.5e3, true, false, null], \"b\": \"\\ud834\\udd1e\\n\"} ");
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_NE(good->Find("b"), nullptr);
  EXPECT_EQ(good->Find("b")->text, "\xf0\x9d\x84\x9e\n");
  ASSERT_NE(good->Find("a"), nullptr);
  EXPECT_EQ(good->Find("a")->items.size(), 5u);
}

TEST(JsonStringTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("plain /path"), "\"plain /path\"");
  EXPECT_EQ(JsonString("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(JsonString("a\nb\tc"), "\"a\\nb\\tc\"");
  EXPECT_EQ(JsonString(std::string("\x00\x01\x1f\r\x7f", 5)),
            "\"\\u0000\\u0001\\u001f\\u000d\x7f\"");
}

TEST(JsonStringTest, EveryAsciiByteReadsBackAsItself) {
  for (int c = 0; c < 0x80; ++c) {
    const std::string text(1, static_cast<char>(c));
    EXPECT_EQ(Decode(JsonString(text)), text) << c;
  }
}

TEST(JsonStringTest, CopiesWellFormedUtf8AsItIs) {
  for (const char* text : {"caf\xc3\xa9",            // U+00E9, two bytes
                           "\xe2\x82\xac",           // U+20AC euro sign, three bytes
                           "\xf0\x9d\x84\x9e",       // U+1D11E, four bytes
                           "\xc2\x80",               // U+0080, the smallest two-byte form
                           "\xe0\xa0\x80",           // U+0800, the smallest three-byte form
                           "\xed\x9f\xbf",           // U+D7FF, just below the surrogates
                           "\xee\x80\x80",           // U+E000, just above them
                           "\xef\xbf\xbf",           // U+FFFF
                           "\xf0\x90\x80\x80",       // U+10000, the smallest four-byte form
                           "\xf4\x8f\xbf\xbf",       // U+10FFFF, the largest code point
                           "\xe2\x80\xa8"}) {        // U+2028, allowed raw in JSON
    EXPECT_EQ(JsonString(text), absl::StrCat("\"", text, "\"")) << text;
    EXPECT_EQ(Decode(JsonString(text)), text);
  }
}

TEST(JsonStringTest, ReplacesEachByteThatIsNotUtf8WithOneReplacementCharacter) {
  const struct {
    std::string in;
    std::string out;
  } cases[] = {
      {"a\xff" "b", "\"a\\ufffdb\""},
      {"\x80", "\"\\ufffd\""},                              // a stray continuation byte
      {"\xbf\xbf", "\"\\ufffd\\ufffd\""},
      {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                   // overlong '/'
      {"\xc1\xbf", "\"\\ufffd\\ufffd\""},                   // overlong U+007F
      {"\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\""},        // overlong '/', three bytes
      {"\xe0\x9f\xbf", "\"\\ufffd\\ufffd\\ufffd\""},        // overlong U+07FF
      {"\xf0\x8f\xbf\xbf", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},  // overlong U+FFFF
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},        // U+D800, a surrogate
      {"\xed\xbf\xbf", "\"\\ufffd\\ufffd\\ufffd\""},        // U+DFFF
      {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},  // U+110000
      {"\xf5\x80\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
      {"\xe2\x82", "\"\\ufffd\\ufffd\""},                   // a euro sign cut short at the end
      {"\xe2\x82" "A", "\"\\ufffd\\ufffdA\""},              // ... and before an ASCII byte
      {"\xf0\x9d\x84", "\"\\ufffd\\ufffd\\ufffd\""},        // a four-byte sequence cut short
      {"\xc3" "\xc3\xa9", "\"\\ufffd\xc3\xa9\""},           // a lead byte, then a whole 'é'
      {"\"\xfe\\", "\"\\\"\\ufffd\\\\\""},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(JsonString(c.in), c.out);
    Decode(JsonString(c.in));
  }
}

// Every one- and two-byte string, and random strings of up to 12 bytes biased towards bytes
// that start or continue multi-byte sequences: the output is valid UTF-8 and parses, and text
// that was valid UTF-8 reads back unchanged.
TEST(JsonStringTest, AnyBytesGiveValidUtf8ThatParses) {
  std::vector<std::string> inputs;
  for (int a = 0; a < 256; ++a) {
    inputs.emplace_back(1, static_cast<char>(a));
    for (int b = 0; b < 256; ++b) {
      inputs.push_back({static_cast<char>(a), static_cast<char>(b)});
    }
  }
  SplitMix64 random(20240611);
  static constexpr unsigned char kInteresting[] = {0x00, 0x1f, '"',  '\\', 'a',  0x7f, 0x80,
                                                   0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1,
                                                   0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4,
                                                   0xf5, 0xff};
  for (int i = 0; i < 100000; ++i) {
    std::string text(random.Next() % 13, '\0');
    for (char& c : text) {
      const uint64_t r = random.Next();
      c = static_cast<char>(r % 2 == 0 ? kInteresting[(r >> 8) % std::size(kInteresting)]
                                       : (r >> 8) & 0xff);
    }
    inputs.push_back(std::move(text));
  }
  for (const std::string& text : inputs) {
    const std::string literal = JsonString(text);
    ASSERT_TRUE(IsValidUtf8(literal)) << literal;
    absl::StatusOr<JsonValue> value = ParseJson(literal);
    ASSERT_TRUE(value.ok()) << value.status() << " in " << literal;
    if (IsValidUtf8(text)) {
      ASSERT_EQ(value->text, text) << literal;
    }
  }
}

TEST(JsonNumberTest, SixSignificantDigitsOrNull) {
  EXPECT_EQ(JsonNumber(0), "0");
  EXPECT_EQ(JsonNumber(2048), "2048");
  EXPECT_EQ(JsonNumber(455.111111), "455.111");
  EXPECT_EQ(JsonNumber(0.00125), "0.00125");
  EXPECT_EQ(JsonNumber(1e20), "1e+20");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::quiet_NaN()), "null");
}

TEST(JsonNumberTest, FixedDecimalsOrNull) {
  EXPECT_EQ(JsonFixed(57731.49, 1), "57731.5");
  EXPECT_EQ(JsonFixed(2, 3), "2.000");
  EXPECT_EQ(JsonFixed(236468224.4, 0), "236468224");
  EXPECT_EQ(JsonFixed(std::numeric_limits<double>::infinity(), 2), "null");
  EXPECT_EQ(JsonFixed(std::numeric_limits<double>::quiet_NaN(), 0), "null");
}

TEST(JsonObjectTest, EmptyObject) {
  EXPECT_EQ(JsonObject().Finish(), "{}");
  EXPECT_EQ(JsonObject(JsonObject::Style::kSpaced).Finish(), "{}");
}

TEST(JsonObjectTest, CompactLayout) {
  JsonObject inner;
  inner.Add("depth", uint32_t{64}).Add("sqpoll", false);
  JsonObject json;
  json.Add("keys", uint64_t{2})
      .Add("ratio", 0.5)
      .Add("mode", "hash")
      .Add("path", std::string("/x"))
      .Add("ok", true)
      .AddRaw("ring", inner.Finish())
      .AddStrings("notes", {"a", "b"})
      .AddStrings("none", {});
  EXPECT_EQ(json.Finish(),
            "{\"keys\":2,\"ratio\":0.5,\"mode\":\"hash\",\"path\":\"/x\",\"ok\":true,"
            "\"ring\":{\"depth\":64,\"sqpoll\":false},\"notes\":[\"a\",\"b\"],\"none\":[]}");
  EXPECT_TRUE(ParseJson(json.Finish()).ok());
}

TEST(JsonObjectTest, SpacedLayoutWithLineBreaks) {
  JsonObject lat(JsonObject::Style::kSpaced);
  lat.AddFixed("mean", 43871.4, 0).Add("p50", uint64_t{33280});
  JsonObject json(JsonObject::Style::kSpaced);
  json.Add("tool", "nvkv-iobench").Add("bs", 4096);
  json.BreakLine().AddFixed("iops", 22794.06, 1).AddRaw("lat_ns", lat.Finish());
  json.BreakLine().AddStrings("notes", {"one", "two"});
  EXPECT_EQ(json.Finish(),
            "{\"tool\": \"nvkv-iobench\", \"bs\": 4096,\n"
            " \"iops\": 22794.1, \"lat_ns\": {\"mean\": 43871, \"p50\": 33280},\n"
            " \"notes\": [\"one\", \"two\"]}");
  EXPECT_TRUE(ParseJson(json.Finish()).ok());
}

TEST(JsonObjectTest, IntegersOfEveryWidthInDecimal) {
  JsonObject json;
  json.Add("u64", std::numeric_limits<uint64_t>::max())
      .Add("i64", std::numeric_limits<int64_t>::min())
      .Add("i", -7)
      .Add("u8", uint8_t{200});
  EXPECT_EQ(json.Finish(),
            "{\"u64\":18446744073709551615,\"i64\":-9223372036854775808,\"i\":-7,\"u8\":200}");
}

TEST(JsonObjectTest, NamesAndValuesThatAreNotUtf8StayValidJson) {
  JsonObject json(JsonObject::Style::kSpaced);
  json.Add("path\xff", "/tmp/\xc0\xaf\x01\"")
      .AddStrings("notes", {"\xed\xa0\x80", "ok"})
      .Add("n", 1);
  const std::string text = json.Finish();
  ASSERT_TRUE(IsValidUtf8(text)) << text;
  absl::StatusOr<JsonValue> value = ParseJson(text);
  ASSERT_TRUE(value.ok()) << value.status() << " in " << text;
  const JsonValue* path = value->Find("path\xef\xbf\xbd");  // U+FFFD in UTF-8
  ASSERT_NE(path, nullptr) << text;
  EXPECT_EQ(path->text, "/tmp/\xef\xbf\xbd\xef\xbf\xbd\x01\"");
  const JsonValue* notes = value->Find("notes");
  ASSERT_NE(notes, nullptr);
  ASSERT_EQ(notes->items.size(), 2u);
  EXPECT_EQ(notes->items[0].text, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(notes->items[1].text, "ok");
}

}  // namespace
}  // namespace nvkv::util
