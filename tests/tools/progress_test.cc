// nvkv-cli's progress line (tools/cli/progress.h ProgressLine): bytes in human units, the rate
// once half a second has passed, the time left when the total is known.
#include "tools/cli/progress.h"

#include <gtest/gtest.h>

#include <string>

namespace nvkv::cli {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(ProgressLineTest, BytesShowHumanUnitsRateAndTimeLeft) {
  EXPECT_EQ(ProgressLine("load", "bytes", 10 * kMiB, 20 * kMiB, 2.0),
            "load [###############...............]  50%  10.0 MiB / 20.0 MiB, 5.0 MiB/s, "
            "2 s left");
  // Read from a pipe: no total, so no bar and no time left.
  EXPECT_EQ(ProgressLine("load", "bytes read", 3 * kMiB, 0, 1.0),
            "load  3.0 MiB read, 3.0 MiB/s");
}

TEST(ProgressLineTest, CountsShowTheirUnitPerSecond) {
  EXPECT_EQ(ProgressLine("check", "segments", 32, 64, 2.0),
            "check [###############...............]  50%  32/64 segments, 16 segments/s, "
            "2 s left");
  EXPECT_EQ(ProgressLine("dump", "pairs", 12345, 0, 2.469), "dump  12345 pairs, 5000 pairs/s");
}

TEST(ProgressLineTest, NoRateBeforeHalfASecondAndLongWaitsInMinutes) {
  EXPECT_EQ(ProgressLine("check", "segments", 1, 10, 0.1),
            "check [###...........................]  10%  1/10 segments");
  EXPECT_EQ(ProgressLine("check", "segments", 0, 10, 5.0),
            "check [..............................]   0%  0/10 segments");
  EXPECT_EQ(ProgressLine("check", "segments", 1, 601, 10.0).substr(45),
            "1/601 segments, 0.1 segments/s, 100 min left");
  EXPECT_EQ(ProgressLine("check", "segments", 9, 10, 9.5).substr(45),
            "9/10 segments, 0.9 segments/s, 1 s left");
  EXPECT_EQ(ProgressLine("check", "segments", 10, 10, 3.0).substr(45),
            "10/10 segments, 3.3 segments/s");  // done: no time left
}

}  // namespace
}  // namespace nvkv::cli
