#include "kv/async_writes.h"

#include <utility>

#include "storage/base/check.h"

namespace nvkv::kv {

absl::Status AsyncWrites::PrepareToWait() {
  if (wake_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<storage::EventFd>> wake = storage::EventFd::Create();
  if (!wake.ok()) return wake.status();
  wake_ = std::move(*wake);
  return absl::OkStatus();
}

void AsyncWrites::AddReady(WriteCallback done, absl::Status status) {
  ready_.emplace_back(std::move(done), std::move(status));
}

void AsyncWrites::AddWaiting(WriteCallback done) {
  NVKV_CHECK(wake_ != nullptr);
  if (!listening_) {
    writer_->AddListener(this);
    listening_ = true;
  }
  // The writer keeps asking a listener with nothing waiting (its answer is then no): cheaper
  // than a thread joining and leaving the writer's list around each write.
  absl::MutexLock lock(&waiting_mu_);
  if (waiting_count_ == waiting_.size()) waiting_.emplace_back();
  Waiting& entry = waiting_[waiting_count_++];
  entry.done = std::move(done);
  entry.marks.swap(next_marks_);  // the spare's vector becomes the next write's
  next_marks_.clear();
}

bool AsyncWrites::AnyCovered(const LogWriter& writer) {
  absl::MutexLock lock(&waiting_mu_);
  for (size_t i = 0; i < waiting_count_; ++i) {
    if (writer.Covers(waiting_[i].marks)) return true;
  }
  return false;
}

void AsyncWrites::Collect() {
  if (waiting_count_ == 0) return;
  const absl::Status writer = writer_->Status();
  absl::MutexLock lock(&waiting_mu_);
  size_t kept = 0;
  for (size_t i = 0; i < waiting_count_; ++i) {
    Waiting& entry = waiting_[i];
    if (writer_->Covers(entry.marks)) {
      ready_.emplace_back(std::move(entry.done), absl::OkStatus());
    } else if (!writer.ok()) {
      // Nothing more becomes durable (a failed write or flush, or the store closing).
      ready_.emplace_back(std::move(entry.done), writer);
    } else {
      if (kept != i) std::swap(waiting_[kept], entry);
      ++kept;
    }
  }
  waiting_count_ = kept;
}

uint32_t AsyncWrites::RunReady() {
  uint32_t ran = 0;
  while (!ready_.empty()) {
    // Take the batch first: callbacks may start writes that land in ready_ again.
    std::vector<std::pair<WriteCallback, absl::Status>> batch;
    batch.swap(ready_);
    for (auto& [done, status] : batch) {
      ++ran;
      done(std::move(status));
    }
  }
  return ran;
}

void AsyncWrites::StopListening() {
  if (!listening_) return;
  writer_->RemoveListener(this);
  listening_ = false;
}

}  // namespace nvkv::kv
