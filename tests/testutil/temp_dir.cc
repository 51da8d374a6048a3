#include "tests/testutil/temp_dir.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include "storage/base/check.h"

namespace nvkv::testing {

TempDir::TempDir() {
  const char* base = std::getenv("NVKV_TEST_DIR");
  std::string pattern = std::string(base != nullptr ? base : ".") + "/nvkv-test-XXXXXX";
  NVKV_CHECK(mkdtemp(pattern.data()) != nullptr);
  path_ = std::filesystem::absolute(pattern).string();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace nvkv::testing
