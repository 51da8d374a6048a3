#include "tests/testutil/killed_writer.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace nvkv::testing {

absl::StatusOr<int64_t> KillWriterAfter(uint32_t wanted,
                                        absl::FunctionRef<void(int ack_fd)> writer) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::ErrnoToStatus(errno, "pipe");
  const pid_t child = fork();
  if (child < 0) return absl::ErrnoToStatus(errno, "fork");
  if (child == 0) {
    close(pipe_fds[0]);
    writer(pipe_fds[1]);
    std::_Exit(30);  // writers do not return
  }
  close(pipe_fds[1]);
  int64_t acknowledged = -1;
  uint32_t index = 0;
  while (acknowledged + 1 < wanted && read(pipe_fds[0], &index, sizeof(index)) == sizeof(index)) {
    acknowledged = index;
  }
  kill(child, SIGKILL);
  int wait_status = 0;
  const pid_t reaped = waitpid(child, &wait_status, 0);
  while (read(pipe_fds[0], &index, sizeof(index)) == sizeof(index)) acknowledged = index;
  close(pipe_fds[0]);
  if (reaped != child) return absl::ErrnoToStatus(errno, "waitpid");
  if (!WIFSIGNALED(wait_status)) {
    return absl::InternalError(
        absl::StrCat("the writer ended by itself: wait status ", wait_status, " after ",
                     acknowledged + 1, " acknowledged writes"));
  }
  return acknowledged;
}

}  // namespace nvkv::testing
