// Checkpoints (checkpoint.h): taken and written, at Close and while running. Open reads them
// (checkpoint_load.cc).
#include "kv/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/page_runs.h"
#include "kv/saved_segment.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// How many ranges and segments a stream holds.
struct StreamCounts {
  uint64_t dropped_ranges = 0;
  uint64_t saved_segments = 0;
};

// The checkpoint's record of `shard`'s log head, and in *summary the bytes of its summary so far
// that follow it (valid while the lock is held).
CheckpointHead SavedHead(Shard& shard, std::string_view* summary)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;  // (const, clang 14's thread-safety analysis loses the lock)
  NVKV_CHECK(head.open == nullptr && head.sealed.empty());  // Close sealed and wrote them
  CheckpointHead place{};
  place.segment = kCheckpointNoHead;
  *summary = {};
  if (!head.has_segment) return place;
  place.segment = head.segment;
  place.generation = head.generation;
  place.next_counter = head.next_counter;
  place.next_page = head.next_page;
  if (!head.summary.abandoned()) {
    *summary = head.summary.entries();
    place.flags = kHeadSummaryKept;
    place.summary_entries = head.summary.entry_count();
    place.summary_bytes = summary->size();
    place.summary_page_bytes = head.summary.bytes_per_page();
  }
  return place;
}

// How much of the stream `out` takes under a lock before the lock is let go (`out.Drain()`):
// a shard's Gets wait while its part is taken.
constexpr size_t kStageBytes = size_t{256} << 10;

// Hands the checkpoint's stream, in order, to `out.Append(bytes, count)`, and calls `out.Drain()`
// whenever no lock is held; `header` goes first as given. The ranges of dropped records kept are
// those the device may still hold records of: none below `oldest`, the oldest sequence of any
// segment holding a log. The shards and the table must not change meanwhile (TakeCheckpoint's
// contract), though their locks are let go between pieces.
template <typename Out>
StreamCounts EmitStream(Out& out, const CheckpointHeader& header, const StoreShape& shape,
                        const CheckpointGlobals& globals, uint64_t oldest, SegmentTable& segments,
                        const ShardSet& shards) {
  StreamCounts counts;
  out.Append(&header, sizeof(header));
  globals.dropped->ForEach([&](uint64_t first, uint64_t last) {
    if (last < oldest) return;
    const CheckpointRange range{first, last};
    out.Append(&range, sizeof(range));
    ++counts.dropped_ranges;
  });
  // A head whose summary is kept has every put of its segment in it (below, after the
  // segments): its segment's full-size key filter is left out, and rebuilt from those at Open.
  std::vector<uint64_t> filters_left_out;
  for (const auto& shard : shards) {
    absl::MutexLock lock(&shard->mu);
    LogHead& head = shard->head;  // (not const: clang 14's thread-safety analysis)
    if (head.has_segment && !head.summary.abandoned()) filters_left_out.push_back(head.segment);
  }
  out.Drain();
  uint64_t next_segment = 0;
  bool segments_done = false;
  while (!segments_done) {
    segments_done = SaveSegments(
        segments, next_segment, filters_left_out, [&](const SavedSegment& saved) {
          out.Append(&saved.fields, sizeof(saved.fields));
          out.Append(saved.tombstones.data(),
                     saved.tombstones.size() * sizeof(CheckpointTombstone));
          out.Append(saved.filter.data(), saved.filter.size() * sizeof(uint64_t));
          ++counts.saved_segments;
          return out.staged_bytes() < kStageBytes;
        });
    out.Drain();
  }
  // Every head before any index entry: the loader then knows where each head's log ends.
  for (const auto& owned : shards) {
    Shard& shard = *owned;
    {
      absl::MutexLock lock(&shard.mu);
      std::string_view summary;
      const CheckpointHead place = SavedHead(shard, &summary);
      out.Append(&place, sizeof(place));
      out.Append(summary.data(), summary.size());
    }
    out.Drain();
  }
  for (const auto& shard : shards) {
    Index::SaveCursor cursor;
    bool done = false;
    while (!done) {
      {
        absl::MutexLock lock(&shard->mu);
        if (!cursor.started) {
          const CheckpointShard saved{shard->index->stats().entries, shard->stale_entries};
          out.Append(&saved, sizeof(saved));
        }
        done = shard->index->SaveSome(cursor, [&](std::string_view key, uint64_t word) {
          if (!shape.ordered) {
            out.Append(&word, sizeof(word));
          } else {
            const CheckpointOrderedEntry entry{word, static_cast<uint32_t>(key.size()), 0};
            out.Append(&entry, sizeof(entry));
            out.Append(key.data(), key.size());
          }
          return out.staged_bytes() < kStageBytes;
        });
      }
      out.Drain();
    }
  }
  return counts;
}

// Adds a block to `taken` (false when the system has none to give).
bool AddBlock(TakenCheckpoint& taken) {
  std::unique_ptr<uint8_t[]> block(new (std::nothrow) uint8_t[TakenCheckpoint::kBlockBytes]);
  if (block == nullptr) return false;
  taken.blocks.push_back(std::move(block));
  return true;
}

// Holds the stream in memory, in the blocks made ready for it and more as it grows
// (TakenCheckpoint); failed() once one could not be allocated.
class StagedOut {
 public:
  explicit StagedOut(TakenCheckpoint& taken) : taken_(taken) {}

  void Append(const void* data, size_t count) {
    if (count == 0) return;  // (`data` may be null then: an empty summary)
    const auto* from = static_cast<const uint8_t*>(data);
    since_drain_ += count;
    const size_t used_now = taken_.bytes % TakenCheckpoint::kBlockBytes;
    if (used_now != 0 && count <= TakenCheckpoint::kBlockBytes - used_now) {
      // Most appends are a few bytes into the block being filled.
      std::memcpy(taken_.blocks[taken_.bytes / TakenCheckpoint::kBlockBytes].get() + used_now,
                  from, count);
      taken_.bytes += count;
      return;
    }
    while (count > 0 && !failed_) {
      const size_t used = taken_.bytes % TakenCheckpoint::kBlockBytes;
      const size_t block = taken_.bytes / TakenCheckpoint::kBlockBytes;
      if (block == taken_.blocks.size() && !AddBlock(taken_)) {
        failed_ = true;
        return;
      }
      const size_t take = std::min(count, TakenCheckpoint::kBlockBytes - used);
      std::memcpy(taken_.blocks[block].get() + used, from, take);
      taken_.bytes += take;
      from += take;
      count -= take;
    }
  }
  size_t staged_bytes() const { return since_drain_; }
  void Drain() { since_drain_ = 0; }
  bool failed() const { return failed_; }

 private:
  TakenCheckpoint& taken_;
  size_t since_drain_ = 0;  // appended since the last Drain
  bool failed_ = false;
};

// Cuts the stream into kCheckpoint pages and writes them, a chunk's worth of consecutive pages
// at a time.
class PageOut {
 public:
  PageOut(const StoreShape& shape, storage::Device& device, const storage::Buffer& chunk,
          const std::vector<uint64_t>& segments, uint64_t generation)
      : shape_(shape),
        g_(shape.geometry),
        out_(device, shape, chunk, /*fua=*/false, shape.placement.metadata),
        segments_(segments),
        generation_(generation) {
    pending_.reserve(g_.payload_bytes());
  }

  // Cuts stream bytes into pages, and writes each chunk's worth of them.
  void Append(std::string_view bytes) {
    written_ += bytes.size();
    while (!bytes.empty()) {
      const size_t take = std::min<size_t>(bytes.size(), g_.payload_bytes() - pending_.size());
      pending_.append(bytes.data(), take);
      bytes.remove_prefix(take);
      if (pending_.size() == g_.payload_bytes()) EndPage();
    }
  }

  // Writes what is left; the status of every write.
  absl::Status Finish() {
    if (!pending_.empty()) EndPage();
    return out_.Finish();
  }
  uint64_t written() const { return written_; }

 private:
  void EndPage() {
    const uint64_t k = pages_++;
    NVKV_CHECK(k / g_.log_pages() < segments_.size());
    const uint32_t in_segment = CheckpointPageInSegment(g_, k);
    const uint64_t page_number = g_.FirstPageOf(segments_[k / g_.log_pages()]) + in_segment;
    PageBuilder builder;
    builder.Start(out_.Room(page_number), g_, PageType::kCheckpoint, generation_, in_segment,
                  /*head_sequence=*/k);
    builder.AddContinuation(pending_);
    builder.Finish(shape_.seed, page_number);
    pending_.clear();
  }

  const StoreShape& shape_;
  const Geometry& g_;  // shape_.geometry
  PageRunWriter out_;
  const std::vector<uint64_t>& segments_;
  const uint64_t generation_;
  std::string pending_;  // the payload of the page being filled
  uint64_t pages_ = 0;   // pages cut so far
  uint64_t written_ = 0;
};

}  // namespace

void MakeRoomToTake(uint64_t bytes, TakenCheckpoint& taken) {
  while (taken.blocks.size() * TakenCheckpoint::kBlockBytes < bytes && AddBlock(taken)) {
    std::memset(taken.blocks.back().get(), 0, TakenCheckpoint::kBlockBytes);
  }
}

absl::StatusOr<TakenCheckpoint> TakeCheckpoint(const StoreShape& shape,
                                               const CheckpointGlobals& globals,
                                               SegmentTable& segments,
                                               const ShardSet& shards,
                                               TakenCheckpoint room) {
  NVKV_CHECK(globals.dropped != nullptr);
  NVKV_CHECK(room.bytes == 0);
  TakenCheckpoint taken = std::move(room);
  CheckpointHeader& header = taken.header;
  header.shard_count = static_cast<uint32_t>(shards.size());
  header.flags = shape.ordered ? kCheckpointOrdered : 0;
  header.filter_probes = segments.contents().filter_probes();
  header.next_sequence = globals.next_sequence;
  const uint64_t oldest = segments.contents().MinSequenceExcept(UINT64_MAX);
  StagedOut out(taken);
  const StreamCounts counts = EmitStream(out, header, shape, globals, oldest, segments, shards);
  if (out.failed()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no memory to hold a checkpoint (", taken.bytes, " bytes of it held)"));
  }
  header.dropped_ranges = counts.dropped_ranges;
  header.saved_segments = counts.saved_segments;
  header.stream_bytes = taken.bytes;
  return taken;
}

absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const StoreShape& shape, storage::Device& device,
                                                  TakenCheckpoint& taken, uint64_t keep_free,
                                                  SegmentTable& segments,
                                                  MakeMapDurable make_map_durable) {
  const Geometry& geometry = shape.geometry;
  CheckpointHeader& header = taken.header;
  NVKV_CHECK(header.stream_bytes == taken.bytes && !taken.blocks.empty());
  const uint64_t pages = (taken.bytes + geometry.payload_bytes() - 1) / geometry.payload_bytes();
  const uint64_t segment_count = (pages + geometry.log_pages() - 1) / geometry.log_pages();
  header.segment_count = static_cast<uint32_t>(segment_count);
  header.store_segments = geometry.segment_count;
  WrittenCheckpoint written;
  if (!segments.Hold(segment_count, keep_free, &written.segments)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the checkpoint needs ", segment_count, " free segments, and ", keep_free,
        " more must stay free; ", segments.free_count(), " are"));
  }
  // A fresh generation for its pages, once it has its segments (none is spent on a checkpoint
  // that finds no room); the generations of logs taken after are above it.
  const uint64_t generation = segments.NextGeneration();
  header.next_generation = generation + 1;
  std::memcpy(taken.blocks.front().get(), &header, sizeof(header));
  // Its segments are free in the map, which recovery does not read: until the map names them, a
  // cut leaves only the map's floors to keep the generations handed out after it above theirs.
  // (A head given one of them under a lower generation would write a log that these pages, which
  // stand for a free marker, hide.)
  if (absl::Status floors = make_map_durable(segments.RaiseMapFloors()); !floors.ok()) {
    segments.Unhold(written.segments);
    return floors;
  }
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device.buffers());
  if (!chunk.valid()) {
    segments.Unhold(written.segments);
    return absl::InternalError("no buffer to write the checkpoint from");
  }
  PageOut out(shape, device, *chunk, written.segments, generation);
  for (uint64_t at = 0; at < taken.bytes; at += TakenCheckpoint::kBlockBytes) {
    const size_t block = static_cast<size_t>(at / TakenCheckpoint::kBlockBytes);
    const uint64_t bytes = std::min<uint64_t>(TakenCheckpoint::kBlockBytes, taken.bytes - at);
    out.Append(std::string_view(reinterpret_cast<const char*>(taken.blocks[block].get()), bytes));
  }
  const absl::Status status = out.Finish();
  NVKV_CHECK(out.written() == header.stream_bytes);
  if (!status.ok()) {
    segments.Unhold(written.segments);
    return status;
  }
  for (uint64_t i = 0; i < segment_count; ++i) {
    written.pages.push_back(static_cast<uint32_t>(
        std::min<uint64_t>(geometry.log_pages(), pages - i * geometry.log_pages())));
  }
  return written;
}

}  // namespace nvkv::kv
