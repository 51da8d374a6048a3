// Memory headroom (memory_headroom.h): reads the cgroup files, /proc/meminfo, RLIMIT_AS and
// RLIMIT_DATA.
#include "kv/memory_headroom.h"

#include <sys/resource.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "storage/base/text_file.h"

namespace nvkv::kv {
namespace {

// Limits at or above this are "no limit" (cgroup v1 writes 2^63 less a page for none).
constexpr uint64_t kUnlimited = uint64_t{1} << 62;

// The file's number; nullopt when absent, "max" or not a number.
std::optional<uint64_t> ReadNumber(const std::string& path) {
  const std::optional<std::string> text = ReadTextFile(path);
  if (!text) return std::nullopt;
  return ParseUnsigned(*text);
}

// The value of `field` in a file of "name value" lines (memory.stat; /proc/self/status, whose
// names end in ':' and values may be followed by a unit).
std::optional<uint64_t> StatField(const std::string& path, absl::string_view field) {
  const std::optional<std::string> text = ReadTextFile(path);
  if (!text) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    const std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint64_t value = 0;
    if (words.size() >= 2 && words[0] == field && absl::SimpleAtoi(words[1], &value)) {
      return value;
    }
  }
  return std::nullopt;
}

// Memory in use that counts against a limit: what the cgroup charges, less the file pages the
// kernel would reclaim first (inactive ones).
uint64_t InUse(uint64_t charged, std::optional<uint64_t> inactive_file) {
  const uint64_t reclaimable = inactive_file.value_or(0);
  return charged > reclaimable ? charged - reclaimable : 0;
}

// What a limit leaves once `used` is taken (none when it is taken already).
uint64_t RoomUnder(uint64_t limit, uint64_t used) { return limit > used ? limit - used : 0; }

std::optional<uint64_t> Least(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// cgroup v1: the memory controller's path of this process, its hierarchical limit and usage.
std::optional<uint64_t> CgroupV1Headroom(const std::string& root, absl::string_view path) {
  const std::string dir = root + "/sys/fs/cgroup/memory" + std::string(path);
  const std::optional<uint64_t> limit =
      StatField(dir + "/memory.stat", "hierarchical_memory_limit");
  if (!limit || *limit >= kUnlimited) return std::nullopt;
  const std::optional<uint64_t> usage = ReadNumber(dir + "/memory.usage_in_bytes");
  if (!usage) return std::nullopt;
  const uint64_t used = InUse(*usage, StatField(dir + "/memory.stat", "total_inactive_file"));
  return RoomUnder(*limit, used);
}

// cgroup v2: memory.max less memory.current at the process's cgroup and every one above it.
std::optional<uint64_t> CgroupV2Headroom(const std::string& root, absl::string_view path) {
  std::optional<uint64_t> least;
  std::string dir(path);
  while (true) {
    const std::string base = root + "/sys/fs/cgroup" + (dir == "/" ? "" : dir);
    const std::optional<uint64_t> limit = ReadNumber(base + "/memory.max");  // "max": none
    const std::optional<uint64_t> current = ReadNumber(base + "/memory.current");
    if (limit && *limit < kUnlimited && current) {
      const uint64_t used = InUse(*current, StatField(base + "/memory.stat", "inactive_file"));
      least = Least(least, RoomUnder(*limit, used));
    }
    if (dir == "/" || dir.empty()) break;
    const size_t slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  return least;
}

}  // namespace

std::optional<uint64_t> MemoryHeadroomBytes(const MemoryLimitSources& sources) {
  std::optional<uint64_t> least;
  if (sources.address_space_limit) {
    least = RoomUnder(*sources.address_space_limit, sources.address_space_used);
  }
  if (sources.data_limit) least = Least(least, RoomUnder(*sources.data_limit, sources.data_used));
  // MemAvailable is in kB.
  const std::optional<uint64_t> available =
      StatField(sources.root + "/proc/meminfo", "MemAvailable:");
  if (available) least = Least(least, *available * 1024);
  // /proc/self/cgroup: "id:controllers:path" per line; v1 names "memory" among the controllers,
  // v2's one line is "0::path".
  const std::optional<std::string> cgroups = ReadTextFile(sources.root + "/proc/self/cgroup");
  if (!cgroups) return least;
  for (absl::string_view line : absl::StrSplit(*cgroups, '\n')) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3 || !absl::StartsWith(fields[2], "/")) continue;
    const std::vector<absl::string_view> controllers = absl::StrSplit(fields[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) {
      least = Least(least, CgroupV1Headroom(sources.root, fields[2]));
    } else if (fields[0] == "0" && fields[1].empty()) {
      least = Least(least, CgroupV2Headroom(sources.root, fields[2]));
    }
  }
  return least;
}

std::optional<uint64_t> MemoryHeadroomBytes() {
  MemoryLimitSources sources;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    sources.address_space_limit = limit.rlim_cur;
    sources.address_space_used =
        StatField("/proc/self/status", "VmSize:").value_or(0) * 1024;  // kB
  }
  if (getrlimit(RLIMIT_DATA, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    sources.data_limit = limit.rlim_cur;
    sources.data_used = StatField("/proc/self/status", "VmData:").value_or(0) * 1024;  // kB
  }
  return MemoryHeadroomBytes(sources);
}

}  // namespace nvkv::kv
