#include "kv/free_segments.h"

#include "storage/base/check.h"

namespace nvkv::kv {

uint64_t FreeSegments::count() {
  absl::MutexLock lock(&mu_);
  return free_.size() + announcing_.size() + ready_.size();
}

std::optional<uint64_t> FreeSegments::NextForHead() {
  absl::MutexLock lock(&mu_);
  if (map_ == nullptr) return free_.empty() ? std::nullopt : std::optional(free_.back());
  return ready_.empty() ? std::nullopt : std::optional(ready_.front());
}

void FreeSegments::TakeForHead(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  if (map_ == nullptr) {
    NVKV_CHECK(!free_.empty() && free_.back() == segment);
    free_.pop_back();
    return;
  }
  NVKV_CHECK(!ready_.empty() && ready_.front() == segment);
  ready_.erase(ready_.begin());
  announce_due_.store(true, std::memory_order_release);
}

bool FreeSegments::TakeUnannounced(uint64_t count, uint64_t keep, std::vector<uint64_t>* taken) {
  absl::MutexLock lock(&mu_);
  taken->clear();
  if (free_.size() < count || free_.size() + announcing_.size() + ready_.size() < count + keep) {
    return false;
  }
  // free_ holds the highest numbers first.
  taken->assign(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(count));
  free_.erase(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(count));
  return true;
}

void FreeSegments::Add(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  free_.push_back(segment);
  if (map_ != nullptr) map_->Set(segment, MapState::kFree);
  announce_due_.store(true, std::memory_order_release);
}

void FreeSegments::Remove(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  std::erase(free_, segment);
  std::erase(ready_, segment);
  std::erase_if(announcing_, [segment](const auto& entry) { return entry.first == segment; });
  if (map_ != nullptr) map_->Set(segment, MapState::kFree);
  announce_due_.store(true, std::memory_order_release);
}

void FreeSegments::Rebuild(std::vector<uint64_t> free) {
  absl::MutexLock lock(&mu_);
  free_ = std::move(free);
  announcing_.clear();
  ready_.clear();
  if (map_ != nullptr) {
    for (const uint64_t segment : free_) map_->Set(segment, MapState::kFree);
  }
  announce_due_.store(true, std::memory_order_release);
}

void FreeSegments::AnnounceMore() {
  if (map_ == nullptr || !announce_due_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&mu_);
  while (!free_.empty() && announcing_.size() + ready_.size() < announced_target_) {
    const uint64_t segment = free_.back();
    free_.pop_back();
    announcing_.emplace_back(segment, map_->Set(segment, MapState::kInUse));
  }
  announce_due_.store(false, std::memory_order_relaxed);  // until a segment leaves or frees
}

void FreeSegments::Written() {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < announcing_.size();) {
    if (map_->Durable(announcing_[i].second)) {
      ready_.push_back(announcing_[i].first);
      announcing_.erase(announcing_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void FreeSegments::Withdraw() {
  if (map_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [segment, ticket] : announcing_) ready_.push_back(segment);
  announcing_.clear();
  for (const uint64_t segment : ready_) {
    free_.push_back(segment);
    map_->Set(segment, MapState::kFree);
  }
  ready_.clear();
}

}  // namespace nvkv::kv
