// Running a tool under test as a child process: its output through files (nothing blocks on a
// pipe), killed and reported as a test failure when it hangs.
#ifndef NVKV_TESTS_TESTUTIL_SUBPROCESS_H_
#define NVKV_TESTS_TESTUTIL_SUBPROCESS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace nvkv::testing {

struct ProcessRun {
  int exit_code = -1;  // -1 when it did not exit normally (a signal, or not started)
  std::string out;
  std::string err;  // empty when stderr_fd is set
};

struct ProcessOptions {
  std::string dir;    // its working directory, where .stdin, .stdout and .stderr are kept
  std::string input;  // its stdin
  std::vector<std::string> env;  // its whole environment ("NAME=value"); empty: this process's
  int stderr_fd = -1;            // >= 0: its stderr goes there (e.g. a terminal), not captured
  absl::Duration limit = absl::Seconds(60);
};

// Runs argv[0] (a path) with `argv`; a run that is still going after `limit` is killed.
ProcessRun RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options);

}  // namespace nvkv::testing

#endif  // NVKV_TESTS_TESTUTIL_SUBPROCESS_H_
