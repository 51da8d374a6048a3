// Checkpoints (checkpoint.h): read back by Open (LoadCheckpoint), verified page by page and
// record by record, and loaded into the indexes and the segment table as they are read.
#include "kv/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/saved_segment.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// Reads the stream back from the checkpoint's pages, verifying each as it is loaded. The pages
// are read in runs of a chunk's worth, read ahead: while one run is loaded, the next ones (one
// per further chunk it is given) are in flight.
class PageIn {
 public:
  PageIn(const StoreShape& shape, storage::Device& device,
         absl::Span<const storage::Buffer> chunks, const std::vector<CheckpointPlace>& places)
      : shape_(shape),
        g_(shape.geometry),
        device_(device),
        pages_per_chunk_(chunks.front().bytes / shape.geometry.page_bytes),
        places_(places),
        runs_(chunks.size()) {
    for (const CheckpointPlace& place : places) total_pages_ += place.pages;
    for (size_t i = 0; i < chunks.size(); ++i) runs_[i].chunk = chunks[i];
  }
  // Waits for the reads still in flight: their chunks go back to the pool after it.
  ~PageIn() {
    for (; issued_ > loaded_; ++loaded_) {
      const Run& run = runs_[loaded_ % runs_.size()];
      while (run.in_flight && device_.Reap(1).ok()) {
      }
      if (run.in_flight) break;  // a queue that cannot reap completes nothing more
    }
  }
  PageIn(const PageIn&) = delete;
  PageIn& operator=(const PageIn&) = delete;

  // Copies the next `count` bytes of the stream to `out`; false once a page fails (status()).
  bool Read(void* out, size_t count) {
    uint8_t* to = static_cast<uint8_t*>(out);
    while (count > 0) {
      if (at_ == used_ && !NextPage()) return false;
      const size_t take = std::min<size_t>(count, used_ - at_);
      std::memcpy(to, page_ + sizeof(PageHeader) + at_, take);
      to += take;
      count -= take;
      at_ += take;
      consumed_ += take;
    }
    return true;
  }

  // Passes over the next `count` bytes of the stream; false once a page fails (status()).
  bool Skip(uint64_t count) {
    while (count > 0) {
      if (at_ == used_ && !NextPage()) return false;
      const uint64_t take = std::min<uint64_t>(count, used_ - at_);
      count -= take;
      at_ += take;
      consumed_ += take;
    }
    return true;
  }

  // The header says the stream has `bytes`: the map's places must hold exactly its pages.
  absl::Status Expect(uint64_t bytes) {
    const uint64_t payload = g_.payload_bytes();
    const uint64_t pages = (bytes + payload - 1) / payload;
    if (bytes < sizeof(CheckpointHeader) || pages != total_pages_) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint: ", bytes, " bytes, but the map gives it ", total_pages_, " pages"));
    }
    for (size_t i = 0; i + 1 < places_.size(); ++i) {
      if (places_[i].pages != g_.log_pages()) {
        return absl::DataLossError(absl::StrCat("checkpoint: segment ", places_[i].segment,
                                                " holds ", places_[i].pages,
                                                " of its pages, not a whole segment's"));
      }
    }
    stream_bytes_ = bytes;
    return CheckUsed();
  }

  uint64_t consumed() const { return consumed_; }
  // Stream bytes not read yet (once Expect has been given the stream's size).
  uint64_t remaining() const { return stream_bytes_ - consumed_; }
  uint64_t pages() const { return k_; }  // pages loaded so far
  const absl::Status& status() const { return status_; }

 private:
  bool Fail(uint64_t page_number, const std::string& why) {
    status_ = absl::DataLossError(absl::StrCat("checkpoint page ", page_number, ": ", why));
    return false;
  }

  // Loads the stream's next page (reading the next run when the chunk is used up) and verifies
  // it belongs there.
  bool NextPage() {
    if (!status_.ok()) return false;
    if (k_ == total_pages_) {
      status_ = absl::DataLossError("checkpoint: the stream runs past its last page");
      return false;
    }
    if (k_ == run_end_ && !ReadRun()) return false;
    const uint64_t page_number = PageNumber(k_);
    page_ = run_data_ + size_t(k_ - run_start_) * g_.page_bytes;
    const absl::StatusOr<PageHeader> header =
        VerifyPage(page_, g_, shape_.seed, page_number);
    if (!header.ok()) return Fail(page_number, std::string(header.status().message()));
    if (header->type != static_cast<uint8_t>(PageType::kCheckpoint)) {
      return Fail(page_number, absl::StrCat("not a checkpoint page (type ", header->type, ")"));
    }
    if (k_ == 0) generation_ = GenerationOf(*header);
    if (GenerationOf(*header) != generation_ || header->head_sequence != k_ ||
        header->page_in_segment != CheckpointPageInSegment(g_, k_)) {
      return Fail(page_number, "belongs to another checkpoint, or another place in it");
    }
    used_ = header->used_bytes;
    at_ = 0;
    ++k_;
    if (stream_bytes_ > 0 && !CheckUsed().ok()) return false;
    return true;
  }

  // Every page but the last is full, and the last holds the stream's rest.
  absl::Status CheckUsed() {
    const uint64_t payload = g_.payload_bytes();
    const uint64_t k = k_ - 1;  // the page loaded last
    const uint64_t expected = k + 1 < total_pages_ ? payload : stream_bytes_ - k * payload;
    if (used_ != expected) {
      status_ = absl::DataLossError(absl::StrCat("checkpoint page ", PageNumber(k), ": holds ",
                                                 used_, " bytes where ", expected,
                                                 " belong"));
    }
    return status_;
  }

  uint64_t PageNumber(uint64_t k) const {
    return g_.FirstPageOf(places_[k / g_.log_pages()].segment) + CheckpointPageInSegment(g_, k);
  }

  // One chunk and the run of pages read into it.
  struct Run {
    storage::Buffer chunk;
    storage::IoRequest request;
    uint64_t first = 0;  // the stream's page k of its first page
    uint32_t count = 0;
    bool in_flight = false;
  };

  static void OnRunRead(storage::IoRequest* request) {
    static_cast<Run*>(request->context)->in_flight = false;
  }

  // Sends the reads of the next runs while a chunk is free (the run loaded last holds none: its
  // pages are used up when this is called). Run i goes to chunk i modulo their number.
  bool IssueRuns() {
    while (issued_ - loaded_ < runs_.size() && next_k_ < total_pages_) {
      Run& run = runs_[issued_ % runs_.size()];
      const uint64_t in_segment = next_k_ % g_.log_pages();
      const uint64_t left = places_[next_k_ / g_.log_pages()].pages - in_segment;
      run.first = next_k_;
      run.count = static_cast<uint32_t>(std::min<uint64_t>(left, pages_per_chunk_));
      run.request = storage::IoRequest{};
      run.request.op = storage::IoOp::kRead;
      run.request.lba = shape_.LbaOf(PageNumber(next_k_));
      run.request.lba_count = run.count * shape_.blocks_per_page;
      run.request.buffer = run.chunk;
      run.request.buffer.bytes = run.count * g_.page_bytes;
      run.request.on_done = OnRunRead;
      run.request.context = &run;
      const absl::Status queued = device_.Enqueue(&run.request);
      if (!queued.ok()) return CannotRead(next_k_, queued);
      run.in_flight = true;
      next_k_ += run.count;
      ++issued_;
    }
    const absl::StatusOr<uint32_t> submitted = device_.Submit();
    if (!submitted.ok()) return CannotRead(k_, submitted.status());  // (next_k_ may be the end)
    return true;
  }

  // Makes the next run, pages k_.., the one loaded, once read.
  bool ReadRun() {
    if (!IssueRuns()) return false;
    const Run& run = runs_[loaded_ % runs_.size()];
    NVKV_CHECK(issued_ > loaded_ && run.first == k_);
    while (run.in_flight) {
      const absl::StatusOr<uint32_t> reaped = device_.Reap(1);
      if (!reaped.ok()) return CannotRead(k_, reaped.status());
    }
    ++loaded_;
    if (!run.request.status.ok()) return CannotRead(k_, run.request.status);
    run_start_ = run.first;
    run_end_ = run.first + run.count;
    run_data_ = run.chunk.data;
    return true;
  }

  bool CannotRead(uint64_t k, const absl::Status& why) {
    status_ = absl::DataLossError(
        absl::StrCat("checkpoint page ", PageNumber(k), ": cannot be read: ", why.message()));
    return false;
  }

  const StoreShape& shape_;
  const Geometry& g_;  // shape_.geometry
  storage::Device& device_;
  const uint32_t pages_per_chunk_;
  const std::vector<CheckpointPlace>& places_;
  std::vector<Run> runs_;  // one per chunk; never resized (reads in flight point into it)
  uint64_t issued_ = 0, loaded_ = 0;  // runs whose reads were sent, and of those, taken
  uint64_t next_k_ = 0;               // the first page of the next run to send
  uint64_t total_pages_ = 0;
  uint64_t stream_bytes_ = 0;  // once the header is read
  uint64_t k_ = 0;             // the next page to load
  uint64_t run_start_ = 0, run_end_ = 0;  // pages of the run loaded last
  const uint8_t* run_data_ = nullptr;     // its first page
  uint64_t generation_ = 0;
  const uint8_t* page_ = nullptr;  // the page loaded last
  uint32_t used_ = 0, at_ = 0;     // its payload bytes, and how many were read
  uint64_t consumed_ = 0;
  absl::Status status_;
};

// Reads a checkpoint's stream and fills the indexes and the table (LoadCheckpoint).
class Loader {
 public:
  Loader(const StoreShape& shape, const CheckpointLoadOptions& options, PageIn& in,
         const std::vector<CheckpointPlace>& places, const std::vector<bool>* map_in_use,
         SegmentTable& segments, const ShardSet& shards)
      : shape_(shape),
        options_(options),
        g_(shape.geometry),
        in_(in),
        places_(places),
        map_in_use_(map_in_use),
        segments_(segments),
        shards_(shards),
        restored_(shape.geometry.segment_count, false),
        log_end_(shape.geometry.segment_count, shape.geometry.log_pages()) {}

  absl::StatusOr<LoadedCheckpoint> Run() {
    CheckpointHeader header;
    if (!in_.Read(&header, sizeof(header))) return in_.status();
    NVKV_RETURN_IF_ERROR(in_.Expect(header.stream_bytes));
    if (header.segment_count != places_.size()) {
      return Refuse(absl::StrCat("it takes ", header.segment_count, " segments; the map names ",
                                 places_.size()));
    }
    if (header.shard_count != shards_.size()) {
      return Refuse(absl::StrCat("written by a store of ", header.shard_count,
                                 " shards; this one has ", shards_.size()));
    }
    if ((header.flags & ~kCheckpointOrdered) != 0) {
      return Refuse(absl::StrCat("flags ", header.flags, " this nvkv does not know"));
    }
    if (((header.flags & kCheckpointOrdered) != 0) != shape_.ordered) {
      return Refuse("written in the other index mode");
    }
    // Every count is checked against the bytes left before anything is sized by it.
    // (A store grown since has more segments: the map says the new ones are free.)
    if (header.store_segments > g_.segment_count ||
        header.filter_probes != segments_.contents().filter_probes() || header.next_sequence == 0 ||
        header.next_generation == 0 ||
        header.dropped_ranges > in_.remaining() / sizeof(CheckpointRange) ||
        header.saved_segments > std::min<uint64_t>(g_.segment_count,
                                                   in_.remaining() / sizeof(CheckpointSegment))) {
      return Refuse("its header does not fit this store");
    }
    header_ = header;
    LoadedCheckpoint loaded;
    loaded.next_sequence = header.next_sequence;
    loaded.next_generation = header.next_generation;
    uint64_t after = 0;  // ranges come in order, apart: each begins past the last one's end + 1
    for (uint64_t i = 0; i < header.dropped_ranges; ++i) {
      CheckpointRange range;
      if (!in_.Read(&range, sizeof(range))) return in_.status();
      if (range.first <= after || range.first > range.last ||
          range.last >= header.next_sequence) {
        return Refuse("its ranges of dropped records are out of order or out of range");
      }
      loaded.dropped.Add(range.first, range.last);
      after = range.last + 1;
    }
    NVKV_RETURN_IF_ERROR(LoadSegments(header.saved_segments));
    for (const auto& shard : shards_) NVKV_RETURN_IF_ERROR(LoadHead(shard->id));
    for (const auto& shard : shards_) NVKV_RETURN_IF_ERROR(LoadShard(*shard));
    if (in_.consumed() != header.stream_bytes) return Refuse("bytes after its last entry");
    loaded.pages = in_.pages();
    loaded.heads = std::move(loaded_heads_);
    return loaded;
  }

 private:
  absl::Status Refuse(const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", why));
  }

  absl::Status LoadSegments(uint64_t count) {
    SavedSegment saved;
    for (uint64_t i = 0; i < count; ++i) {
      CheckpointSegment& f = saved.fields;
      if (!in_.Read(&f, sizeof(f))) return in_.status();
      if (f.segment >= g_.segment_count ||
          f.tombstone_samples > SegmentContents::max_tombstone_samples() ||
          f.filter_words > std::min(segments_.contents().max_filter_words(), in_.remaining() / 8)) {
        return Refuse("a segment record of sizes no store has");
      }
      if (f.generation >= header_.next_generation || f.max_sequence >= header_.next_sequence) {
        return Refuse(absl::StrCat("segment ", f.segment,
                                   " holds what is newer than the checkpoint"));
      }
      if (map_in_use_ != nullptr && !(*map_in_use_)[f.segment]) {
        return Refuse(absl::StrCat("it says segment ", f.segment,
                                   " holds a log, which the map does not"));
      }
      put_bytes_ += static_cast<uint64_t>(std::max<int64_t>(0, f.record_bytes - f.tombstone_bytes));
      puts_ += f.puts;
      saved.tombstones.resize(f.tombstone_samples);
      saved.filter.resize(f.filter_words);
      if (!in_.Read(saved.tombstones.data(),
                    saved.tombstones.size() * sizeof(CheckpointTombstone)) ||
          !in_.Read(saved.filter.data(), saved.filter.size() * sizeof(uint64_t))) {
        return in_.status();
      }
      NVKV_RETURN_IF_ERROR(RestoreSavedSegment(segments_, saved));
      restored_[f.segment] = true;
    }
    for (uint64_t s = 0; map_in_use_ != nullptr && s < g_.segment_count; ++s) {
      if ((*map_in_use_)[s] && !restored_[s]) {
        return Refuse(absl::StrCat("the map says segment ", s,
                                   " holds a log, which the checkpoint leaves out"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status LoadShard(Shard& shard) {
    CheckpointShard saved;
    if (!in_.Read(&saved, sizeof(saved))) return in_.status();
    const uint64_t entry_bytes =
        shape_.ordered ? sizeof(CheckpointOrderedEntry) + 1 : sizeof(uint64_t);
    if (saved.entries > in_.remaining() / entry_bytes || saved.stale_entries > saved.entries) {
      return Refuse("a shard of more entries than it holds");
    }
    absl::MutexLock lock(&shard.mu);
    // (At most as many again, or 64Ki: announced segments that hold nothing count as full.)
    shard.index->Reserve(saved.entries +
                         std::min(RoomPerShard(), std::max<uint64_t>(saved.entries, 1 << 16)));
    std::string key;
    for (uint64_t i = 0; i < saved.entries; ++i) {
      uint64_t word = 0;
      key.clear();
      if (shape_.ordered) {
        CheckpointOrderedEntry entry;
        if (!in_.Read(&entry, sizeof(entry))) return in_.status();
        if (entry.key_bytes == 0 || entry.key_bytes > kMaxKeyBytes) {
          return Refuse("a key of a size no store writes");
        }
        key.resize(entry.key_bytes);
        if (!in_.Read(key.data(), key.size())) return in_.status();
        if (shards_.For(HashKey(key)).id != shard.id) {
          return Refuse("a key in another shard's entries");
        }
        word = entry.value;
      } else if (!in_.Read(&word, sizeof(word))) {
        return in_.status();
      }
      const std::optional<uint64_t> value = shard.index->SavedValue(word);
      if (!value.has_value()) return Refuse("an index entry no index holds");
      const uint64_t page = Location::FromIndexValue(*value).page;
      if (page < g_.FirstPageOf(0) || page >= g_.map_first_page() ||
          g_.PageInSegment(page) >= log_end_[g_.SegmentOf(page)] ||
          !restored_[g_.SegmentOf(page)]) {
        return Refuse(absl::StrCat("an index entry points at page ", page,
                                   ", outside every log it names"));
      }
      const absl::Status restored = shard.index->RestoreEntry(key, word);
      if (!restored.ok()) return Refuse(std::string(restored.message()));
    }
    shard.stale_entries = saved.stale_entries;
    return absl::OkStatus();
  }

  // Where shard `shard`'s head goes on (a LoadedCheckpoint::heads entry), once it is known to be
  // a segment the checkpoint restored, whose log ends before that place and has no summary yet;
  // index entries read after it must point before that place.
  absl::Status LoadHead(uint32_t shard) {
    CheckpointHead saved;
    if (!in_.Read(&saved, sizeof(saved))) return in_.status();
    if ((saved.flags & ~kHeadSummaryKept) != 0 || saved.reserved != 0) {
      return Refuse(absl::StrCat("shard ", shard, "'s head: flags this nvkv does not know"));
    }
    if (saved.segment == kCheckpointNoHead) {
      if (saved.flags != 0 || saved.summary_bytes != 0) return Refuse("a head of no segment");
      return absl::OkStatus();
    }
    // Head counters grow by one a page: 2^48 pages is more than any device holds.
    if (saved.segment >= g_.segment_count || !restored_[saved.segment] ||
        saved.next_page > g_.log_pages() || saved.next_counter <= saved.next_page ||
        saved.next_counter >= (uint64_t{1} << 48) ||
        saved.summary_bytes > std::min<uint64_t>(in_.remaining(), kMaxSummaryPagesCap *
                                                                      g_.payload_bytes())) {
      return Refuse(absl::StrCat("shard ", shard, "'s head at a place no log of its has"));
    }
    ResumedHead resumed;
    resumed.shard = shard;
    resumed.place = HeadPlace{saved.segment, saved.generation, saved.next_page,
                              saved.next_counter};
    if (!options_.resume_heads) {
      // Where the head's log stood is all the caller needs: it reads the segment.
      if (!in_.Skip(saved.summary_bytes)) return in_.status();
      log_end_[saved.segment] = saved.next_page;
      loaded_heads_.push_back(std::move(resumed));
      return absl::OkStatus();
    }
    std::string entries(saved.summary_bytes, '\0');
    if (!in_.Read(entries.data(), entries.size())) return in_.status();
    std::vector<KeyHash> puts;  // of its summary: its segment's key filter, when left out
    if ((saved.flags & kHeadSummaryKept) != 0) {
      const absl::Status summary = resumed.summary.Resume(
          shape_.ordered, g_, entries, saved.summary_entries, saved.summary_page_bytes,
          saved.next_page, header_.next_sequence, [&](absl::Span<const SummaryRecord> records) {
            for (const SummaryRecord& record : records) {
              if (!record.is_delete) puts.push_back(record.hash);
            }
          });
      if (!summary.ok()) {
        return Refuse(absl::StrCat("shard ", shard, "'s head: its summary: ", summary.message()));
      }
    } else if (saved.summary_entries != 0 || saved.summary_bytes != 0) {
      return Refuse(absl::StrCat("shard ", shard, "'s head: entries of a summary it has not"));
    }
    const absl::Status taken =
        ResumeSavedHead(segments_, saved.segment, saved.generation, puts);
    if (!taken.ok()) return Refuse(std::string(taken.message()));
    log_end_[saved.segment] = saved.next_page;  // the head writes from there on
    loaded_heads_.push_back(std::move(resumed));
    return absl::OkStatus();
  }

  const StoreShape& shape_;
  const CheckpointLoadOptions& options_;
  const Geometry& g_;  // shape_.geometry
  PageIn& in_;
  const std::vector<CheckpointPlace>& places_;
  const std::vector<bool>* map_in_use_;  // null: not compared (a base checkpoint)
  SegmentTable& segments_;
  const ShardSet& shards_;
  CheckpointHeader header_{};   // once read
  std::vector<bool> restored_;  // per segment: the checkpoint restored it
  // Per segment: the pages its log may have; a head's segment ends where the head goes on.
  std::vector<uint32_t> log_end_;
  std::vector<ResumedHead> loaded_heads_;
  // Of the segments it restored: the bytes of their puts, and how many.
  uint64_t put_bytes_ = 0, puts_ = 0;

  // CheckpointOptions::room_after's, spread over the shards (asked once).
  uint64_t RoomPerShard() {
    if (!options_.room_after) return 0;
    if (!room_per_shard_) {
      const uint64_t put_bytes = puts_ > 0 ? std::max<uint64_t>(put_bytes_ / puts_, 1) : 64;
      room_per_shard_ = options_.room_after(restored_, log_end_, put_bytes) / shards_.size();
    }
    return *room_per_shard_;
  }
  std::optional<uint64_t> room_per_shard_;
};

}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const StoreShape& shape,
                                                const CheckpointLoadOptions& options,
                                                storage::Device& device,
                                                const std::vector<CheckpointPlace>& places,
                                                const std::vector<bool>* map_in_use,
                                                SegmentTable& segments,
                                                const ShardSet& shards) {
  const Geometry& geometry = shape.geometry;
  if (places.empty()) return absl::DataLossError("checkpoint: no segment holds it");
  for (const CheckpointPlace& place : places) {
    if (place.segment >= geometry.segment_count || place.pages == 0 ||
        place.pages > geometry.log_pages()) {
      return absl::DataLossError(absl::StrCat("checkpoint: the map gives segment ", place.segment,
                                              " ", place.pages, " of its pages"));
    }
  }
  // Up to four chunks: one run loaded while three are read.
  constexpr size_t kChunks = 4;
  const storage::ChunkLeases chunks = storage::ChunkLeases::UpTo(device.buffers(), kChunks);
  if (chunks.empty()) return absl::InternalError("no buffer to read the checkpoint into");
  // PageIn waits for the reads still in flight as it ends: the chunks go back to the pool after.
  PageIn in(shape, device, chunks.buffers(), places);
  return Loader(shape, options, in, places, map_in_use, segments, shards).Run();
}

}  // namespace nvkv::kv
