// What this process holds, from /proc/self/status, and limits set relative to it: for tests
// that run code under a tight memory limit in a forked child.
#ifndef NVKV_TESTS_TESTUTIL_PROCESS_MEMORY_H_
#define NVKV_TESTS_TESTUTIL_PROCESS_MEMORY_H_

#include <cstdint>

namespace nvkv::testing {

// Bytes of one /proc/self/status field given in kB ("VmSize:", the address space; "VmData:",
// the heap and private mappings), 0 when there is no such field.
uint64_t ProcessStatusBytes(const char* field);

// Sets RLIMIT_AS (the address space) or RLIMIT_DATA to what the process holds now plus
// `extra_bytes`. False when that cannot be read or set.
bool LimitAddressSpaceTo(uint64_t extra_bytes);
bool LimitDataTo(uint64_t extra_bytes);

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_PROCESS_MEMORY_H_
