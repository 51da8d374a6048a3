// Ring: one io_uring instance, set up with the features the kernel grants, plus the batched
// submit/reap primitives every io_uring backend shares.
//
// Thread contract: a Ring belongs to one issuing thread. With SINGLE_ISSUER the ring is created
// disabled (IORING_SETUP_R_DISABLED) and enabled by the first Submit, so the issuing thread is
// the first thread that submits, not the one that opened the device.
#ifndef NVKV_STORAGE_RING_H_
#define NVKV_STORAGE_RING_H_

#include <liburing.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/device.h"

namespace nvkv::storage {

// True when `status` is io_uring_setup refusing a ring (no io_uring in the kernel, refused by a
// seccomp profile or sysctl, or no room under the locked-memory limit) rather than a problem of
// the file: then a file's queue may do without io_uring (SyncFileDevice).
bool IsRingRefused(const absl::Status& status);

class Ring {
 public:
  // Creates a ring with `sq_entries` submission slots. `required_flags` (e.g. SQE128|CQE32 for
  // passthrough) must be granted or creation fails; the optional features in `options` are
  // tried and dropped one at a time when the kernel refuses them, each drop noted in `notes`.
  // ENOSYS/EPERM/ENOMEM from io_uring_setup come back as kUnimplemented / kPermissionDenied /
  // kResourceExhausted (IsRingRefused).
  static absl::StatusOr<std::unique_ptr<Ring>> Create(uint32_t sq_entries, uint32_t required_flags,
                                                      const RingOptions& options,
                                                      RingFeatures* features,
                                                      std::vector<std::string>* notes);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Registers `fd` as fixed file 0. Returns false (and notes why) when the kernel refuses.
  bool RegisterFile(int fd, std::vector<std::string>* notes);
  // Registers the pool's regions. Returns false (and notes why) when the kernel refuses.
  bool RegisterBuffers(std::span<const iovec> regions, std::vector<std::string>* notes);

  bool OpcodeSupported(int opcode) const;

  // A free SQE, or nullptr when the submission ring is full.
  io_uring_sqe* GetSqe();
  uint32_t SqSpaceLeft();

  // Pushes queued SQEs and, when wait_nr > 0, waits for that many CQEs, in one io_uring_enter.
  // Returns the number of SQEs consumed by the kernel.
  absl::StatusOr<uint32_t> Submit(uint32_t wait_nr);

  // Enters the kernel to run deferred completion work (DEFER_TASKRUN) without submitting.
  absl::Status GetEvents();

  io_uring* raw() { return &ring_; }
  const RingFeatures& features() const { return features_; }
  bool needs_get_events() const { return features_.defer_taskrun; }

 private:
  Ring() = default;
  absl::Status EnableIfDisabled();

  io_uring ring_{};
  bool initialized_ = false;
  bool disabled_ = false;  // created with R_DISABLED, not yet enabled
  bool want_registered_ring_fd_ = false;
  RingFeatures features_;
  io_uring_probe* probe_ = nullptr;
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_RING_H_
