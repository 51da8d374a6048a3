#include "storage/ring_device.h"

#include <sys/file.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"

namespace nvkv::storage {

RingDevice::RingDevice(DeviceInfo info, int fd, std::unique_ptr<Ring> ring,
                       std::unique_ptr<BufferPool> pool)
    : info_(std::move(info)), fd_(fd), ring_(std::move(ring)), pool_(std::move(pool)) {}

RingDevice::~RingDevice() {
  // Requests still in flight point into caller memory and our buffers: wait them out before the
  // ring and pool go away, so the kernel never writes into freed memory. Their callbacks never
  // run, so their completions are only counted (no backend's CompletionStatus: this runs after
  // the backend's part of the object is gone).
  if (broken_.ok()) {
    while (sqes_in_flight_ > 0) {
      if (sqes_unsubmitted_ > 0 || ring_->needs_get_events()) {
        if (!ring_->Submit(1).ok()) break;
        sqes_unsubmitted_ = 0;
      } else {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(ring_->raw(), &cqe) != 0) break;
      }
      DiscardCompletions();
    }
  }
  ring_.reset();
  if (fd_ >= 0 && unlock_on_close_) flock(fd_, LOCK_UN);
  if (fd_ >= 0) close(fd_);
}

namespace {

// The zone rules a request can be held to before it reaches the device (the write pointer's are
// the device's to check).
absl::Status ValidateZoneRequest(const DeviceInfo& info, const IoRequest& request) {
  const ZoneModel& zones = info.zones;
  if (!zones.zoned()) {
    return absl::UnimplementedError(absl::StrCat(
        info.path, ": zone commands need a zoned device whose zones are known"));
  }
  if (info.read_only && request.op != IoOp::kZoneReport) {
    return absl::FailedPreconditionError(
        absl::StrCat(info.path, ": opened read-only; no zone changes"));
  }
  if (request.lba >= info.lba_count || request.lba % zones.zone_blocks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LBA ", request.lba, " is not the first block of a zone of ", info.path));
  }
  if (request.op == IoOp::kZoneAppend && zones.max_append_blocks != 0 &&
      request.lba_count > zones.max_append_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("zone append of ", request.lba_count, " blocks: ", info.path,
                     " appends at most ", zones.max_append_blocks));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRequest(const DeviceInfo& info, const IoRequest& request) {
  if (info.read_only && (request.op == IoOp::kWrite || request.op == IoOp::kFlush)) {
    return absl::FailedPreconditionError(absl::StrCat(
        info.path, ": opened read-only; no ", request.op == IoOp::kWrite ? "write" : "flush"));
  }
  if (request.op == IoOp::kFlush) return absl::OkStatus();
  if (request.op == IoOp::kWaitEvent) {
    return absl::UnimplementedError(
        absl::StrCat("waiting for an event needs an io_uring queue (", info.path, ")"));
  }
  if (IsZoneOp(request.op)) {
    absl::Status zone = ValidateZoneRequest(info, request);
    if (!zone.ok() || request.op == IoOp::kZoneReset || request.op == IoOp::kZoneFinish) {
      return zone;
    }
  } else if (request.op != IoOp::kRead && request.op != IoOp::kWrite) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown I/O op ", static_cast<int>(request.op)));
  }
  if (request.lba_count == 0) return absl::InvalidArgumentError("I/O of zero blocks");
  if ((request.op == IoOp::kWrite || request.op == IoOp::kZoneAppend) &&
      !info.placement_ids.empty() && request.placement >= info.placement_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "write to placement handle ", request.placement, " of ", info.path, ", which has ",
        info.placement_ids.size()));
  }
  // A report's blocks are its buffer's length, not a range of the device.
  if (request.op != IoOp::kZoneReport &&
      (request.lba >= info.lba_count || request.lba_count > info.lba_count - request.lba)) {
    return absl::OutOfRangeError(absl::StrCat("I/O of ", request.lba_count, " blocks at LBA ",
                                              request.lba, " ends beyond the device's ",
                                              info.lba_count, " blocks (", info.path, ")"));
  }
  const uint64_t bytes = uint64_t{request.lba_count} * info.lba_bytes;
  if (request.buffer.data == nullptr || request.buffer.bytes < bytes) {
    return absl::InvalidArgumentError(absl::StrCat("buffer of ", request.buffer.bytes,
                                                   " bytes is too small for ", bytes, " bytes"));
  }
  const uint32_t alignment = std::max<uint32_t>(info.memory_alignment, 1);
  if (reinterpret_cast<uintptr_t>(request.buffer.data) % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer address is not aligned to ", alignment, " bytes, as direct I/O requires"));
  }
  return absl::OkStatus();
}

absl::Status RingDevice::Enqueue(IoRequest* request) {
  if (!broken_.ok()) return broken_;
  const bool event = request->op == IoOp::kWaitEvent;
  if (event && request->event_fd < 0) {
    return absl::InvalidArgumentError("an event wait without an eventfd");
  }
  absl::Status valid = event ? absl::OkStatus() : ValidateRequest(info_, *request);
  if (!valid.ok()) return valid;
  const uint32_t sqe_count = event ? 1 : SqeCount(*request);
  NVKV_CHECK(sqe_count > 0);
  if (sqe_count > info_.ring.sq_entries || sqe_count > kMaxSqesPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("request needs ", sqe_count, " commands; the queue holds ",
                     info_.ring.sq_entries));
  }
  if (requests_in_flight_ >= info_.ring.queue_depth ||
      sqes_in_flight_ + sqe_count > info_.ring.sq_entries) {
    return absl::UnavailableError(absl::StrCat("queue full (", requests_in_flight_,
                                               " requests in flight, depth ",
                                               info_.ring.queue_depth, "): reap first"));
  }
  io_uring_sqe* sqes[kMaxSqesPerRequest];
  for (uint32_t i = 0; i < sqe_count; ++i) {
    sqes[i] = ring_->GetSqe();
    // sqes_in_flight_ bounds SQ use, so a slot is always there.
    NVKV_CHECK(sqes[i] != nullptr);
  }
  request->status = absl::OkStatus();
  request->parts_pending = sqe_count;
  request->next_done = nullptr;
  if (event) {
    PrepareEventWait(request, sqes[0]);
  } else {
    PrepareSqes(request, sqes);
  }
  sqes_in_flight_ += sqe_count;
  sqes_unsubmitted_ += sqe_count;
  ++requests_in_flight_;
  ++stats_.requests_enqueued;
  return absl::OkStatus();
}

void RingDevice::PrepareEventWait(IoRequest* request, io_uring_sqe* sqe) {
  // A plain read of the eventfd's 8-byte count (not the device's file: no fixed file, no fixed
  // buffer); it completes when another thread writes the eventfd.
  request->event_count = 0;
  io_uring_prep_read(sqe, request->event_fd, &request->event_count, sizeof(request->event_count),
                     0);
  io_uring_sqe_set_data(sqe, request);
}

absl::Status RingDevice::EventWaitStatus(const io_uring_cqe& cqe) {
  if (cqe.res == static_cast<int>(sizeof(uint64_t))) return absl::OkStatus();
  if (cqe.res < 0) return absl::ErrnoToStatus(-cqe.res, "waiting for an eventfd");
  return absl::InternalError(absl::StrCat("eventfd read of ", cqe.res, " bytes"));
}

absl::StatusOr<uint32_t> RingDevice::Submit() {
  if (!broken_.ok()) return broken_;
  if (sqes_unsubmitted_ == 0) return 0u;
  absl::StatusOr<uint32_t> pushed = ring_->Submit(0);
  ++stats_.enter_syscalls;
  CountCall(pushed.ok() ? std::min(*pushed, sqes_unsubmitted_) : 0);
  if (!pushed.ok()) {
    // SQEs already in the ring cannot be withdrawn; refuse further use of this queue.
    broken_ = absl::FailedPreconditionError(
        absl::StrCat("queue broken by a failed submit: ", pushed.status().ToString()));
    return pushed.status();
  }
  ++stats_.submit_calls;
  sqes_unsubmitted_ -= std::min(*pushed, sqes_unsubmitted_);
  return *pushed;
}

uint32_t RingDevice::HarvestCompletions() {
  io_uring* raw = ring_->raw();
  unsigned head;
  io_uring_cqe* cqe;
  uint32_t seen = 0;
  // One pass over everything the kernel has posted, then one store to release the CQ slots.
  io_uring_for_each_cqe(raw, head, cqe) {
    ++seen;
    auto* request = reinterpret_cast<IoRequest*>(static_cast<uintptr_t>(cqe->user_data));
    NVKV_CHECK(request != nullptr);
    NVKV_CHECK(request->parts_pending > 0);
    absl::Status part = request->op == IoOp::kWaitEvent ? EventWaitStatus(*cqe)
                                                        : CompletionStatus(*request, *cqe);
    if (!part.ok() && request->status.ok()) request->status = std::move(part);
    if (--request->parts_pending == 0) {
      if (done_tail_ == nullptr) {
        done_head_ = request;
      } else {
        done_tail_->next_done = request;
      }
      done_tail_ = request;
      ++done_count_;
    }
  }
  if (seen > 0) {
    io_uring_cq_advance(raw, seen);
    sqes_in_flight_ -= seen;
    ++stats_.reap_calls;
    stats_.completions_reaped += seen;
    stats_.max_completions_per_reap = std::max<uint64_t>(stats_.max_completions_per_reap, seen);
  }
  return seen;
}

void RingDevice::DiscardCompletions() {
  const unsigned ready = io_uring_cq_ready(ring_->raw());
  io_uring_cq_advance(ring_->raw(), ready);
  sqes_in_flight_ -= std::min<uint32_t>(ready, sqes_in_flight_);
}

uint32_t RingDevice::RunCallbacks() {
  uint32_t ran = 0;
  // Detach the list first: callbacks may enqueue, and their completions belong to a later reap.
  IoRequest* request = done_head_;
  done_head_ = done_tail_ = nullptr;
  done_count_ = 0;
  while (request != nullptr) {
    IoRequest* next = request->next_done;
    request->next_done = nullptr;
    --requests_in_flight_;
    ++stats_.requests_completed;
    if (!request->status.ok()) ++stats_.requests_failed;
    ++ran;
    if (request->on_done != nullptr) request->on_done(request);
    request = next;
  }
  CountCompleted(ran);
  return ran;
}

absl::StatusOr<uint32_t> RingDevice::Reap(uint32_t min_complete) {
  if (!broken_.ok()) return broken_;
  min_complete = std::min(min_complete, requests_in_flight_);
  HarvestCompletions();
  // Enter the kernel when
  //   - SQEs are still queued: Reap promises to submit them, and they go out in the same
  //     io_uring_enter that waits. (Skipping this when enough completions were already visible
  //     left refills unsubmitted for a whole turn: with COOP_TASKRUN, where completions appear
  //     without entering, the device queue drained to near zero between turns.)
  //   - fewer than min_complete requests are done;
  //   - with DEFER_TASKRUN nothing is visible yet: completions are posted only when we enter,
  //     so a non-blocking reap enters once too.
  const bool enter = sqes_in_flight_ > 0 &&
                     (sqes_unsubmitted_ > 0 || done_count_ < min_complete ||
                      (done_count_ == 0 && ring_->needs_get_events()));
  if (enter) {
    while (true) {
      // Each request still to finish posts at least one CQE, so waiting for that many CQEs never
      // waits past the point where min_complete requests are done.
      const uint32_t wait_nr = min_complete > done_count_ ? min_complete - done_count_ : 0;
      absl::Status entered;
      uint32_t pushed_now = 0;
      if (sqes_unsubmitted_ == 0 && wait_nr == 0) {
        entered = ring_->GetEvents();  // only DEFER_TASKRUN gets here: run deferred completions
      } else {
        absl::StatusOr<uint32_t> pushed = ring_->Submit(wait_nr);
        if (pushed.ok()) {
          pushed_now = std::min(*pushed, sqes_unsubmitted_);
          sqes_unsubmitted_ -= pushed_now;
        } else {
          entered = pushed.status();
        }
      }
      ++stats_.enter_syscalls;
      CountCall(pushed_now);
      if (!entered.ok()) {
        broken_ = absl::FailedPreconditionError(
            absl::StrCat("queue broken by a failed reap: ", entered.ToString()));
        return entered;
      }
      HarvestCompletions();
      if (done_count_ >= min_complete) break;
    }
  }
  return RunCallbacks();
}

absl::StatusOr<std::unique_ptr<Ring>> CreateRingFor(int fd, uint32_t required_flags,
                                                    const RingOptions& options, BufferPool& pool,
                                                    DeviceInfo* info) {
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue depth ", options.queue_depth, " must be between 1 and 4096"));
  }
  RingFeatures features;
  auto ring = Ring::Create(options.queue_depth, required_flags, options, &features, &info->notes);
  if (!ring.ok()) return ring.status();
  if (options.register_file) (*ring)->RegisterFile(fd, &info->notes);
  if (options.fixed_buffers) {
    pool.set_registered((*ring)->RegisterBuffers(pool.regions(), &info->notes));
  }
  info->ring = (*ring)->features();
  info->ring.queue_depth = options.queue_depth;
  return ring;
}

}  // namespace nvkv::storage
