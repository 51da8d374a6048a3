#include "tests/testutil/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace nvkv::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

}  // namespace

ProcessRun RunProcess(const std::vector<std::string>& argv_in, const ProcessOptions& options) {
  const std::string in_path = options.dir + "/.stdin", out_path = options.dir + "/.stdout",
                    err_path = options.dir + "/.stderr";
  {
    std::ofstream in(in_path, std::ios::binary | std::ios::trunc);
    in.write(options.input.data(), static_cast<std::streamsize>(options.input.size()));
  }
  std::vector<std::string> argv_strings = argv_in;
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = options.env;
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  if (options.stderr_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, options.stderr_fd, 2);
  } else {
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
  }
  posix_spawn_file_actions_addchdir_np(&actions, options.dir.c_str());
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(),
                                  options.env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ProcessRun run;
  if (spawned != 0) {
    ADD_FAILURE() << "posix_spawn " << argv_in[0] << ": " << strerror(spawned);
    return run;
  }
  // A run that hangs is killed, and fails the test, instead of stopping the suite.
  int status = 0;
  const absl::Time deadline = absl::Now() + options.limit;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ADD_FAILURE() << absl::StrJoin(argv_in, " ") << ": still running after "
                    << absl::FormatDuration(options.limit) << "; killed";
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(WIFEXITED(status)) << "killed by a signal: " << status;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadAll(out_path);
  run.err = options.stderr_fd >= 0 ? "" : ReadAll(err_path);
  return run;
}

}  // namespace nvkv::testing
