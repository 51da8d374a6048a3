// Which sanitizer a test binary is built with, for tests whose measurements a sanitizer's own
// memory or allocations would distort.
#ifndef NVKV_TESTS_TESTUTIL_SANITIZERS_H_
#define NVKV_TESTS_TESTUTIL_SANITIZERS_H_

// NVKV_UNDER_ASAN: built with AddressSanitizer (GCC's macro, or clang's feature test).
#if defined(__SANITIZE_ADDRESS__)
#define NVKV_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVKV_UNDER_ASAN 1
#endif
#endif

// NVKV_UNDER_TSAN: built with ThreadSanitizer.
#if defined(__SANITIZE_THREAD__)
#define NVKV_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NVKV_UNDER_TSAN 1
#endif
#endif

#endif  // NVKV_TESTS_TESTUTIL_SANITIZERS_H_
