// util/size_parse: the grammar of util/size_parse.h, its limits and its errors.
#include "util/size_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace nvkv::util {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMax = UINT64_MAX;

TEST(ParseSizeTest, PlainNumbersAreBytes) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("1"), 1u);
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("4096b"), 4096u);
  EXPECT_EQ(*ParseSize("4096B"), 4096u);
  EXPECT_EQ(*ParseSize("000512"), 512u);
}

TEST(ParseSizeTest, UnitsArePowersOf1024InAnyCase) {
  for (const char* unit : {"k", "K", "kb", "KB", "kB", "kib", "KiB", "KIB", "kiB"}) {
    EXPECT_EQ(*ParseSize(std::string("4") + unit), 4u << 10) << unit;
  }
  EXPECT_EQ(*ParseSize("64m"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseSize("64M"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseSize("64MiB"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseSize("64mb"), uint64_t{64} << 20);
  EXPECT_EQ(*ParseSize("1g"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSize("1GiB"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSize("2t"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseSize("2TB"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseSize("0k"), 0u);
}

TEST(ParseSizeTest, RefusesTextOutsideTheGrammar) {
  for (const char* bad : {"", "k", "b", "ib", "kib", "-1", "+1", " 1", "1 ", "64 m", "1.5g",
                          "0x10", "12q", "1kk", "1ki", "1Ki", "1kbb", "1bb", "1bi", "1bib",
                          "1p", "1e3", "1\n"}) {
    absl::StatusOr<uint64_t> size = ParseSize(bad);
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(size.status().message(), HasSubstr("is not a size (examples: 4096, 64k")) << bad;
  }
  // An embedded NUL is not the end of the text.
  EXPECT_FALSE(ParseSize(std::string_view("1\0k", 3)).ok());
}

TEST(ParseSizeTest, LargestSizesFitAndOneMoreIsTooLarge) {
  EXPECT_EQ(*ParseSize("18446744073709551615"), kMax);
  EXPECT_EQ(*ParseSize("16777215t"), uint64_t{16777215} << 40);
  EXPECT_EQ(*ParseSize("17179869183g"), uint64_t{17179869183} << 30);
  EXPECT_EQ(*ParseSize("18014398509481983k"), kMax >> 10 << 10);
  for (const char* big : {"18446744073709551616", "99999999999999999999", "16777216t",
                          "20000000t", "17179869184G", "18014398509481984kib",
                          "000018446744073709551616b", "340282366920938463463374607431768211456"}) {
    absl::StatusOr<uint64_t> size = ParseSize(big);
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument) << big;
    EXPECT_THAT(size.status().message(), HasSubstr("is too large")) << big;
  }
  // Text outside the grammar is named as such even when its digits overflow.
  EXPECT_THAT(ParseSize("99999999999999999999q").status().message(), HasSubstr("not a size"));
}

TEST(ParsePositiveSizeTest, RefusesZeroAndOtherwiseMatchesParseSize) {
  for (const char* zero : {"0", "0k", "00", "0TiB"}) {
    absl::StatusOr<uint64_t> size = ParsePositiveSize(zero);
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument) << zero;
    EXPECT_THAT(size.status().message(), HasSubstr("at least one byte")) << zero;
  }
  EXPECT_EQ(*ParsePositiveSize("1"), 1u);
  EXPECT_EQ(*ParsePositiveSize("64MiB"), uint64_t{64} << 20);
  EXPECT_THAT(ParsePositiveSize("12q").status().message(), HasSubstr("is not a size"));
  EXPECT_THAT(ParsePositiveSize("16777216t").status().message(), HasSubstr("is too large"));
}

}  // namespace
}  // namespace nvkv::util
