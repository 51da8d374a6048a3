// MemoryHeadroomBytes: the least room any limit leaves, read from cgroup files laid out under a
// test root as the kernel lays them out under /.
#include "kv/memory_headroom.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

class MemoryHeadroomTest : public ::testing::Test {
 protected:
  // Writes `text` to `path` below the root, making its directories.
  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path file = dir_.path() + path;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  MemoryLimitSources Sources() const {
    MemoryLimitSources sources;
    sources.root = dir_.path();
    return sources;
  }

  testing::TempDir dir_;
};

TEST_F(MemoryHeadroomTest, NoLimitAndNoFilesGiveNone) {
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), std::nullopt);
  // cgroup v1 without a limit (the kernel's "none" is 2^63 less a page).
  Write("/proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/app\n0::/\n");
  Write("/sys/fs/cgroup/memory/app/memory.stat",
        "cache 0\nhierarchical_memory_limit 9223372036854771712\ntotal_inactive_file 0\n");
  Write("/sys/fs/cgroup/memory/app/memory.usage_in_bytes", "1048576\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), std::nullopt);
}

// cgroup v1: the hierarchical limit (the least of the cgroup's and its ancestors') less what the
// cgroup uses, its inactive file pages not counted (the kernel reclaims them first).
TEST_F(MemoryHeadroomTest, CgroupV1GivesTheHierarchicalLimitLessWhatIsInUse) {
  Write("/proc/self/cgroup", "7:blkio:/\n4:memory:/jobs/app\n0::/\n");
  Write("/sys/fs/cgroup/memory/jobs/app/memory.stat",
        "cache 1\nhierarchical_memory_limit 104857600\ntotal_inactive_file 10485760\n");
  Write("/sys/fs/cgroup/memory/jobs/app/memory.usage_in_bytes", "52428800\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), 100 * kMiB - (50 - 10) * kMiB);
  // Past the limit: no room at all.
  Write("/sys/fs/cgroup/memory/jobs/app/memory.usage_in_bytes", "209715200\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), 0u);
}

// cgroup v2: memory.max less memory.current at the process's cgroup and each above it; the
// tightest wins, and "max" is no limit.
TEST_F(MemoryHeadroomTest, CgroupV2GivesTheTightestLevel) {
  Write("/proc/self/cgroup", "0::/outer/inner\n");
  Write("/sys/fs/cgroup/outer/inner/memory.max", "max\n");
  Write("/sys/fs/cgroup/outer/inner/memory.current", "1048576\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), std::nullopt);
  Write("/sys/fs/cgroup/outer/memory.max", "268435456\n");
  Write("/sys/fs/cgroup/outer/memory.current", "67108864\n");
  Write("/sys/fs/cgroup/outer/memory.stat", "anon 1\ninactive_file 16777216\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), 256 * kMiB - (64 - 16) * kMiB);
  Write("/sys/fs/cgroup/outer/inner/memory.max", "41943040\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), 40 * kMiB - 1 * kMiB);
}

// RLIMIT_AS counts address space, not resident memory: what is mapped already is taken off.
TEST_F(MemoryHeadroomTest, AnAddressSpaceLimitCountsWithTheCgroups) {
  MemoryLimitSources sources = Sources();
  sources.address_space_limit = 512 * kMiB;
  sources.address_space_used = 200 * kMiB;
  EXPECT_EQ(MemoryHeadroomBytes(sources), 312 * kMiB);
  Write("/proc/self/cgroup", "0::/app\n");
  Write("/sys/fs/cgroup/app/memory.max", "104857600\n");
  Write("/sys/fs/cgroup/app/memory.current", "0\n");
  EXPECT_EQ(MemoryHeadroomBytes(sources), 100 * kMiB);
  sources.address_space_used = 600 * kMiB;
  EXPECT_EQ(MemoryHeadroomBytes(sources), 0u);
}

// RLIMIT_DATA counts the process's data (heap and private mappings, VmData): what it holds
// already is taken off, and the tightest of the limits wins.
TEST_F(MemoryHeadroomTest, ADataLimitCountsWithTheOthers) {
  MemoryLimitSources sources = Sources();
  sources.data_limit = 256 * kMiB;
  sources.data_used = 56 * kMiB;
  EXPECT_EQ(MemoryHeadroomBytes(sources), 200 * kMiB);
  sources.address_space_limit = 512 * kMiB;
  sources.address_space_used = 400 * kMiB;
  EXPECT_EQ(MemoryHeadroomBytes(sources), 112 * kMiB);
  sources.data_used = 300 * kMiB;
  EXPECT_EQ(MemoryHeadroomBytes(sources), 0u);
}

// The machine's available memory (MemAvailable, in kB) is one more limit.
TEST_F(MemoryHeadroomTest, TheMachinesAvailableMemoryIsALimitToo) {
  Write("/proc/meminfo",
        "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:    2048000 kB\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), uint64_t{2048000} * 1024);
  Write("/proc/self/cgroup", "0::/app\n");
  Write("/sys/fs/cgroup/app/memory.max", "104857600\n");
  Write("/sys/fs/cgroup/app/memory.current", "0\n");
  EXPECT_EQ(MemoryHeadroomBytes(Sources()), 100 * kMiB);
}

// This process's own limits, whatever they are, give an answer without failing.
TEST_F(MemoryHeadroomTest, ThisProcessIsReadWithoutFailing) {
  const std::optional<uint64_t> headroom = MemoryHeadroomBytes();
  if (headroom) {
    EXPECT_LT(*headroom, uint64_t{1} << 62);
  }
}

}  // namespace
}  // namespace nvkv::kv
