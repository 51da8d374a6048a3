// The status of a failed system call, for the calls that take a file descriptor: running out of
// them is a limit the user can raise, and the message says which.
#ifndef NVKV_STORAGE_BASE_ERRNO_STATUS_H_
#define NVKV_STORAGE_BASE_ERRNO_STATUS_H_

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace nvkv {

// absl::ErrnoToStatus(err, call), except that EMFILE and ENFILE (no file descriptor left) are
// kResourceExhausted naming the open-files limit. `call` says what failed ("open PATH").
inline absl::Status ErrnoStatus(int err, absl::string_view call) {
  if (err == EMFILE || err == ENFILE) {
    return absl::ResourceExhaustedError(
        absl::StrCat(call, ": no file descriptor left (raise the open-files limit, ulimit -n)"));
  }
  return absl::ErrnoToStatus(err, call);
}

}  // namespace nvkv

#endif  // NVKV_STORAGE_BASE_ERRNO_STATUS_H_
