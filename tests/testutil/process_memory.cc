#include "tests/testutil/process_memory.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace nvkv::testing {
namespace {

bool LimitTo(int resource, const char* field, uint64_t extra_bytes) {
  const uint64_t held = ProcessStatusBytes(field);
  if (held == 0) return false;
  const rlimit limit{held + extra_bytes, held + extra_bytes};
  return setrlimit(resource, &limit) == 0;
}

}  // namespace

uint64_t ProcessStatusBytes(const char* field) {
  std::ifstream status("/proc/self/status");
  const std::string prefix(field);
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size())) << 10;
  }
  return 0;
}

bool LimitAddressSpaceTo(uint64_t extra_bytes) {
  return LimitTo(RLIMIT_AS, "VmSize:", extra_bytes);
}

bool LimitDataTo(uint64_t extra_bytes) { return LimitTo(RLIMIT_DATA, "VmData:", extra_bytes); }

}  // namespace nvkv::testing
