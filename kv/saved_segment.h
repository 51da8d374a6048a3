// What a checkpoint (kv/checkpoint.h) saves of each segment holding a log, as recovery would find
// it again by reading the log: the SegmentTable's facts of it (generation, summary place, live
// bytes) and its SegmentContents (sequences, byte counts, tombstone sample, key filter); and how
// recovery from a checkpoint restores them.
#ifndef NVKV_KV_SAVED_SEGMENT_H_
#define NVKV_KV_SAVED_SEGMENT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"

namespace nvkv::kv {

struct SavedSegment {
  CheckpointSegment fields;
  std::vector<CheckpointTombstone> tombstones;  // its sample (SegmentContents::Save)
  std::vector<uint64_t> filter;                 // its key filter's words; empty: none
};

// Calls `visit` for the segments of `table` holding a log, in segment order, without the key
// filters of `filters_left_out` (log heads' segments whose puts the checkpoint holds anyway, in
// the head's summary so far: ResumeSavedHead rebuilds them), from segment `next` on, until
// `visit` returns false (`next` is then the segment after that one) or none is left (returns
// true). The caller may write between calls; meanwhile nothing may change which segments hold a
// log or their filters' and samples' sizes (Close, or a checkpoint while running: writes held
// back, compaction paused), as the stream's size was counted before.
bool SaveSegments(SegmentTable& table, uint64_t& next,
                  const std::vector<uint64_t>& filters_left_out,
                  const std::function<bool(const SavedSegment&)>& visit);

// Recovery from a checkpoint, before SegmentTable::FinishRecovery: `saved` is a segment holding
// a log, sealed (ResumeSavedHead makes a head's open again). kDataLoss for what SaveSegments
// never gives (SegmentTable::RestoreLog and SegmentContents::CheckSaved say what), and nothing
// changes; the caller then sets the checkpoint aside (SegmentTable::ForgetRecovered).
absl::Status RestoreSavedSegment(SegmentTable& table, const SavedSegment& saved);

// Recovery from a checkpoint: restored `segment`, of the log of `generation`, is a log head's
// again (kOpen), as it was at Close, with its key filter at full size: the one restored, or,
// when the checkpoint left it out, one made of `puts`, the hashes of every put its log holds.
// kDataLoss when it is not a restored segment of that generation without a summary, taken by no
// other head, whose restored filter is full size, or which has none and `puts` are not as many
// as the puts it holds (nothing changes); the caller then sets the checkpoint aside.
absl::Status ResumeSavedHead(SegmentTable& table, uint64_t segment, uint64_t generation,
                             absl::Span<const KeyHash> puts);

}  // namespace nvkv::kv

#endif  // NVKV_KV_SAVED_SEGMENT_H_
