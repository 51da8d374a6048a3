// Memory headroom: how much more memory this process may take before a limit stops it, so that
// work whose memory grows with the store (recovery's tables, kv/recovery.h) can bound itself
// instead of being killed. A memory cgroup does not fail an allocation: past its limit the
// kernel kills the process as it touches the pages, so the limit must be known beforehand.
//
// Limits read: the process's memory cgroup and every cgroup above it (v1: memory.stat's
// hierarchical_memory_limit less memory.usage_in_bytes; v2: memory.max less memory.current at
// each level), RLIMIT_AS less the address space already mapped (VmSize), RLIMIT_DATA less the
// data already held (VmData: the heap and private mappings, where the tables live), and the
// machine's MemAvailable (/proc/meminfo: free memory and what the kernel can reclaim without
// swapping).
// The least headroom wins. Swap is not counted as room.
//
// Thread contract: the functions are thread-safe (they read files and call getrlimit).
#ifndef NVKV_KV_MEMORY_HEADROOM_H_
#define NVKV_KV_MEMORY_HEADROOM_H_

#include <cstdint>
#include <optional>
#include <string>

namespace nvkv::kv {

// The headroom under every limit that applies, or nullopt when none does (or none can be read).
std::optional<uint64_t> MemoryHeadroomBytes();

// What MemoryHeadroomBytes reads, for tests: the filesystem root below which /proc (self/cgroup,
// meminfo) and /sys/fs/cgroup are looked for ("" for the real ones), RLIMIT_AS with the
// process's address space and RLIMIT_DATA with its data, when the caller gives them (nullopt:
// not limited).
struct MemoryLimitSources {
  std::string root;
  std::optional<uint64_t> address_space_limit;
  uint64_t address_space_used = 0;
  std::optional<uint64_t> data_limit;
  uint64_t data_used = 0;
};
std::optional<uint64_t> MemoryHeadroomBytes(const MemoryLimitSources& sources);

}  // namespace nvkv::kv

#endif  // NVKV_KV_MEMORY_HEADROOM_H_
