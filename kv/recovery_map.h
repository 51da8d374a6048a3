// What the segment map tells recovery, read once at the start of every Open (recovery.h): which
// segments hold nothing, which have a summary, which to read whole, where the checkpoint it names
// lies and whether that checkpoint is a base, and the floors of what it does not say.
#ifndef NVKV_KV_RECOVERY_MAP_H_
#define NVKV_KV_RECOVERY_MAP_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/checkpoint.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

// Floors (kv/FORMAT.md "Segment map"): recovery starts the next sequence and generation at least
// at the highest it reads. (A plain copy of the packed fields, which nothing may bind a
// reference to.)
struct Floors {
  uint64_t sequence = 0;
  uint64_t generation = 0;
  void Raise(uint64_t sequence_floor, uint64_t generation_floor) {
    sequence = std::max(sequence, sequence_floor);
    generation = std::max(generation, generation_floor);
  }
};

// A segment the map says is summarized, and where its summary is.
struct Summarized {
  uint64_t segment = 0;
  SummaryPlace place;
};

// About how many records the summaries `summaries` name, all together: an entry is a
// SummaryEntry and, in ordered mode, its key (taken as 16 bytes). Recovery sizes its tables and
// a base's index by it.
inline uint64_t RecordsSummarized(const StoreShape& shape,
                                  const std::vector<Summarized>& summaries) {
  uint64_t pages = 0;
  for (const Summarized& s : summaries) pages += s.place.pages;
  const uint64_t entry_bytes = sizeof(SummaryEntry) + (shape.ordered ? 16 : 0);
  return pages * shape.geometry.payload_bytes() / entry_bytes;
}

struct MapView {
  // Segments to read whole (in order): every one the map neither says is free nor summarized,
  // nor names as the checkpoint's (whether those are read is recovery's choice).
  std::vector<uint64_t> to_read;
  std::vector<Summarized> summarized;  // segments whose summaries to read instead, in order
  std::vector<CheckpointPlace> checkpoint;  // the checkpoint's segments, in its order
  // Why the map's marks rule the checkpoint out (a map page damaged, places that do not line
  // up); empty when it may be used.
  std::string checkpoint_unusable;
  // The checkpoint is the base of a log written after it (MapState::kBaseCheckpoint), not what a
  // clean Close left with nothing after it.
  bool base = false;
  Floors floors;  // the highest of the map pages' floors
  std::vector<bool> in_use;       // per segment: the map says it holds a log
  std::vector<bool> free;         // per segment: the map says it is free
  uint64_t segments_skipped = 0;  // free by the map: not read
  uint64_t pages_damaged = 0;     // map pages that failed to read or verify
};

// Reads the segment map `segments` keeps (loading its pages into it). A page that cannot be read
// or does not verify says nothing: every segment it names is read (a failing device shows itself
// in the segments). Without a map, or with `read_all`, every segment is to be read whole.
absl::StatusOr<MapView> ReadMapView(const StoreShape& shape, storage::Device& device,
                                    SegmentTable& segments, bool read_all);

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECOVERY_MAP_H_
