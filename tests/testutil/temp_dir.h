// A fresh directory, removed at the end of the test.
// Direct I/O needs a real file system: tmpfs refuses O_DIRECT on older kernels, so tests use
// NVKV_TEST_DIR when set, else the build's working directory.
#ifndef NVKV_TESTS_TESTUTIL_TEMP_DIR_H_
#define NVKV_TESTS_TESTUTIL_TEMP_DIR_H_

#include <string>

namespace nvkv::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_TEMP_DIR_H_
