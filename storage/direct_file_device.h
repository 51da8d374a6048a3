// DirectFileDevice: a regular file or block device opened with O_DIRECT, driven through io_uring
// with fixed-buffer reads and writes (IORING_OP_READ_FIXED / WRITE_FIXED) from the registered
// pool, and fdatasync (IORING_OP_FSYNC + IORING_FSYNC_DATASYNC) as the flush. The embedded
// default: a plain file path works on any Linux machine with io_uring.
#ifndef NVKV_STORAGE_DIRECT_FILE_DEVICE_H_
#define NVKV_STORAGE_DIRECT_FILE_DEVICE_H_

#include <memory>
#include <string>

#include "storage/file_open.h"
#include "storage/ring_device.h"

namespace nvkv::storage {

class DirectFileDevice final : public RingDevice {
 public:
  // Opens `path` (see OpenFileForDirectIo for the checks). Fails with kUnimplemented or
  // kPermissionDenied when io_uring itself is unavailable, so the caller can fall back.
  static absl::StatusOr<std::unique_ptr<DirectFileDevice>> Open(const std::string& path,
                                                                const DeviceOptions& options);

  absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) override;
  absl::Status GrowFile(uint64_t bytes) override { return GrowRegularFile(fd(), bytes, &info_); }

 private:
  using RingDevice::RingDevice;
  // Wraps an already-open fd (owned from then on) in a new ring and pool.
  static absl::StatusOr<std::unique_ptr<DirectFileDevice>> Create(int fd, DeviceInfo info,
                                                                  const DeviceOptions& options);

  uint32_t SqeCount(const IoRequest& request) const override;
  void PrepareSqes(IoRequest* request, io_uring_sqe** sqes) override;
  absl::Status CompletionStatus(IoRequest& request, const io_uring_cqe& cqe) override;

  DeviceOptions options_;
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_DIRECT_FILE_DEVICE_H_
