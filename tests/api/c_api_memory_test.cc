// The C API when memory runs out: no C++ exception (std::bad_alloc from the standard library)
// crosses into the caller, which may be C and cannot catch it. Each call reports it as
// kResourceExhausted through errptr, or, where a call has no errptr, through the next one that
// has (a batch that could not take an op refuses to be written).
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nvkv/nvkv_c.h"
#include "tests/testutil/temp_dir.h"

namespace {

// The process's address space in use now, in bytes (/proc/self/statm counts pages).
size_t AddressSpaceBytes() {
  long pages = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
  std::fclose(statm);
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// In a forked child: with the address space capped just above what is in use, a batch op that
// must copy 512 MiB cannot, and that must come back as an error (from the next nvkv_write), not
// an exception. Exit codes: 0 all well; others name the step that went wrong.
[[noreturn]] void RunOutOfMemory(const std::string& path) {
  char* err = nullptr;
  nvkv_options_t* options = nvkv_options_create();
  nvkv_options_set_capacity_bytes(options, 32u << 20);
  nvkv_t* db = nvkv_open(options, path.c_str(), &err);
  nvkv_options_destroy(options);
  if (db == nullptr) std::_Exit(10);
  // The source: 512 MiB of address space that exists before the cap (never touched).
  constexpr size_t kHuge = size_t{512} << 20;
  char* huge = static_cast<char*>(std::malloc(kHuge));
  if (huge == nullptr) std::_Exit(11);
  const rlimit cap{AddressSpaceBytes() + (size_t{64} << 20), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &cap) != 0) std::_Exit(12);

  nvkv_writebatch_t* batch = nvkv_writebatch_create();
  if (batch == nullptr) std::_Exit(13);
  nvkv_writebatch_put(batch, "small", 5, "v", 1);
  nvkv_writebatch_put(batch, "huge", 4, huge, kHuge);  // cannot be copied: must not throw
  // The cap lifted again (up to the hard limit, which stayed), so that what follows is not
  // refused memory too (a reading thread's queue, the engine's threads).
  const rlimit lifted{RLIM_INFINITY, RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &lifted) != 0) std::_Exit(19);
  nvkv_write(db, nullptr, batch, &err);
  if (err == nullptr) std::_Exit(14);  // an incomplete batch was written
  if (nvkv_errcode(err) != NVKV_RESOURCE_EXHAUSTED) {
    std::fprintf(stderr, "write: %s\n", err);
    std::_Exit(15);
  }
  nvkv_free(err);
  err = nullptr;
  size_t length = 0;
  char* value = nvkv_get(db, "small", 5, &length, &err);
  if (value != nullptr || err != nullptr) std::_Exit(16);  // nothing of the batch was written
  // After clearing it, the batch is usable again.
  nvkv_writebatch_clear(batch);
  nvkv_writebatch_put(batch, "small", 5, "v", 1);
  nvkv_write(db, nullptr, batch, &err);
  if (err != nullptr) {
    std::fprintf(stderr, "write after clear: %s\n", err);
    std::_Exit(17);
  }
  nvkv_writebatch_destroy(batch);
  nvkv_close(db, &err);
  if (err != nullptr) std::_Exit(18);
  std::_Exit(0);
}

TEST(CApiMemoryTest, AllocationFailureIsAnErrorNotAnException) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot cap it";
#endif
  nvkv::testing::TempDir dir;
  EXPECT_EXIT(RunOutOfMemory(dir.File("store")), ::testing::ExitedWithCode(0), "");
}

}  // namespace
