#include "storage/direct_file_device.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/file_open.h"
#include "storage/ring.h"
#include "storage/sync_file_device.h"

namespace nvkv::storage {

absl::StatusOr<std::unique_ptr<DirectFileDevice>> DirectFileDevice::Open(
    const std::string& path, const DeviceOptions& options) {
  auto opened = OpenFileForDirectIo(path, options);
  if (!opened.ok()) return opened.status();
  opened->info.kind = DeviceKind::kDirectFile;
  auto device = Create(opened->fd, std::move(opened->info), options);
  if (device.ok()) (*device)->HoldClaim(std::move(opened->claim), options.lock_device);
  return device;
}

absl::StatusOr<std::unique_ptr<DirectFileDevice>> DirectFileDevice::Create(
    int fd, DeviceInfo info, const DeviceOptions& options) {
  auto pool = BufferPool::Create(options.buffers);
  if (!pool.ok()) {
    close(fd);
    return pool.status();
  }
  // Files and block devices: the page cache is bypassed, but the drive below may still cache
  // writes; we cannot ask, so assume a volatile cache and flush.
  info.volatile_write_cache = true;
  info.max_transfer_bytes = 1u << 20;  // the block layer splits; keep one request bounded
  auto ring = CreateRingFor(fd, /*required_flags=*/0, options.ring, **pool, &info);
  if (!ring.ok()) {
    close(fd);
    return ring.status();
  }
  if (info.ring.iopoll) {
    info.notes.push_back("IOPOLL on a file: flushes are refused by the kernel; use FUA writes");
  }
  auto device = std::unique_ptr<DirectFileDevice>(
      new DirectFileDevice(std::move(info), fd, std::move(*ring), std::move(*pool)));
  device->options_ = options;
  return device;
}

absl::StatusOr<std::unique_ptr<Device>> DirectFileDevice::OpenQueue(
    const QueueOptions& queue_options) {
  auto fd = DuplicateFd(this->fd());
  if (!fd.ok()) return fd.status();
  DeviceInfo info = info_;
  info.notes.clear();
  DeviceOptions options = options_;
  options.ring.queue_depth = queue_options.queue_depth;
  options.buffers = queue_options.buffers;
  auto queue = Create(*fd, info, options);
  if (queue.ok()) return std::unique_ptr<Device>(std::move(*queue));
  // A ring refused (the locked-memory limit, ring.cc): this queue does without io_uring.
  // Create closed the duplicate on error.
  if (!IsRingRefused(queue.status()) || !options.allow_sync_fallback) return queue.status();
  auto again = DuplicateFd(this->fd());
  if (!again.ok()) return again.status();
  info.notes.clear();
  info.notes.push_back(absl::StrCat("a queue of ", queue_options.queue_depth,
                                    " uses synchronous pread/pwrite: ", queue.status().message()));
  return SyncFileDevice::QueueOnFd(*again, std::move(info), options, queue_options);
}

uint32_t DirectFileDevice::SqeCount(const IoRequest&) const { return 1; }

void DirectFileDevice::PrepareSqes(IoRequest* request, io_uring_sqe** sqes) {
  io_uring_sqe* sqe = sqes[0];
  const uint64_t offset = request->lba * info_.lba_bytes;
  const unsigned bytes = request->lba_count * info_.lba_bytes;
  const bool fixed = info_.ring.fixed_buffers && request->buffer.buf_index >= 0;
  switch (request->op) {
    case IoOp::kRead:
      if (fixed) {
        io_uring_prep_read_fixed(sqe, sqe_fd(), request->buffer.data, bytes, offset,
                                 request->buffer.buf_index);
      } else {
        io_uring_prep_read(sqe, sqe_fd(), request->buffer.data, bytes, offset);
      }
      break;
    case IoOp::kWrite:
      if (fixed) {
        io_uring_prep_write_fixed(sqe, sqe_fd(), request->buffer.data, bytes, offset,
                                  request->buffer.buf_index);
      } else {
        io_uring_prep_write(sqe, sqe_fd(), request->buffer.data, bytes, offset);
      }
      // FUA on a file: RWF_DSYNC makes this one write durable before it completes.
      if (request->fua) sqe->rw_flags = RWF_DSYNC;
      break;
    case IoOp::kFlush:
      io_uring_prep_fsync(sqe, sqe_fd(), IORING_FSYNC_DATASYNC);
      break;
    case IoOp::kWaitEvent:
      NVKV_CHECK(false);  // RingDevice prepares these itself
      break;
    case IoOp::kZoneAppend:
    case IoOp::kZoneReset:
    case IoOp::kZoneFinish:
    case IoOp::kZoneReport:
      NVKV_CHECK(false);  // refused by ValidateRequest: a file has no zones
  }
  sqe->flags |= sqe_flags();
  io_uring_sqe_set_data(sqe, request);
}

absl::Status DirectFileDevice::CompletionStatus(IoRequest& request,
                                                const io_uring_cqe& cqe) {
  const char* op = request.op == IoOp::kRead    ? "read"
                   : request.op == IoOp::kWrite ? "write"
                                                : "flush";
  if (cqe.res < 0) return FileIoError(-cqe.res, op, request, info_);
  if (request.op != IoOp::kFlush) {
    const int64_t want = int64_t{request.lba_count} * info_.lba_bytes;
    if (cqe.res != want) {
      // A short transfer on O_DIRECT means the file ended (truncated under us) or the device
      // failed part way; either way the request did not do what was asked.
      return absl::DataLossError(absl::StrCat("short ", op, " at LBA ", request.lba, " of ",
                                              info_.path, ": ", cqe.res, " of ", want, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace nvkv::storage
