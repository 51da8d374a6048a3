// Checkpointer (checkpointer.h).
#include "kv/checkpointer.h"

#include <algorithm>
#include <utility>

#include "storage/base/start_thread.h"

namespace nvkv::kv {

Checkpointer::Checkpointer(const Options& options, std::function<uint64_t()> log_pages,
                           std::function<absl::StatusOr<uint64_t>()> write)
    : options_(options), log_pages_(std::move(log_pages)), write_(std::move(write)) {}

Checkpointer::~Checkpointer() { Stop(); }

void Checkpointer::StartFrom(uint64_t log_pages_now, uint64_t checkpoint_pages,
                             uint64_t log_pages_after) {
  absl::MutexLock lock(&mu_);
  log_mark_ = log_pages_now - std::min(log_pages_now, log_pages_after);
  checkpoint_pages_ = checkpoint_pages;
}

absl::Status Checkpointer::Start() {
  if (options_.log_ratio == 0) return absl::OkStatus();
  return StartThread("the checkpoint thread", thread_, [this] { Loop(); });
}

void Checkpointer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::Wrote(uint64_t log_pages_now, uint64_t checkpoint_pages) {
  written_.fetch_add(1);
  absl::MutexLock lock(&mu_);
  log_mark_ = log_pages_now;
  checkpoint_pages_ = checkpoint_pages;
}

uint64_t Checkpointer::last_pages() {
  absl::MutexLock lock(&mu_);
  return checkpoint_pages_;
}

bool Checkpointer::Due() {
  if (options_.log_ratio == 0) return false;
  const uint64_t now = log_pages_();
  absl::MutexLock lock(&mu_);
  const uint64_t since = (now - std::min(now, log_mark_)) * options_.page_bytes;
  const uint64_t threshold = std::max<uint64_t>(
      options_.min_log_bytes, checkpoint_pages_ * options_.page_bytes * options_.log_ratio);
  return since >= threshold;
}

void Checkpointer::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.poll);
      if (stopping_) return;
    }
    if (!Due()) continue;
    const uint64_t before = log_pages_();
    const absl::StatusOr<uint64_t> pages = write_();
    if (pages.ok()) continue;  // write_ called Wrote
    failed_.fetch_add(1);
    // Tried again once as much log again was written.
    absl::MutexLock lock(&mu_);
    log_mark_ = before;
  }
}

}  // namespace nvkv::kv
