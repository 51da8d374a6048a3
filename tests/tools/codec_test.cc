// nvkv-cli's text encodings (tools/cli/codec.h): escaped and hex fields, sizes and counts.
#include "tools/cli/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace nvkv::cli {
namespace {

using ::testing::HasSubstr;

std::string AllBytes() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  return bytes;
}

TEST(EscapeTest, PrintableAsciiStandsForItself) {
  EXPECT_EQ(Escape("Hello, world! ~{}", false), "Hello, world! ~{}");
}

TEST(EscapeTest, SeparatorsBackslashAndOtherBytesAreEscaped) {
  EXPECT_EQ(Escape(std::string("a\tb\nc\rd\\e\0f\x7f\xff", 13), false),
            "a\\tb\\nc\\rd\\\\e\\x00f\\x7f\\xff");
}

TEST(EscapeTest, OnlyALeadingHashOfAKeyIsEscaped) {
  EXPECT_EQ(Escape("#a#", true), "\\x23a#");
  EXPECT_EQ(Escape("#a#", false), "#a#");
}

TEST(EscapeTest, EveryByteRoundTripsAndNoSeparatorSurvives) {
  const std::string escaped = Escape(AllBytes(), true);
  EXPECT_EQ(escaped.find('\t'), std::string::npos);
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(escaped.find('\r'), std::string::npos);
  absl::StatusOr<std::string> back = Unescape(escaped);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, AllBytes());
}

TEST(UnescapeTest, AcceptsUpperCaseHexAndRawBytes) {
  absl::StatusOr<std::string> text = Unescape("\\xFF\x01 raw");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "\xff\x01 raw");
}

TEST(UnescapeTest, RejectsUnknownAndCutEscapes) {
  EXPECT_THAT(std::string(Unescape("a\\q").status().message()), HasSubstr("unknown escape \\q"));
  EXPECT_THAT(std::string(Unescape("a\\").status().message()), HasSubstr("lone backslash"));
  EXPECT_THAT(std::string(Unescape("\\x4").status().message()), HasSubstr("two hex digits"));
  EXPECT_THAT(std::string(Unescape("\\xg0").status().message()), HasSubstr("two hex digits"));
}

TEST(HexTest, RoundTripsEveryByte) {
  const std::string hex = ToHex(AllBytes());
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(hex.size() - 4), "feff");
  absl::StatusOr<std::string> back = FromHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, AllBytes());
}

TEST(HexTest, SkipsWhiteSpaceOnlyWhenAsked) {
  EXPECT_FALSE(FromHex("ab cd").ok());
  absl::StatusOr<std::string> spaced = FromHex("AB cd\n0\t1\n", /*skip_space=*/true);
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(*spaced, "\xab\xcd\x01");
  EXPECT_FALSE(FromHex("abc").ok());
  EXPECT_FALSE(FromHex("zz").ok());
  EXPECT_TRUE(FromHex("").ok());
}

TEST(ParseCountTest, TakesDecimalCountsIncludingZero) {
  EXPECT_EQ(*ParseCount("0"), 0u);
  EXPECT_EQ(*ParseCount("10"), 10u);
  EXPECT_FALSE(ParseCount("").ok());
  EXPECT_FALSE(ParseCount("-1").ok());
  EXPECT_FALSE(ParseCount("1k").ok());
}

TEST(FormatBytesTest, PicksTheLargestUnitBelow1024) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(64u << 20), "64.0 MiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace nvkv::cli
