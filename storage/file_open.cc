#include "storage/file_open.h"

#include <fcntl.h>
#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "storage/base/align.h"
#include "storage/base/errno_status.h"
#include "storage/base/status_macros.h"
#include "storage/device_lock.h"

namespace nvkv::storage {
namespace {

// Closes the fd on every early return.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// Why a file of type `mode` (st_mode) cannot hold a store: only a regular file or a block device
// can (an NVMe generic character device is the passthrough backend's, nvme_device.h).
absl::Status NotAStoreFile(const std::string& path, mode_t mode) {
  const char* what = S_ISDIR(mode)    ? ": is a directory"
                     : S_ISCHR(mode)  ? ": is a character device; only NVMe generic devices "
                                        "(/dev/ngXnY) are supported as character devices"
                     : S_ISFIFO(mode) ? ": is a FIFO (named pipe), not a store file or device"
                     : S_ISSOCK(mode) ? ": is a socket, not a store file or device"
                                      : ": neither a regular file nor a block device";
  return absl::InvalidArgumentError(absl::StrCat(path, what));
}

absl::Status OpenError(int err, const std::string& path, bool read_only) {
  // O_DIRECT is refused (EINVAL) before the kind of file is looked at: a directory or a
  // character device is named as such, not taken for a file system without direct I/O.
  struct stat st;
  if (err == EINVAL && stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) &&
      !S_ISBLK(st.st_mode)) {
    return NotAStoreFile(path, st.st_mode);
  }
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          path, read_only ? ": permission denied (need read access)"
                          : ": permission denied (need read and write access; a reader may open "
                            "it read-only)"));
    case EROFS:
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": on a read-only file system (a reader may open it read-only)"));
    case EINVAL:
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the file system does not support O_DIRECT"));
    case EISDIR:
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
    default:
      return ErrnoStatus(err, absl::StrCat("open ", path));
  }
}

// The direct-I/O alignment the file system asks for: statx(STATX_DIOALIGN) on 6.1+, else 512
// for offsets and 512 for memory (the historic O_DIRECT rule on block-backed file systems).
void DirectIoAlignment(int fd, uint32_t* offset_align, uint32_t* memory_align) {
  *offset_align = 512;
  *memory_align = 512;
  struct statx stx;
  std::memset(&stx, 0, sizeof(stx));
  if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_offset_align != 0) {
    *offset_align = stx.stx_dio_offset_align;
    *memory_align = stx.stx_dio_mem_align;
  }
}

// Writes zeros over bytes [from, to) of a new or grown file. posix_fallocate leaves "unwritten"
// extents, and on ext4 and XFS the first write into one must also commit a metadata change:
// every durable page write would pay a journal commit (measured here: ~25 ms instead of ~3 ms
// per durable write). Writing the file once up front (1 GiB takes about a second) keeps that off
// the write path.
absl::Status ZeroFill(int fd, uint64_t from, uint64_t to, uint32_t alignment) {
  constexpr size_t kChunkBytes = 1 << 20;
  void* zeros = nullptr;
  if (posix_memalign(&zeros, std::max<size_t>(alignment, 4096), kChunkBytes) != 0) {
    return absl::ResourceExhaustedError("no memory to zero-fill the store file");
  }
  std::memset(zeros, 0, kChunkBytes);
  absl::Status status;
  for (uint64_t offset = from; offset < to && status.ok();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, to - offset));
    const ssize_t written = pwrite(fd, zeros, n, static_cast<off_t>(offset));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      status = errno == ENOSPC ? absl::ResourceExhaustedError("no space to zero-fill the store")
                               : absl::ErrnoToStatus(errno, "zero-filling the store file");
      break;
    }
    offset += static_cast<uint64_t>(written);
  }
  free(zeros);
  if (status.ok() && fdatasync(fd) != 0) status = absl::ErrnoToStatus(errno, "fdatasync");
  return status;
}

// Reserves bytes [from, to) of the regular file `fd` (posix_fallocate: a full file system shows
// up now, not mid-write) and, with `zero_fill`, writes zeros over them (ZeroFill): a store file
// created, or grown.
absl::Status AllocateRange(int fd, const std::string& path, uint64_t from, uint64_t to,
                           uint32_t alignment, bool zero_fill) {
  // Past the file size limit (ulimit -f) the kernel sends SIGXFSZ, which ends the process unless
  // it is ignored: the limit is checked first.
  struct rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      to > limit.rlim_cur) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": a ", to, "-byte store is over the file size limit (ulimit -f) of ",
                     limit.rlim_cur, " bytes"));
  }
  const int err = posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from));
  if (err == ENOSPC) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": no space for a ", to, "-byte store"));
  }
  if (err != 0) return absl::ErrnoToStatus(err, absl::StrCat("fallocate ", path));
  return zero_fill ? ZeroFill(fd, from, to, alignment) : absl::OkStatus();
}

// True when `path`'s directory, with symbolic links and dot-dots resolved, is /dev or below.
bool UnderDev(const std::string& path) {
  std::error_code error;
  const std::filesystem::path parent = std::filesystem::absolute(path, error).parent_path();
  if (error) return false;
  const std::filesystem::path directory = std::filesystem::weakly_canonical(parent, error);
  if (error) return false;  // a missing directory: the create fails with ENOENT by itself
  const std::string resolved = directory.string();
  return resolved == "/dev" || resolved.rfind("/dev/", 0) == 0;
}

// The NVMe generic node (/dev/ngXnY) of block device `fd`, an NVMe namespace's block node
// (nvmeXnY), or "" when it is not one. The kernel names the generic node after the controller
// and the namespace: when the block node's parent in sysfs is its controller (nvmeC), ngCnY;
// under native multipath the block node is named after the subsystem instead, which usually
// numbers like its first controller, so ngXnY is the best guess there.
std::string GenericNodeOf(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "";
  std::error_code error;
  const std::filesystem::path node = std::filesystem::canonical(
      absl::StrCat("/sys/dev/block/", major(st.st_rdev), ":", minor(st.st_rdev)), error);
  if (error) return "";
  const std::string name = node.filename().string();
  const std::string parent = node.parent_path().filename().string();
  const size_t n = name.rfind('n');
  if (name.rfind("nvme", 0) != 0 || n == std::string::npos || n <= 4) return "";
  const std::string controller =
      parent.rfind("nvme", 0) == 0 && parent.find_first_not_of("0123456789", 4) ==
                                          std::string::npos
          ? parent.substr(4)
          : name.substr(4, n - 4);
  return absl::StrCat("/dev/ng", controller, name.substr(n));
}

// Why a zoned block device is refused: nvkv writes zones only by NVMe passthrough.
absl::Status ZonedBlockDeviceError(const std::string& path, int fd, uint32_t zone_sectors) {
  const std::string generic = GenericNodeOf(fd);
  if (generic.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": zoned block device (", zone_sectors,
        "-sector zones): nvkv writes zones only through an NVMe generic node (/dev/ngXnY)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": zoned namespace (", zone_sectors,
      "-sector zones): its block node cannot give nvkv Zone Append; open its NVMe generic node ",
      generic, " instead"));
}

}  // namespace

absl::StatusOr<OpenedFile> OpenFileForDirectIo(const std::string& path,
                                               const DeviceOptions& options) {
  if (path.empty()) return absl::InvalidArgumentError("empty device path");
  if (options.read_only && options.create_bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a read-only open creates no file"));
  }
  // O_NONBLOCK: opening a FIFO would wait for a writer otherwise (it is refused below, and the
  // flag cleared on what is kept: io_uring must not see it on a file).
  const int flags = (options.read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC | O_NONBLOCK;
  bool created = false;
  int fd = open(path.c_str(), flags);
  if (fd < 0 && errno == ENOENT && options.create_bytes > 0) {
    if (UnderDev(path)) {
      // /dev is devtmpfs: a "store" created there would live in memory, and a mistyped device
      // name would be formatted as one.
      return absl::NotFoundError(absl::StrCat(
          path, ": no such device (nvkv creates store files, but never under /dev)"));
    }
    fd = open(path.c_str(), flags | O_CREAT | O_EXCL, 0644);
    created = fd >= 0;
  }
  if (fd < 0) return OpenError(errno, path, options.read_only);
  FdCloser closer{fd};
  // A file this call created is removed again if the open fails later on.
  struct CreatedFileRemover {
    const std::string& path;
    bool armed;
    ~CreatedFileRemover() {
      if (armed) unlink(path.c_str());
    }
  } remover{path, created};

  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  OpenedFile opened;
  opened.info.path = path;
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) return NotAStoreFile(path, st.st_mode);
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fcntl ", path));
  }
  if (options.lock_device) {
    NVKV_ASSIGN_OR_RETURN(opened.claim,
                          ClaimDevice(fd, path, ClaimModeFor(options.read_only),
                                      options.lock_wait_ms, &opened.info.notes));
  }

  uint64_t size_bytes = 0;
  if (S_ISBLK(st.st_mode)) {
    opened.info.block_device = true;
    int logical = 0;
    if (ioctl(fd, BLKSSZGET, &logical) != 0 || logical <= 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("BLKSSZGET ", path));
    }
    if (ioctl(fd, BLKGETSIZE64, &size_bytes) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("BLKGETSIZE64 ", path));
    }
    opened.info.lba_bytes = static_cast<uint32_t>(logical);
    opened.info.memory_alignment = static_cast<uint32_t>(logical);
    // A zoned block device (e.g. the block node of a ZNS namespace) takes writes only at each
    // zone's write pointer. BLKGETZONESZ gives the zone size in sectors, 0 when not zoned.
    uint32_t zone_sectors = 0;
    opened.info.zoned = ioctl(fd, BLKGETZONESZ, &zone_sectors) == 0 && zone_sectors != 0;
    if (opened.info.zoned && options.zoned_access != ZonedAccess::kAnyNode) {
      return ZonedBlockDeviceError(path, fd, zone_sectors);
    }
  } else {
    uint32_t offset_align = 0, memory_align = 0;
    DirectIoAlignment(fd, &offset_align, &memory_align);
    opened.info.lba_bytes = offset_align;
    opened.info.memory_alignment = memory_align;
    if (created) {
      const uint64_t want = AlignDown(options.create_bytes, offset_align);
      // (On an error, `remover` takes the file away again.)
      if (want == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot create ", path, " with ", options.create_bytes, " bytes"));
      }
      NVKV_RETURN_IF_ERROR(
          AllocateRange(fd, path, 0, want, offset_align, options.zero_fill_on_create));
      size_bytes = want;
    } else {
      size_bytes = static_cast<uint64_t>(st.st_size);
    }
  }
  opened.info.lba_count = size_bytes / opened.info.lba_bytes;
  if (opened.info.capacity_bytes() < options.min_bytes || opened.info.lba_count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": too small: ", opened.info.capacity_bytes(), " bytes, need ",
                     options.min_bytes));
  }
  opened.info.created = created;
  opened.info.read_only = options.read_only;
  opened.fd = fd;
  closer.fd = -1;
  remover.armed = false;
  return opened;
}

namespace {

// What the block layer's errno for a failed bio says the device reported (Linux maps a
// driver's blk_status_t to these in blk_status_to_errno; the NVMe driver maps its statuses to
// blk_status_t in nvme_error_status). Empty for an errno with no such meaning.
const char* BlockStatusMeaning(int err) {
  switch (err) {
    case ENODATA:
      return "medium error: the device could not read or write these blocks, as on an NVMe "
             "Write Fault, Unrecovered Read Error or write to a read-only range";
    case ENOSPC:
      return "the device is out of capacity, as on an NVMe Capacity Exceeded";
    case EREMOTEIO:
      return "the device refused the command, as on an NVMe LBA Out of Range or Namespace Not "
             "Ready";
    case EILSEQ:
      return "protection information check failed";
    case EBADE:
      return "reservation conflict: another host holds a reservation on the namespace";
    case ENOLINK:
      return "path or transport error";
    case EOPNOTSUPP:
      return "the device does not support the command";
    case EIO:
      return "the device reported an error; the kernel log may say which";
    default:
      return nullptr;
  }
}

}  // namespace

absl::Status FileIoError(int err, const char* call, const IoRequest& request,
                         const DeviceInfo& info) {
  std::string where = absl::StrCat(call, " of ", info.path);
  if (request.op != IoOp::kFlush) {
    where = absl::StrCat(call, " ", request.lba_count, " blocks at LBA ", request.lba, " of ",
                         info.path);
  }
  const char* meaning = info.block_device ? BlockStatusMeaning(err) : nullptr;
  if (err == ECANCELED) {
    // nvkv cancels no request: io_uring does, when it has to hand one to a worker thread (a
    // flush, or a write the file system cannot take at once) and cannot start one.
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": cancelled by io_uring, which could not start a worker thread for it (the limit "
               "on processes, ulimit -u, may be too low)"));
  }
  if (err == ENOSPC) {
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": no space left", meaning != nullptr ? absl::StrCat(" (", meaning, ")") : ""));
  }
  const absl::Status status = absl::ErrnoToStatus(err, where);
  if (meaning == nullptr) return status;
  // The bytes of a medium error or a failed integrity check cannot be trusted (ErrnoToStatus
  // would call ENODATA kNotFound, as if the key were absent).
  const absl::StatusCode code = err == ENODATA || err == EILSEQ ? absl::StatusCode::kDataLoss
                                                                : status.code();
  return absl::Status(code, absl::StrCat(status.message(), " (", meaning, ")"));
}

absl::Status GrowRegularFile(int fd, uint64_t bytes, DeviceInfo* info) {
  if (info->read_only) {
    return absl::FailedPreconditionError(absl::StrCat(info->path, ": opened read-only"));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", info->path));
  if (!S_ISREG(st.st_mode)) {
    return absl::UnimplementedError(
        absl::StrCat(info->path, ": only a regular file can be grown"));
  }
  const uint64_t from = static_cast<uint64_t>(st.st_size);
  const uint64_t to = bytes / info->lba_bytes * info->lba_bytes;
  if (to > from) {
    NVKV_RETURN_IF_ERROR(AllocateRange(fd, info->path, from, to, info->lba_bytes,
                                       /*zero_fill=*/true));
  }
  info->lba_count = std::max<uint64_t>(to, from) / info->lba_bytes;
  return absl::OkStatus();
}

absl::StatusOr<int> DuplicateFd(int fd) {
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return ErrnoStatus(errno, "dup of the store's file for another queue");
  return copy;
}

void RemoveCreatedFile(const DeviceInfo& info) {
  if (info.created && !info.path.empty()) unlink(info.path.c_str());
}

}  // namespace nvkv::storage
