#include "kv/segment_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// The most records a segment can hold: every page full of the smallest records (a delete of a
// one-byte key).
uint64_t MaxRecordsPerSegment(const Geometry& geometry) {
  return uint64_t{geometry.pages_per_segment} * (geometry.payload_bytes() / RecordBytes(1, 0));
}

// See bits_per_put_.
uint32_t BitsPerPut(uint64_t segments) {
  return static_cast<uint32_t>(
      std::clamp(std::ceil(std::log2(100.0 * static_cast<double>(segments)) * 1.44), 10.0, 32.0));
}

// The step between a key's bits: odd, so that the probes hit distinct bits, and mixing both
// halves of the hash (the index draws on lo, the shard on hi's top bits).
uint64_t FilterStep(const KeyHash& hash) {
  return ((hash.hi ^ (hash.lo >> 32 | hash.lo << 32)) * 0x9e3779b97f4a7c15ull) | 1;
}

absl::Status NoMemoryForFilter(uint64_t segment, uint64_t words) {
  return absl::ResourceExhaustedError(absl::StrCat("no memory for the key filter of segment ",
                                                   segment, " (", words * 8, " bytes)"));
}

// Adds `value` to `counter`, whose one writer is the caller: readers on other threads see the
// old sum or the new one.
template <typename T>
void AddBySoleWriter(std::atomic<T>& counter, T value) {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

}  // namespace

SegmentTable::KeyFilter::KeyFilter(uint64_t words, uint32_t probes)
    : KeyFilter(words, probes, std::unique_ptr<std::atomic<uint64_t>[]>(
                                   new std::atomic<uint64_t>[words])) {}

SegmentTable::KeyFilter::KeyFilter(uint64_t words, uint32_t probes,
                                   std::unique_ptr<std::atomic<uint64_t>[]> own_bits)
    : words_(words), probes_(probes), own_bits_(std::move(own_bits)), bits_(own_bits_.get()) {
  NVKV_CHECK((words & (words - 1)) == 0);
  for (uint64_t i = 0; i < words; ++i) bits_[i].store(0, std::memory_order_relaxed);
}

std::unique_ptr<SegmentTable::KeyFilter> SegmentTable::KeyFilter::OwnOrNull(uint64_t words,
                                                                            uint32_t probes) {
  std::unique_ptr<std::atomic<uint64_t>[]> bits(new (std::nothrow) std::atomic<uint64_t>[words]);
  std::unique_ptr<KeyFilter> filter(bits == nullptr ? nullptr
                                                    : new (std::nothrow) KeyFilter(
                                                          words, probes, std::move(bits)));
  return filter;
}

SegmentTable::KeyFilter::KeyFilter(uint64_t words, uint32_t probes, const uint64_t* saved,
                                   std::atomic<uint64_t>* bits,
                                   std::shared_ptr<ZeroedBlock> block)
    : words_(words), probes_(probes), shared_block_(std::move(block)), bits_(bits) {
  NVKV_CHECK((words & (words - 1)) == 0);
  for (uint64_t i = 0; i < words; ++i) {
    new (&bits_[i]) std::atomic<uint64_t>(saved != nullptr ? saved[i] : 0);
  }
}

std::unique_ptr<SegmentTable::KeyFilter> SegmentTable::KeyFilter::InBlocks(uint64_t words,
                                                                           uint32_t probes,
                                                                           FilterBlocks& blocks,
                                                                           const uint64_t* saved) {
  std::shared_ptr<ZeroedBlock> block;
  std::atomic<uint64_t>* const bits = blocks.Take(words, &block);
  if (bits == nullptr) return nullptr;
  return std::unique_ptr<KeyFilter>(new KeyFilter(words, probes, saved, bits, std::move(block)));
}

std::atomic<uint64_t>* SegmentTable::FilterBlocks::Take(uint64_t words,
                                                        std::shared_ptr<ZeroedBlock>* block) {
  constexpr uint64_t kBlockWords = (uint64_t{2} << 20) / sizeof(uint64_t);
  constexpr uint64_t kPopulateWords = (uint64_t{256} << 10) / sizeof(uint64_t);
  if (block_ == nullptr || used_words_ + words > block_->bytes() / sizeof(uint64_t)) {
    ZeroedBlock fresh = ZeroedBlock::Allocate(std::max(kBlockWords, words) * sizeof(uint64_t),
                                              ZeroedBlock::Pages::kSmall);
    if (fresh.data() == nullptr) return nullptr;
    block_ = std::make_shared<ZeroedBlock>(std::move(fresh));
    used_words_ = 0;
    populated_words_ = 0;
  }
  if (used_words_ + words > populated_words_) {
    const uint64_t count = std::max(kPopulateWords, used_words_ + words - populated_words_);
    block_->Populate(populated_words_ * sizeof(uint64_t), count * sizeof(uint64_t));
    populated_words_ += count;
  }
  *block = block_;
  std::atomic<uint64_t>* const at =
      static_cast<std::atomic<uint64_t>*>(block_->data()) + used_words_;
  used_words_ += words;
  return at;
}

void SegmentTable::KeyFilter::Add(const KeyHash& hash) {
  const uint64_t mask = words_ * 64 - 1, step = FilterStep(hash);
  uint64_t bit = hash.lo;
  for (uint32_t i = 0; i < probes_; ++i, bit += step) {
    // One writer at a time (the caller's contract): a plain read and write, no locked
    // read-modify-write, and a reader beside it sees either word.
    std::atomic<uint64_t>& word = bits_[(bit & mask) / 64];
    word.store(word.load(std::memory_order_relaxed) | (uint64_t{1} << (bit % 64)),
               std::memory_order_relaxed);
  }
}

bool SegmentTable::KeyFilter::MayContain(const KeyHash& hash) const {
  const uint64_t mask = words_ * 64 - 1, step = FilterStep(hash);
  uint64_t bit = hash.lo;
  for (uint32_t i = 0; i < probes_; ++i, bit += step) {
    const uint64_t word = bits_[(bit & mask) / 64].load(std::memory_order_relaxed);
    if ((word & (uint64_t{1} << (bit % 64))) == 0) return false;
  }
  return true;
}

void SegmentTable::KeyFilter::CopyTo(std::vector<uint64_t>* words) const {
  words->resize(words_);
  for (uint64_t i = 0; i < words_; ++i) (*words)[i] = bits_[i].load(std::memory_order_relaxed);
}

void SegmentTable::KeyFilter::FoldTo(uint64_t words) {
  NVKV_CHECK((words & (words - 1)) == 0);
  if (words >= words_) return;
  // Bit b of the smaller filter holds every bit b (mod its size) of this one: word i holds
  // words i, i + words, i + 2 * words... (bit positions within a word are kept).
  std::unique_ptr<std::atomic<uint64_t>[]> folded(new std::atomic<uint64_t>[words]);
  for (uint64_t i = 0; i < words; ++i) {
    uint64_t bits = 0;
    for (uint64_t j = i; j < words_; j += words) bits |= bits_[j].load(std::memory_order_relaxed);
    folded[i].store(bits, std::memory_order_relaxed);
  }
  own_bits_ = std::move(folded);
  shared_block_.reset();
  bits_ = own_bits_.get();
  words_ = words;
}

uint64_t SegmentTable::FilterWordsFor(uint64_t puts) const {
  uint64_t words = 1;
  while (words * 64 < puts * bits_per_put_) words *= 2;
  return words;
}

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
      bits_per_put_(BitsPerPut(geometry.segment_count)),
      probes_(std::max<uint32_t>(1, static_cast<uint32_t>(bits_per_put_ * 0.69))),
      open_filter_words_(FilterWordsFor(MaxRecordsPerSegment(geometry))),
      info_(new Info[geometry.segment_count]) {}

void SegmentTable::Reset(Info& info) {
  info.live_bytes.store(0);
  info.likely_stale_bytes.store(0);
  info.min_sequence.store(UINT64_MAX);
  info.max_sequence.store(0);
  info.record_bytes.store(0);
  info.tombstone_bytes.store(0);
  info.puts.store(0);
  info.filter.reset();
  info.sample_count = 0;
  info.generation = 0;
  info.summary = SummaryPlace{};
}

uint64_t SegmentTable::KeepFor(SegmentUse use) const {
  return use == SegmentUse::kUserPut      ? reserve_user_
         : use == SegmentUse::kUserDelete ? 1
                                          : 0;
}

absl::StatusOr<uint64_t> SegmentTable::Allocate(SegmentUse use, uint64_t* generation,
                                                bool* awaiting_map) {
  absl::MutexLock lock(&mu_);
  *awaiting_map = false;
  NVKV_RETURN_IF_ERROR(CheckReserveLocked(use));
  if (map_ != nullptr && ready_.empty()) {
    *awaiting_map = true;
    return 0;
  }
  // The new segment's key filter before the segment: without memory for it, none is taken.
  std::unique_ptr<KeyFilter> filter = KeyFilter::OwnOrNull(open_filter_words_, probes_);
  if (filter == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for a new segment's key filter (", open_filter_words_ * 8,
                     " bytes)"));
  }
  uint64_t segment = 0;
  if (map_ == nullptr) {
    segment = free_.back();
    free_.pop_back();
  } else {
    segment = ready_.front();
    ready_.erase(ready_.begin());
    announce_due_.store(true, std::memory_order_release);
  }
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kFree);
  info.state = SegmentState::kOpen;
  Reset(info);
  info.filter = std::move(filter);
  changes_.fetch_add(1, std::memory_order_relaxed);
  *generation = next_generation_.fetch_add(1);
  info.generation = *generation;
  return segment;
}

absl::Status SegmentTable::CheckReserve(SegmentUse use) {
  if (use == SegmentUse::kCompaction) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return CheckReserveLocked(use);
}

absl::Status SegmentTable::CheckReserveLocked(SegmentUse use) {
  const uint64_t keep = KeepFor(use);
  // The kept checkpoint (the base) spares the next Open reading the log: puts never take its
  // room. Deletes and compaction are how a full store makes room again, so when nothing else is
  // free they may, rather than be refused (recovery then reads the log after a crash).
  if (FreeCountLocked() <= keep && use != SegmentUse::kUserPut) {
    FreeCheckpointLocked(kept_checkpoint_);
  }
  if (FreeCountLocked() > keep) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "store full: ", FreeCountLocked(), " free segments of ", segment_count_, " (",
      kept_checkpoint_.size(), " hold the checkpoint the next Open starts from)",
      " and compaction finds nothing to reclaim"));
}

void SegmentTable::Seal(uint64_t segment, std::optional<LastWrite> last_write) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kOpen);
  info.state = SegmentState::kSealed;
  info.last_write = last_write;
  if (info.filter != nullptr) info.filter->FoldTo(FilterWordsFor(info.puts.load()));
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
  // The tombstone floor of each segment (MinSequenceExcept) from the two smallest minimums.
  uint64_t lowest = UINT64_MAX, second = UINT64_MAX, lowest_segment = segment_count_;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    if (info_[s].state == SegmentState::kFree) continue;
    const uint64_t min = info_[s].min_sequence.load();
    if (min < lowest) {
      second = lowest;
      lowest = min;
      lowest_segment = s;
    } else if (min < second) {
      second = min;
    }
  }
  std::optional<uint64_t> best;
  double best_score = -1;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    Info& info = info_[s];
    if (info.state != SegmentState::kSealed || info.held_unread) continue;
    if (!with_writes_in_flight && info.pages_pending.load(std::memory_order_acquire) != 0) {
      continue;
    }
    // Bytes cleaning must copy: live puts, and the share of tombstones it would keep, unless
    // the global test drops all of them.
    const uint64_t floor = s == lowest_segment ? second : lowest;
    const bool tombstones_dead = info.max_sequence.load() < floor;
    int64_t tombstones_kept = 0;
    if (!tombstones_dead && info.sample_count > 0) {
      tombstones_kept = info.tombstone_bytes.load() * KeptSamples(s) / info.sample_count;
    }
    // Records that blind overwrites probably made stale are counted as garbage: cleaning the
    // segment is what finds out, and settles them (compactor.h).
    const int64_t indexed = info.live_bytes.load() - info.likely_stale_bytes.load();
    const int64_t kept = std::max<int64_t>(0, indexed) + tombstones_kept;
    if (only_with_garbage) {
      const int64_t dead = info.record_bytes.load() - kept;
      if (dead < static_cast<int64_t>(page_payload_bytes_) &&
          kept > static_cast<int64_t>(sparse_bytes_)) {
        continue;  // would be rewritten into as many pages as it has
      }
    }
    const double u =
        std::min(1.0, static_cast<double>(kept) / static_cast<double>(capacity_bytes_));
    double score;
    if (policy == CompactionPolicy::kGreedy) {
      score = 1.0 - u;
    } else {
      // LFS cost-benefit: free space gained times its age, over the cost of reading the segment
      // and writing its live part. Age is how many writes ago the segment's newest record was.
      const uint64_t newest = info.max_sequence.load();
      const double age = static_cast<double>(now_sequence > newest ? now_sequence - newest : 0) + 1;
      score = (1.0 - u) * age / (1.0 + u);
    }
    if (score > best_score) {
      best_score = score;
      best = s;
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
  Reset(info);
  ++info.incarnation;
  free_.push_back(segment);
  changes_.fetch_add(1, std::memory_order_relaxed);
  if (map_ != nullptr) map_->Set(segment, MapState::kFree);
  announce_due_.store(true, std::memory_order_release);
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

void SegmentTable::AnnounceMore() {
  if (map_ == nullptr || !announce_due_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&mu_);
  while (!free_.empty() && announcing_.size() + ready_.size() < announced_target()) {
    const uint64_t segment = free_.back();
    free_.pop_back();
    announcing_.emplace_back(segment, map_->Set(segment, MapState::kInUse));
  }
  announce_due_.store(false, std::memory_order_relaxed);  // until a segment leaves or frees
}

void SegmentTable::WithdrawAnnouncements() {
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
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < announcing_.size();) {
    if (map_->Durable(announcing_[i].second)) {
      ready_.push_back(announcing_[i].first);
      announcing_.erase(announcing_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return absl::OkStatus();
}

SegmentMapPageHeader SegmentTable::MapFloors() const {
  SegmentMapPageHeader floors{};
  floors.sequence_floor = next_sequence_ != nullptr ? next_sequence_->load() : 1;
  floors.generation_floor = next_generation_.load();
  return floors;
}

void SegmentTable::NoteRecord(uint64_t segment, const KeyHash& hash, uint64_t sequence,
                              uint32_t record_bytes, bool is_delete) {
  Info& info = info_[segment];
  // One writer (the contract): plain loads and stores, no locked read-modify-writes, which cost
  // recovery, noting a million records or more, tens of milliseconds.
  AddBySoleWriter(info.record_bytes, int64_t{record_bytes});
  if (!is_delete) {
    // Only puts: a tombstone hides nothing older that another tombstone would not hide too
    // (recovery lets the newest record of a key win; older deletes leave it absent all the same).
    if (info.filter == nullptr) StartRecoveredFilter(segment);  // heads' segments have theirs
    info.filter->Add(hash);
    AddBySoleWriter(info.puts, uint64_t{1});
  } else {
    AddBySoleWriter(info.tombstone_bytes, int64_t{record_bytes});
    // Keep the tombstones with the smallest hash.lo: replace the largest when full.
    TombstoneSample sample;
    sample.hash = hash;
    sample.sequence = sequence;
    if (info.samples == nullptr) {
      info.samples = std::make_unique<std::array<TombstoneSample, kTombstoneSamples>>();
    }
    std::array<TombstoneSample, kTombstoneSamples>& samples = *info.samples;
    if (info.sample_count < kTombstoneSamples) {
      samples[info.sample_count++] = sample;
    } else {
      TombstoneSample* largest = &samples[0];
      for (TombstoneSample& s : samples) {
        if (s.hash.lo > largest->hash.lo) largest = &s;
      }
      if (hash.lo < largest->hash.lo) *largest = sample;
    }
  }
  if (sequence < info.min_sequence.load(std::memory_order_relaxed)) {
    info.min_sequence.store(sequence, std::memory_order_relaxed);
  }
  if (sequence > info.max_sequence.load(std::memory_order_relaxed)) {
    info.max_sequence.store(sequence, std::memory_order_relaxed);
  }
}

void SegmentTable::NoteRestoredPut(uint64_t segment, const KeyHash& hash) {
  Info& info = info_[segment];
  if (info.filter == nullptr) StartRecoveredFilter(segment);
  info.filter->Add(hash);
}

uint64_t SegmentTable::MinSequenceExcept(uint64_t except) {
  absl::MutexLock lock(&mu_);
  uint64_t min = UINT64_MAX;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    if (s == except || info_[s].state == SegmentState::kFree) continue;
    min = std::min(min, info_[s].min_sequence.load());
  }
  return min;
}

bool SegmentTable::MayHoldOlder(const KeyHash& hash, uint64_t sequence, uint64_t except) {
  absl::MutexLock lock(&mu_);
  return FindOlder(hash, sequence, except) != UINT64_MAX;
}

uint64_t SegmentTable::FindOlder(const KeyHash& hash, uint64_t sequence, uint64_t except) {
  for (uint64_t s = 0; s < segment_count_; ++s) {
    const Info& info = info_[s];
    if (s == except || info.state == SegmentState::kFree) continue;
    if (info.min_sequence.load() >= sequence) continue;
    if (info.filter != nullptr && info.filter->MayContain(hash)) return s;
  }
  return UINT64_MAX;
}

uint32_t SegmentTable::KeptSamples(uint64_t segment) {
  Info& info = info_[segment];
  uint32_t kept = 0;
  for (uint32_t i = 0; i < info.sample_count; ++i) {
    TombstoneSample& sample = (*info.samples)[i];
    // A tombstone found needed stays so while its blocker is there. One found droppable stays
    // so: every older record of its key was noted before the tombstone was written, and
    // compaction copies such a record only from a segment that held it (false positives of
    // later filters aside, which only make the estimate less exact).
    if (sample.checked) {
      if (sample.blocker == UINT64_MAX) continue;
      const Info& blocker = info_[sample.blocker];
      if (blocker.incarnation == sample.blocker_incarnation &&
          blocker.state != SegmentState::kFree) {
        ++kept;
        continue;
      }
    }
    sample.checked = true;
    sample.blocker = FindOlder(sample.hash, sample.sequence, segment);
    if (sample.blocker == UINT64_MAX) continue;
    sample.blocker_incarnation = info_[sample.blocker].incarnation;
    ++kept;
  }
  return kept;
}

absl::Status SegmentTable::SizeRecoveredFilter(uint64_t segment, uint64_t puts) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  if (info.filter != nullptr) return absl::OkStatus();
  const uint64_t words = FilterWordsFor(std::max<uint64_t>(puts, 1));
  info.filter = KeyFilter::InBlocks(words, probes_, recovered_filters_);
  if (info.filter == nullptr) return NoMemoryForFilter(segment, words);
  return absl::OkStatus();
}

void SegmentTable::StartRecoveredFilter(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  if (recovering_ != UINT64_MAX) {
    Info& previous = info_[recovering_];
    previous.filter->FoldTo(FilterWordsFor(previous.puts.load()));
  }
  info_[segment].filter = std::make_unique<KeyFilter>(open_filter_words_, probes_);
  recovering_ = segment;
}

void SegmentTable::RecoverSegment(uint64_t segment, const RecoveredSegment& found) {
  const bool in_use = found.in_use;
  Info& info = info_[segment];
  {
    absl::MutexLock lock(&mu_);
    if (!in_use) {
      info.filter.reset();
      info.sample_count = 0;
    } else if (info.filter != nullptr) {
      info.filter->FoldTo(FilterWordsFor(info.puts.load()));
    }
    if (recovering_ == segment) recovering_ = UINT64_MAX;
    info.generation = in_use ? found.generation : 0;
    info.summary = in_use ? found.summary : SummaryPlace{};
  }
  info.state = in_use ? SegmentState::kSealed : SegmentState::kFree;
  if (found.extends_restored) return;  // NoteRecord widened the restored sequences
  info.min_sequence.store(found.min_sequence);
  info.max_sequence.store(found.max_sequence);
}

void SegmentTable::FinishRecovery() {
  absl::MutexLock lock(&mu_);
  recovered_filters_.Close();
  free_.clear();
  announcing_.clear();
  ready_.clear();
  announce_due_.store(true, std::memory_order_release);
  // Highest numbers last, so heads fill the device from the front.
  for (uint64_t s = segment_count_; s > 0; --s) {
    const Info& info = info_[s - 1];
    const bool free = info.state == SegmentState::kFree;
    if (free) free_.push_back(s - 1);
    if (map_ == nullptr) continue;
    if (free) {
      map_->Set(s - 1, MapState::kFree);
    } else if (info.state == SegmentState::kCheckpoint) {
      map_->Set(s - 1, MapState::kBaseCheckpoint, info.summary);
    } else if (info.summary.pages > 0) {
      map_->Set(s - 1, MapState::kSummarized, info.summary);
    } else {
      map_->Set(s - 1, MapState::kInUse);
    }
  }
}

void SegmentTable::ForEachSaved(const std::vector<uint64_t>& filters_left_out,
                                const std::function<void(const SavedSegment&)>& visit) {
  uint64_t next = 0;
  SaveSome(next, filters_left_out, [&](const SavedSegment& saved) {
    visit(saved);
    return true;
  });
}

bool SegmentTable::SaveSome(uint64_t& next, const std::vector<uint64_t>& filters_left_out,
                            const std::function<bool(const SavedSegment&)>& visit) {
  absl::MutexLock lock(&mu_);
  SavedSegment saved;
  while (next < segment_count_) {
    const uint64_t s = next++;
    Info& info = info_[s];
    if (info.state == SegmentState::kFree || info.state == SegmentState::kCheckpoint) continue;
    CheckpointSegment& f = saved.fields;
    f = CheckpointSegment{};
    f.segment = s;
    f.generation = info.generation;
    f.min_sequence = info.min_sequence.load();
    f.max_sequence = info.max_sequence.load();
    f.live_bytes = info.live_bytes.load();
    f.likely_stale_bytes = info.likely_stale_bytes.load();
    f.record_bytes = info.record_bytes.load();
    f.tombstone_bytes = info.tombstone_bytes.load();
    f.puts = info.puts.load();
    f.summary_first = info.summary.first;
    f.summary_pages = info.summary.pages;
    saved.tombstones.clear();
    for (uint32_t i = 0; i < info.sample_count; ++i) {
      const TombstoneSample& sample = (*info.samples)[i];
      saved.tombstones.push_back({sample.hash.lo, sample.hash.hi, sample.sequence});
    }
    f.tombstone_samples = static_cast<uint32_t>(saved.tombstones.size());
    saved.filter.clear();
    const bool left_out = std::find(filters_left_out.begin(), filters_left_out.end(), s) !=
                          filters_left_out.end();
    if (info.filter != nullptr && !left_out) info.filter->CopyTo(&saved.filter);
    f.filter_words = saved.filter.size();
    if (!visit(saved)) return next == segment_count_;
  }
  return true;
}

absl::Status SegmentTable::RestoreSegment(const SavedSegment& saved) {
  const CheckpointSegment& f = saved.fields;
  const auto refuse = [&](const char* what) {
    return absl::DataLossError(absl::StrCat("checkpoint: segment ", f.segment, ": ", what));
  };
  if (f.segment >= segment_count_) return refuse("beyond the store");
  if (f.tombstone_samples != saved.tombstones.size() || saved.tombstones.size() > kTombstoneSamples) {
    return refuse("too many tombstone samples");
  }
  const uint64_t words = saved.filter.size();
  if (f.filter_words != words || (words & (words - 1)) != 0 || words > open_filter_words_) {
    return refuse("a key filter of a size no store makes");
  }
  if (f.generation == 0 || f.record_bytes < 0 || f.live_bytes < 0 || f.tombstone_bytes < 0 ||
      f.summary_first + uint64_t{f.summary_pages} > log_pages_) {
    return refuse("counts no segment holding a log has");
  }
  absl::MutexLock lock(&mu_);
  Info& info = info_[f.segment];
  if (info.state != SegmentState::kFree) return refuse("given twice");
  info.state = SegmentState::kSealed;
  info.generation = f.generation;
  info.summary = SummaryPlace{f.summary_first, f.summary_pages};
  info.min_sequence.store(f.min_sequence);
  info.max_sequence.store(f.max_sequence);
  info.live_bytes.store(f.live_bytes);
  info.likely_stale_bytes.store(f.likely_stale_bytes);
  info.record_bytes.store(f.record_bytes);
  info.tombstone_bytes.store(f.tombstone_bytes);
  info.puts.store(f.puts);
  info.filter.reset();
  if (words > 0) {
    info.filter = KeyFilter::InBlocks(words, probes_, recovered_filters_, saved.filter.data());
    if (info.filter == nullptr) return NoMemoryForFilter(f.segment, words);
  }
  info.sample_count = static_cast<uint32_t>(saved.tombstones.size());
  info.samples.reset();
  if (info.sample_count > 0) {
    info.samples = std::make_unique<std::array<TombstoneSample, kTombstoneSamples>>();
    for (uint32_t i = 0; i < info.sample_count; ++i) {
      const CheckpointTombstone& t = saved.tombstones[i];
      (*info.samples)[i] = TombstoneSample{KeyHash{t.hash_lo, t.hash_hi}, t.sequence};
    }
  }
  return absl::OkStatus();
}

absl::Status SegmentTable::ResumeHead(uint64_t segment, uint64_t generation,
                                      absl::Span<const KeyHash> puts) {
  const auto refuse = [&] {
    return absl::DataLossError(absl::StrCat("segment ", segment,
                                            " is not a log a head could go on with"));
  };
  if (segment >= segment_count_) return refuse();
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  if (info.state != SegmentState::kSealed || info.generation != generation ||
      info.summary.pages != 0) {
    return refuse();
  }
  if (info.filter == nullptr) {
    if (puts.size() != info.puts.load()) return refuse();
    info.filter = std::make_unique<KeyFilter>(open_filter_words_, probes_);
    for (const KeyHash& hash : puts) info.filter->Add(hash);
  } else if (info.filter->words() != open_filter_words_) {
    return refuse();
  }
  info.state = SegmentState::kOpen;
  info.last_write.reset();
  return absl::OkStatus();
}

void SegmentTable::ForgetRecovered() {
  absl::MutexLock lock(&mu_);
  kept_checkpoint_.clear();
  pending_checkpoint_.clear();
  for (uint64_t s = 0; s < segment_count_; ++s) {
    Reset(info_[s]);
    info_[s].samples.reset();
    info_[s].state = SegmentState::kFree;
  }
  recovering_ = UINT64_MAX;
}

void SegmentTable::ForgetRecoveredSegment(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  Reset(info_[segment]);
  info_[segment].samples.reset();
  info_[segment].state = SegmentState::kFree;
  if (recovering_ == segment) recovering_ = UINT64_MAX;
}

bool SegmentTable::TakeForCheckpoint(uint64_t count, uint64_t keep,
                                     std::vector<uint64_t>* taken) {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(pending_checkpoint_.empty());
  taken->clear();
  if (free_.size() < count || FreeCountLocked() < count + keep) return false;
  // free_ holds the highest numbers first.
  taken->assign(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(count));
  free_.erase(free_.begin(), free_.begin() + static_cast<ptrdiff_t>(count));
  for (const uint64_t segment : *taken) {
    NVKV_CHECK(info_[segment].state == SegmentState::kFree);
    info_[segment].state = SegmentState::kCheckpoint;
  }
  pending_checkpoint_ = *taken;
  return true;
}

void SegmentTable::AbandonCheckpoint() {
  absl::MutexLock lock(&mu_);
  FreeCheckpointLocked(pending_checkpoint_);
}

SegmentMap::Ticket SegmentTable::RaiseMapFloors() {
  if (map_ == nullptr) return SegmentMap::Ticket{};
  return map_->Rewrite(0);
}

bool SegmentTable::MapDurable(const SegmentMap::Ticket& ticket) const {
  return map_ == nullptr || map_->Durable(ticket);
}

std::vector<SegmentMap::Ticket> SegmentTable::AdoptCheckpoint(std::span<const uint32_t> pages,
                                                              MapState mark) {
  NVKV_CHECK(map_ != nullptr &&
             (mark == MapState::kCheckpoint || mark == MapState::kBaseCheckpoint));
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(pages.size() == pending_checkpoint_.size());
  FreeCheckpointLocked(kept_checkpoint_);
  kept_checkpoint_ = std::move(pending_checkpoint_);
  pending_checkpoint_.clear();
  std::vector<SegmentMap::Ticket> tickets;
  for (size_t i = 0; i < kept_checkpoint_.size(); ++i) {
    Info& info = info_[kept_checkpoint_[i]];
    info.summary = SummaryPlace{static_cast<uint32_t>(i), pages[i]};
    tickets.push_back(map_->Set(kept_checkpoint_[i], mark, info.summary));
  }
  return tickets;
}

void SegmentTable::KeepCheckpoint(uint64_t segment, uint32_t position, uint32_t pages) {
  absl::MutexLock lock(&mu_);
  Info& info = info_[segment];
  NVKV_CHECK(info.state == SegmentState::kFree && position == kept_checkpoint_.size());
  info.state = SegmentState::kCheckpoint;
  info.summary = SummaryPlace{position, pages};
  kept_checkpoint_.push_back(segment);
}

void SegmentTable::MarkKeptCheckpointCurrent() {
  NVKV_CHECK(map_ != nullptr);
  absl::MutexLock lock(&mu_);
  for (const uint64_t segment : kept_checkpoint_) {
    map_->Set(segment, MapState::kCheckpoint, info_[segment].summary);
  }
}

void SegmentTable::ReleaseCheckpoint() {
  absl::MutexLock lock(&mu_);
  FreeCheckpointLocked(kept_checkpoint_);
}

uint64_t SegmentTable::FreeCheckpointLocked(std::vector<uint64_t>& segments) {
  for (const uint64_t segment : segments) {
    Info& info = info_[segment];
    NVKV_CHECK(info.state == SegmentState::kCheckpoint);
    info.state = SegmentState::kFree;
    info.summary = SummaryPlace{};
    free_.push_back(segment);
    if (map_ != nullptr) map_->Set(segment, MapState::kFree);
  }
  const uint64_t freed = segments.size();
  segments.clear();
  if (freed > 0) announce_due_.store(true, std::memory_order_release);
  return freed;
}

uint64_t SegmentTable::checkpoint_segments_kept() {
  absl::MutexLock lock(&mu_);
  return kept_checkpoint_.size();
}

uint64_t SegmentTable::generation(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  return info_[segment].generation;
}

void SegmentTable::ClearLiveBytes() {
  for (uint64_t s = 0; s < segment_count_; ++s) info_[s].live_bytes.store(0);
}

uint64_t SegmentTable::free_count() {
  absl::MutexLock lock(&mu_);
  return FreeCountLocked();
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
    if (FreeCountLocked() > keep) return true;
    for (uint64_t s = 0; s < segment_count_; ++s) {
      if (info_[s].state == SegmentState::kCompacting) return false;
    }
    return !BestVictim(CompactionPolicy::kGreedy, 0, /*only_with_garbage=*/true,
                       /*with_writes_in_flight=*/true)
                .has_value();
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
  return FreeCountLocked() > keep;
}

uint64_t SegmentTable::usable_bytes() {
  absl::MutexLock lock(&mu_);
  const uint64_t kept = reserve_user_ + kept_checkpoint_.size();
  return segment_count_ > kept ? (segment_count_ - kept) * capacity_bytes_ : 0;
}

uint64_t SegmentTable::filter_bytes() {
  absl::MutexLock lock(&mu_);
  uint64_t words = 0;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    words += info_[s].filter != nullptr ? info_[s].filter->words() : 0;
  }
  return words * sizeof(uint64_t);
}

}  // namespace nvkv::kv

