// SegmentTable (segment_table.h), its recovery and checkpoint side: what recovery fills in at
// Open, what a checkpoint saves of each segment and restores, and the held segments
// checkpoints lie in.
#include "kv/segment_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

void SegmentTable::RecoverSegment(uint64_t segment, const RecoveredSegment& found) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  info.state = found.in_use ? SegmentState::kSealed : SegmentState::kFree;
  info.generation = found.in_use ? found.generation : 0;
  info.summary = found.in_use ? found.summary : SummaryPlace{};
  contents_.Recover(segment, found.in_use, found.min_sequence, found.max_sequence,
                    found.extends_restored);
}

void SegmentTable::FinishRecovery() {
  contents_.FinishRecovery();
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> free;
  // Highest numbers first, so heads fill the device from the front.
  for (uint64_t s = segment_count_; s > 0; --s) {
    const Info& info = info_[s - 1];
    if (info.state == SegmentState::kFree) {
      free.push_back(s - 1);
    } else if (map_ != nullptr) {
      if (info.state == SegmentState::kHeld) {
        map_->Set(s - 1, MapState::kBaseCheckpoint, info.summary);
      } else if (info.summary.pages > 0) {
        map_->Set(s - 1, MapState::kSummarized, info.summary);
      } else {
        map_->Set(s - 1, MapState::kInUse);
      }
    }
  }
  free_.Rebuild(std::move(free));
}

std::optional<SegmentTable::LogFacts> SegmentTable::log_facts(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  const Info& info = info_[segment];
  if (info.state == SegmentState::kFree || info.state == SegmentState::kHeld) return std::nullopt;
  return LogFacts{.generation = info.generation,
                  .summary = info.summary,
                  .live_bytes = info.live_bytes.load(),
                  .likely_stale_bytes = info.likely_stale_bytes.load()};
}

absl::Status SegmentTable::RestoreLog(uint64_t segment, const LogFacts& facts) {
  const auto refuse = [&](const char* what) {
    return absl::DataLossError(absl::StrCat("checkpoint: segment ", segment, ": ", what));
  };
  if (segment >= segment_count_) return refuse("beyond the store");
  if (facts.generation == 0 || facts.live_bytes < 0 ||
      facts.summary.first + uint64_t{facts.summary.pages} > log_pages_) {
    return refuse("counts no segment holding a log has");
  }
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  if (info.state != SegmentState::kFree) return refuse("given twice");
  info.state = SegmentState::kSealed;
  info.generation = facts.generation;
  info.summary = facts.summary;
  info.live_bytes.store(facts.live_bytes);
  info.likely_stale_bytes.store(facts.likely_stale_bytes);
  return absl::OkStatus();
}

bool SegmentTable::ReopenLog(uint64_t segment, uint64_t generation) {
  if (segment >= segment_count_) return false;
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  if (info.state != SegmentState::kSealed || info.generation != generation ||
      info.summary.pages != 0) {
    return false;
  }
  info.state = SegmentState::kOpen;
  info.last_write.reset();
  return true;
}

void SegmentTable::ForgetRecovered() {
  absl::MutexLock lock(&mu_);
  kept_.clear();
  for (uint64_t s = 0; s < segment_count_; ++s) {
    Empty(s);
    info_[s].state = SegmentState::kFree;
  }
}

void SegmentTable::ForgetRecoveredSegment(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  Empty(segment);
  info_[segment].state = SegmentState::kFree;
}

bool SegmentTable::Hold(uint64_t count, uint64_t keep, std::vector<uint64_t>* taken) {
  absl::MutexLock lock(&mu_);
  if (!free_.TakeUnannounced(count, keep, taken)) return false;
  for (const uint64_t segment : *taken) {
    NVKV_CHECK(info_[segment].state == SegmentState::kFree);
    info_[segment].state = SegmentState::kHeld;
  }
  return true;
}

void SegmentTable::Unhold(std::span<const uint64_t> segments) {
  absl::MutexLock lock(&mu_);
  for (const uint64_t segment : segments) {
    NVKV_CHECK(std::find(kept_.begin(), kept_.end(), segment) == kept_.end());
  }
  UnholdLocked(segments);
}

SegmentMap::Ticket SegmentTable::RaiseMapFloors() {
  if (map_ == nullptr) return SegmentMap::Ticket{};
  return map_->Rewrite(0);
}

bool SegmentTable::MapDurable(const SegmentMap::Ticket& ticket) const {
  return map_ == nullptr || map_->Durable(ticket);
}

std::vector<SegmentMap::Ticket> SegmentTable::KeepHeld(std::span<const uint64_t> segments,
                                                       std::span<const uint32_t> pages,
                                                       MapState mark) {
  NVKV_CHECK(map_ != nullptr);
  NVKV_CHECK(mark == MapState::kCheckpoint || mark == MapState::kBaseCheckpoint);
  NVKV_CHECK(pages.size() == segments.size());
  absl::MutexLock lock(&mu_);
  ReleaseKeptLocked();
  kept_.assign(segments.begin(), segments.end());
  std::vector<SegmentMap::Ticket> tickets;
  for (size_t i = 0; i < kept_.size(); ++i) {
    Info& info = info_[kept_[i]];
    NVKV_CHECK(info.state == SegmentState::kHeld);
    info.summary = SummaryPlace{static_cast<uint32_t>(i), pages[i]};
    tickets.push_back(map_->Set(kept_[i], mark, info.summary));
  }
  return tickets;
}

void SegmentTable::KeepFound(uint64_t segment, uint32_t pages) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kFree);
  info.state = SegmentState::kHeld;
  info.summary = SummaryPlace{static_cast<uint32_t>(kept_.size()), pages};
  kept_.push_back(segment);
}

void SegmentTable::MarkKept(MapState mark) {
  NVKV_CHECK(map_ != nullptr);
  absl::MutexLock lock(&mu_);
  for (const uint64_t segment : kept_) map_->Set(segment, mark, info_[segment].summary);
}

void SegmentTable::ReleaseKept() {
  absl::MutexLock lock(&mu_);
  ReleaseKeptLocked();
}

void SegmentTable::ReleaseKeptLocked() {
  UnholdLocked(kept_);
  kept_.clear();
}

void SegmentTable::UnholdLocked(std::span<const uint64_t> segments) {
  for (const uint64_t segment : segments) {
    Info& info = info_[segment];
    NVKV_CHECK(info.state == SegmentState::kHeld);
    info.state = SegmentState::kFree;
    info.summary = SummaryPlace{};
    free_.Add(segment);
  }
}

uint64_t SegmentTable::kept_count() {
  absl::MutexLock lock(&mu_);
  return kept_.size();
}

}  // namespace nvkv::kv
