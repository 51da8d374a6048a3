// Compiled, never linked, by the thread_safety_* tests (tests/CMakeLists.txt, clang only): it
// reads a field of the engine's Shard that is ABSL_GUARDED_BY(mu). Without NVKV_TSA_HOLD_LOCK
// the lock is not taken, and the compile must fail with a -Wthread-safety diagnostic; with it,
// the same read under absl::MutexLock must compile. Together they show that the analysis runs
// with the project's flags and sees the project's own annotations (kv/engine_impl.h), and that
// the failing compile fails for that reason and no other.
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "kv/engine_impl.h"

namespace nvkv::kv {

uint64_t NextCounterOf(Shard& shard) {
#ifdef NVKV_TSA_HOLD_LOCK
  absl::MutexLock lock(&shard.mu);
#endif
  return shard.head.next_counter;
}

}  // namespace nvkv::kv
