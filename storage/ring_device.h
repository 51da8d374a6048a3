// RingDevice: the queueing, batched submission and batched reaping that every io_uring backend
// shares. A backend says how to turn a request into SQEs and how to read a CQE; RingDevice does
// the rest: bounded depth (back-pressure), one system call per Submit, harvesting every
// available CQE per reap pass, and running callbacks only after the reap loop.
//
// Thread contract: see Device (one issuing thread).
// Invariants:
//   - sqes_in_flight_ <= info_.ring.sq_entries, so the CQ ring (2x SQ) never overflows;
//   - requests_in_flight_ counts requests enqueued and not yet handed to their callbacks.
#ifndef NVKV_STORAGE_RING_DEVICE_H_
#define NVKV_STORAGE_RING_DEVICE_H_

#include <memory>

#include "storage/buffer_pool.h"
#include "storage/device.h"
#include "storage/device_lock.h"
#include "storage/ring.h"

namespace nvkv::storage {

class RingDevice : public Device {
 public:
  // Commands one request may be split into (larger requests are refused with kInvalidArgument).
  static constexpr uint32_t kMaxSqesPerRequest = 64;

  ~RingDevice() override;

  const DeviceInfo& info() const override { return info_; }
  BufferPool& buffers() override { return *pool_; }
  absl::Status Enqueue(IoRequest* request) override;
  absl::StatusOr<uint32_t> Submit() override;
  absl::StatusOr<uint32_t> Reap(uint32_t min_complete) override;
  uint32_t in_flight() const override { return requests_in_flight_; }
  const IoStats& stats() const override { return stats_; }

 protected:
  // Takes ownership of `fd` (closed on destruction), the ring and the pool.
  RingDevice(DeviceInfo info, int fd, std::unique_ptr<Ring> ring, std::unique_ptr<BufferPool> pool);

  // How many SQEs `request` needs (more than one when it is split, e.g. past the NVMe MDTS).
  virtual uint32_t SqeCount(const IoRequest& request) const = 0;
  // Fills `sqes` (SqeCount of them, already taken from the ring) for `request`. Each SQE's
  // user_data must be the request's address.
  virtual void PrepareSqes(IoRequest* request, io_uring_sqe** sqes) = 0;
  // The outcome of one CQE of `request`, and what it returns beside it (a zone append's
  // address: IoRequest::appended_lba).
  virtual absl::Status CompletionStatus(IoRequest& request, const io_uring_cqe& cqe) = 0;

  // The fd to put in SQEs and the SQE flags that go with it (fixed file index 0 or the raw fd).
  int sqe_fd() const { return info_.ring.registered_file ? 0 : fd_; }
  uint8_t sqe_flags() const { return info_.ring.registered_file ? IOSQE_FIXED_FILE : 0; }
  int fd() const { return fd_; }
  Ring& ring() { return *ring_; }
  // The first queue of a device holds its claim (device_lock.h), and, when `unlock_on_close`,
  // drops the lock on its I/O file explicitly on close: the kernel tears rings down
  // asynchronously, and a ring that still references the file would otherwise keep the lock
  // for a moment after the device is gone.
  void HoldClaim(DeviceClaim claim, bool unlock_on_close) {
    claim_ = std::move(claim);
    unlock_on_close_ = unlock_on_close;
  }

  DeviceInfo info_;

 private:
  // Harvests every CQE available now; completed requests go on the done list.
  uint32_t HarvestCompletions();
  // Releases every CQE available now without looking at it (the destructor's wait).
  void DiscardCompletions();
  // Runs the callbacks of every request on the done list; returns how many ran.
  uint32_t RunCallbacks();
  // IoOp::kWaitEvent, the same on every io_uring backend: a read of the eventfd.
  static void PrepareEventWait(IoRequest* request, io_uring_sqe* sqe);
  static absl::Status EventWaitStatus(const io_uring_cqe& cqe);

  int fd_;
  bool unlock_on_close_ = false;
  DeviceClaim claim_;
  std::unique_ptr<Ring> ring_;
  std::unique_ptr<BufferPool> pool_;
  uint32_t sqes_in_flight_ = 0;   // taken from the ring, CQE not yet harvested
  uint32_t sqes_unsubmitted_ = 0; // prepared, not yet pushed by Submit
  uint32_t requests_in_flight_ = 0;
  IoRequest* done_head_ = nullptr;  // completed requests, callbacks pending (FIFO)
  IoRequest* done_tail_ = nullptr;
  uint32_t done_count_ = 0;         // length of the done list
  absl::Status broken_;             // set when the ring itself failed
  IoStats stats_;
};

// Sets up a ring for `info` and registers `fd` and the pool's buffers as `options` ask; used by
// every io_uring backend at open. Fills info->ring and info->notes.
absl::StatusOr<std::unique_ptr<Ring>> CreateRingFor(int fd, uint32_t required_flags,
                                                    const RingOptions& options, BufferPool& pool,
                                                    DeviceInfo* info);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_RING_DEVICE_H_
