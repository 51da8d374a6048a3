// Checkpoints: at a clean Close, and while it runs (checkpointer.h), the engine writes down what
// recovery would otherwise rebuild from the log (every shard's index entries, what the segment
// table knows of each segment holding a log, the next sequence and generation, the records of
// dropped batches), so that the next Open reads that and nothing else after a clean Close, and
// that and the log written after it after a crash (kv/FORMAT.md "Checkpoint").
//
// Where: in free segments, pages 0 .. log_pages - 1 of each (the last page keeps its free
// marker), as a stream of bytes across the payloads of kCheckpoint pages. The segment map marks
// those segments kCheckpoint, with their order, only once every page is durable.
//
// When it counts: marked kCheckpoint, it stands for the log as it is at Close, and Open reads it
// and nothing else. The Open that reads it writes the segment map before anything else is
// written, and the map it writes marks it kBaseCheckpoint: from then on it stands for the log as
// it was, and recovery after a crash reads it and then the log written after it (recovery.h). It
// stays so, its segments not free, until a later Close writes a newer one (whose map write frees
// its segments), or deletes or compaction find no other free segment (SegmentTable::CheckReserve:
// puts are refused instead). A checkpoint that
// cannot be read whole, does not verify, or does not agree with itself or with the map is not
// used: recovery reads the log instead (summaries and segments), which finds the same state.
//
// Cost: 8 bytes per index entry in hash mode (16 and the key in ordered mode), ~100 bytes per
// segment holding a log and its key filter (2.5-8 bytes per put it holds), and each head's
// summary so far. A head's segment has a full-size filter (128-256 KiB for 1 MiB segments): it
// is left out when the head's summary is kept, which names every put of the segment, and Open
// rebuilds it from there (ResumeSavedHead, saved_segment.h). Open reads it in
// chunk-sized runs and fills the indexes as it goes: no table of every key beside the index.
#ifndef NVKV_KV_CHECKPOINT_H_
#define NVKV_KV_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/page_format.h"
#include "kv/segment_map.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

// What LoadCheckpoint is to do besides reading.
struct CheckpointLoadOptions {
  // how many entries beyond the checkpoint's the indexes are sized for, so that
  // they do not grow afterwards (recovery over a base adds the log written after it). Called
  // once the checkpoint's segments are known, before any index entry is restored, with: per
  // segment, whether the checkpoint names its log (`restored`) and how many pages of it
  // (`log_end`: a head's place, else every page); and the mean bytes of the puts it names.
  std::function<uint64_t(const std::vector<bool>& restored, const std::vector<uint32_t>& log_end,
                         uint64_t put_bytes)>
      room_after;
  // The heads go on in their segments (after a clean Close): their summaries so
  // far and key filters are made. Not over a base: recovery reads those segments, and makes
  // their key filters as it reads them; LoadedCheckpoint::heads then gives their places only.
  bool resume_heads = true;
};

// One segment of a checkpoint as the map names it.
struct CheckpointPlace {
  uint64_t segment = 0;
  uint32_t pages = 0;  // pages of the checkpoint written there
};

// What a checkpoint takes beside the shards and the segment table.
struct CheckpointGlobals {
  uint64_t next_sequence = 0;  // the engine's: above every record's
  const SequenceRanges* dropped = nullptr;  // records of batches recovery dropped
};

// A checkpoint taken (TakeCheckpoint) and not yet written (WriteCheckpoint): its stream as the
// shards and the table were, held in memory, so that writes may go on while it is written. It
// takes about what it will on the device: the index entries and the segments' key filters.
struct TakenCheckpoint {
  static constexpr size_t kBlockBytes = size_t{256} << 10;
  CheckpointHeader header{};  // as taken; WriteCheckpoint sets where it goes and the store's size
  // The stream, the header first, in blocks of kBlockBytes (the last one filled in part).
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  uint64_t bytes = 0;
};

// Blocks for about `bytes` of stream, allocated and their pages touched, for TakeCheckpoint to
// fill: made before writes are held back, so that the take does not wait on a page fault for
// each page of them. As many as the system gives.
void MakeRoomToTake(uint64_t bytes, TakenCheckpoint& taken);

// Takes the checkpoint of `shards` and `segments` as they are into memory: into `room`'s blocks
// (MakeRoomToTake; none holding any stream yet), and more as needed. Nothing may change them
// meanwhile: the engine is closing, or holds its writes back with compaction paused (a
// checkpoint while running); it lets their locks go between pieces. kResourceExhausted when
// the system has no memory for it.
absl::StatusOr<TakenCheckpoint> TakeCheckpoint(const StoreShape& shape,
                                               const CheckpointGlobals& globals,
                                               SegmentTable& segments,
                                               const ShardSet& shards,
                                               TakenCheckpoint room = {});

// Where WriteCheckpoint wrote a checkpoint: the segments the table holds for it (in the
// checkpoint's order) and how many of its pages each holds.
struct WrittenCheckpoint {
  std::vector<uint64_t> segments;
  std::vector<uint32_t> pages;
  uint64_t total_pages() const {
    uint64_t total = 0;
    for (const uint32_t p : pages) total += p;
    return total;
  }
};
// Writes `taken` into free segments through `device` (a queue with chunk buffers), which the
// table holds for it (SegmentTable::Hold), leaving `keep_free` free. The caller makes the pages
// durable, and only then has the table keep them (SegmentTable::KeepHeld), which makes the map
// name them, or gives them back (Unhold). Writes may go on meanwhile (into the heads' segments
// and segments taken after it: the log after it), but compaction must stay paused until the
// table keeps it: the segments it names must stay as it took them. kResourceExhausted when the
// free segments cannot hold it (nothing written); device errors (its segments free again).
// `make_map_durable` writes the map change of a ticket and returns once it is on the device: the
// pages go into segments the map calls free, and a map floor above their generation is made
// durable before them (SegmentTable::RaiseMapFloors).
using MakeMapDurable = absl::FunctionRef<absl::Status(const SegmentMap::Ticket&)>;
absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const StoreShape& shape, storage::Device& device,
                                                  TakenCheckpoint& taken, uint64_t keep_free,
                                                  SegmentTable& segments,
                                                  MakeMapDurable make_map_durable);

// A log head that goes on in its segment: the checkpoint's segment table has it open already.
struct ResumedHead {
  uint32_t shard = 0;
  HeadPlace place;
  SummaryBuilder summary;  // of the segment's records so far (abandoned: it gets none)
};

// What Open takes from a checkpoint besides the indexes and the table.
struct LoadedCheckpoint {
  uint64_t next_sequence = 0;
  uint64_t next_generation = 0;
  SequenceRanges dropped;
  std::vector<ResumedHead> heads;  // the shards' heads that have a segment (LogHead::Resume)
  uint64_t pages = 0;  // pages read
};

// Where page `k` of a checkpoint's stream lies: in segment `k / log_pages` of its places, at
// the same page within it as `k % log_pages` (the writer's and the loader's one rule).
inline uint32_t CheckpointPageInSegment(const Geometry& g, uint64_t k) {
  return static_cast<uint32_t>(k % g.log_pages());
}

// Reads the checkpoint whose segments the map names (`places`, in their order) and fills the
// empty indexes of `shards` and the table `segments` as it reads. `map_in_use` says, per
// segment, whether the map says it holds a log: the checkpoint must name exactly those. Null for
// a checkpoint the log may have gone on after (MapState::kBaseCheckpoint): the caller finds out
// what changed since.
// kDataLoss, saying what is wrong, when it cannot be used (a page that fails to read or verify,
// content that disagrees with itself or the map, a different shard count or index mode): the
// indexes and the table are then partly filled, and the caller must make them anew before it
// reads the log instead.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const StoreShape& shape,
                                                const CheckpointLoadOptions& options,
                                                storage::Device& device,
                                                const std::vector<CheckpointPlace>& places,
                                                const std::vector<bool>* map_in_use,
                                                SegmentTable& segments,
                                                const ShardSet& shards);

}  // namespace nvkv::kv

#endif  // NVKV_KV_CHECKPOINT_H_
