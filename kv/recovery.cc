// Recovery (recovery.h): reads every segment at Open and rebuilds the indexes.
#include "kv/recovery.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <cstring>


#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/checkpoint.h"
#include "kv/newest_records.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "kv/segment_summary.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// What recovery keeps per key while it scans: the newest record seen so far, in a NewestRecords
// per shard (24 bytes per entry, no key bytes). Hash mode builds its index from those tables
// once every segment is read. Ordered mode builds its index as it reads (the index holds the
// keys, and its entries the records' places and sizes); its tables keep only each key's newest
// sequence, to tell a record that replaces the key's entry from an older one.
// A record recovery applies, read from a segment's pages or from its summary.
struct FoundRecord {
  KeyHash hash;
  std::string_view key;  // empty in hash mode when read from a summary
  uint64_t page_number = 0;
  uint32_t record_bytes = 0;
  uint64_t sequence = 0;
  bool is_delete = false;
};

// Items wait in a short queue before they are handled: the caller prefetches what handling an
// item will touch as it pushes it, and handling the items ahead of it covers the time the memory
// takes to arrive. Recovery's tables and indexes are far larger than the caches: a probe that
// waited for memory took most of its time.
template <typename Item>
class Lookahead {
 public:
  static constexpr size_t kDepth = 16;  // enough to cover one memory access

  // Queues `item`, handling the oldest first when the queue is full.
  template <typename Handle>
  void Push(const Item& item, Handle handle) {
    if (count_ == kDepth) {
      handle(items_[first_]);
      first_ = (first_ + 1) % kDepth;
      --count_;
    }
    items_[(first_ + count_) % kDepth] = item;
    ++count_;
  }

  // Handles every item queued, in the order pushed.
  template <typename Handle>
  void Drain(Handle handle) {
    for (; count_ > 0; --count_) {
      handle(items_[first_]);
      first_ = (first_ + 1) % kDepth;
    }
  }

 private:
  std::array<Item, kDepth> items_{};
  size_t first_ = 0, count_ = 0;
};

NewestRecords::Record NewestOf(const FoundRecord& record) {
  NewestRecords::Record newest;
  newest.sequence = record.sequence;
  newest.page = record.page_number;
  newest.record_bytes = record.record_bytes;
  newest.is_delete = record.is_delete;
  return newest;
}

// A segment the map says is summarized, and where its summary is.
struct Summarized {
  uint64_t segment = 0;
  SummaryPlace place;
};

// Where recovery puts what it finds: the shards' indexes and the segment table.
struct Sink {
  const Geometry& geometry;
  bool ordered;
  SegmentTable& segments;

  // Adds one live key to `shard`'s index and its bytes to its segment's live bytes.
  absl::Status InsertLive(Shard& shard, uint64_t hash_lo, std::string_view key, uint64_t page,
                          uint32_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const Location location = Location::Indexed(page, record_bytes, /*index_keeps_size=*/ordered);
    NVKV_RETURN_IF_ERROR(shard.index->Insert(hash_lo, key, location.index_value()));
    segments.AddLive(geometry.SegmentOf(page), record_bytes);
    return absl::OkStatus();
  }
};

// Adds to `shard`'s index the newest record of each key of its table, then frees the table.
// `passes_left` counts this one: the passes after it will add about as many, so the index is
// sized once for them all.
absl::Status DrainHashed(Sink& sink, Shard& shard, NewestRecords& table, uint32_t passes_left)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  uint64_t live = 0;
  table.ForEach([&](uint64_t, const NewestRecords::Record& newest) {
    live += newest.is_delete ? 0 : 1;
  });
  // Each pass takes a random share of the keys: this one's count, taken for each pass to come,
  // errs by about passes_left * sqrt(live). Three times that more, so that a later pass hardly
  // ever has to grow the index (which briefly holds it twice).
  const uint64_t error =
      passes_left > 1 ? static_cast<uint64_t>(3 * std::sqrt(static_cast<double>(live)) + 1) : 0;
  shard.index->Reserve(shard.index->stats().entries + (live + error) * passes_left);
  absl::Status status;
  struct Live {
    uint64_t hash_lo = 0;
    NewestRecords::Record newest;
  };
  const auto insert = [&](const Live& live) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!status.ok()) return;
    status = sink.InsertLive(shard, live.hash_lo, {}, live.newest.page, live.newest.record_bytes);
  };
  Lookahead<Live> queue;
  table.ForEach([&](uint64_t hash_lo, const NewestRecords::Record& newest)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (newest.is_delete) return;
    shard.index->Prefetch(hash_lo);
    queue.Push(Live{hash_lo, newest}, insert);
  });
  queue.Drain(insert);
  table.Clear();
  return status;
}

// Ordered mode: `shard`'s index was built during the scan; its entries' records are live.
void AddLiveOfIndex(Sink& sink, Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  shard.index->ForEachValue([&](uint64_t value) {
    const Location location = Location::FromIndexValue(value);
    sink.segments.AddLive(sink.geometry.SegmentOf(location.page), location.record_bytes);
  });
}

// One recovery: what it gathers while it reads the segments, and how it builds the indexes.
class Recovery {
 public:
  Recovery(const RecoveryOptions& options, uint32_t passes, const Geometry& geometry,
           storage::Device& device, SegmentTable& segments,
           const std::vector<std::unique_ptr<Shard>>& shards)
      : options_(options),
        passes_(passes),
        g_(geometry),
        device_(device),
        segments_(segments),
        shards_(shards),
        newest_(shards.size()),
        in_use_(geometry.segment_count, false),
        generation_(geometry.segment_count, 0),
        summary_(geometry.segment_count),
        map_in_use_(geometry.segment_count, false),
        min_seq_(geometry.segment_count, UINT64_MAX),
        max_seq_(geometry.segment_count, 0) {}

  // More passes than this recovery was given, when its tables outgrew the budget (Run then
  // returned kResourceExhausted): the caller starts again with as many. 0 otherwise.
  uint32_t passes_needed() const { return passes_needed_; }

  absl::StatusOr<RecoveryReport> Run() {
    const absl::Time start = absl::Now();
    NVKV_RETURN_IF_ERROR(ReadMap());
    if (!checkpoint_.empty() && !options_.read_all) {
      const absl::Status used = UseCheckpoint();
      if (used.ok()) {
        report_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
        return std::move(report_);
      }
      report_.checkpoint_unused = std::string(used.message());
    }
    // A checkpoint not used holds no log; its segments are read like any the map does not say
    // are free (and found to hold none).
    for (const CheckpointPlace& place : checkpoint_) to_read_.push_back(place.segment);
    std::sort(to_read_.begin(), to_read_.end());
    report_.passes = passes_;
    for (pass_ = 0; pass_ < passes_; ++pass_) {
      pass_pages_done_ = 0;
      NVKV_RETURN_IF_ERROR(ReadSummaries());
      NVKV_RETURN_IF_ERROR(ReadAllSegments());
      if (!refused_.ok()) return refused_;
      if (pass_ == 0) RecoverSegments();
      NVKV_RETURN_IF_ERROR(BuildPassIndexes());
    }
    FinishIndexes();
    report_.next_sequence = std::max(max_sequence_ + 1, floors_.sequence_floor);
    report_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    return std::move(report_);
  }

 private:
  // Reads the segment map: which segments to read (to_read_), and the floors of the ones it
  // skips. Every segment is read when the map is not to be trusted (options) or says nothing.
  absl::Status ReadMap() {
    SegmentMap* map = segments_.map();
    std::vector<bool> free(g_.segment_count, false);
    std::vector<SummaryPlace> summarized(g_.segment_count);
    std::vector<std::pair<uint32_t, CheckpointPlace>> checkpoint;  // by place in it
    if (map != nullptr) {
      storage::Buffer chunk = device_.buffers().GetChunk();
      if (!chunk.valid()) return absl::InternalError("no buffer to read the segment map into");
      const uint32_t per_page = MapEntriesPerPage(g_.page_bytes);
      // A page that cannot be read or does not verify says nothing: every segment it names is
      // read (a failing device shows itself in the segments).
      report_.map_pages_damaged += ReadMapPages(
          device_, g_, options_.store_seed, options_.blocks_per_page, chunk,
          [&](uint64_t index, const SegmentMapPageHeader& floors,
              const SegmentMapEntry* entries, uint64_t segments) {
            floors_.sequence_floor = std::max(floors_.sequence_floor, floors.sequence_floor);
            floors_.generation_floor =
                std::max(floors_.generation_floor, floors.generation_floor);
            map->LoadPage(index, entries);
            for (uint64_t e = 0; e < segments; ++e) {
              const uint64_t segment = index * per_page + e;
              const SegmentMapEntry& entry = entries[e];
              free[segment] = entry.state == static_cast<uint8_t>(MapState::kFree);
              map_in_use_[segment] = entry.state == static_cast<uint8_t>(MapState::kInUse) ||
                                     entry.state == static_cast<uint8_t>(MapState::kSummarized);
              if (entry.state == static_cast<uint8_t>(MapState::kSummarized)) {
                summarized[segment] = SummaryPlace{entry.summary_first, entry.summary_pages};
              }
              if (entry.state == static_cast<uint8_t>(MapState::kCheckpoint)) {
                checkpoint.push_back({entry.summary_first, {segment, entry.summary_pages}});
              }
            }
          });
      device_.buffers().PutChunk(chunk);
    }
    // The checkpoint's segments in its order: segment 0, 1, ... (kept whatever their marks say:
    // a checkpoint not used, or one whose marks are not its places, has them read).
    std::sort(checkpoint.begin(), checkpoint.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [position, place] : checkpoint) checkpoint_.push_back(place);
    bool places_right = report_.map_pages_damaged == 0;
    for (size_t i = 0; i < checkpoint.size(); ++i) {
      places_right = places_right && checkpoint[i].first == i;
    }
    if (!places_right && !checkpoint_.empty()) {
      checkpoint_unusable_ = report_.map_pages_damaged > 0
                                 ? "a page of the segment map is damaged"
                                 : "the segment map's marks of its segments do not line up";
    }
    std::vector<bool> in_checkpoint(g_.segment_count, false);
    for (const CheckpointPlace& place : checkpoint_) in_checkpoint[place.segment] = true;
    for (uint64_t s = 0; s < g_.segment_count; ++s) {
      if (in_checkpoint[s]) {
        continue;  // Run decides
      } else if (options_.read_all) {
        to_read_.push_back(s);
      } else if (free[s]) {
        ++report_.segments_skipped;
      } else if (summarized[s].pages > 0) {
        summarized_.push_back({s, summarized[s]});
      } else {
        to_read_.push_back(s);
      }
    }
    return absl::OkStatus();
  }

  // Reads the checkpoint the map names and, when it can be used, finishes recovery with it. When
  // it cannot, the indexes and the table are made anew, and the reason returned.
  absl::Status UseCheckpoint() {
    if (!checkpoint_unusable_.empty()) return absl::DataLossError(checkpoint_unusable_);
    const CheckpointOptions options{options_.store_seed, options_.blocks_per_page,
                                    options_.ordered};
    absl::StatusOr<LoadedCheckpoint> loaded =
        LoadCheckpoint(options, g_, device_, checkpoint_, map_in_use_, segments_, shards_);
    if (!loaded.ok()) {
      for (const auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        shard->index = options_.ordered ? NewOrderedIndex() : NewHashIndex();
        shard->stale_entries = 0;
      }
      segments_.ForgetRecovered();
      return loaded.status();
    }
    // The heads go on where they were at Close: nothing has been written since.
    for (ResumedHead& resumed : loaded->heads) {
      Shard& shard = *shards_[resumed.shard];
      absl::MutexLock lock(&shard.mu);
      shard.head.Resume(resumed.place, std::move(resumed.summary));
    }
    report_.heads_resumed = loaded->heads.size();
    report_.from_checkpoint = true;
    report_.checkpoint = checkpoint_;
    report_.pages += loaded->pages;
    report_.next_sequence = std::max(loaded->next_sequence, floors_.sequence_floor);
    report_.dropped_batch_records = std::move(loaded->dropped);
    segments_.SetNextGeneration(std::max(loaded->next_generation, floors_.generation_floor));
    segments_.FinishRecovery();
    return absl::OkStatus();
  }

  // Reads the summaries the map names (with each segment's last page, for a free marker newer
  // than the summary), many in flight at once, and applies those that verify; the segment of
  // any other is read whole instead (to_read_).
  // The first pass reads the summaries the map names; a later one those the first used.
  absl::Status ReadSummaries() {
    const std::vector<Summarized>& summaries = pass_ == 0 ? summarized_ : used_;
    pass_pages_ = to_read_.size() * g_.pages_per_segment;
    for (const Summarized& s : summaries) pass_pages_ += s.place.pages + 1;
    if (summaries.empty()) return absl::OkStatus();
    // Room for this pass's share of the keys the summaries name (about: an entry is 32 bytes
    // and its key's, in ordered mode), so that the tables do not grow step by step as they fill.
    uint64_t summary_pages = 0;
    for (const Summarized& s : summaries) summary_pages += s.place.pages;
    const uint64_t entry_bytes = sizeof(SummaryEntry) + (options_.ordered ? 16 : 0);
    const uint64_t records = summary_pages * g_.payload_bytes() / entry_bytes / passes_;
    for (NewestRecords& table : newest_) table.Reserve(records / newest_.size());
    // Tables that will not fit are known before any summary is read.
    NVKV_RETURN_IF_ERROR(CheckBudget(/*projected=*/TableBytes()));
    storage::BufferPool& pool = device_.buffers();
    std::vector<storage::Buffer> chunks;
    for (storage::Buffer chunk = pool.GetChunk(); chunk.valid(); chunk = pool.GetChunk()) {
      chunks.push_back(chunk);
    }
    if (chunks.empty()) return absl::InternalError("no buffer to read summaries into");
    const uint32_t pages_per_chunk = pool.chunk_bytes() / g_.page_bytes;
    absl::Status status;
    size_t next = 0;
    while (next < summaries.size() && status.ok()) {
      // As many summaries as the chunks take: the summary's pages, then the last page.
      struct Placed {
        Summarized summarized;
        const uint8_t* pages;  // summary pages, then the segment's last page
        size_t request;        // index of its first request (two per summary)
      };
      std::vector<Placed> placed;
      std::vector<storage::IoRequest> requests;
      uint32_t chunk = 0, used = 0;
      while (next < summaries.size()) {
        const Summarized& s = summaries[next];
        const uint32_t need = s.place.pages + 1;
        if (need > pages_per_chunk) {  // larger than a chunk: read the segment instead
          ReadWholeInstead(s);
          ++next;
          continue;
        }
        if (used + need > pages_per_chunk) {
          if (++chunk == chunks.size()) break;
          used = 0;
        }
        uint8_t* at = chunks[chunk].data + size_t{used} * g_.page_bytes;
        placed.push_back({s, at, requests.size()});
        // `count` pages from `page` into the chunk, `offset` pages after `at`.
        const auto read = [&](uint64_t page, uint32_t count, uint32_t offset) {
          storage::IoRequest& request = requests.emplace_back();
          request.op = storage::IoOp::kRead;
          request.lba = page * options_.blocks_per_page;
          request.lba_count = count * options_.blocks_per_page;
          request.buffer = chunks[chunk];
          request.buffer.data = at + size_t{offset} * g_.page_bytes;
          request.buffer.bytes = count * g_.page_bytes;
        };
        const uint64_t first_page = g_.FirstPageOf(s.segment);
        read(first_page + s.place.first, s.place.pages, 0);
        read(first_page + g_.pages_per_segment - 1, 1, s.place.pages);
        used += need;
        ++next;
      }
      status = storage::RunAll(device_, requests);
      for (const Placed& p : placed) {
        if (!status.ok()) break;
        const bool read = requests[p.request].status.ok() && requests[p.request + 1].status.ok();
        const bool applied = read && ApplySummary(p.summarized, p.pages);
        pass_pages_done_ += p.summarized.place.pages + 1;
        if (applied) {
          if (pass_ == 0) used_.push_back(p.summarized);
        } else if (pass_ == 0) {
          ReadWholeInstead(p.summarized);
        } else {
          status = absl::UnavailableError(absl::StrCat(
              "segment ", p.summarized.segment, ": its summary verified in the first pass of "
              "recovery but not in pass ", pass_ + 1, " (the device reads differently)"));
        }
      }
      if (status.ok()) status = CheckBudget(TableBytes());
    }
    for (const storage::Buffer& chunk : chunks) pool.PutChunk(chunk);
    if (!status.ok()) return status;
    std::sort(to_read_.begin(), to_read_.end());
    return absl::OkStatus();
  }

  // The first pass: summary `s` is not used, its segment is read whole instead.
  void ReadWholeInstead(const Summarized& s) {
    ++report_.summaries_unused;
    to_read_.push_back(s.segment);
    pass_pages_ += g_.pages_per_segment;
  }

  // Applies one summary read with its segment's last page (`pages`); false when it does not
  // verify, or the segment was freed after it was written: its segment is then read instead.
  // Every pass applies its records; the first also notes what the summary says of its segment.
  bool ApplySummary(const Summarized& summarized, const uint8_t* pages) {
    const uint64_t segment = summarized.segment;
    const SummaryPlace& place = summarized.place;
    const uint64_t last_page = g_.FirstPageOf(segment) + g_.pages_per_segment - 1;
    const absl::StatusOr<PageHeader> last =
        VerifyPage(pages + size_t{place.pages} * g_.page_bytes, g_, options_.store_seed, last_page);
    // The last page holds nothing but free markers; never written, the segment was never freed.
    uint64_t freed_at = 0;
    if (last.ok() && last->type == static_cast<uint8_t>(PageType::kFree)) {
      freed_at = GenerationOf(*last);
    } else if (!absl::IsNotFound(last.status())) {
      return false;
    }
    // The entry count the summary's first page gives, to size the segment's key filter once it
    // is known to verify (when its records are visited).
    SummaryHeader peeked;
    std::memcpy(&peeked, pages + sizeof(PageHeader), sizeof(peeked));
    const absl::StatusOr<SummaryFound> found = ReadSummary(
        g_, options_.store_seed, segment, place.first, place.pages, options_.ordered,
        [&](uint32_t i) { return pages + size_t{i} * g_.page_bytes; },
        [&](absl::Span<const SummaryRecord> records) {
          if (!records.empty() && pass_ == 0) {
            const absl::Status sized = segments_.SizeRecoveredFilter(segment, peeked.entry_count);
            if (!sized.ok() && refused_.ok()) refused_ = sized;
          }
          for (const SummaryRecord& record : records) {
            FoundRecord found;
            found.hash = record.hash;
            found.key = record.key;
            found.page_number = g_.FirstPageOf(segment) + record.page_in_segment;
            found.record_bytes = record.record_bytes;
            found.sequence = record.sequence;
            found.is_delete = record.is_delete;
            NoteRecord(segment, found);
          }
          ApplyNoted();  // while the keys are valid
        },
        /*newer_than=*/freed_at);
    if (!found.ok()) return false;
    report_.pages += place.pages + 1;
    if (pass_ > 0) return true;
    in_use_[segment] = true;
    generation_[segment] = found->generation;
    summary_[segment] = place;
    max_generation_ = std::max(max_generation_, found->generation);
    floors_.sequence_floor = std::max(floors_.sequence_floor, found->header.sequence_floor);
    floors_.generation_floor = std::max(floors_.generation_floor, found->header.generation_floor);
    ++report_.segments_summarized;
    return true;
  }

  // Reads the segments of to_read_, several in flight at once (as many as the queue's chunks
  // allow), and scans each in segment order as its reads complete.
  absl::Status ReadAllSegments() {
    storage::BufferPool& pool = device_.buffers();
    const uint32_t chunks_per_segment = SegmentBuffer::ChunksFor(g_, pool);
    if (pool.chunk_count() < chunks_per_segment) {
      return absl::InvalidArgumentError(absl::StrCat("segments of ", g_.segment_bytes(),
                                                     " bytes are too large to recover"));
    }
    const uint32_t parallel = std::max<uint32_t>(1, pool.chunk_count() / chunks_per_segment);
    std::vector<std::unique_ptr<SegmentBuffer>> buffers;
    for (uint32_t b = 0; b < parallel; ++b) {
      NVKV_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuffer> buffer,
                            SegmentBuffer::Make(device_, g_, options_.blocks_per_page));
      buffers.push_back(std::move(buffer));
    }
    std::deque<SegmentBuffer*> in_flight;
    size_t next = 0;
    size_t scanned = 0;  // to_read_[scanned] is the next to scan
    while (next < to_read_.size() || !in_flight.empty()) {
      while (next < to_read_.size() && in_flight.size() < parallel) {
        SegmentBuffer* buffer = buffers[next % parallel].get();
        NVKV_RETURN_IF_ERROR(buffer->Issue(to_read_[next++]));
        in_flight.push_back(buffer);
      }
      SegmentBuffer& read = *in_flight.front();
      while (!read.done()) {
        NVKV_RETURN_IF_ERROR(device_.Reap(1).status());
      }
      NVKV_RETURN_IF_ERROR(ScanRead(read, scanned++));
      in_flight.pop_front();
      pass_pages_done_ += g_.pages_per_segment;
      const absl::Status budget = CheckBudget(TableBytes());
      if (!budget.ok()) {
        // Recovery starts again on this queue: no read may still land in these buffers.
        for (SegmentBuffer* buffer : in_flight) {
          while (!buffer->done()) NVKV_RETURN_IF_ERROR(device_.Reap(1).status());
        }
        return budget;
      }
    }
    return absl::OkStatus();
  }

  // Scans one segment read whole into `read`, to_read_[position]. Every pass applies its
  // records; the first notes what the scan says of the segment, and a later one checks that it
  // found the same.
  absl::Status ScanRead(SegmentBuffer& read, size_t position) {
    const uint64_t segment = read.segment();
    // Pages the device cannot read are damaged ones (segment_read.h), unless none of the
    // segment can be read: then the device, not a block, is failing, and a store opened without
    // it would look empty there.
    const uint32_t failed = read.Settle();
    if (failed == g_.pages_per_segment) {
      return absl::Status(read.status().code(),
                          absl::StrCat("segment ", segment, ": no page of it can be read: ",
                                       read.status().message()));
    }
    const auto page_at = [&read](uint32_t i) { return read.page(i); };
    const SegmentScanResult scan = ScanSegment(
        g_, options_.store_seed, segment, page_at, /*assemble=*/false,
        [&](const ScannedRecord& record) {
          FoundRecord found;
          found.hash = HashKey(record.key);
          found.key = record.key;
          found.page_number = record.page_number;
          found.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
          found.sequence = record.header.sequence;
          found.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
          NoteRecord(segment, found);
        });
    ApplyNoted();  // while the keys are valid: the read's buffers are reused after this
    report_.pages += g_.pages_per_segment;
    const ScanFacts facts{scan.in_use,    scan.generation,        scan.hole_pages,
                          scan.records,   scan.batches_discarded, failed};
    if (pass_ > 0) {
      if (facts == scanned_[position]) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat(
          "segment ", segment, ": pass ", pass_ + 1, " of recovery found its log other than the "
          "first did (the device reads differently)"));
    }
    scanned_.push_back(facts);
    report_.unreadable_pages += failed;
    in_use_[segment] = scan.in_use;
    generation_[segment] = scan.generation;
    // A whole log that ends with its summary (written before a crash, but not yet in the map):
    // the map may say so from now on, once the summary verifies and accounts for every record.
    if (scan.in_use && scan.summary.pages > 0 && scan.hole_pages == 0 &&
        scan.batches_discarded == 0) {
      const absl::StatusOr<SummaryFound> found = ReadSummary(
          g_, options_.store_seed, segment, scan.summary.first, scan.summary.pages,
          // An ordered Open names only summaries it could use itself (with keys).
          options_.ordered, [&](uint32_t i) { return read.page(scan.summary.first + i); },
          [](absl::Span<const SummaryRecord>) {}, /*newer_than=*/0);
      if (found.ok() && found->generation == scan.generation &&
          found->header.entry_count == scan.records) {
        summary_[segment] = scan.summary;
      }
    }
    max_generation_ = std::max(max_generation_, scan.max_generation);
    // Sequences of pages outside every log count too: a new record must never lose to an old one
    // that a later recovery might read.
    max_sequence_ = std::max(max_sequence_, scan.max_sequence);
    report_.batches_discarded += scan.batches_discarded;
    report_.dropped_batch_records.AddAll(scan.dropped);
    report_.damaged_pages += scan.hole_pages;
    return absl::OkStatus();
  }

  // One record recovery applies, found in `segment`. It waits in a short queue (noted_, a
  // Lookahead) while the table slot it will probe is fetched, and is applied when the queue is
  // full or by ApplyNoted, which the caller runs while its keys are still valid and before
  // records of another segment are noted.
  // A record of another pass's keys is noted in the first pass only (for the segment table).
  void NoteRecord(uint64_t segment, const FoundRecord& record) {
    const bool in_pass = PassOf(record.hash) == pass_;
    if (!in_pass && pass_ > 0) return;
    const uint32_t shard = ShardIndexFor(record.hash, shards_.size());
    if (in_pass) newest_[shard].Prefetch(record.hash);
    noted_.Push(Noted{segment, shard, in_pass, record},
                [this](const Noted& noted) { ApplyRecord(noted); });
  }

  // The pass that takes `hash`'s key: hash bits 23..31, which neither the tables (bits 0..22 of
  // hash.hi) nor the shard (bits 32..63) use, so that each pass's keys spread over every shard
  // and sub-table.
  uint32_t PassOf(const KeyHash& hash) const {
    return static_cast<uint32_t>((((hash.hi >> 23) & 0x1ff) * passes_) >> 9);
  }

  // Applies every record NoteRecord holds, in the order noted.
  void ApplyNoted() {
    noted_.Drain([this](const Noted& noted) { ApplyRecord(noted); });
  }

  struct Noted {
    uint64_t segment = 0;
    uint32_t shard = 0;    // the record's
    bool in_pass = false;  // its key is this pass's
    FoundRecord record;
  };

  void ApplyRecord(const Noted& noted) {
    const uint64_t segment = noted.segment;
    const FoundRecord& record = noted.record;
    const KeyHash& hash = record.hash;
    const uint32_t shard = noted.shard;
    if (noted.in_pass) {
      NewestRecords::Record newest = NewestOf(record);
      if (options_.ordered) newest.page = newest.record_bytes = 0;  // the index keeps them
      switch (newest_[shard].KeepIfNewer(hash, newest)) {
        case NewestRecords::Kept::kNewest:
          if (options_.ordered) ApplyToOrderedIndex(*shards_[shard], hash, record);
          break;
        case NewestRecords::Kept::kOlder:
          break;
        case NewestRecords::Kept::kRefused:
          if (refused_.ok()) {
            refused_ = absl::DataLossError(absl::StrCat(
                "page ", record.page_number, ": record sequence ", record.sequence,
                " is not below 2^56, which no nvkv store reaches"));
          }
          break;
        case NewestRecords::Kept::kNoMemory:
          // CheckBudget starts recovery again in more passes, when it can.
          if (tables_failed_at_ == 0) tables_failed_at_ = TableBytes();
          if (refused_.ok()) {
            refused_ = absl::ResourceExhaustedError(absl::StrCat(
                "recovery: no memory to grow the table of newest records beyond ",
                newest_[shard].allocated_bytes(), " bytes (Options::recovery_memory_bytes reads "
                "the log in passes within less)"));
          }
          break;
      }
    }
    if (pass_ == 0) {
      min_seq_[segment] = std::min(min_seq_[segment], record.sequence);
      max_seq_[segment] = std::max(max_seq_[segment], record.sequence);
      max_sequence_ = std::max(max_sequence_, record.sequence);
      segments_.NoteRecord(segment, hash, record.sequence, record.record_bytes, record.is_delete);
      ++report_.records;
    }
  }

  // Ordered mode: `record` is its key's newest so far: the key's entry says so (a delete removes
  // it).
  void ApplyToOrderedIndex(Shard& shard, const KeyHash& hash, const FoundRecord& record) {
    absl::MutexLock lock(&shard.mu);
    shard.index->Find(hash.lo, record.key, &found_);
    if (record.is_delete) {
      if (!found_.empty()) shard.index->Erase(hash.lo, record.key, found_.front());
      return;
    }
    const uint64_t value =
        Location::Indexed(record.page_number, record.record_bytes, /*index_keeps_size=*/true)
            .index_value();
    if (found_.empty()) {
      const absl::Status inserted = shard.index->Insert(hash.lo, record.key, value);
      if (!inserted.ok() && refused_.ok()) refused_ = inserted;
    } else {
      shard.index->Replace(hash.lo, record.key, found_.front(), value);
    }
  }

  // After the first pass: what it found of each segment, for the segment table.
  void RecoverSegments() {
    for (uint64_t s = 0; s < g_.segment_count; ++s) {
      SegmentTable::RecoveredSegment found;
      found.in_use = in_use_[s];
      found.generation = generation_[s];
      found.min_sequence = min_seq_[s];
      found.max_sequence = max_seq_[s];
      found.summary = summary_[s];
      segments_.RecoverSegment(s, found);
    }
  }

  // After each pass, each shard's index entries of the pass's keys: hash mode builds them from
  // the shard's table, which is freed before the next shard's are built; ordered mode has built
  // them already.
  absl::Status BuildPassIndexes() {
    Sink sink{g_, options_.ordered, segments_};
    for (const auto& shard : shards_) {
      NewestRecords& table = newest_[shard->id];
      report_.table_bytes_peak = std::max(report_.table_bytes_peak, table.allocated_bytes());
      absl::MutexLock lock(&shard->mu);
      if (options_.ordered) {
        table.Clear();
      } else {
        NVKV_RETURN_IF_ERROR(DrainHashed(sink, *shard, table, passes_ - pass_));
      }
    }
    return absl::OkStatus();
  }

  // After the last pass: ordered mode's live bytes, and the segment table ready for use.
  void FinishIndexes() {
    Sink sink{g_, options_.ordered, segments_};
    if (options_.ordered) {
      for (const auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        AddLiveOfIndex(sink, *shard);
      }
    }
    segments_.SetNextGeneration(std::max(max_generation_ + 1, floors_.generation_floor));
    segments_.FinishRecovery();
  }

  uint64_t TableBytes() const {
    uint64_t bytes = 0;
    for (const NewestRecords& table : newest_) bytes += table.allocated_bytes();
    return bytes;
  }

  // kResourceExhausted, with passes_needed_ set, when the tables hold more than the budget
  // (`bytes` of them now): as many passes as would keep them within it, projected from the
  // share of this pass's pages read so far (a quarter more, so that one restart does), or all of
  // `bytes` when nothing is read yet (the room reserved for the summaries' keys). A table that
  // could not grow (the system had no memory for it: the limits MemoryHeadroomBytes reads are
  // not all there is, and the index and key filters grow beside the tables) makes the budget
  // half of what the tables held then.
  absl::Status CheckBudget(uint64_t bytes) {
    uint64_t budget = options_.table_budget_bytes;
    if (tables_failed_at_ > 0) {
      const uint64_t half = std::max<uint64_t>(tables_failed_at_ / 2, 1);
      budget = budget == 0 ? half : std::min(budget, half);
    }
    if (budget == 0 || bytes <= budget || passes_ >= kMaxRecoveryPasses) return absl::OkStatus();
    double projected = static_cast<double>(bytes) * passes_;
    if (pass_pages_done_ > 0) {
      projected *= 1.25 * static_cast<double>(std::max(pass_pages_, pass_pages_done_)) /
                   static_cast<double>(pass_pages_done_);
    }
    const double needed = std::ceil(projected / static_cast<double>(budget));
    passes_needed_ = static_cast<uint32_t>(
        std::clamp<double>(needed, passes_ + 1, kMaxRecoveryPasses));
    return absl::ResourceExhaustedError(absl::StrCat(
        "recovery's tables outgrew ", budget, " bytes in ", passes_, " pass(es)"));
  }

  const RecoveryOptions options_;
  const uint32_t passes_;      // over the log, each for a share of the keys (PassOf)
  uint32_t pass_ = 0;          // the one under way
  uint32_t passes_needed_ = 0;  // when the tables outgrew the budget (CheckBudget)
  uint64_t tables_failed_at_ = 0;  // the tables' bytes when one could not grow (0: none failed)
  uint64_t pass_pages_ = 0;  // pages the pass reads (summaries with their last pages, segments)
  uint64_t pass_pages_done_ = 0;  // of them, read and applied
  const Geometry& g_;
  storage::Device& device_;
  SegmentTable& segments_;
  const std::vector<std::unique_ptr<Shard>>& shards_;
  RecoveryReport report_;
  // The newest record of each key, one table per shard.
  std::vector<NewestRecords> newest_;
  std::vector<uint64_t> found_;  // ApplyToOrderedIndex's, kept to save an allocation per record
  Lookahead<Noted> noted_;  // records noted and not yet applied (NoteRecord)
  std::vector<bool> in_use_;        // per segment: it holds a log
  std::vector<uint64_t> generation_;  // per segment: its log's
  std::vector<SummaryPlace> summary_;  // per segment: its summary, when the map may name it
  std::vector<Summarized> summarized_;  // the segments the map says are summarized, and where
  std::vector<Summarized> used_;        // of them, those whose summaries the first pass used
  // What the first pass's scan found of each segment read whole (to_read_'s order), which every
  // later pass must find again.
  struct ScanFacts {
    bool in_use = false;
    uint64_t generation = 0, hole_pages = 0, records = 0, batches_discarded = 0;
    uint32_t unreadable_pages = 0;
    bool operator==(const ScanFacts&) const = default;
  };
  std::vector<ScanFacts> scanned_;
  std::vector<uint64_t> to_read_;   // the segments recovery reads, in order
  std::vector<bool> map_in_use_;    // per segment: the map says it holds a log
  std::vector<CheckpointPlace> checkpoint_;  // the checkpoint's segments the map names, in order
  std::string checkpoint_unusable_;  // why the map's marks rule the checkpoint out
  SegmentMapPageHeader floors_{};   // the highest of the map pages' floors
  std::vector<uint64_t> min_seq_, max_seq_;  // record sequences per segment
  uint64_t max_sequence_ = 0;
  uint64_t max_generation_ = 0;
  absl::Status refused_;  // a record recovery cannot keep
};

}  // namespace

absl::StatusOr<RecoveryReport> RecoverStore(const RecoveryOptions& options,
                                            const Geometry& geometry, storage::Device& device,
                                            SegmentTable& segments,
                                            const std::vector<std::unique_ptr<Shard>>& shards) {
  uint32_t passes = 1;
  while (true) {
    Recovery recovery(options, passes, geometry, device, segments, shards);
    absl::StatusOr<RecoveryReport> report = recovery.Run();
    if (recovery.passes_needed() == 0) return report;
    // The tables outgrew the budget: start again from nothing in more passes.
    passes = recovery.passes_needed();
    for (const auto& shard : shards) {
      absl::MutexLock lock(&shard->mu);
      shard->index = options.ordered ? NewOrderedIndex() : NewHashIndex();
      shard->stale_entries = 0;
    }
    segments.ForgetRecovered();
  }
}

}  // namespace nvkv::kv

