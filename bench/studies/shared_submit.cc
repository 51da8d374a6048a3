// nvkv-shared-submit: can synchronous reads from many threads be submitted together for less
// CPU than each thread's own ring? A study of the designs, with liburing directly and nothing of
// nvkv: --threads threads each read one random 4 KiB block at a time (O_DIRECT) from --filename
// and wait for it, as nvkv's synchronous Gets do, for --runtime seconds. --mode picks how:
//
//   own       each thread its own ring (SINGLE_ISSUER, DEFER_TASKRUN) and one io_uring_enter
//             that submits and waits: what nvkv's read queues do.
//   handoff   one ring for all. Submission is a role: a thread that finds nobody submitting
//             enters the kernel with everything queued, and goes round again for what others
//             queued meanwhile (group commit of submissions). Completion is a role too: one
//             thread waits for the ring's completions and wakes each owner with a futex, and
//             hands the role to a sleeping thread when its own read is done.
//   reaper    as handoff, but while a thread waits for completions, arrivals only queue their
//             reads: its next wait submits them (fewer, larger submissions; reads wait longer).
//   msgring   one ring submits, each read linked to an IORING_OP_MSG_RING that posts its
//             completion on the owner's own ring, where the owner waits: the kernel wakes the
//             owner directly, no futex.
//   sqpoll    each thread its own ring, all attached to one SQPOLL kernel thread.
//
// Prints one line: reads/s, CPU per read (user + system of the whole process, the SQPOLL thread
// included), system calls per read, reads per submitting call and futex wakes per read.
// bench/README.md ("A shared submission point for synchronous Gets") has the results.
#include <fcntl.h>
#include <liburing.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr unsigned kBlockBytes = 4096;

enum class Mode { kOwn, kHandoff, kReaper, kMsgRing, kSqPoll };

struct Config {
  std::string filename;
  int threads = 16;
  Mode mode = Mode::kOwn;
  double seconds = 5;
};

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "nvkv-shared-submit: %s\n", message.c_str());
  std::exit(1);
}

// One thread's read in flight through a shared ring.
struct Waiter {
  enum : int { kInFlight = 0, kDone = 1, kReapNow = 2 };
  std::atomic<int> state{kInFlight};  // a futex word
  int result = 0;
  bool asleep = false;  // under SharedRing::reap_mu
};

void FutexWait(std::atomic<int>* word, int expected) {
  syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWake(std::atomic<int>* word) {
  syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

struct Counters {
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> syscalls{0};
  std::atomic<uint64_t> submit_calls{0};  // calls that submitted at least one read
  std::atomic<uint64_t> submitted{0};     // reads those calls submitted
  std::atomic<uint64_t> wakes{0};
};

// The ring all threads share in handoff, reaper and msgring modes.
class SharedRing {
 public:
  SharedRing(Mode mode, int fd, Counters* counters) : mode_(mode), fd_(fd), counters_(counters) {
    int rc = io_uring_queue_init(4096, &ring_, 0);
    if (rc < 0) Fail(std::string("io_uring_queue_init: ") + std::strerror(-rc));
  }
  ~SharedRing() { io_uring_queue_exit(&ring_); }

  // Reads one block at `offset` into `buffer` and waits for it. `own_ring` is the caller's
  // ring (msgring mode only).
  int Read(Waiter* waiter, void* buffer, uint64_t offset, io_uring* own_ring) {
    waiter->state.store(Waiter::kInFlight, std::memory_order_relaxed);
    std::unique_lock lock(sq_mu_);
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_read(sqe, fd_, buffer, kBlockBytes, offset);
    io_uring_sqe_set_data(sqe, waiter);
    if (mode_ == Mode::kMsgRing) {
      // The message runs whatever the read did (a hard link); a read that fails posts its own
      // completion on the shared ring, which Failures() counts.
      sqe->flags |= IOSQE_IO_HARDLINK | IOSQE_CQE_SKIP_SUCCESS;
      io_uring_sqe* message = GetSqe();
      io_uring_prep_msg_ring(message, own_ring->ring_fd, kBlockBytes,
                             reinterpret_cast<uint64_t>(waiter), 0);
      message->flags |= IOSQE_CQE_SKIP_SUCCESS;
    }
    ++queued_reads_;
    const bool leave_to_reaper = mode_ == Mode::kReaper && reaper_in_kernel_;
    if (!submitting_ && !leave_to_reaper) SubmitQueued(lock);
    lock.unlock();
    if (mode_ == Mode::kMsgRing) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(own_ring, &cqe);
      counters_->syscalls.fetch_add(1, std::memory_order_relaxed);
      if (rc < 0) Fail(std::string("wait on the own ring: ") + std::strerror(-rc));
      int result = cqe->res;
      io_uring_cqe_seen(own_ring, cqe);
      return result;
    }
    WaitForCompletion(waiter);
    return waiter->result;
  }

  // Reads that failed in msgring mode (their completions stay on the shared ring).
  unsigned Failures() {
    unsigned count = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      ++count;
      io_uring_cqe_seen(&ring_, cqe);
    }
    return count;
  }

 private:
  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) Fail("shared submission queue full");
    return sqe;
  }

  // Publishes what is queued; the caller submits `queued_reads_` reads' entries. REQUIRES sq_mu_.
  unsigned TakeQueued() {
    unsigned entries = queued_reads_ * (mode_ == Mode::kMsgRing ? 2 : 1);
    queued_reads_ = 0;
    io_uring_smp_store_release(ring_.sq.ktail, ring_.sq.sqe_tail);
    return entries;
  }

  void CountSubmission(unsigned entries) {
    counters_->submit_calls.fetch_add(1, std::memory_order_relaxed);
    counters_->submitted.fetch_add(entries / (mode_ == Mode::kMsgRing ? 2 : 1),
                                   std::memory_order_relaxed);
  }

  // Enters the kernel with what is queued, again for what others queue meanwhile.
  void SubmitQueued(std::unique_lock<std::mutex>& lock) {
    submitting_ = true;
    while (queued_reads_ > 0) {
      unsigned entries = TakeQueued();
      lock.unlock();
      int rc = io_uring_enter(ring_.ring_fd, entries, 0, 0, nullptr);
      counters_->syscalls.fetch_add(1, std::memory_order_relaxed);
      if (rc < 0) Fail(std::string("io_uring_enter: ") + std::strerror(-rc));
      CountSubmission(entries);
      lock.lock();
    }
    submitting_ = false;
  }

  // Sleeps until `waiter` is done, or takes the completion role while nobody has it.
  void WaitForCompletion(Waiter* waiter) {
    {
      std::unique_lock lock(reap_mu_);
      if (waiter->state.load(std::memory_order_acquire) == Waiter::kDone) return;
      if (reaping_) {
        waiter->asleep = true;
        sleepers_.push_back(waiter);
        lock.unlock();
        int state;
        while ((state = waiter->state.load(std::memory_order_acquire)) == Waiter::kInFlight) {
          FutexWait(&waiter->state, Waiter::kInFlight);
        }
        if (state == Waiter::kDone) return;
        waiter->state.store(Waiter::kInFlight, std::memory_order_relaxed);  // handed the role
      } else {
        reaping_ = true;
      }
    }
    ReapUntilDone(waiter);
  }

  // The completion role: waits for completions and hands them out until `waiter`'s is among
  // them, then passes the role on to a sleeping thread, if any.
  void ReapUntilDone(Waiter* waiter) {
    std::vector<Waiter*> finished;
    while (waiter->state.load(std::memory_order_acquire) != Waiter::kDone) {
      unsigned to_submit = 0;
      if (mode_ == Mode::kReaper) {
        std::lock_guard lock(sq_mu_);
        reaper_in_kernel_ = true;
        if (!submitting_) to_submit = TakeQueued();
      }
      int rc = io_uring_enter(ring_.ring_fd, to_submit, 1, IORING_ENTER_GETEVENTS, nullptr);
      counters_->syscalls.fetch_add(1, std::memory_order_relaxed);
      if (rc < 0 && rc != -EINTR) Fail(std::string("io_uring_enter: ") + std::strerror(-rc));
      if (to_submit > 0) CountSubmission(to_submit);
      finished.clear();
      unsigned head;
      unsigned count = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        auto* owner = static_cast<Waiter*>(io_uring_cqe_get_data(cqe));
        owner->result = cqe->res;
        finished.push_back(owner);
        ++count;
      }
      io_uring_cq_advance(&ring_, count);
      std::lock_guard lock(reap_mu_);
      for (Waiter* owner : finished) {
        const bool wake = owner->asleep;
        if (wake) {
          owner->asleep = false;
          std::erase(sleepers_, owner);
        }
        owner->state.store(Waiter::kDone, std::memory_order_release);
        if (wake) {
          FutexWake(&owner->state);
          counters_->wakes.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
    if (mode_ == Mode::kReaper) {
      // Reads queued for this thread's next wait go out now.
      std::unique_lock lock(sq_mu_);
      reaper_in_kernel_ = false;
      if (!submitting_ && queued_reads_ > 0) SubmitQueued(lock);
    }
    std::lock_guard lock(reap_mu_);
    if (sleepers_.empty()) {
      reaping_ = false;
      return;
    }
    Waiter* next = sleepers_.back();
    sleepers_.pop_back();
    next->asleep = false;
    next->state.store(Waiter::kReapNow, std::memory_order_release);
    FutexWake(&next->state);
    counters_->wakes.fetch_add(1, std::memory_order_relaxed);
  }

  const Mode mode_;
  const int fd_;
  Counters* const counters_;
  io_uring ring_;
  std::mutex sq_mu_;
  unsigned queued_reads_ = 0;      // under sq_mu_: prepared, not yet published
  bool submitting_ = false;        // under sq_mu_: a thread is in SubmitQueued
  bool reaper_in_kernel_ = false;  // under sq_mu_ (reaper mode)
  std::mutex reap_mu_;
  bool reaping_ = false;            // under reap_mu_: a thread has the completion role
  std::vector<Waiter*> sleepers_;  // under reap_mu_: threads asleep on a read in flight
};

void InitOwnRing(const Config& config, io_uring* ring, std::mutex* sqpoll_mu, int* sqpoll_fd) {
  io_uring_params params{};
  if (config.mode == Mode::kSqPoll) {
    std::lock_guard lock(*sqpoll_mu);
    params.flags = IORING_SETUP_SQPOLL;
    params.sq_thread_idle = 100;  // ms
    if (*sqpoll_fd >= 0) {
      params.flags |= IORING_SETUP_ATTACH_WQ;
      params.wq_fd = static_cast<uint32_t>(*sqpoll_fd);
    }
    int rc = io_uring_queue_init_params(8, ring, &params);
    if (rc < 0) Fail(std::string("SQPOLL ring: ") + std::strerror(-rc));
    if (*sqpoll_fd < 0) *sqpoll_fd = ring->ring_fd;
    return;
  }
  // msgring's own rings take messages from other threads' submissions: no SINGLE_ISSUER there.
  if (config.mode == Mode::kOwn) {
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  }
  int rc = io_uring_queue_init_params(8, ring, &params);
  if (rc < 0) Fail(std::string("io_uring_queue_init: ") + std::strerror(-rc));
}

// One read on the thread's own ring, submitted and waited for in one call.
int ReadOwn(io_uring* ring, int fd, void* buffer, uint64_t offset, Counters* counters) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  io_uring_prep_read(sqe, fd, buffer, kBlockBytes, offset);
  int rc = io_uring_submit_and_wait(ring, 1);
  counters->syscalls.fetch_add(1, std::memory_order_relaxed);
  if (rc < 0) Fail(std::string("io_uring_submit_and_wait: ") + std::strerror(-rc));
  counters->submit_calls.fetch_add(1, std::memory_order_relaxed);
  counters->submitted.fetch_add(1, std::memory_order_relaxed);
  io_uring_cqe* cqe = nullptr;
  rc = io_uring_peek_cqe(ring, &cqe);
  if (rc < 0) Fail("a completion went missing");
  int result = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  return result;
}

bool ParseMode(std::string_view name, Mode* mode) {
  static constexpr std::pair<std::string_view, Mode> kModes[] = {
      {"own", Mode::kOwn},         {"handoff", Mode::kHandoff}, {"reaper", Mode::kReaper},
      {"msgring", Mode::kMsgRing}, {"sqpoll", Mode::kSqPoll}};
  for (const auto& [candidate, value] : kModes) {
    if (name == candidate) {
      *mode = value;
      return true;
    }
  }
  return false;
}

Config ParseArgs(int argc, char** argv) {
  Config config;
  std::string mode_name = "own";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view flag) -> const char* {
      if (arg.substr(0, flag.size()) != flag) return nullptr;
      return argv[i] + flag.size();
    };
    if (const char* path = value("--filename=")) {
      config.filename = path;
    } else if (const char* threads = value("--threads=")) {
      config.threads = std::atoi(threads);
    } else if (const char* mode = value("--mode=")) {
      mode_name = mode;
    } else if (const char* seconds = value("--runtime=")) {
      config.seconds = std::atof(seconds);
    } else {
      std::fprintf(stderr,
                   "usage: nvkv-shared-submit --filename=PATH [--threads=16] "
                   "[--mode=own|handoff|reaper|msgring|sqpoll] [--runtime=SECONDS]\n");
      std::exit(2);
    }
  }
  if (config.filename.empty()) Fail("--filename is required");
  if (config.threads < 1 || config.threads > 1024) Fail("--threads is 1 to 1024");
  if (!(config.seconds > 0)) Fail("--runtime is a positive number of seconds");
  if (!ParseMode(mode_name, &config.mode)) Fail("unknown --mode " + mode_name);
  return config;
}

double CpuMicros() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto micros = [](timeval t) { return t.tv_sec * 1e6 + t.tv_usec; };
  return micros(usage.ru_utime) + micros(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  const Config config = ParseArgs(argc, argv);
  int fd = open(config.filename.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) Fail(config.filename + ": " + std::strerror(errno));
  const off_t bytes = lseek(fd, 0, SEEK_END);
  const uint64_t blocks = bytes > 0 ? static_cast<uint64_t>(bytes) / kBlockBytes : 0;
  if (blocks == 0) Fail(config.filename + ": smaller than one 4 KiB block");

  Counters counters;
  const bool shared = config.mode == Mode::kHandoff || config.mode == Mode::kReaper ||
                      config.mode == Mode::kMsgRing;
  std::unique_ptr<SharedRing> shared_ring;
  if (shared) shared_ring = std::make_unique<SharedRing>(config.mode, fd, &counters);
  std::mutex sqpoll_mu;
  int sqpoll_fd = -1;
  std::atomic<bool> stop{false};
  std::atomic<int> short_reads{0};

  const double cpu_before = CpuMicros();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < config.threads; ++t) {
    threads.emplace_back([&, t] {
      void* buffer = nullptr;
      if (posix_memalign(&buffer, kBlockBytes, kBlockBytes) != 0) Fail("out of memory");
      std::mt19937_64 random(7919 * static_cast<uint64_t>(t) + 1);
      io_uring own_ring;
      const bool has_own_ring = config.mode != Mode::kHandoff && config.mode != Mode::kReaper;
      if (has_own_ring) InitOwnRing(config, &own_ring, &sqpoll_mu, &sqpoll_fd);
      Waiter waiter;
      uint64_t reads = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t offset = (random() % blocks) * kBlockBytes;
        const int result =
            shared ? shared_ring->Read(&waiter, buffer, offset, &own_ring)
                   : ReadOwn(&own_ring, fd, buffer, offset, &counters);
        if (result != static_cast<int>(kBlockBytes)) short_reads.fetch_add(1);
        ++reads;
      }
      counters.reads.fetch_add(reads);
      if (has_own_ring) io_uring_queue_exit(&own_ring);
      std::free(buffer);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(config.seconds));
  stop.store(true);
  for (std::thread& thread : threads) thread.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuMicros() - cpu_before;
  const unsigned failed = shared_ring ? shared_ring->Failures() : 0;
  if (short_reads.load() > 0 || failed > 0) {
    Fail(std::to_string(short_reads.load() + failed) + " reads failed or came back short");
  }

  const double reads = static_cast<double>(counters.reads.load());
  const char* mode_names[] = {"own", "handoff", "reaper", "msgring", "sqpoll"};
  std::printf(
      "[RUN] %s, %d threads: %.0f ops/s (%.2f us/op); system calls per read %.2f, reads per "
      "submitting call %.2f, futex wakes per read %.2f\n",
      mode_names[static_cast<int>(config.mode)], config.threads, reads / elapsed, cpu / reads,
      counters.syscalls.load() / reads,
      static_cast<double>(counters.submitted.load()) /
          static_cast<double>(std::max<uint64_t>(1, counters.submit_calls.load())),
      counters.wakes.load() / reads);
  close(fd);
  return 0;
}
