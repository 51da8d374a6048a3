#include "kv/segment_contents.h"

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

// Adds `value` to `counter`, whose one writer is the caller: readers on other threads see the
// old sum or the new one.
template <typename T>
void AddBySoleWriter(std::atomic<T>& counter, T value) {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

absl::Status NoMemoryForFilter(uint64_t segment, uint64_t words) {
  return absl::ResourceExhaustedError(absl::StrCat("no memory for the key filter of segment ",
                                                   segment, " (", words * 8, " bytes)"));
}

}  // namespace

SegmentContents::SegmentContents(const Geometry& geometry)
    : segment_count_(geometry.segment_count),
      bits_per_put_(BitsPerPut(geometry.segment_count)),
      probes_(std::max<uint32_t>(1, static_cast<uint32_t>(bits_per_put_ * 0.69))),
      open_filter_words_(FilterWordsFor(MaxRecordsPerSegment(geometry))),
      contents_(new Contents[geometry.segment_count]) {}

uint64_t SegmentContents::FilterWordsFor(uint64_t puts) const {
  uint64_t words = 1;
  while (words * 64 < puts * bits_per_put_) words *= 2;
  return words;
}

absl::Status SegmentContents::Open(uint64_t segment) {
  std::unique_ptr<KeyFilter> filter = KeyFilter::OwnOrNull(open_filter_words_, probes_);
  if (filter == nullptr) return NoMemoryForFilter(segment, open_filter_words_);
  absl::MutexLock lock(&mu_);
  ClearLocked(segment);
  contents_[segment].filter = std::move(filter);
  return absl::OkStatus();
}

void SegmentContents::Note(uint64_t segment, const KeyHash& hash, uint64_t sequence,
                           uint32_t record_bytes, bool is_delete) {
  Contents& c = contents_[segment];
  // One writer (the contract): plain loads and stores, no locked read-modify-writes, which cost
  // recovery, noting a million records or more, tens of milliseconds.
  AddBySoleWriter(c.record_bytes, int64_t{record_bytes});
  if (!is_delete) {
    // Only puts: a tombstone hides nothing older that another tombstone would not hide too
    // (recovery lets the newest record of a key win; older deletes leave it absent all the same).
    if (c.filter == nullptr) StartRecoveredFilter(segment);  // heads' segments have theirs
    c.filter->Add(hash);
    AddBySoleWriter(c.puts, uint64_t{1});
  } else {
    AddBySoleWriter(c.tombstone_bytes, int64_t{record_bytes});
    // Keep the tombstones with the smallest hash.lo: replace the largest when full.
    TombstoneSample sample;
    sample.hash = hash;
    sample.sequence = sequence;
    if (c.samples == nullptr) {
      c.samples = std::make_unique<std::array<TombstoneSample, kTombstoneSamples>>();
    }
    std::array<TombstoneSample, kTombstoneSamples>& samples = *c.samples;
    if (c.sample_count < kTombstoneSamples) {
      samples[c.sample_count++] = sample;
    } else {
      TombstoneSample* largest = &samples[0];
      for (TombstoneSample& s : samples) {
        if (s.hash.lo > largest->hash.lo) largest = &s;
      }
      if (hash.lo < largest->hash.lo) *largest = sample;
    }
  }
  if (sequence < c.min_sequence.load(std::memory_order_relaxed)) {
    c.min_sequence.store(sequence, std::memory_order_relaxed);
  }
  if (sequence > c.max_sequence.load(std::memory_order_relaxed)) {
    c.max_sequence.store(sequence, std::memory_order_relaxed);
  }
}

void SegmentContents::Seal(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  Contents& c = contents_[segment];
  if (c.filter != nullptr) c.filter->FoldTo(FilterWordsFor(c.puts.load()));
}

void SegmentContents::Clear(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  ClearLocked(segment);
}

void SegmentContents::ClearLocked(uint64_t segment) {
  Contents& c = contents_[segment];
  c.min_sequence.store(UINT64_MAX);
  c.max_sequence.store(0);
  c.record_bytes.store(0);
  c.tombstone_bytes.store(0);
  c.puts.store(0);
  c.filter.reset();
  c.samples.reset();
  c.sample_count = 0;
  ++c.incarnation;
  if (recovering_ == segment) recovering_ = UINT64_MAX;
}

uint64_t SegmentContents::MinSequenceExcept(uint64_t except) {
  absl::MutexLock lock(&mu_);
  uint64_t min = UINT64_MAX;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    if (s != except) min = std::min(min, contents_[s].min_sequence.load());
  }
  return min;
}

bool SegmentContents::MayHoldOlder(const KeyHash& hash, uint64_t sequence, uint64_t except) {
  absl::MutexLock lock(&mu_);
  return FindOlder(hash, sequence, except) != UINT64_MAX;
}

uint64_t SegmentContents::FindOlder(const KeyHash& hash, uint64_t sequence, uint64_t except) {
  for (uint64_t s = 0; s < segment_count_; ++s) {
    const Contents& c = contents_[s];
    if (s == except || c.min_sequence.load() >= sequence) continue;
    if (c.filter != nullptr && c.filter->MayContain(hash)) return s;
  }
  return UINT64_MAX;
}

std::vector<SegmentContents::CleaningEstimate> SegmentContents::EstimateCleaning(
    std::span<const uint64_t> segments) {
  absl::MutexLock lock(&mu_);
  // The global test of each segment's tombstones (MinSequenceExcept), from the two smallest
  // minimums.
  uint64_t lowest = UINT64_MAX, second = UINT64_MAX, lowest_segment = segment_count_;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    const uint64_t min = contents_[s].min_sequence.load();
    if (min < lowest) {
      second = lowest;
      lowest = min;
      lowest_segment = s;
    } else if (min < second) {
      second = min;
    }
  }
  std::vector<CleaningEstimate> estimates;
  estimates.reserve(segments.size());
  for (const uint64_t s : segments) {
    const Contents& c = contents_[s];
    CleaningEstimate& e = estimates.emplace_back();
    e.record_bytes = c.record_bytes.load();
    e.max_sequence = c.max_sequence.load();
    const uint64_t floor = s == lowest_segment ? second : lowest;
    if (e.max_sequence >= floor && c.sample_count > 0) {
      e.tombstones_kept = c.tombstone_bytes.load() * KeptSamples(s) / c.sample_count;
    }
  }
  return estimates;
}

uint32_t SegmentContents::KeptSamples(uint64_t segment) {
  Contents& c = contents_[segment];
  uint32_t kept = 0;
  for (uint32_t i = 0; i < c.sample_count; ++i) {
    TombstoneSample& sample = (*c.samples)[i];
    // A tombstone found needed stays so while its blocker's log is there. One found droppable
    // stays so: every older record of its key was noted before the tombstone was written, and
    // compaction copies such a record only from a segment that held it (false positives of
    // later filters aside, which only make the estimate less exact).
    if (sample.checked) {
      if (sample.blocker == UINT64_MAX) continue;
      if (contents_[sample.blocker].incarnation == sample.blocker_incarnation) {
        ++kept;
        continue;
      }
    }
    sample.checked = true;
    sample.blocker = FindOlder(sample.hash, sample.sequence, segment);
    if (sample.blocker == UINT64_MAX) continue;
    sample.blocker_incarnation = contents_[sample.blocker].incarnation;
    ++kept;
  }
  return kept;
}

absl::Status SegmentContents::SizeRecoveredFilter(uint64_t segment, uint64_t puts) {
  absl::MutexLock lock(&mu_);
  Contents& c = contents_[segment];
  if (c.filter != nullptr) return absl::OkStatus();
  const uint64_t words = FilterWordsFor(std::max<uint64_t>(puts, 1));
  c.filter = KeyFilter::InBlocks(words, probes_, recovered_filters_);
  if (c.filter == nullptr) return NoMemoryForFilter(segment, words);
  return absl::OkStatus();
}

void SegmentContents::StartRecoveredFilter(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  if (recovering_ != UINT64_MAX) {
    Contents& previous = contents_[recovering_];
    previous.filter->FoldTo(FilterWordsFor(previous.puts.load()));
  }
  contents_[segment].filter = std::make_unique<KeyFilter>(open_filter_words_, probes_);
  recovering_ = segment;
}

void SegmentContents::NoteRestoredPut(uint64_t segment, const KeyHash& hash) {
  Contents& c = contents_[segment];
  if (c.filter == nullptr) StartRecoveredFilter(segment);
  c.filter->Add(hash);
}

void SegmentContents::Recover(uint64_t segment, bool in_use, uint64_t min_sequence,
                              uint64_t max_sequence, bool noted_over_restored) {
  absl::MutexLock lock(&mu_);
  if (!in_use) {
    ClearLocked(segment);
    return;
  }
  Contents& c = contents_[segment];
  if (c.filter != nullptr) c.filter->FoldTo(FilterWordsFor(c.puts.load()));
  if (recovering_ == segment) recovering_ = UINT64_MAX;
  if (noted_over_restored) return;
  c.min_sequence.store(min_sequence);
  c.max_sequence.store(max_sequence);
}

void SegmentContents::FinishRecovery() {
  absl::MutexLock lock(&mu_);
  recovered_filters_.Close();
}

void SegmentContents::Save(uint64_t segment, bool filter_left_out, CheckpointSegment* saved,
                           std::vector<CheckpointTombstone>* tombstones,
                           std::vector<uint64_t>* filter) {
  absl::MutexLock lock(&mu_);
  const Contents& c = contents_[segment];
  saved->min_sequence = c.min_sequence.load();
  saved->max_sequence = c.max_sequence.load();
  saved->record_bytes = c.record_bytes.load();
  saved->tombstone_bytes = c.tombstone_bytes.load();
  saved->puts = c.puts.load();
  tombstones->clear();
  for (uint32_t i = 0; i < c.sample_count; ++i) {
    const TombstoneSample& sample = (*c.samples)[i];
    tombstones->push_back({sample.hash.lo, sample.hash.hi, sample.sequence});
  }
  saved->tombstone_samples = static_cast<uint32_t>(tombstones->size());
  filter->clear();
  if (c.filter != nullptr && !filter_left_out) c.filter->CopyTo(filter);
  saved->filter_words = filter->size();
}

absl::Status SegmentContents::CheckSaved(uint64_t segment, const CheckpointSegment& saved,
                                         std::span<const CheckpointTombstone> tombstones,
                                         std::span<const uint64_t> filter) const {
  const auto refuse = [&](const char* what) {
    return absl::DataLossError(absl::StrCat("checkpoint: segment ", segment, ": ", what));
  };
  if (saved.tombstone_samples != tombstones.size() || tombstones.size() > kTombstoneSamples) {
    return refuse("too many tombstone samples");
  }
  const uint64_t words = filter.size();
  if (saved.filter_words != words || (words & (words - 1)) != 0 || words > open_filter_words_) {
    return refuse("a key filter of a size no store makes");
  }
  if (saved.record_bytes < 0 || saved.tombstone_bytes < 0) {
    return refuse("counts no segment holding a log has");
  }
  return absl::OkStatus();
}

absl::Status SegmentContents::Restore(uint64_t segment, const CheckpointSegment& saved,
                                      std::span<const CheckpointTombstone> tombstones,
                                      std::span<const uint64_t> filter) {
  NVKV_RETURN_IF_ERROR(CheckSaved(segment, saved, tombstones, filter));
  const uint64_t words = filter.size();
  absl::MutexLock lock(&mu_);
  ClearLocked(segment);
  Contents& c = contents_[segment];
  if (words > 0) {
    c.filter = KeyFilter::InBlocks(words, probes_, recovered_filters_, filter.data());
    if (c.filter == nullptr) return NoMemoryForFilter(segment, words);
  }
  c.min_sequence.store(saved.min_sequence);
  c.max_sequence.store(saved.max_sequence);
  c.record_bytes.store(saved.record_bytes);
  c.tombstone_bytes.store(saved.tombstone_bytes);
  c.puts.store(saved.puts);
  c.sample_count = static_cast<uint32_t>(tombstones.size());
  if (c.sample_count > 0) {
    c.samples = std::make_unique<std::array<TombstoneSample, kTombstoneSamples>>();
    for (uint32_t i = 0; i < c.sample_count; ++i) {
      const CheckpointTombstone& t = tombstones[i];
      (*c.samples)[i] = TombstoneSample{KeyHash{t.hash_lo, t.hash_hi}, t.sequence};
    }
  }
  return absl::OkStatus();
}

bool SegmentContents::CanResumeOpen(uint64_t segment, uint64_t puts) {
  if (segment >= segment_count_) return false;
  absl::MutexLock lock(&mu_);
  const Contents& c = contents_[segment];
  return c.filter != nullptr ? c.filter->words() == open_filter_words_ : puts == c.puts.load();
}

void SegmentContents::ResumeOpen(uint64_t segment, absl::Span<const KeyHash> puts) {
  NVKV_CHECK(CanResumeOpen(segment, puts.size()));
  absl::MutexLock lock(&mu_);
  Contents& c = contents_[segment];
  if (c.filter != nullptr) return;
  c.filter = std::make_unique<KeyFilter>(open_filter_words_, probes_);
  for (const KeyHash& hash : puts) c.filter->Add(hash);
}

uint64_t SegmentContents::filter_bytes() {
  absl::MutexLock lock(&mu_);
  uint64_t words = 0;
  for (uint64_t s = 0; s < segment_count_; ++s) {
    words += contents_[s].filter != nullptr ? contents_[s].filter->words() : 0;
  }
  return words * sizeof(uint64_t);
}

}  // namespace nvkv::kv
