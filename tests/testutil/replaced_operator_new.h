// Replaces the global operator new and delete of the test binary that includes this header, in
// exactly one of its source files, with functions that take their memory from
// nvkv::testing::TestAllocate, which that binary defines: to count the allocations a thread makes,
// or to make some fail. Never include it in a library: every binary linking it would get these.
//
// TestAllocate(bytes, alignment) returns memory for `bytes` (at least 1) aligned to `alignment`,
// to be released with std::free, or null when the allocation is to fail: the throwing forms of
// new then throw std::bad_alloc, the nothrow ones return null.
#ifndef NVKV_TESTS_TESTUTIL_REPLACED_OPERATOR_NEW_H_
#define NVKV_TESTS_TESTUTIL_REPLACED_OPERATOR_NEW_H_

#include <cstddef>
#include <cstdlib>
#include <new>

// GCC, inlining these into a test (at -O1: tests/CMakeLists.txt), warns that the std::free calls
// below release memory that operator new gave: they are meant to (TestAllocate's memory goes back
// with std::free). Silenced for the rest of the source file that includes this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace nvkv::testing {

void* TestAllocate(size_t bytes, size_t alignment);

// What the default operator new would do: malloc, or aligned_alloc beyond malloc's alignment.
inline void* SystemAllocate(size_t bytes, size_t alignment) {
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes == 0 ? 1 : bytes);
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

inline void* TestAllocateOrThrow(size_t bytes, size_t alignment) {
  void* p = TestAllocate(bytes, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace nvkv::testing

void* operator new(size_t bytes) {
  return nvkv::testing::TestAllocateOrThrow(bytes, alignof(std::max_align_t));
}
void* operator new[](size_t bytes) {
  return nvkv::testing::TestAllocateOrThrow(bytes, alignof(std::max_align_t));
}
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  return nvkv::testing::TestAllocate(bytes, alignof(std::max_align_t));
}
void* operator new[](size_t bytes, const std::nothrow_t&) noexcept {
  return nvkv::testing::TestAllocate(bytes, alignof(std::max_align_t));
}
void* operator new(size_t bytes, std::align_val_t align) {
  return nvkv::testing::TestAllocateOrThrow(bytes, static_cast<size_t>(align));
}
void* operator new[](size_t bytes, std::align_val_t align) {
  return nvkv::testing::TestAllocateOrThrow(bytes, static_cast<size_t>(align));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

#endif  // NVKV_TESTS_TESTUTIL_REPLACED_OPERATOR_NEW_H_
