// The claim that keeps a second opener off a device: two writers would interleave their logs on
// the same segments, and a reader beside a writer would read a log that changes under it. A
// writer claims the device exclusively; readers share a claim that keeps writers off.
//
// Linux gives an NVMe namespace two nodes, the generic character device /dev/ngXnY (passthrough)
// and the block device /dev/nvmeXnY, and a lock on one inode does not cover the other. So the
// claim is on the namespace: whichever node the I/O goes through, both nodes are locked, always
// in the same order (generic first, then block), and the block node is also opened with O_EXCL,
// the kernel's own claim, which keeps off mkfs, mounts and device-mapper too (and which they
// hold against us). Every lock is waited for up to a bound: a process killed while it had the
// device open keeps the lock on its I/O file until the kernel has torn down its io_uring rings,
// some 100 ms after it is gone, and that release is the sign that none of its writes can still
// land.
#ifndef NVKV_STORAGE_DEVICE_LOCK_H_
#define NVKV_STORAGE_DEVICE_LOCK_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvkv::storage {

// How a device is claimed: by one writer alone, or by any number of readers at once (and then
// by no writer).
enum class ClaimMode : uint8_t {
  kExclusive,  // flock LOCK_EX on each node, and O_EXCL on the block node
  kShared,     // flock LOCK_SH on each node, no O_EXCL (which would keep other readers off)
};

// A writer's claim, or a reader's (DeviceOptions::read_only).
inline ClaimMode ClaimModeFor(bool read_only) {
  return read_only ? ClaimMode::kShared : ClaimMode::kExclusive;
}

// The two nodes of the NVMe namespace a device node belongs to, as /dev paths; each empty when
// there is none (a regular file has neither; a block device that is not a whole NVMe namespace,
// a partition say, has only itself as `block`).
struct NamespaceNodes {
  std::string generic;  // /dev/ngXnY
  std::string block;    // /dev/nvmeXnY
};

// The nodes of the namespace behind `path`, whose fstat is `st`, found through sysfs (the
// kernel's names, whatever /dev path or symlink the caller used): `path` itself for its own
// kind, and the paired node when sysfs lists it and `dev_root`/<name> is that very device.
// What could not be found is said in `notes`. `sys_root` and `dev_root` are for tests.
NamespaceNodes FindNamespaceNodes(const std::string& path, const struct stat& st,
                                  std::vector<std::string>* notes,
                                  const std::string& sys_root = "/sys",
                                  const std::string& dev_root = "/dev");

// Holds the part of a device's claim that is not on its I/O file: the files opened to lock the
// paired node and to claim the block node, closed (their locks and claim released) when it is
// destroyed. They are never registered in a ring, so that release is immediate. The lock on the
// I/O file itself is the device's to drop (it may outlive a close in the kernel's rings).
// Move-only.
class DeviceClaim {
 public:
  DeviceClaim() = default;
  DeviceClaim(DeviceClaim&& other) noexcept;
  DeviceClaim& operator=(DeviceClaim&& other) noexcept;
  DeviceClaim(const DeviceClaim&) = delete;
  DeviceClaim& operator=(const DeviceClaim&) = delete;
  ~DeviceClaim() { Close(); }

 private:
  friend absl::StatusOr<DeviceClaim> ClaimDevice(int io_fd, const std::string& path,
                                                 ClaimMode mode, uint32_t wait_ms,
                                                 std::vector<std::string>* notes);
  void Close();
  std::vector<int> held_fds_;
};

// Claims the device that `io_fd` (opened from `path`) is the I/O file of, in `mode`, waiting up
// to `wait_ms` in all, in this order:
//   1. the namespace's generic node is locked (flock): `io_fd` itself when it is that node;
//   2. the block node is opened read-only (kExclusive: with O_EXCL) and that file locked
//      (flock); when `io_fd` is the block node, it is locked too, since it is the file a dead
//      opener's rings hold;
//   3. a regular file: `io_fd` is locked.
// A shared claim needs no O_EXCL to keep a writer off: the writer's exclusive lock on the same
// node waits for every shared one.
// A paired node that cannot be opened (missing, or no permission: udev makes /dev/ngXnY
// root-only) is skipped with a note in `notes`: an opener of that node is then not kept off.
// Errors: kFailedPrecondition "in use" when a lock or the O_EXCL claim is still held by someone
// else after the wait; errno statuses for other failures.
absl::StatusOr<DeviceClaim> ClaimDevice(int io_fd, const std::string& path, ClaimMode mode,
                                        uint32_t wait_ms, std::vector<std::string>* notes);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_DEVICE_LOCK_H_
