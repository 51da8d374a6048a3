#include "storage/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/base/errno_status.h"
#include "storage/base/status_macros.h"

namespace nvkv::storage {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGenericPrefix = "ng";
constexpr std::string_view kBlockPrefix = "nvme";

// The namespace part of a node's kernel name, "0n1" of "ng0n1" or "nvme0n1": `prefix` then
// digits, 'n', digits. Empty for anything else (controllers "nvme0", partitions "nvme0n1p1",
// multipath's hidden per-path nodes "nvme0c0n1").
std::string_view NamespaceSuffix(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return {};
  const std::string_view rest = name.substr(prefix.size());
  const size_t n = rest.find('n');
  if (n == 0 || n == std::string_view::npos || n + 1 == rest.size()) return {};
  for (size_t i = 0; i < rest.size(); ++i) {
    if (i != n && !std::isdigit(static_cast<unsigned char>(rest[i]))) return {};
  }
  return rest;
}

std::string DeviceNumber(dev_t rdev) { return absl::StrCat(major(rdev), ":", minor(rdev)); }

// The kernel's name of device `rdev` ("ng0n1", "nvme0n1") from sysfs' /dev/{char,block} links,
// or empty.
std::string KernelName(const std::string& sys_root, bool block, dev_t rdev) {
  std::error_code error;
  const fs::path device = fs::canonical(
      fs::path(sys_root) / "dev" / (block ? "block" : "char") / DeviceNumber(rdev), error);
  return error ? std::string() : device.filename().string();
}

// `dev_root`/`name` when it is the device that sysfs lists as `class_dir`/`name`; else empty,
// with a note saying why.
std::string PairedNode(const std::string& sys_root, const std::string& dev_root,
                       std::string_view class_dir, const std::string& name, bool block,
                       std::vector<std::string>* notes) {
  std::ifstream sysfs_dev(fs::path(sys_root) / class_dir / name / "dev");
  std::string number;
  if (!std::getline(sysfs_dev, number)) return {};  // the kernel has no such node
  const std::string node = (fs::path(dev_root) / name).string();
  struct stat st;
  if (stat(node.c_str(), &st) != 0 || (block ? !S_ISBLK(st.st_mode) : !S_ISCHR(st.st_mode)) ||
      DeviceNumber(st.st_rdev) != number) {
    notes->push_back(absl::StrCat("the namespace's other node ", name, " (device ", number,
                                  ") is not at ", node, ": an opener of it is not kept off"));
    return {};
  }
  return node;
}

absl::Status InUse(const std::string& path, std::string_view what, uint32_t wait_ms) {
  // The "in use by another opener" prefix is what callers and users match on.
  return absl::FailedPreconditionError(absl::StrCat(
      path, ": in use by another opener (", std::string(what), "; waited ", wait_ms, " ms)"));
}

// flock on `fd` of `path` (LOCK_EX or LOCK_SH, by `mode`), retried until `deadline`.
absl::Status LockUntil(int fd, const std::string& path, ClaimMode mode, absl::Time deadline,
                       uint32_t wait_ms) {
  const int operation = mode == ClaimMode::kExclusive ? LOCK_EX : LOCK_SH;
  while (flock(fd, operation | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return absl::ErrnoToStatus(errno, absl::StrCat("flock ", path));
    if (absl::Now() >= deadline) {
      return InUse(path,
                   mode == ClaimMode::kExclusive ? "locked by a writer or by readers"
                                                 : "locked by a writer",
                   wait_ms);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::OkStatus();
}

// A read-only file of block device `path`, for kExclusive opened with O_EXCL (the kernel's
// exclusive claim), retried until `deadline` while someone else holds that claim.
absl::StatusOr<int> ClaimBlockUntil(const std::string& path, ClaimMode mode,
                                    absl::Time deadline, uint32_t wait_ms) {
  const int exclusive = mode == ClaimMode::kExclusive ? O_EXCL : 0;
  while (true) {
    const int fd = open(path.c_str(), O_RDONLY | exclusive | O_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno == EINTR) continue;
    if (errno != EBUSY) return ErrnoStatus(errno, absl::StrCat("open ", path));
    if (absl::Now() >= deadline) {
      return InUse(path,
                   "claimed exclusively: another opener, a mounted file system or a "
                   "device mapper",
                   wait_ms);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace

NamespaceNodes FindNamespaceNodes(const std::string& path, const struct stat& st,
                                  std::vector<std::string>* notes, const std::string& sys_root,
                                  const std::string& dev_root) {
  NamespaceNodes nodes;
  const bool block = S_ISBLK(st.st_mode);
  if (!block && !S_ISCHR(st.st_mode)) return nodes;
  (block ? nodes.block : nodes.generic) = path;
  const std::string name = KernelName(sys_root, block, st.st_rdev);
  const std::string_view suffix = NamespaceSuffix(name, block ? kBlockPrefix : kGenericPrefix);
  if (suffix.empty()) return nodes;  // not a whole NVMe namespace: no pair
  if (block) {
    nodes.generic = PairedNode(sys_root, dev_root, "class/nvme-generic",
                               std::string(kGenericPrefix).append(suffix), false, notes);
  } else {
    nodes.block = PairedNode(sys_root, dev_root, "class/block",
                             std::string(kBlockPrefix).append(suffix), true, notes);
  }
  return nodes;
}

DeviceClaim::DeviceClaim(DeviceClaim&& other) noexcept
    : held_fds_(std::exchange(other.held_fds_, {})) {}

DeviceClaim& DeviceClaim::operator=(DeviceClaim&& other) noexcept {
  if (this != &other) {
    Close();
    held_fds_ = std::exchange(other.held_fds_, {});
  }
  return *this;
}

void DeviceClaim::Close() {
  for (const int fd : held_fds_) close(fd);
  held_fds_.clear();
}

absl::StatusOr<DeviceClaim> ClaimDevice(int io_fd, const std::string& path, ClaimMode mode,
                                        uint32_t wait_ms, std::vector<std::string>* notes) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
  struct stat st;
  if (fstat(io_fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  DeviceClaim claim;
  if (!S_ISBLK(st.st_mode) && !S_ISCHR(st.st_mode)) {
    NVKV_RETURN_IF_ERROR(LockUntil(io_fd, path, mode, deadline, wait_ms));
    return claim;
  }
  const NamespaceNodes nodes = FindNamespaceNodes(path, st, notes);
  // 1. The generic node.
  if (S_ISCHR(st.st_mode)) {
    NVKV_RETURN_IF_ERROR(LockUntil(io_fd, path, mode, deadline, wait_ms));
  } else if (!nodes.generic.empty()) {
    const int fd = open(nodes.generic.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      notes->push_back(absl::StrCat("cannot open the namespace's other node ", nodes.generic,
                                    " to lock it (", std::strerror(errno),
                                    "): an opener of it is not kept off"));
    } else {
      claim.held_fds_.push_back(fd);
      NVKV_RETURN_IF_ERROR(LockUntil(fd, nodes.generic, mode, deadline, wait_ms));
    }
  }
  // 2. The block node: claimed with O_EXCL (kExclusive), and locked. Two files of one inode lock
  //    each other out even in one process, so when the I/O file is the block node, it is the one
  //    locked.
  if (!nodes.block.empty()) {
    const bool io_is_block = S_ISBLK(st.st_mode);
    absl::StatusOr<int> claimed = ClaimBlockUntil(nodes.block, mode, deadline, wait_ms);
    if (!claimed.ok()) {
      if (io_is_block ||
          !(absl::IsNotFound(claimed.status()) || absl::IsPermissionDenied(claimed.status()))) {
        return claimed.status();
      }
      notes->push_back(absl::StrCat("cannot claim the namespace's other node ", nodes.block, " (",
                                    claimed.status().message(),
                                    "): an opener of it is not kept off"));
    } else {
      claim.held_fds_.push_back(*claimed);
      NVKV_RETURN_IF_ERROR(LockUntil(io_is_block ? io_fd : *claimed,
                                     io_is_block ? path : nodes.block, mode, deadline,
                                     wait_ms));
    }
  }
  return claim;
}

}  // namespace nvkv::storage
