#include "storage/event_fd.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/errno_status.h"

namespace nvkv::storage {

absl::StatusOr<std::unique_ptr<EventFd>> EventFd::Create() {
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "eventfd");
  return std::unique_ptr<EventFd>(new EventFd(fd));
}

EventFd::~EventFd() { close(fd_); }

void EventFd::Signal() {
  const uint64_t one = 1;
  // Fails only when the count would overflow (2^64 - 2 signals untaken): then it is set anyway.
  ssize_t written;
  do {
    written = write(fd_, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

bool EventFd::ArmOn(Device& queue) {
  if (armed_) return true;
  if (unsupported_) return false;
  wait_ = IoRequest{};
  wait_.op = IoOp::kWaitEvent;
  wait_.event_fd = fd_;
  wait_.on_done = OnWaitDone;
  wait_.context = this;
  if (!queue.Enqueue(&wait_).ok()) return false;
  armed_ = true;
  return true;
}

void EventFd::OnWaitDone(IoRequest* request) {
  auto* self = static_cast<EventFd*>(request->context);
  self->armed_ = false;
  self->fired_ = true;
  // A read the ring cannot do (an IOPOLL ring answers EOPNOTSUPP at once) would otherwise end
  // every wait at once, and the caller would spin.
  if (!request->status.ok()) self->unsupported_ = true;
}

absl::Status EventFd::Disarm(Device& queue) {
  if (!armed_) return absl::OkStatus();
  Signal();
  while (armed_) {
    absl::StatusOr<uint32_t> reaped = queue.Reap(1);
    if (!reaped.ok()) return reaped.status();
  }
  fired_ = false;
  return absl::OkStatus();
}

void EventFd::Wait() {
  NVKV_CHECK(!armed_);
  if (fired_) {
    fired_ = false;
    return;
  }
  // A blocking eventfd (so that an io_uring read of it waits for a signal instead of failing
  // with EAGAIN): one read both waits and takes the count.
  uint64_t count = 0;
  while (read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

bool EventFd::TakeSignal() {
  bool taken = fired_;
  fired_ = false;
  if (taken || armed_) return taken;  // an armed read takes the count itself
  // Read only once poll says the count is non-zero: the read would block otherwise.
  pollfd readable{fd_, POLLIN, 0};
  if (poll(&readable, 1, 0) <= 0 || (readable.revents & POLLIN) == 0) return false;
  uint64_t count = 0;
  return read(fd_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count));
}

}  // namespace nvkv::storage
