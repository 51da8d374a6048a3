#include "storage/sync_file_device.h"

#include <sys/file.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "storage/file_open.h"

namespace nvkv::storage {

absl::StatusOr<std::unique_ptr<SyncFileDevice>> SyncFileDevice::Open(
    const std::string& path, const DeviceOptions& options) {
  if (options.ring.queue_depth == 0 || options.ring.queue_depth > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("queue depth ", options.ring.queue_depth,
                                                   " must be between 1 and 4096"));
  }
  auto opened = OpenFileForDirectIo(path, options);
  if (!opened.ok()) return opened.status();
  auto pool = BufferPool::Create(options.buffers);
  if (!pool.ok()) {
    close(opened->fd);
    return pool.status();
  }
  opened->info.kind = DeviceKind::kSyncFile;
  opened->info.volatile_write_cache = true;
  opened->info.max_transfer_bytes = 1u << 20;
  opened->info.ring.queue_depth = options.ring.queue_depth;
  auto device = std::unique_ptr<SyncFileDevice>(
      new SyncFileDevice(std::move(opened->info), opened->fd, std::move(*pool), options));
  device->unlock_on_close_ = options.lock_device;
  device->claim_ = std::move(opened->claim);
  return device;
}

SyncFileDevice::SyncFileDevice(DeviceInfo info, int fd, std::unique_ptr<BufferPool> pool,
                               const DeviceOptions& options)
    : info_(std::move(info)), fd_(fd), pool_(std::move(pool)), options_(options) {
  queued_.reserve(info_.ring.queue_depth);
  done_.reserve(info_.ring.queue_depth);
  running_.reserve(info_.ring.queue_depth);
}

SyncFileDevice::~SyncFileDevice() {
  if (fd_ >= 0 && unlock_on_close_) flock(fd_, LOCK_UN);
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<Device>> SyncFileDevice::OpenQueue(
    const QueueOptions& queue_options) {
  auto fd = DuplicateFd(fd_);
  if (!fd.ok()) return fd.status();
  DeviceInfo info = info_;
  info.notes.clear();
  return QueueOnFd(*fd, std::move(info), options_, queue_options);
}

absl::StatusOr<std::unique_ptr<Device>> SyncFileDevice::QueueOnFd(
    int fd, DeviceInfo info, const DeviceOptions& family_options,
    const QueueOptions& queue_options) {
  auto pool = BufferPool::Create(queue_options.buffers);
  if (!pool.ok()) {
    close(fd);
    return pool.status();
  }
  info.kind = DeviceKind::kSyncFile;
  info.ring = RingFeatures{};
  info.ring.queue_depth = queue_options.queue_depth;
  DeviceOptions options = family_options;
  options.ring.queue_depth = queue_options.queue_depth;
  options.buffers = queue_options.buffers;
  return std::unique_ptr<Device>(new SyncFileDevice(std::move(info), fd, std::move(*pool),
                                                    options));
}

absl::Status SyncFileDevice::Enqueue(IoRequest* request) {
  absl::Status valid = ValidateRequest(info_, *request);
  if (!valid.ok()) return valid;
  if (in_flight() >= info_.ring.queue_depth) {
    return absl::UnavailableError(absl::StrCat("queue full (depth ", info_.ring.queue_depth,
                                               "): reap first"));
  }
  request->status = absl::OkStatus();
  request->parts_pending = 1;
  queued_.push_back(request);
  ++stats_.requests_enqueued;
  return absl::OkStatus();
}

absl::Status SyncFileDevice::Execute(const IoRequest& request) {
  const off_t offset = static_cast<off_t>(request.lba * info_.lba_bytes);
  const size_t bytes = size_t{request.lba_count} * info_.lba_bytes;
  size_t done = 0;
  bool counted = false;  // the request was counted as pushed (by its first call)
  while (request.op != IoOp::kFlush && done < bytes) {
    ssize_t n = request.op == IoOp::kRead
                    ? pread(fd_, request.buffer.data + done, bytes - done, offset + done)
                    : pwrite(fd_, request.buffer.data + done, bytes - done, offset + done);
    ++stats_.enter_syscalls;
    CountCall(counted ? 0 : 1);  // a retry or a short transfer's rest is the same request
    counted = true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return FileIoError(errno, request.op == IoOp::kRead ? "pread" : "pwrite", request,
                                  info_);
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("short transfer at LBA ", request.lba, " of ",
                                              info_.path, ": file ended"));
    }
    done += static_cast<size_t>(n);
  }
  if (request.op == IoOp::kFlush || (request.op == IoOp::kWrite && request.fua)) {
    ++stats_.enter_syscalls;
    CountCall(request.op == IoOp::kFlush ? 1 : 0);  // a FUA write's flush is part of the write
    if (fdatasync(fd_) != 0) {
      IoRequest flush = request;
      flush.op = IoOp::kFlush;  // a FUA write's flush: named as one
      return FileIoError(errno, "fdatasync", flush, info_);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SyncFileDevice::Submit() {
  const uint32_t pushed = static_cast<uint32_t>(queued_.size());
  if (pushed == 0) return 0u;
  ++stats_.submit_calls;
  for (IoRequest* request : queued_) {
    request->status = Execute(*request);
    done_.push_back(request);
  }
  queued_.clear();
  return pushed;
}

absl::StatusOr<uint32_t> SyncFileDevice::Reap(uint32_t) {
  // Every request completes inside Submit, so whatever min_complete asks is available now.
  auto pushed = Submit();
  if (!pushed.ok()) return pushed.status();
  // Swap into running_ so callbacks may enqueue (and Submit) without disturbing this batch;
  // both vectors keep their capacity, so nothing is allocated per request.
  std::vector<IoRequest*>& done = running_;
  done.clear();
  done.swap(done_);
  if (!done.empty()) {
    ++stats_.reap_calls;
    stats_.completions_reaped += done.size();
    stats_.max_completions_per_reap =
        std::max<uint64_t>(stats_.max_completions_per_reap, done.size());
  }
  for (IoRequest* request : done) {
    request->parts_pending = 0;
    ++stats_.requests_completed;
    if (!request->status.ok()) ++stats_.requests_failed;
    if (request->on_done != nullptr) request->on_done(request);
  }
  const auto ran = static_cast<uint32_t>(done.size());
  CountCompleted(ran);
  done.clear();
  return ran;
}

}  // namespace nvkv::storage
