// EventFd: a counter one thread signals and another waits for (Linux eventfd). A thread that
// blocks in a queue's Reap for its own I/O can be woken by another thread through it: it keeps
// an IoOp::kWaitEvent request on the eventfd in flight on its queue (ArmOn), which completes
// when the eventfd is signalled. Where the queue cannot carry such a request (not io_uring), the
// thread waits with Wait when it has no I/O in flight.
//
// Thread contract: Signal from any thread; ArmOn, Wait and TakeSignal from the owning thread.
#ifndef NVKV_STORAGE_EVENT_FD_H_
#define NVKV_STORAGE_EVENT_FD_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/device.h"

namespace nvkv::storage {

class EventFd {
 public:
  // kResourceExhausted (or the errno's code) when the process cannot get one more descriptor.
  static absl::StatusOr<std::unique_ptr<EventFd>> Create();
  // A queue with a request armed: Signal, then destroy the queue (its destructor waits for the
  // request, which the signal completes; the kernel writes into this object until then), then
  // this object.
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  // Wakes the waiter (never blocks; signals before a wait are kept until it takes them).
  void Signal();

  // Keeps a wait request in flight on `queue` (the owner's): nothing when one is armed already.
  // Returns false when the queue cannot wait for events (not io_uring, an IOPOLL ring, or no
  // room): the caller then must not block in Reap expecting a Signal to end it.
  bool ArmOn(Device& queue);
  bool armed() const { return armed_; }
  // Ends an armed wait on `queue` (a Signal, then Reap on it until the request completed; other
  // completions meanwhile run their callbacks as any Reap does), so that nothing of this object
  // is left in flight: a queue's ring may only be entered by its own thread, so the owner does
  // this before it leaves the queue to be destroyed elsewhere. Returns the queue's error, if a
  // Reap failed.
  absl::Status Disarm(Device& queue);

  // Blocks until signalled (consuming the signal), or returns at once when the armed request
  // completed since the last Wait or TakeSignal. Only while no wait request is armed. A signal
  // nobody waited for is kept, so a later Wait may return for it: callers check what they wait
  // for and wait again.
  void Wait();
  // Consumes a pending signal without blocking (a system call unless armed); true when there
  // was one, or the armed request completed since the last call.
  bool TakeSignal();

 private:
  explicit EventFd(int fd) : fd_(fd) {}
  static void OnWaitDone(IoRequest* request);

  const int fd_;
  IoRequest wait_;     // the armed request, when armed_
  bool armed_ = false;
  bool fired_ = false;  // the armed request completed; TakeSignal reports it once
  bool unsupported_ = false;  // a wait failed (e.g. an IOPOLL ring): ArmOn refuses from then on
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_EVENT_FD_H_
