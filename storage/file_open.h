// Opening a regular file or block device for direct I/O: the checks and geometry shared by the
// io_uring file backend and the pread/pwrite fallback.
#ifndef NVKV_STORAGE_FILE_OPEN_H_
#define NVKV_STORAGE_FILE_OPEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "storage/device.h"
#include "storage/device_lock.h"

namespace nvkv::storage {

struct OpenedFile {
  int fd = -1;      // owned by the caller once returned
  DeviceInfo info;  // path, lba_bytes, lba_count, memory_alignment, block_device, zoned
  DeviceClaim claim;  // with options.lock_device: the files that lock the paired node
};

// Opens `path` with O_DIRECT (creating and sizing a regular file when options.create_bytes asks),
// takes the exclusive lock, and reads the geometry. Clear errors for a missing path, missing
// permission, a directory or character device, a device below options.min_bytes, a lock held
// by another opener, or a zoned block device (kInvalidArgument, naming the namespace's NVMe
// generic node when it has one, unless options.zoned_access is kAnyNode).
absl::StatusOr<OpenedFile> OpenFileForDirectIo(const std::string& path,
                                               const DeviceOptions& options);

// Device::GrowFile for the file-backed devices: extends the regular file `fd` (described by
// `info`, whose lba_count it updates) to `bytes`.
absl::Status GrowRegularFile(int fd, uint64_t bytes, DeviceInfo* info);

// Duplicates `fd` for another queue on the same open file (shares the lock).
absl::StatusOr<int> DuplicateFd(int fd);

// The status of `request` failed with errno `err` by `call` ("read", "pwrite", "fdatasync") on a
// file or block device: "write 8 blocks at LBA 16 of /dev/nvme0n1: No data available (medium
// error: ...)". ENOSPC is kResourceExhausted; so is ECANCELED (io_uring found no worker thread). On a block device the kernel turns the drive's
// status into an errno (the NVMe driver's Write Fault becomes ENODATA, Capacity Exceeded ENOSPC,
// LBA Out of Range EREMOTEIO, ...): the message says what the drive reported.
absl::Status FileIoError(int err, const char* call, const IoRequest& request,
                         const DeviceInfo& info);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_FILE_OPEN_H_
