#include "storage/ring.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/base/errno_status.h"

namespace nvkv::storage {
namespace {

absl::Status SetupError(int err) {
  switch (err) {
    case ENOSYS:
      return absl::UnimplementedError("io_uring_setup: ENOSYS (kernel built without io_uring)");
    case EPERM:
      return absl::PermissionDeniedError(
          "io_uring_setup: EPERM (io_uring disabled by kernel.io_uring_disabled or a seccomp "
          "profile such as Docker's default)");
    case ENOMEM: {
      // The kernel charges a ring to the locked-memory limit of an unprivileged process.
      rlimit limit{};
      getrlimit(RLIMIT_MEMLOCK, &limit);
      const std::string now = limit.rlim_cur == RLIM_INFINITY
                                  ? std::string("unlimited")
                                  : absl::StrCat(limit.rlim_cur / 1024, " KiB");
      return absl::ResourceExhaustedError(absl::StrCat(
          "io_uring_setup: ENOMEM: the locked-memory limit (RLIMIT_MEMLOCK, now ", now,
          ") leaves no room for another ring; raise it with `ulimit -l unlimited` (LimitMEMLOCK= "
          "for a systemd service, --ulimit memlock=-1 for docker run)"));
    }
    default:
      return ErrnoStatus(err, "io_uring_setup");
  }
}

}  // namespace

bool IsRingRefused(const absl::Status& status) {
  return (absl::IsUnimplemented(status) || absl::IsPermissionDenied(status) ||
          absl::IsResourceExhausted(status)) &&
         status.message().find("io_uring_setup") != absl::string_view::npos;
}

absl::StatusOr<std::unique_ptr<Ring>> Ring::Create(uint32_t sq_entries, uint32_t required_flags,
                                                   const RingOptions& options,
                                                   RingFeatures* features,
                                                   std::vector<std::string>* notes) {
  std::unique_ptr<Ring> ring(new Ring());
  // Optional flags in the order they are given up when the kernel says EINVAL: the most recent
  // and least essential first.
  //   DEFER_TASKRUN: completion work runs only when we enter the kernel to reap (6.1+);
  //     saves interrupting the issuing thread. Needs SINGLE_ISSUER.
  //   COOP_TASKRUN: the fallback (5.19+): no IPI to the issuing thread on completion.
  //   SINGLE_ISSUER: one thread submits; lets the kernel skip locking (6.0+).
  //   SQPOLL / IOPOLL: only when asked for.
  bool single_issuer = options.single_issuer;
  bool defer = options.single_issuer;
  bool coop = true;
  bool sqpoll = options.sqpoll;
  bool iopoll = options.iopoll;
  for (;;) {
    io_uring_params params;
    std::memset(&params, 0, sizeof(params));
    params.flags = required_flags;
    if (single_issuer) params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_R_DISABLED;
    if (defer) params.flags |= IORING_SETUP_DEFER_TASKRUN;
    if (!defer && coop && !sqpoll) params.flags |= IORING_SETUP_COOP_TASKRUN;
    if (sqpoll) {
      params.flags |= IORING_SETUP_SQPOLL;
      params.sq_thread_idle = options.sqpoll_idle_ms;
    }
    if (iopoll) params.flags |= IORING_SETUP_IOPOLL;
    // Room for every request's completion even if all SQ slots turn over once while we reap.
    params.flags |= IORING_SETUP_CQSIZE;
    params.cq_entries = sq_entries * 2;
    const int ret = io_uring_queue_init_params(sq_entries, &ring->ring_, &params);
    if (ret == 0) {
      ring->initialized_ = true;
      ring->disabled_ = single_issuer;
      break;
    }
    if (ret != -EINVAL) {
      if (sqpoll && ret == -EPERM) {
        notes->push_back("SQPOLL refused (EPERM: needs CAP_SYS_NICE on this kernel); not used");
        sqpoll = false;
        continue;
      }
      return SetupError(-ret);
    }
    // EINVAL: drop one optional feature and try again; with none left, the required flags
    // themselves are refused.
    if (defer && sqpoll) {
      defer = false;  // DEFER_TASKRUN and SQPOLL do not combine
      notes->push_back("DEFER_TASKRUN not combinable with SQPOLL; not used");
    } else if (defer) {
      defer = false;
      notes->push_back("DEFER_TASKRUN refused by the kernel (needs 6.1); using COOP_TASKRUN");
    } else if (coop && !sqpoll) {
      coop = false;
      notes->push_back("COOP_TASKRUN refused by the kernel (needs 5.19); not used");
    } else if (single_issuer) {
      single_issuer = false;
      notes->push_back("SINGLE_ISSUER refused by the kernel (needs 6.0); not used");
    } else if (iopoll) {
      iopoll = false;
      notes->push_back("IOPOLL refused by the kernel; not used");
    } else if (sqpoll) {
      sqpoll = false;
      notes->push_back("SQPOLL refused by the kernel; not used");
    } else {
      if (required_flags & IORING_SETUP_SQE128) {
        return absl::UnimplementedError(
            "io_uring_setup refused SQE128|CQE32, which NVMe passthrough needs (kernel 5.19+)");
      }
      return SetupError(EINVAL);
    }
  }
  ring->features_.sq_entries = ring->ring_.sq.ring_entries;
  ring->features_.sqe128_cqe32 = (required_flags & IORING_SETUP_SQE128) != 0;
  ring->features_.single_issuer = single_issuer;
  ring->features_.defer_taskrun = defer;
  ring->features_.coop_taskrun = !defer && coop && !sqpoll;
  ring->features_.sqpoll = sqpoll;
  ring->features_.iopoll = iopoll;
  ring->probe_ = io_uring_get_probe_ring(&ring->ring_);
  // A registered ring fd lives in the registering thread's io_uring context, so it can only be
  // registered by the issuing thread: done at the first Submit, and only with SINGLE_ISSUER,
  // which guarantees no other thread submits.
  ring->want_registered_ring_fd_ = options.register_ring_fd && single_issuer;
  if (options.register_ring_fd && !single_issuer) {
    notes->push_back("registered ring fd needs SINGLE_ISSUER; not used");
  }
  ring->features_.registered_ring_fd = ring->want_registered_ring_fd_;
  *features = ring->features_;
  return ring;
}

Ring::~Ring() {
  if (probe_ != nullptr) io_uring_free_probe(probe_);
  // The ring's teardown runs asynchronously in the kernel; a registered file would stay open
  // (and its flock held) until then. Unregistering is synchronous, so a reopen right after
  // close finds the device free.
  if (initialized_ && features_.registered_file) io_uring_unregister_files(&ring_);
  if (initialized_) io_uring_queue_exit(&ring_);
}

bool Ring::RegisterFile(int fd, std::vector<std::string>* notes) {
  const int ret = io_uring_register_files(&ring_, &fd, 1);
  if (ret != 0) {
    notes->push_back(absl::StrCat("fixed file refused (", strerror(-ret), "); not used"));
    return false;
  }
  features_.registered_file = true;
  return true;
}

bool Ring::RegisterBuffers(std::span<const iovec> regions, std::vector<std::string>* notes) {
  const int ret = io_uring_register_buffers(&ring_, regions.data(),
                                            static_cast<unsigned>(regions.size()));
  if (ret != 0) {
    notes->push_back(absl::StrCat("registering ", regions.size(), " buffers refused (",
                                  strerror(-ret), "; RLIMIT_MEMLOCK?); fixed buffers not used"));
    return false;
  }
  features_.fixed_buffers = true;
  return true;
}

bool Ring::OpcodeSupported(int opcode) const {
  return probe_ != nullptr && io_uring_opcode_supported(probe_, opcode);
}

io_uring_sqe* Ring::GetSqe() { return io_uring_get_sqe(&ring_); }

uint32_t Ring::SqSpaceLeft() { return io_uring_sq_space_left(&ring_); }

absl::Status Ring::EnableIfDisabled() {
  if (!disabled_) return absl::OkStatus();
  if (want_registered_ring_fd_) {
    // Saves the fd lookup on every io_uring_enter (5.18+). Refusal is harmless.
    if (io_uring_register_ring_fd(&ring_) != 1) features_.registered_ring_fd = false;
  }
  // liburing 2.3 declares io_uring_enable_rings but its shared library does not export it, so
  // make the one register call ourselves.
  const long ret =
      syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
  if (ret < 0) return absl::ErrnoToStatus(errno, "io_uring_register(ENABLE_RINGS)");
  disabled_ = false;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Ring::Submit(uint32_t wait_nr) {
  absl::Status enabled = EnableIfDisabled();
  if (!enabled.ok()) return enabled;
  int ret;
  do {
    ret = io_uring_submit_and_wait(&ring_, wait_nr);
  } while (ret == -EINTR);
  if (ret < 0) {
    if (ret == -EEXIST) {
      return absl::FailedPreconditionError(
          "io_uring_enter: EEXIST (a SINGLE_ISSUER ring was used from a second thread)");
    }
    return absl::ErrnoToStatus(-ret, "io_uring_enter");
  }
  return static_cast<uint32_t>(ret);
}

absl::Status Ring::GetEvents() {
  absl::Status enabled = EnableIfDisabled();
  if (!enabled.ok()) return enabled;
  int ret;
  do {
    ret = io_uring_get_events(&ring_);
  } while (ret == -EINTR);
  if (ret < 0) return absl::ErrnoToStatus(-ret, "io_uring_enter(GETEVENTS)");
  return absl::OkStatus();
}

}  // namespace nvkv::storage
