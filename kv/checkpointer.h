// Checkpointer: writes checkpoints (checkpoint.h) while the engine runs, so that recovery after a
// crash reads the last one and only the log written since (kv/FORMAT.md "Recovery from a
// base"), instead of the whole log.
//
// When: once the log written since the last checkpoint (pages the log heads assigned, compaction's
// copies included) reaches `log_ratio` times that checkpoint's size, and at least
// `min_log_bytes`. Each checkpoint writes the whole index, so the ratio bounds what checkpoints
// add to the device's writes (1 / log_ratio of the log's) and how much log a recovery reads and
// keeps tables for beside the index.
//
// How: its thread looks every `poll` whether one is due and then calls `write`, the
// CheckpointKeeper's, which holds writes back while it takes the checkpoint into memory, not
// while it writes it. A checkpoint that fails (no room, a device error) is tried again once as
// much log again was written.
//
// Thread contract: Start, Stop from the engine's owner thread; Wrote and the counters from any.
#ifndef NVKV_KV_CHECKPOINTER_H_
#define NVKV_KV_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace nvkv::kv {

class Checkpointer {
 public:
  struct Options {
    uint32_t log_ratio = 8;  // 0: never while running
    uint64_t min_log_bytes = uint64_t{64} << 20;
    uint32_t page_bytes = 4096;
    absl::Duration poll = absl::Milliseconds(100);
  };
  // `log_pages` gives the pages the log heads assigned so far (a count that only grows);
  // `write` writes a checkpoint and returns its pages.
  Checkpointer(const Options& options, std::function<uint64_t()> log_pages,
               std::function<absl::StatusOr<uint64_t>()> write);
  ~Checkpointer();  // Stop()
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Where the engine starts: a checkpoint of `checkpoint_pages` pages stands for the log up to
  // `log_pages_now`, but for `log_pages_after` pages recovery read beyond it (0 after a clean
  // Close; the log after the base, or the whole log, after a crash).
  void StartFrom(uint64_t log_pages_now, uint64_t checkpoint_pages, uint64_t log_pages_after);
  // kResourceExhausted when the system will not start the thread.
  absl::Status Start();
  void Stop();  // idempotent; waits for a checkpoint under way

  // A checkpoint of `checkpoint_pages` pages now stands for the log up to `log_pages_now`
  // (written by the thread, or asked for: Engine::Checkpoint).
  void Wrote(uint64_t log_pages_now, uint64_t checkpoint_pages);
  // Whether the log written since the last checkpoint calls for one.
  bool Due();
  // The last checkpoint's pages (0 before any).
  uint64_t last_pages();

  // Checkpoints written (by the thread, or asked for) and failed.
  uint64_t written() const { return written_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  void Loop();
  // (Lock order: a leaf; write_ is called without it.)

  const Options options_;
  const std::function<uint64_t()> log_pages_;
  const std::function<absl::StatusOr<uint64_t>()> write_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The log's pages when the last checkpoint was written (less the log it does not hold), and
  // that checkpoint's size in pages.
  uint64_t log_mark_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t checkpoint_pages_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> written_{0}, failed_{0};
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_CHECKPOINTER_H_
