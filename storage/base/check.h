// Assertions for programmer errors. Operating errors (user input, device failures) travel as
// absl::Status and never reach these macros.
//
// NVKV_CHECK is always on: use it for invariants whose breach would put bad data on the device.
// NVKV_DCHECK compiles away in release builds: use it for costly checks on the hot path.
// One condition per assertion, so a failure names exactly what was wrong.
#ifndef NVKV_STORAGE_BASE_CHECK_H_
#define NVKV_STORAGE_BASE_CHECK_H_

#include <cstdio>
#include <cstdlib>

namespace nvkv::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "%s:%d: NVKV_CHECK failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace nvkv::internal

#define NVKV_CHECK(condition)                                               \
  do {                                                                      \
    if (__builtin_expect(!(condition), 0)) {                                \
      ::nvkv::internal::CheckFailed(__FILE__, __LINE__, #condition);        \
    }                                                                       \
  } while (0)

#ifdef NDEBUG
#define NVKV_DCHECK(condition) \
  do {                         \
    if (false && (condition)) { \
    }                          \
  } while (0)
#else
#define NVKV_DCHECK(condition) NVKV_CHECK(condition)
#endif

#endif  // NVKV_STORAGE_BASE_CHECK_H_
