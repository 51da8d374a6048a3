// SyncFileDevice: the fallback for files and block devices where io_uring is unavailable
// (io_uring_setup fails with ENOSYS or EPERM, e.g. Docker's default seccomp profile or
// kernel.io_uring_disabled=2). Same Device contract, but each request is carried out with
// pread/pwrite/fdatasync inside Submit; Reap only runs callbacks. Correct, not fast.
#ifndef NVKV_STORAGE_SYNC_FILE_DEVICE_H_
#define NVKV_STORAGE_SYNC_FILE_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "storage/device.h"
#include "storage/device_lock.h"
#include "storage/file_open.h"

namespace nvkv::storage {

class SyncFileDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<SyncFileDevice>> Open(const std::string& path,
                                                              const DeviceOptions& options);
  ~SyncFileDevice() override;

  const DeviceInfo& info() const override { return info_; }
  BufferPool& buffers() override { return *pool_; }
  absl::Status Enqueue(IoRequest* request) override;
  absl::StatusOr<uint32_t> Submit() override;
  absl::StatusOr<uint32_t> Reap(uint32_t min_complete) override;
  uint32_t in_flight() const override {
    return static_cast<uint32_t>(queued_.size() + done_.size());
  }
  const IoStats& stats() const override { return stats_; }
  absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) override;
  absl::Status GrowFile(uint64_t bytes) override { return GrowRegularFile(fd_, bytes, &info_); }

  // Records why this backend was chosen (shown by info().notes).
  void AddNote(std::string note) { info_.notes.push_back(std::move(note)); }

  // A queue of this backend on `fd` (owned from now on; closed on error too), a file opened for
  // direct I/O by another queue of the family, for when that backend cannot make one (a ring
  // refused for the locked-memory limit). `info` is the family's, kind kSyncFile from now on.
  static absl::StatusOr<std::unique_ptr<Device>> QueueOnFd(int fd, DeviceInfo info,
                                                           const DeviceOptions& options,
                                                           const QueueOptions& queue_options);

 private:
  SyncFileDevice(DeviceInfo info, int fd, std::unique_ptr<BufferPool> pool,
                 const DeviceOptions& options);
  absl::Status Execute(const IoRequest& request);

  DeviceInfo info_;
  int fd_;
  bool unlock_on_close_ = false;  // the first queue drops the device lock explicitly
  DeviceClaim claim_;             // the first queue's: locks on the paired node (device_lock.h)
  std::unique_ptr<BufferPool> pool_;
  DeviceOptions options_;
  std::vector<IoRequest*> queued_;  // enqueued, not yet carried out
  std::vector<IoRequest*> done_;    // carried out, callbacks pending
  std::vector<IoRequest*> running_; // the batch whose callbacks Reap is running
  IoStats stats_;
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_SYNC_FILE_DEVICE_H_
