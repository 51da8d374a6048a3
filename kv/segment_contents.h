// SegmentContents: what each segment's log holds, as far as cleaning needs to know it — the
// sequence range of its records, their bytes and the deletes' among them, a filter of the keys
// of its puts, and a sample of its tombstones. SegmentTable owns one (segment_table.h) and says
// when a segment's log begins (Open), is sealed (Seal) and ends (Clear); the log heads,
// compaction's copies and recovery note each record (Note); compaction asks which tombstones it
// must keep (MayHoldOlder, MinSequenceExcept) and what cleaning a segment would gain
// (EstimateCleaning).
//
// Which tombstones cleaning must keep. A delete's tombstone hides the older puts of its key; it
// may be dropped once none of them can remain outside the segment being cleaned (older deletes
// need no hiding: recovery lets the newest record of a key win, and a delete leaves it absent).
// Each segment holding a log has a filter of the keys of its puts (a Bloom filter over their
// KeyHash: every put appended, copied there by compaction or found there by recovery is
// noted), and MayHoldOlder answers "may a segment other than the victim, holding records older
// than the tombstone, hold a put of this key?". Before that, the cheap global test: no other
// segment holds any record older than the tombstone (MinSequenceExcept). A segment whose log
// ended (Clear) holds no record and no filter, so neither question counts it.
//
// A false positive keeps a tombstone until the segment that gave it is cleaned, and a tombstone
// is checked against every older segment, so the filters are sized for the store: about 1 in 100
// tombstones checked against all of its segments is kept by mistake. That takes
// 1.44 * log2(100 * segments) bits per put (clamped to 10..32: 20 for 128 segments, 24 for 1024,
// 30 for 16384), rounded up to a power of two.
//
// Memory. A segment a head is filling has a filter sized for the most puts a segment can hold
// (every page full of the smallest records: 41472 for 1 MiB segments of 4 KiB pages, 128 KiB of
// filter at 24 bits each); when it is sealed, or recovered, the filter is folded (its halves ORed
// together) down to 1-2 times the bits its puts need. So a store costs 2.5-8 bytes of memory per
// put record on the device (dead ones too, until their segment is cleaned), plus ~400 bytes per
// segment (counters and the tombstone sample below) and one full-size filter per log head.
//
// What cleaning a segment gains. Its live puts and the tombstones compaction must keep are
// copied; everything else it holds is reclaimed. Tombstones are never "live" (a delete removes
// the key from the index), so their bytes are counted apart, with an estimate of how many
// cleaning would keep: none when the global test drops them all, else the share of a small
// sample of the segment's tombstones (the ones with the smallest hashes, so a fair sample of its
// keys) that MayHoldOlder would keep.
//
// Thread contract: thread-safe. Note and NoteRestoredPut are called by the one thread filling the
// segment (the caller's contract) without `mu_`: plain atomic stores of counters, relaxed atomic
// ORs into the filter, and the tombstone sample, which Note makes at the segment's first delete.
// Everything else takes `mu_`, a leaf (SegmentTable calls in holding its own lock). Other than
// that sample, and a recovered segment's first filter (made under `mu_` by the noting thread), a
// filter or sample is made, folded or dropped only under `mu_`, and never while its segment is
// being noted.
#ifndef NVKV_KV_SEGMENT_CONTENTS_H_
#define NVKV_KV_SEGMENT_CONTENTS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kv/engine.h"
#include "kv/key_filter.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"

namespace nvkv::kv {

class SegmentContents {
 public:
  explicit SegmentContents(const Geometry& geometry);

  // The log of `segment` begins: nothing noted, and a full-size key filter for a head to fill.
  // kResourceExhausted (and nothing changes) when the system has no memory for the filter.
  absl::Status Open(uint64_t segment);
  // A record of key `hash` and `record_bytes` (a delete when `is_delete`) was appended to
  // `segment` (by a user write or a compaction copy), or found there by recovery: its key, its
  // sequence range and byte counts. By the one thread filling the segment (under the lock of the
  // shard whose head owns it), or by recovery before the engine starts.
  void Note(uint64_t segment, const KeyHash& hash, uint64_t sequence, uint32_t record_bytes,
            bool is_delete);
  // A segment's log is complete (a head is done with it): its filter shrinks to fit its puts.
  void Seal(uint64_t segment);
  // The log of `segment` ended (cleaned, or set aside by recovery): it holds nothing.
  void Clear(uint64_t segment);

  // The smallest record sequence in any segment other than `except`, or UINT64_MAX.
  uint64_t MinSequenceExcept(uint64_t except);
  // Whether a segment other than `except`, holding a record older than `sequence`, may hold a
  // put of key `hash`. False only when none does: a tombstone of that key and sequence in
  // `except` hides nothing elsewhere. O(segments).
  bool MayHoldOlder(const KeyHash& hash, uint64_t sequence, uint64_t except);

  // What cleaning a segment would copy and reclaim, apart from its live puts.
  struct CleaningEstimate {
    int64_t record_bytes = 0;     // every record noted, dead or not
    int64_t tombstones_kept = 0;  // bytes of tombstones cleaning would keep (an estimate)
    uint64_t max_sequence = 0;    // of its records: how recently it was written
  };
  // For each of `segments`, in order.
  std::vector<CleaningEstimate> EstimateCleaning(std::span<const uint64_t> segments);

  // Recovery. It notes the records it finds (Note), then says of each segment whether it holds
  // a log (Recover). Recovery is about to note up to `puts` puts of `segment` (from its
  // summary): the segment's key filter is made that size at once, where it would otherwise
  // start at full size and be folded. kResourceExhausted when the system has no memory for it.
  absl::Status SizeRecoveredFilter(uint64_t segment, uint64_t puts);
  // Recovery over a checkpoint: a put of `hash` is in restored `segment`, whose counts the
  // checkpoint gave but not its key filter (a log head's): the filter only.
  void NoteRestoredPut(uint64_t segment, const KeyHash& hash);
  // Recovery found all there is of `segment`: with no log in it, it is cleared; else its filter
  // shrinks to fit and, unless `noted_over_restored` (its records were noted on top of what a
  // checkpoint gave, sequences included), its sequences are those of the log recovery found.
  void Recover(uint64_t segment, bool in_use, uint64_t min_sequence, uint64_t max_sequence,
               bool noted_over_restored);
  // Recovery is over: the memory recovered filters came from is theirs alone from now on.
  void FinishRecovery();

  // The checkpoint (kv/checkpoint.h): the contents' fields of `saved`, its tombstone sample and,
  // unless `filter_left_out`, its key filter's words (none: empty).
  void Save(uint64_t segment, bool filter_left_out, CheckpointSegment* saved,
            std::vector<CheckpointTombstone>* tombstones, std::vector<uint64_t>* filter);
  // kDataLoss for what Save never gives of a segment (too many tombstones, a filter whose size is
  // no power of two or too large, negative counts).
  absl::Status CheckSaved(uint64_t segment, const CheckpointSegment& saved,
                          std::span<const CheckpointTombstone> tombstones,
                          std::span<const uint64_t> filter) const;
  // Recovery from a checkpoint: what Save gave of `segment`, back. kDataLoss as CheckSaved (and
  // nothing changes); kResourceExhausted when the system has no memory for the filter.
  absl::Status Restore(uint64_t segment, const CheckpointSegment& saved,
                       std::span<const CheckpointTombstone> tombstones,
                       std::span<const uint64_t> filter);
  // Recovery from a checkpoint: whether restored `segment` can be a log head's again with `puts`
  // puts named (ResumeOpen): false when its restored filter is not full size, or it has none and
  // `puts` is not the number of puts it holds.
  bool CanResumeOpen(uint64_t segment, uint64_t puts);
  // It is (CanResumeOpen said so), with its key filter at full size: the one restored, or, when
  // the checkpoint left it out, one made of `puts`, the hashes of every put its log holds.
  void ResumeOpen(uint64_t segment, absl::Span<const KeyHash> puts);

  uint32_t filter_probes() const { return probes_; }
  // The most a saved segment may hold: filter words, and tombstone samples.
  uint64_t max_filter_words() const { return open_filter_words_; }
  static constexpr uint32_t max_tombstone_samples() { return kTombstoneSamples; }
  // The bytes of the segments' key filters (recovery plans its memory with them).
  uint64_t filter_bytes();

 private:
  // One tombstone of the segment's sample, and what EstimateCleaning last found about it: the
  // segment (`blocker`, in its `blocker_incarnation`) that made MayHoldOlder keep it, if any.
  struct TombstoneSample {
    KeyHash hash;
    uint64_t sequence = 0;
    bool checked = false;
    uint64_t blocker = UINT64_MAX;  // UINT64_MAX: nothing older may hold the key
    uint64_t blocker_incarnation = 0;
  };
  static constexpr uint32_t kTombstoneSamples = 8;

  struct Contents {
    std::atomic<uint64_t> min_sequence{UINT64_MAX};
    std::atomic<uint64_t> max_sequence{0};
    std::atomic<int64_t> record_bytes{0};     // every record noted, dead or not
    std::atomic<int64_t> tombstone_bytes{0};  // the deletes among them
    std::atomic<uint64_t> puts{0};            // records of puts: the keys in `filter`
    // Added to by Note (one thread) without mu_; made, folded, dropped and read by the others
    // under mu_. Null: no records.
    std::unique_ptr<KeyFilter> filter;
    // The kTombstoneSamples tombstones with the smallest hash.lo: written by Note while the
    // segment is open, read (and `checked`/`blocker` written) by EstimateCleaning once it is
    // sealed, under mu_. Allocated at the segment's first tombstone (most never hold one: the
    // contents of every segment of the store are made, and Open pays for each).
    std::unique_ptr<std::array<TombstoneSample, kTombstoneSamples>> samples;
    uint32_t sample_count = 0;
    // How often the segment's contents were started over (a log begun, ended or restored: a
    // sampled tombstone's blocker is current while this stays); guarded by mu_.
    uint64_t incarnation = 0;
  };

  // The filter size (64-bit words, a power of two) giving `puts` keys bits_per_put_ bits each.
  uint64_t FilterWordsFor(uint64_t puts) const;
  void ClearLocked(uint64_t segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The segment other than `except` that MayHoldOlder finds, or UINT64_MAX.
  uint64_t FindOlder(const KeyHash& hash, uint64_t sequence, uint64_t except)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many of `segment`'s sampled tombstones cleaning would keep, of sample_count.
  uint32_t KeptSamples(uint64_t segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recovery notes records of segments that have no filter yet: one full-size filter at a time
  // (the previous recovered segment's is folded first, recovery reads segments in turn).
  void StartRecoveredFilter(uint64_t segment);

  const uint64_t segment_count_;
  // Bits per key of a sealed segment's filter (at least; up to twice as many after rounding) and
  // bits set per key: chosen so that a tombstone checked against every segment of the store
  // is kept by a false positive about 1 time in 100 (each false positive keeps it until that
  // segment is cleaned): log2(100 * segments) * 1.44 bits, ln 2 of them set per key.
  const uint32_t bits_per_put_;
  const uint32_t probes_;
  const uint64_t open_filter_words_;  // for the most puts a segment can hold
  std::unique_ptr<Contents[]> contents_;
  absl::Mutex mu_;
  // The memory of the filters Restore and SizeRecoveredFilter make, until FinishRecovery.
  FilterBlocks recovered_filters_ ABSL_GUARDED_BY(mu_);
  uint64_t recovering_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;  // the one full-size recovered filter
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_CONTENTS_H_
