// SegmentTable (segment_table.h): allocation and the free list, liveness and victims, and the
// segment map's write protocol. Its recovery and checkpoint side is
// segment_table_restore.cc.
#include "kv/segment_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// What cleaning a segment that keeps the share `u` of its log gains for what it costs. Greedy:
// the space it frees. LFS cost-benefit: the space it frees times its age (how many writes ago
// its newest record was, `age`), over the cost of reading the segment and writing what it keeps.
double VictimScore(CompactionPolicy policy, double u, uint64_t age) {
  if (policy == CompactionPolicy::kGreedy) return 1.0 - u;
  return (1.0 - u) * (static_cast<double>(age) + 1) / (1.0 + u);
}

}  // namespace

SegmentTable::SegmentTable(const Geometry& geometry, uint32_t reserve_user, SegmentMap* map,
                           const std::atomic<uint64_t>* next_sequence)
    : segment_count_(geometry.segment_count),
      map_(map),
      next_sequence_(next_sequence),
      capacity_bytes_(uint64_t{geometry.log_pages()} * geometry.page_bytes),
      log_pages_(geometry.log_pages()),
      page_payload_bytes_(geometry.payload_bytes()),
      sparse_bytes_(uint64_t{geometry.pages_per_segment > 2 ? geometry.pages_per_segment - 2 : 0} *
                    geometry.payload_bytes() / 2),
      reserve_user_(reserve_user),
      info_(new Info[geometry.segment_count]),
      contents_(geometry),
      free_(map, reserve_user) {}

void SegmentTable::Empty(uint64_t segment) {
  Info& info = info_[segment];
  info.live_bytes.store(0);
  info.likely_stale_bytes.store(0);
  info.generation = 0;
  info.summary = SummaryPlace{};
  contents_.Clear(segment);
}

uint64_t SegmentTable::KeepFor(SegmentUse use) const {
  return use == SegmentUse::kUserPut      ? reserve_user_
         : use == SegmentUse::kUserDelete ? 1
                                          : 0;
}

absl::StatusOr<uint64_t> SegmentTable::Allocate(SegmentUse use, uint64_t* generation,
                                                bool* awaiting_writer) {
  absl::MutexLock lock(&mu_);
  *awaiting_writer = false;
  NVKV_RETURN_IF_ERROR(CheckReserveLocked(use));
  const std::optional<uint64_t> next = free_.NextForHead();
  if (!next || (zone_tokens_.has_value() && *zone_tokens_ == 0)) {
    *awaiting_writer = true;
    return 0;
  }
  const uint64_t segment = *next;
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kFree);
  // Its contents (a key filter) before the segment: without memory for them, none is taken.
  NVKV_RETURN_IF_ERROR(contents_.Open(segment));
  free_.TakeForHead(segment);
  if (zone_tokens_.has_value()) --*zone_tokens_;
  info.state = SegmentState::kOpen;
  info.live_bytes.store(0);
  info.likely_stale_bytes.store(0);
  info.summary = SummaryPlace{};
  changes_.fetch_add(1, std::memory_order_relaxed);
  *generation = next_generation_.fetch_add(1);
  info.generation = *generation;
  return segment;
}

void SegmentTable::UseZoneTokens(uint32_t tokens) {
  absl::MutexLock lock(&mu_);
  zone_tokens_ = tokens;
}

void SegmentTable::ZoneDone() {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(zone_tokens_.has_value());
  ++*zone_tokens_;
}

std::optional<uint32_t> SegmentTable::zone_tokens_free() {
  absl::MutexLock lock(&mu_);
  return zone_tokens_;
}

absl::Status SegmentTable::CheckReserve(SegmentUse use) {
  if (use == SegmentUse::kCompaction) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return CheckReserveLocked(use);
}

absl::Status SegmentTable::CheckReserveLocked(SegmentUse use) {
  const uint64_t keep = KeepFor(use);
  // The kept held segments (a checkpoint, the base) spare the next Open reading the log: puts
  // never take their room. Deletes and compaction are how a full store makes room again, so
  // when nothing else is free they may, rather than be refused (recovery then reads the log
  // after a crash).
  if (free_.count() <= keep && use != SegmentUse::kUserPut) ReleaseKeptLocked();
  if (free_.count() > keep) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "store full: ", free_.count(), " free segments of ", segment_count_, " (",
      kept_.size(), " hold the checkpoint the next Open starts from)",
      " and compaction finds nothing to reclaim"));
}

void SegmentTable::Seal(uint64_t segment, std::optional<LastWrite> last_write) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kOpen);
  info.state = SegmentState::kSealed;
  info.last_write = last_write;
  contents_.Seal(segment);
}

std::optional<LastWrite> SegmentTable::last_write(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  return info_[segment].last_write;
}

void SegmentTable::Retain(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(info_[segment].state == SegmentState::kCompacting);
  info_[segment].state = SegmentState::kRetained;
  retained_count_.fetch_add(1);
}

void SegmentTable::Retire(uint64_t segment, bool holds_log) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kFree || info.state == SegmentState::kCompacting);
  NVKV_CHECK(!holds_log || info.state == SegmentState::kCompacting);
  info.state = SegmentState::kRetired;
  info.last_write.reset();
  if (!holds_log) {
    Empty(segment);
    free_.Remove(segment);  // (compaction's segment is on no list: the map says free all the same)
  }
  retired_count_.fetch_add(1, std::memory_order_relaxed);
  changes_.fetch_add(1, std::memory_order_relaxed);
}

void SegmentTable::Unretain(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(info_[segment].state == SegmentState::kRetained);
  retained_count_.fetch_sub(1);
  info_[segment].state = SegmentState::kSealed;
  info_[segment].live_bytes.store(0);
}

bool SegmentTable::IsRetained(uint64_t segment) {
  if (retained_count_.load() == 0) return false;
  absl::MutexLock lock(&mu_);
  return info_[segment].state == SegmentState::kRetained;
}

void SegmentTable::HoldUnread(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  info_[segment].held_unread = true;
}

std::vector<uint64_t> SegmentTable::retained() {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> out;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    if (info_[s].state == SegmentState::kRetained) out.push_back(s);
  }
  return out;
}

std::vector<uint64_t> SegmentTable::SealedWithWritesPending() {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> out;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    if (info_[s].state == SegmentState::kSealed && WritesPending(s)) out.push_back(s);
  }
  return out;
}

std::optional<uint64_t> SegmentTable::PickVictim(CompactionPolicy policy, uint64_t now_sequence,
                                                 bool only_with_garbage) {
  absl::MutexLock lock(&mu_);
  std::optional<uint64_t> best = BestVictim(policy, now_sequence, only_with_garbage,
                                            /*with_writes_in_flight=*/false);
  if (best) {
    info_[*best].state = SegmentState::kCompacting;
    changes_.fetch_add(1, std::memory_order_relaxed);
  }
  return best;
}

std::optional<uint64_t> SegmentTable::BestVictim(CompactionPolicy policy, uint64_t now_sequence,
                                                 bool only_with_garbage,
                                                 bool with_writes_in_flight) {
  std::vector<uint64_t> candidates;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    const Info& info = info_[s];
    if (info.state != SegmentState::kSealed || info.held_unread) continue;
    if (with_writes_in_flight || !WritesPending(s)) {
      candidates.push_back(s);
    }
  }
  const std::vector<SegmentContents::CleaningEstimate> estimates =
      contents_.EstimateCleaning(candidates);
  std::optional<uint64_t> best;
  double best_score = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Info& info = info_[candidates[i]];
    const SegmentContents::CleaningEstimate& estimate = estimates[i];
    // Bytes cleaning must copy: live puts, and the tombstones it would keep. Records that blind
    // overwrites probably made stale are counted as garbage: cleaning the segment is what finds
    // out, and settles them (compactor.h).
    const int64_t indexed = info.live_bytes.load() - info.likely_stale_bytes.load();
    const int64_t kept = std::max<int64_t>(0, indexed) + estimate.tombstones_kept;
    if (only_with_garbage) {
      const int64_t dead = estimate.record_bytes - kept;
      if (dead < static_cast<int64_t>(page_payload_bytes_) &&
          kept > static_cast<int64_t>(sparse_bytes_)) {
        continue;  // would be rewritten into as many pages as it has
      }
    }
    const double u =
        std::min(1.0, static_cast<double>(kept) / static_cast<double>(capacity_bytes_));
    const uint64_t newest = estimate.max_sequence;
    const double score = VictimScore(policy, u, now_sequence > newest ? now_sequence - newest : 0);
    if (score > best_score) {
      best_score = score;
      best = candidates[i];
    }
  }
  return best;
}

void SegmentTable::Unpick(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  info_[segment].state = SegmentState::kSealed;
}

void SegmentTable::Free(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kCompacting);
  info.state = SegmentState::kFree;
  info.last_write.reset();
  Empty(segment);
  free_.Add(segment);
  changes_.fetch_add(1, std::memory_order_relaxed);
}

bool SegmentTable::MarkSummarized(uint64_t segment, uint64_t generation,
                                  const SummaryPlace& summary) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  // Freed since (and maybe taken again): the summary describes a log the segment no longer holds.
  if (info.state == SegmentState::kFree || info.state == SegmentState::kOpen ||
      info.generation != generation) {
    return false;
  }
  info.summary = summary;
  if (map_ != nullptr) map_->Set(segment, MapState::kSummarized, summary);
  return true;
}

void SegmentTable::WithdrawAnnouncements() {
  absl::MutexLock lock(&mu_);
  free_.Withdraw();
}

std::optional<SegmentMap::PageWrite> SegmentTable::TakeMapWrite(uint8_t* page) {
  NVKV_CHECK(map_ != nullptr);
  return map_->TakeWrite(page, [this] { return MapFloors(); });
}

absl::Status SegmentTable::MapPageWritten(const SegmentMap::PageWrite& write,
                                          const absl::Status& status) {
  NVKV_CHECK(map_ != nullptr);
  map_->Written(write, status.ok());
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("writing the segment map failed: ", status.message()));
  }
  free_.Written();
  return absl::OkStatus();
}

SegmentMapPageHeader SegmentTable::MapFloors() const {
  SegmentMapPageHeader floors{};
  floors.sequence_floor = next_sequence_ != nullptr ? next_sequence_->load() : 1;
  floors.generation_floor = next_generation_.load();
  return floors;
}

uint64_t SegmentTable::generation(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  return info_[segment].generation;
}

void SegmentTable::ClearLiveBytes() {
  for (uint64_t s = 0; s < segment_count_; ++s) info_[s].live_bytes.store(0);
}

uint64_t SegmentTable::live_bytes_total() const {
  int64_t total = 0;
  for (uint64_t s = 0; s < segment_count_; ++s) total += info_[s].live_bytes.load();
  return static_cast<uint64_t>(std::max<int64_t>(0, total));
}

SegmentState SegmentTable::state(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  return info_[segment].state;
}

bool SegmentTable::WaitForFree(SegmentUse use, absl::Duration timeout) {
  const uint64_t keep = KeepFor(use);
  // Compaction can still free a segment while it is cleaning one, or while some segment is
  // worth cleaning (counting segments whose writes are still in flight: they become victims
  // once written). When neither holds, the store is full and waiting would only delay saying so.
  auto settled = [this, keep]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (free_.count() > keep) return true;
    for (uint64_t s = 0; s < segment_count_; ++s) {
      if (info_[s].state == SegmentState::kCompacting) return false;
    }
    return !BestVictim(CompactionPolicy::kGreedy, 0, /*only_with_garbage=*/true,
                       /*with_writes_in_flight=*/true)
                .has_value();
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
  return free_.count() > keep;
}

uint64_t SegmentTable::usable_bytes() {
  absl::MutexLock lock(&mu_);
  const uint64_t kept = reserve_user_ + kept_.size() + retired_count_.load();
  return segment_count_ > kept ? (segment_count_ - kept) * capacity_bytes_ : 0;
}

}  // namespace nvkv::kv

