// FUZZ_REQUIRE: the property checks of the fuzz targets. A failed one prints what was wrong and
// aborts, which libFuzzer reports as a crash and saves the input for (fuzz/README.md).
#ifndef NVKV_FUZZ_FUZZ_CHECK_H_
#define NVKV_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_REQUIRE(condition, ...)                                                   \
  do {                                                                                 \
    if (!(condition)) {                                                                \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n  ", __FILE__, __LINE__, \
                   #condition);                                                        \
      std::fprintf(stderr, "" __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                      \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

#endif  // NVKV_FUZZ_FUZZ_CHECK_H_
