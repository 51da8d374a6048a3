// The exclusive lock that keeps a second opener off a device: two writers would interleave
// their logs on the same segments.
#ifndef NVKV_STORAGE_DEVICE_LOCK_H_
#define NVKV_STORAGE_DEVICE_LOCK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace nvkv::storage {

// Takes an exclusive advisory lock (flock) on `fd`, the I/O file of `path`. Held by another
// open file, it is retried for up to `wait_ms`: a process killed while it had the device open
// keeps the lock until the kernel has torn down its io_uring rings, which it does after the
// process is gone (some 100 ms later), and the lock's release is the sign that none of the dead
// process's writes can still land. Then kFailedPrecondition, saying how long it waited.
absl::Status LockDeviceFile(int fd, const std::string& path, uint32_t wait_ms);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_DEVICE_LOCK_H_
