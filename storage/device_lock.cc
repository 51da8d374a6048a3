#include "storage/device_lock.h"

#include <sys/file.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace nvkv::storage {

absl::Status LockDeviceFile(int fd, const std::string& path, uint32_t wait_ms) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return absl::ErrnoToStatus(errno, absl::StrCat("flock ", path));
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": in use by another opener (exclusive lock held; waited ", wait_ms, " ms)"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

}  // namespace nvkv::storage
