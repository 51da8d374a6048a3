// Recovery (recovery.h): reads every segment at Open and rebuilds the indexes.
#include "kv/recovery.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <span>
#include <cstring>


#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// How a start of recovery reads the log: in `passes` (Recovery::PlanPasses may add more), with
// tables sized for `whole_segment_records` records of every key in the segments it reads whole,
// and `whole_segment_filter_bytes` of key filters for those segments, when a start given up
// projected them (0: not known).
struct PassPlan {
  uint32_t passes = 1;
  uint64_t whole_segment_records = 0;
  uint64_t whole_segment_filter_bytes = 0;
};

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
  const StoreShape& shape;
  SegmentTable& segments;

  // Adds one live key to `shard`'s index and its bytes to its segment's live bytes.
  absl::Status InsertLive(Shard& shard, uint64_t hash_lo, std::string_view key, uint64_t page,
                          uint32_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const Location location = shape.IndexedAt(page, record_bytes);
    NVKV_RETURN_IF_ERROR(shard.index->Insert(hash_lo, key, location.index_value()));
    segments.AddLive(shape.geometry.SegmentOf(page), record_bytes);
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
    sink.segments.AddLive(sink.shape.geometry.SegmentOf(location.page), location.record_bytes);
  });
}

// One recovery: what it gathers while it reads the segments, and how it builds the indexes.
class Recovery {
 public:
  Recovery(const RecoveryOptions& options, bool use_checkpoint, const PassPlan& plan,
           const StoreShape& shape, storage::Device& device, SegmentTable& segments,
           const ShardSet& shards)
      : options_(options),
        shape_(shape),
        use_checkpoint_(use_checkpoint),
        passes_(plan.passes),
        whole_records_(plan.whole_segment_records),
        whole_filter_bytes_(plan.whole_segment_filter_bytes),
        budget_(options.table_budget_bytes),
        g_(shape.geometry),
        device_(device),
        segments_(segments),
        shards_(shards),
        newest_(shards.size()),
        in_use_(shape.geometry.segment_count, false),
        generation_(shape.geometry.segment_count, 0),
        summary_(shape.geometry.segment_count),
        map_in_use_(shape.geometry.segment_count, false),
        min_seq_(shape.geometry.segment_count, UINT64_MAX),
        max_seq_(shape.geometry.segment_count, 0),
        read_before_(shape.geometry.segment_count, false),
        tail_from_(shape.geometry.segment_count, 0) {}

  // Why the base checkpoint was set aside after recovery had begun to apply the log after it
  // (Run then returned kDataLoss): the caller starts again without it. Empty otherwise.
  const std::string& base_failed() const { return base_failed_; }

  // More passes than this recovery was given, when its tables outgrew the budget or would have
  // (Run then returned kResourceExhausted): the caller starts again with this plan. Passes 0
  // otherwise.
  PassPlan plan_needed() const {
    return PassPlan{passes_needed_, whole_records_, whole_filter_bytes_};
  }

  // Pages read so far (the report's count, for a Run that did not finish).
  uint64_t pages_read() const { return report_.pages; }

  absl::StatusOr<RecoveryReport> Run() {
    const absl::Time start = absl::Now();
    report_.start = RecoveryStart::kLog;  // unless a checkpoint is used
    NVKV_RETURN_IF_ERROR(ReadMap());
    if (!checkpoint_.empty() && !options_.read_all && use_checkpoint_) {
      const absl::Status used = base_ ? UseBase() : UseCheckpoint();
      if (used.ok() && !base_) {
        report_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
        return std::move(report_);
      }
      if (!used.ok()) {
        report_.checkpoint_unused = std::string(used.message());
        base_ = false;
      }
    } else {
      base_ = false;
    }
    PlanPasses();
    if (!base_) {
      // A checkpoint not used holds no log; its segments are read like any the map does not say
      // are free (and found to hold none).
      for (const CheckpointPlace& place : checkpoint_) to_read_.push_back(place.segment);
    }
    std::sort(to_read_.begin(), to_read_.end());
    report_.passes = passes_;
    for (pass_ = 0; pass_ < passes_; ++pass_) {
      pass_pages_done_ = 0;
      NVKV_RETURN_IF_ERROR(ReadSummaries());
      if (pass_ == 0 && WithinCeiling()) {
        // The summaries' keys are known now (this pass's share of them in the tables), and
        // those of the segments read whole when a start given up projected them.
        NVKV_RETURN_IF_ERROR(GoOnNarrowed(PlanFor(
            index_entries_before_ + TableEntries() * passes_ + whole_records_,
            segments_.filter_bytes() + whole_filter_bytes_, "the summaries")));
      }
      NVKV_RETURN_IF_ERROR(ReadAllSegments());
      if (pass_ == 0 && WithinCeiling()) {
        // Every key of this pass's share is known, and every key filter made: the index is
        // built next (hash mode).
        NVKV_RETURN_IF_ERROR(GoOnNarrowed(PlanFor(index_entries_before_ + TableEntries() * passes_,
                                                  segments_.filter_bytes(), "the first pass")));
      }
      if (pass_ > 0) {
        NVKV_RETURN_IF_ERROR(ApplyKeptRecords());
        NVKV_RETURN_IF_ERROR(CheckBudget(TableBytes()));
      }
      if (!refused_.ok()) return refused_;
      if (pass_ == 0) RecoverSegments();
      NVKV_RETURN_IF_ERROR(BuildPassIndexes());
      if (!base_failed_.empty()) return absl::DataLossError(base_failed_);
      if (!report_.unread_pages.empty() && !options_.open_degraded) return UnreadRefusal();
    }
    FinishIndexes();
    report_.next_sequence = std::max({max_sequence_ + 1, floors_.sequence_floor, base_sequence_});
    if (!report_.unread_pages.empty()) report_.next_sequence += UnreadSequenceGap(g_);
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
      const storage::BufferLease chunk = storage::BufferLease::Chunk(device_.buffers());
      if (!chunk.valid()) return absl::InternalError("no buffer to read the segment map into");
      const uint32_t per_page = MapEntriesPerPage(g_.page_bytes);
      // A page that cannot be read or does not verify says nothing: every segment it names is
      // read (a failing device shows itself in the segments).
      report_.map_pages_damaged += ReadMapPages(
          device_, g_, shape_.seed, shape_.blocks_per_page, *chunk,
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
              if (entry.state == static_cast<uint8_t>(MapState::kCheckpoint) ||
                  entry.state == static_cast<uint8_t>(MapState::kBaseCheckpoint)) {
                checkpoint.push_back({entry.summary_first, {segment, entry.summary_pages}});
                // One mark of a base is enough: an Open that read the checkpoint marks it so
                // before anything is written, and a cut may leave only some pages of that map
                // write on the device.
                base_ = base_ || entry.state == static_cast<uint8_t>(MapState::kBaseCheckpoint);
              }
            }
          });
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
    map_free_ = free;
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
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(
        shape_, CheckpointLoadOptions{}, device_, checkpoint_, &map_in_use_, segments_, shards_);
    if (!loaded.ok()) {
      ForgetAll();
      return loaded.status();
    }
    // The heads go on where they were at Close: nothing has been written since.
    for (ResumedHead& resumed : loaded->heads) {
      Shard& shard = shards_[resumed.shard];
      absl::MutexLock lock(&shard.mu);
      shard.head.Resume(resumed.place, std::move(resumed.summary));
    }
    report_.heads_resumed = loaded->heads.size();
    report_.start = RecoveryStart::kCleanClose;
    report_.checkpoint = checkpoint_;
    report_.pages += loaded->pages;
    report_.checkpoint_pages = loaded->pages;
    report_.next_sequence = std::max(loaded->next_sequence, floors_.sequence_floor);
    report_.dropped_batch_records = std::move(loaded->dropped);
    segments_.SetNextGeneration(std::max(loaded->next_generation, floors_.generation_floor));
    KeepCheckpoint();
    segments_.FinishRecovery();
    return absl::OkStatus();
  }

  // What a checkpoint set aside had filled is made anew.
  void ForgetAll() {
    shards_.ResetIndexes(shape_.ordered);
    segments_.ForgetRecovered();
  }

  // The checkpoint recovery started from stays on the device, the base of the next recovery
  // after a crash: the map says so from the Open's first map write on (MapState::kBaseCheckpoint).
  void KeepCheckpoint() {
    for (size_t i = 0; i < checkpoint_.size(); ++i) {
      segments_.KeepCheckpoint(checkpoint_[i].segment, static_cast<uint32_t>(i),
                               checkpoint_[i].pages);
    }
  }

  // Reads the checkpoint the map names as the base of the log written after it (a crash came
  // after the Open that read it): the indexes and the table as they were then. Then finds what
  // changed since: the segments it says hold a log are read no more, but for the heads' (the
  // pages after the checkpoint's end of their logs: tail_from_); every other segment the map
  // does not say is free holds log written after it, read as usual (summaries and segments) and
  // applied over it (BuildPassIndexes). When that cannot be told apart, the checkpoint is set
  // aside (the indexes and the table made anew) and the reason returned.
  absl::Status UseBase() {
    if (!checkpoint_unusable_.empty()) return absl::DataLossError(checkpoint_unusable_);
    CheckpointLoadOptions options;
    // Room for the entries the log after it may add (the summaries' records, spread over the
    // shards), made as the index is first sized: growing it later would hold it twice.
    options.room_after = [this](const std::vector<bool>& restored,
                                const std::vector<uint32_t>& log_end, uint64_t put_bytes) {
      const uint64_t entry_bytes = sizeof(SummaryEntry) + (shape_.ordered ? 16 : 0);
      uint64_t records = 0;
      std::vector<bool> summarized(g_.segment_count, false);
      for (const Summarized& s : summarized_) {
        summarized[s.segment] = true;
        if (!restored[s.segment]) records += s.place.pages * g_.payload_bytes() / entry_bytes;
      }
      for (uint64_t s = 0; s < g_.segment_count; ++s) {
        // Segments the log after it may have gone on in (read whole): those it does not name,
        // and the heads' after their places.
        if (!map_in_use_[s] || (!restored[s] && summarized[s])) continue;
        const uint64_t pages = restored[s] ? g_.log_pages() - log_end[s] : g_.log_pages();
        records += pages * g_.payload_bytes() / put_bytes;
      }
      return records;
    };
    // The heads' segments are read, and their key filters made as they are (one at a time at
    // full size): no head goes on in its segment after a crash.
    options.resume_heads = false;
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(
        shape_, options, device_, checkpoint_, /*map_in_use=*/nullptr, segments_, shards_);
    absl::Status status = loaded.status();
    if (status.ok()) status = FindTail(*loaded);
    if (!status.ok()) {
      ForgetAll();
      tail_from_.assign(g_.segment_count, 0);
      report_.base_segments_freed = 0;
      return status;
    }
    report_.start = RecoveryStart::kBaseCheckpoint;
    report_.checkpoint = checkpoint_;
    report_.pages += loaded->pages;
    report_.checkpoint_pages = loaded->pages;
    report_.segments_after_base = summarized_.size() + to_read_.size();
    base_sequence_ = loaded->next_sequence;
    base_generation_ = loaded->next_generation;
    base_dropped_ = loaded->dropped;
    report_.dropped_batch_records = std::move(loaded->dropped);
    return absl::OkStatus();
  }

  // The tables' budget, and as many passes as keep the tables the summaries call for within it
  // (ReadSummaries sizes them so), planned before any is read rather than found too few later.
  // Unless the options give one: over a base, a share of the index it gave (Open's memory is to
  // stay within the index plus a tenth, and reading the segments read whole needs some too; the
  // log after a base is a small part of the store). Without a base the tables hold a record of
  // every key of the log, and a pass more reads the whole log again: the budget is what the
  // machine's and the cgroup's memory leave (table_budget_ceiling_bytes), so that recovery stays
  // one pass wherever memory allows (no bound when no limit can be read: /proc/meminfo at
  // least always can). (At least kMinTableBudget, and twice what the shards' tables take empty,
  // else no number of passes fits; at most the ceiling.)
  void PlanPasses() {
    const uint64_t records = SummarizedRecords() + whole_records_;
    for (const auto& shard : shards_) {
      absl::MutexLock lock(&shard->mu);
      index_entries_before_ += shard->index->stats().entries;
    }
    if (budget_ == 0) {
      const uint64_t ceiling = options_.table_budget_ceiling_bytes;
      uint64_t wanted = ceiling != 0 ? ceiling : UINT64_MAX;
      if (base_) {
        uint64_t index_bytes = 0;
        for (const auto& shard : shards_) {
          absl::MutexLock lock(&shard->mu);
          index_bytes += shard->index->stats().memory_bytes;
        }
        wanted = index_bytes / kTableShareOfIndex;
      }
      const uint64_t empty_tables = newest_.size() * NewestRecords::BytesFor(0);
      budget_ = std::max({wanted, kMinTableBudget, 2 * empty_tables});
      if (ceiling != 0) budget_ = std::min(budget_, ceiling);
    }
    passes_ = std::max(passes_, PassesFor(records, budget_));
    report_.passes = passes_;
  }

  // The fewest passes whose tables hold `records` (of every key of the log) within `budget`
  // (at most kMaxRecoveryPasses).
  uint32_t PassesFor(uint64_t records, uint64_t budget) const {
    uint32_t passes = 1;
    while (passes < kMaxRecoveryPasses &&
           newest_.size() * NewestRecords::BytesFor(records / passes / newest_.size()) > budget) {
      ++passes;
    }
    return passes;
  }

  // About how many records the summaries recovery is to read name (an entry is 32 bytes and its
  // key's, in ordered mode): ReadSummaries sizes the tables for them.
  uint64_t SummarizedRecords() const {
    uint64_t summary_pages = 0;
    for (const Summarized& s : summarized_) summary_pages += s.place.pages;
    const uint64_t entry_bytes = sizeof(SummaryEntry) + (shape_.ordered ? 16 : 0);
    return summary_pages * g_.payload_bytes() / entry_bytes;
  }

  // UseBase: which segments hold log written after the checkpoint `loaded` (to_read_ and
  // summarized_ keep only those), and what it knows of segments compaction freed since (which
  // it forgets). Fails when a segment's last page cannot tell whether it was freed.
  absl::Status FindTail(const LoadedCheckpoint& loaded) {
    std::vector<bool> restored(g_.segment_count, false);
    std::vector<uint64_t> logs;  // the checkpoint's segments holding a log
    for (uint64_t s = 0; s < g_.segment_count; ++s) {
      if (segments_.state(s) == SegmentState::kFree) continue;
      restored[s] = true;
      logs.push_back(s);
    }
    for (const CheckpointPlace& place : checkpoint_) {
      if (restored[place.segment]) {
        return absl::DataLossError(absl::StrCat("checkpoint: it says segment ", place.segment,
                                                ", where it lies itself, holds a log"));
      }
    }
    // Compaction freed some of those since: the map says so, or, as it says so lazily, the
    // segment's last page does. A segment that still holds the log the checkpoint knows has no
    // free marker newer than that log there: compaction writes one there first when it frees
    // the segment, and a head takes it again only after.
    std::vector<bool> freed(g_.segment_count, false);
    std::vector<uint64_t> last_pages, asked;
    for (const uint64_t s : logs) {
      if (map_free_[s]) {
        freed[s] = true;
      } else {
        asked.push_back(s);
        last_pages.push_back(g_.FirstPageOf(s) + g_.pages_per_segment - 1);
      }
    }
    report_.pages += last_pages.size();
    NVKV_RETURN_IF_ERROR(ReadPages(last_pages, [&](size_t i, const uint8_t* page,
                                                   const absl::Status& read) -> absl::Status {
      const uint64_t s = asked[i];
      absl::StatusOr<PageHeader> last =
          read.ok() ? VerifyPage(page, g_, shape_.seed, last_pages[i]) : read;
      if (absl::IsNotFound(last.status())) return absl::OkStatus();  // never freed
      if (last.ok() && last->type == static_cast<uint8_t>(PageType::kFree)) {
        freed[s] = GenerationOf(*last) > segments_.generation(s);
        return absl::OkStatus();
      }
      return absl::DataLossError(absl::StrCat("segment ", s, ": its last page cannot tell "
                                              "whether it changed after the checkpoint"));
    }));
    // What the checkpoint knows of a freed segment is gone: its index entries (the live records
    // compaction copied from it are in the log after the checkpoint, as newer entries) and its
    // place in the table. It holds nothing, or a log begun after the checkpoint, read as such.
    uint64_t freed_count = 0;
    for (const uint64_t s : logs) {
      if (!freed[s]) continue;
      ++freed_count;
      restored[s] = false;
      segments_.ForgetRecoveredSegment(s);
    }
    if (freed_count > 0) {
      for (const auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        shard->index->EraseIf([&](uint64_t value) {
          return freed[g_.SegmentOf(Location::FromIndexValue(value).page)];
        });
        // Some of those may have been stale: the count is an estimate (compaction settles).
        shard->stale_entries = std::min(shard->stale_entries, shard->index->stats().entries);
      }
    }
    report_.base_segments_freed = freed_count;
    std::erase_if(logs, [&](uint64_t s) { return freed[s]; });
    for (const ResumedHead& head : loaded.heads) {
      const uint64_t s = head.place.segment;
      if (!freed[s]) tail_from_[s] = g_.FirstPageOf(s) + head.place.next_page;
    }
    // The log after the checkpoint: the heads' segments from where the checkpoint ends them,
    // read whole, and every segment it does not know.
    std::vector<Summarized> tail_summaries;
    for (const Summarized& s : summarized_) {
      if (!restored[s.segment]) tail_summaries.push_back(s);
    }
    summarized_ = std::move(tail_summaries);
    std::vector<uint64_t> tail_segments;
    for (const uint64_t s : to_read_) {
      if (!restored[s]) tail_segments.push_back(s);
    }
    for (const ResumedHead& head : loaded.heads) {
      if (restored[head.place.segment]) tail_segments.push_back(head.place.segment);
    }
    to_read_ = std::move(tail_segments);
    for (const uint64_t s : logs) read_before_[s] = true;
    return absl::OkStatus();
  }

  // Reads `pages` (one page each), a chunk of them at a time, and calls `visit(i, page, status)`
  // for each in order; stops at the first error `visit` returns.
  template <typename Visit>
  absl::Status ReadPages(const std::vector<uint64_t>& pages, Visit visit) {
    const storage::BufferLease lease = storage::BufferLease::Chunk(device_.buffers());
    if (!lease.valid()) return absl::InternalError("no buffer to read pages into");
    const storage::Buffer& chunk = *lease;
    const size_t per_chunk = chunk.bytes / g_.page_bytes;
    absl::Status status;
    std::vector<storage::IoRequest> requests;
    for (size_t first = 0; first < pages.size() && status.ok(); first += per_chunk) {
      const size_t count = std::min(per_chunk, pages.size() - first);
      requests.assign(count, storage::IoRequest{});
      for (size_t i = 0; i < count; ++i) {
        storage::IoRequest& request = requests[i];
        request.op = storage::IoOp::kRead;
        request.lba = shape_.LbaOf(pages[first + i]);
        request.lba_count = shape_.blocks_per_page;
        request.buffer = chunk;
        request.buffer.data = chunk.data + i * g_.page_bytes;
        request.buffer.bytes = g_.page_bytes;
      }
      status = storage::RunAll(device_, requests);
      for (size_t i = 0; i < count && status.ok(); ++i) {
        status = visit(first + i, chunk.data + i * g_.page_bytes, requests[i].status);
      }
    }
    return status;
  }

  // Reads the summaries the map names (with each segment's last page, for a free marker newer
  // than the summary), many in flight at once, and applies those that verify; the segment of
  // any other is read whole instead (to_read_).
  // The first pass reads the summaries the map names; a later one those the first used.
  absl::Status ReadSummaries() {
    const std::vector<Summarized>& summaries = pass_ == 0 ? summarized_ : used_;
    pass_pages_ = SegmentsToReadThisPass().size() * g_.pages_per_segment;
    for (const Summarized& s : summaries) pass_pages_ += s.place.pages + 1;
    if (summaries.empty()) return absl::OkStatus();
    // Room for this pass's share of the keys the summaries name (about: an entry is 32 bytes
    // and its key's, in ordered mode), so that the tables do not grow step by step as they fill.
    uint64_t summary_pages = 0;
    for (const Summarized& s : summaries) summary_pages += s.place.pages;
    const uint64_t entry_bytes = sizeof(SummaryEntry) + (shape_.ordered ? 16 : 0);
    const uint64_t records = summary_pages * g_.payload_bytes() / entry_bytes / passes_;
    for (NewestRecords& table : newest_) table.Reserve(records / newest_.size());
    // Tables that will not fit are known before any summary is read.
    NVKV_RETURN_IF_ERROR(CheckBudget(/*projected=*/TableBytes()));
    storage::BufferPool& pool = device_.buffers();
    std::vector<storage::BufferLease> leases;
    std::vector<storage::Buffer> chunks;
    while (true) {
      storage::BufferLease chunk = storage::BufferLease::Chunk(pool);
      if (!chunk.valid()) break;
      chunks.push_back(*chunk);
      leases.push_back(std::move(chunk));
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
          request.lba = shape_.LbaOf(page);
          request.lba_count = count * shape_.blocks_per_page;
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
        const std::span<storage::IoRequest> its_reads(&requests[p.request], 2);
        bool read = its_reads[0].status.ok() && its_reads[1].status.ok();
        // The first pass read it: a read that fails now is tried again (a transient error), and
        // only a summary that reads otherwise makes this pass differ.
        for (uint32_t again = 0; !read && pass_ > 0 && again < kRereadsInLaterPasses; ++again) {
          status = storage::RunAll(device_, its_reads);
          if (!status.ok()) break;
          read = its_reads[0].status.ok() && its_reads[1].status.ok();
        }
        if (!status.ok()) break;
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

  // Applies the records of `segment` that a summary gives (read, or kept by the first pass).
  void ApplySummaryRecords(uint64_t segment, absl::Span<const SummaryRecord> records) {
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
  }

  // Applies one summary read with its segment's last page (`pages`); false when it does not
  // verify, or the segment was freed after it was written: its segment is then read instead.
  // Every pass applies its records; the first also notes what the summary says of its segment.
  bool ApplySummary(const Summarized& summarized, const uint8_t* pages) {
    const uint64_t segment = summarized.segment;
    const SummaryPlace& place = summarized.place;
    const uint64_t last_page = g_.FirstPageOf(segment) + g_.pages_per_segment - 1;
    const absl::StatusOr<PageHeader> last =
        VerifyPage(pages + size_t{place.pages} * g_.page_bytes, g_, shape_.seed, last_page);
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
        g_, shape_.seed, segment, place.first, place.pages, shape_.ordered,
        [&](uint32_t i) { return pages + size_t{i} * g_.page_bytes; },
        [&](absl::Span<const SummaryRecord> records) {
          if (!records.empty() && pass_ == 0) {
            const absl::Status sized = segments_.SizeRecoveredFilter(segment, peeked.entry_count);
            if (!sized.ok() && refused_.ok()) refused_ = sized;
          }
          ApplySummaryRecords(segment, records);
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

  // The places in to_read_ of the segments this pass reads: every one in the first; in a later
  // pass only those where the first found records (an announced segment no head took, or a
  // free one, adds nothing to any pass, and reading it whole again would cost a segment each).
  // Nor those whose records the first pass kept (ScanRead).
  std::vector<size_t> SegmentsToReadThisPass() const {
    std::vector<size_t> positions;
    for (size_t p = 0; p < to_read_.size(); ++p) {
      const bool kept = p < kept_.size() && kept_[p] != nullptr;
      if (pass_ == 0 || (scanned_[p].records > 0 && !kept)) positions.push_back(p);
    }
    return positions;
  }

  // A later pass: applies the records the first kept of segments it read whole, as if read
  // again.
  absl::Status ApplyKeptRecords() {
    for (size_t p = 0; p < kept_.size(); ++p) {
      if (kept_[p] == nullptr) continue;
      const uint64_t segment = to_read_[p];
      NVKV_RETURN_IF_ERROR(kept_[p]->Visit(g_, [&](absl::Span<const SummaryRecord> records) {
        ApplySummaryRecords(segment, records);
      }));
    }
    return absl::OkStatus();
  }

  // Reads the segments of to_read_ this pass needs, several in flight at once (as many as the
  // queue's chunks allow), and scans each in segment order as its reads complete.
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
                            SegmentBuffer::Make(device_, g_, shape_.blocks_per_page));
      buffers.push_back(std::move(buffer));
    }
    const std::vector<size_t> positions = SegmentsToReadThisPass();
    // The keys the tables hold already (the summaries'), and room for this pass's share of
    // those of the segments read whole, once a start given up has projected them.
    const uint64_t held_before = TableEntries();
    const uint64_t filters_before = segments_.filter_bytes();
    if (whole_records_ > 0 && !positions.empty()) {
      ReserveTables(held_before + whole_records_ / passes_);
      NVKV_RETURN_IF_ERROR(CheckBudget(TableBytes()));
    }
    std::deque<SegmentBuffer*> in_flight;
    size_t next = 0;
    size_t scanned = 0;  // to_read_[positions[scanned]] is the next to scan
    while (next < positions.size() || !in_flight.empty()) {
      while (next < positions.size() && in_flight.size() < parallel) {
        SegmentBuffer* buffer = buffers[next % parallel].get();
        NVKV_RETURN_IF_ERROR(buffer->Issue(to_read_[positions[next++]]));
        in_flight.push_back(buffer);
      }
      SegmentBuffer& read = *in_flight.front();
      while (!read.done()) {
        NVKV_RETURN_IF_ERROR(device_.Reap(1).status());
      }
      NVKV_RETURN_IF_ERROR(ScanRead(read, positions[scanned++]));
      in_flight.pop_front();
      pass_pages_done_ += g_.pages_per_segment;
      absl::Status budget = GoOnNarrowed(CheckBudget(TableBytes()));
      if (budget.ok() && pass_ == 0 && whole_records_ == 0 &&
          scanned == SampleOf(positions.size())) {
        budget = ProjectWholeRecords(held_before, filters_before, scanned, positions.size());
      }
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
    // With passes to come, the first keeps the records they apply (not its own keys'), as a
    // summary in memory, so that they need not read the segment again: within a quarter of the
    // tables' budget beside it (Open's peak is to stay within the index and a tenth of it), and
    // as long as the segment's would be a summary (MaxSummaryPages: not of small records).
    std::unique_ptr<SummaryBuilder> keep;
    if (pass_ == 0 && passes_ > 1 && kept_bytes_ < budget_ / kKeptShare) {
      keep = std::make_unique<SummaryBuilder>();
      keep->Reset(shape_.ordered, g_);
    }
    // Pages the device cannot read are damaged ones (segment_read.h), unless none of the
    // segment can be read: then the device, not a block, is failing, and a store opened without
    // it would look empty there.
    uint32_t failed = read.Settle();
    // The first pass read more of it: a read that fails now is tried again (a transient error),
    // and only a segment that still reads otherwise makes this pass differ.
    for (uint32_t again = 0; pass_ > 0 && failed > scanned_[position].unreadable_pages &&
                             again < kRereadsInLaterPasses;
         ++again) {
      NVKV_ASSIGN_OR_RETURN(failed, read.Read(segment));
    }
    if (failed == g_.pages_per_segment) {
      return absl::Status(read.status().code(),
                          absl::StrCat("segment ", segment, ": no page of it can be read: ",
                                       read.status().message()));
    }
    const auto page_at = [&read](uint32_t i) { return read.page(i); };
    const SegmentScanResult scan = ScanSegment(
        g_, shape_.seed, segment, page_at, /*assemble=*/false,
        [&](const ScannedRecord& record) {
          FoundRecord found;
          found.hash = HashKey(record.key);
          found.key = record.key;
          found.page_number = record.page_number;
          found.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
          found.sequence = record.header.sequence;
          found.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
          NoteRecord(segment, found);
          if (keep != nullptr && record.page_number >= tail_from_[segment] &&
              PassOf(found.hash) != 0) {
            keep->Add(found.hash, shape_.ordered ? record.key : std::string_view(),
                      record.header,
                      static_cast<uint32_t>(record.page_number - g_.FirstPageOf(segment)));
          }
        });
    ApplyNoted();  // while the keys are valid: the read's buffers are reused after this
    if (pass_ == 0 && failed > 0) NoteUnread(read, scan);
    if (pass_ == 0) {
      kept_.resize(to_read_.size());
      // (A segment with none to keep is kept too: a later pass has nothing to read there.)
      if (keep != nullptr && !keep->abandoned()) {
        const uint64_t bytes = keep->ShrinkToFit();
        if (kept_bytes_ + bytes <= budget_ / kKeptShare) {
          kept_bytes_ += bytes;
          kept_[position] = std::move(keep);
        }
      }
    }
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
    if (read_before_[segment] && (scan.in_use ? scan.generation != segments_.generation(segment)
                                              : tail_from_[segment] != g_.FirstPageOf(segment))) {
      // A head's segment of the base checkpoint holds another log than the one it knew, though
      // its last page said nothing changed (damage where the log began). A head the checkpoint
      // names at its segment's first page had written nothing there: that segment may hold no
      // log still (a batch took it and was refused, and nothing was written after).
      base_failed_ = absl::StrCat("segment ", segment, " holds another log than the checkpoint's");
    }
    report_.unreadable_pages += failed;
    in_use_[segment] = scan.in_use;
    generation_[segment] = scan.generation;
    // A whole log that ends with its summary (written before a crash, but not yet in the map):
    // the map may say so from now on, once the summary verifies and accounts for every record.
    if (scan.in_use && scan.summary.pages > 0 && scan.hole_pages == 0 &&
        scan.batches_discarded == 0) {
      const absl::StatusOr<SummaryFound> found = ReadSummary(
          g_, shape_.seed, segment, scan.summary.first, scan.summary.pages,
          // An ordered Open names only summaries it could use itself (with keys).
          shape_.ordered, [&](uint32_t i) { return read.page(scan.summary.first + i); },
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
    if (read_before_[segment]) {
      // Of a head's segment the base checkpoint knows, the batches written after it only: it
      // holds those before (which a hole found now would drop: their records read as damaged).
      scan.dropped.ForEach([&](uint64_t first, uint64_t last) {
        if (first >= base_sequence_) report_.dropped_batch_records.Add(first, last);
      });
    } else {
      report_.dropped_batch_records.AddAll(scan.dropped);
    }
    report_.damaged_pages += scan.hole_pages;
    return absl::OkStatus();
  }

  // `read` has pages the device failed to read (twice). Unless the segment holds no log and its
  // first page says so, or they are pages of the summary the map names (read whole because the
  // summary could not be: its log's records are on the pages before), they may hold records:
  // they are noted (RecoveryReport::unread_pages), and recovery goes on without their records,
  // as it does past a damaged page. Without open_degraded UnreadRefusal then fails the Open, once
  // the pass has found whether the recovery it is part of stands (over a base, a head's segment
  // that cannot be read sets the base aside, and the log read instead may not need these pages).
  void NoteUnread(const SegmentBuffer& read, const SegmentScanResult& scan) {
    const uint64_t segment = read.segment();
    if (!scan.in_use && read.page(0) != nullptr) return;
    uint32_t records_end = g_.pages_per_segment;
    for (const Summarized& s : summarized_) {
      if (s.segment == segment) records_end = s.place.first;
    }
    for (uint32_t i = 0; i < records_end; ++i) {
      if (read.page(i) != nullptr) continue;
      if (report_.unread_pages.empty()) unread_why_ = std::string(read.status().message());
      report_.unread_pages.push_back(g_.FirstPageOf(segment) + i);
    }
  }

  // Why an Open that is not degraded fails when pages of the log could not be read (NoteUnread):
  // a read that fails now may work at the next Open, and an Open without their records would
  // hand out their sequences again and leave their batches half there for compaction to find.
  absl::Status UnreadRefusal() const {
    const std::vector<uint64_t>& unread = report_.unread_pages;
    constexpr size_t kNamed = 8;
    std::string pages;
    for (size_t i = 0; i < std::min(unread.size(), kNamed); ++i) {
      absl::StrAppend(&pages, i == 0 ? "" : ", ", "page ", unread[i]);
    }
    if (unread.size() > kNamed) absl::StrAppend(&pages, " and ", unread.size() - kNamed, " more");
    return absl::UnavailableError(absl::StrCat(
        pages, " of the log cannot be read (", unread_why_,
        "); the store does not open without their records: open it again once the device reads "
        "them, or with Options::open_degraded (nvkv-cli --degraded) to go on without them"));
  }

  // One record recovery applies, found in `segment`. It waits in a short queue (noted_, a
  // Lookahead) while the table slot it will probe is fetched, and is applied when the queue is
  // full or by ApplyNoted, which the caller runs while its keys are still valid and before
  // records of another segment are noted.
  // A record of another pass's keys is noted in the first pass only (for the segment table).
  void NoteRecord(uint64_t segment, const FoundRecord& record) {
    // A head's segment the base checkpoint knows up to its end of the log then: of those
    // records, the key filter only (it left the filter out, UseBase).
    if (record.page_number < tail_from_[segment]) {
      if (pass_ == 0 && !record.is_delete) segments_.NoteRestoredPut(segment, record.hash);
      return;
    }
    const bool in_pass = PassOf(record.hash) == pass_;
    if (!in_pass && pass_ > 0) return;
    const uint32_t shard = shards_.For(record.hash).id;
    if (in_pass) newest_[shard].Prefetch(record.hash);
    noted_.Push(Noted{segment, shard, in_pass, record},
                [this](const Noted& noted) { ApplyRecord(noted); });
  }

  // The pass that takes `hash`'s key: hash.hi bits 23..31, which the tables keep in each entry
  // (NewestRecords::kHiBitsKept; NarrowTo tells a pass's keys by them) but place nothing by,
  // as neither does the shard (bits 32..63), so that each pass's keys spread over every shard
  // and sub-table. (The keys of one pass agree in some of the bits a table compares, but only
  // they share its table: the chance that two keys are taken for one stays as it was.)
  uint32_t PassOf(const KeyHash& hash) const {
    static_assert((NewestRecords::kHiBitsKept & (uint64_t{0x1ff} << kPassBitsFirst)) ==
                  uint64_t{0x1ff} << kPassBitsFirst);
    return static_cast<uint32_t>((((hash.hi >> kPassBitsFirst) & 0x1ff) * passes_) >> 9);
  }
  static constexpr int kPassBitsFirst = 23;

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
      if (shape_.ordered) newest.page = newest.record_bytes = 0;  // the index keeps them
      switch (newest_[shard].KeepIfNewer(hash, newest)) {
        case NewestRecords::Kept::kNewest:
          if (shape_.ordered) ApplyToOrderedIndex(shards_[shard], hash, record);
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
    if (base_ && record.sequence < base_sequence_) {
      // Over a base, a copy compaction made of an older record (ApplyTailHashed): a delete
      // hides nothing the base does not know of; a put counts only where the base holds no entry
      // of its key (which is the copy's original, or newer).
      if (record.is_delete || !found_.empty()) return;
    }
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
      // What the base checkpoint knows of a segment stands, but for a head's log gone on since.
      if (read_before_[s] && tail_from_[s] == 0) continue;
      SegmentTable::RecoveredSegment found;
      found.extends_restored = read_before_[s];
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
    Sink sink{shape_, segments_};
    for (const auto& shard : shards_) {
      NewestRecords& table = newest_[shard->id];
      report_.table_bytes_peak = std::max(report_.table_bytes_peak, table.allocated_bytes());
      absl::MutexLock lock(&shard->mu);
      if (shape_.ordered) {
        table.Clear();
      } else if (base_) {
        NVKV_RETURN_IF_ERROR(ApplyTailHashed(sink, *shard, table));
      } else {
        NVKV_RETURN_IF_ERROR(DrainHashed(sink, *shard, table, passes_ - pass_));
      }
    }
    return absl::OkStatus();
  }

  // After the last pass: ordered mode's live bytes, and the segment table ready for use.
  void FinishIndexes() {
    Sink sink{shape_, segments_};
    if (shape_.ordered) {
      // Over a base checkpoint the index's entries are the live records, each with its size:
      // counted again, whatever the log after it replaced.
      if (base_) segments_.ClearLiveBytes();
      for (const auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        AddLiveOfIndex(sink, *shard);
      }
    }
    segments_.SetNextGeneration(
        std::max({max_generation_ + 1, floors_.generation_floor, base_generation_}));
    if (base_) KeepCheckpoint();
    segments_.FinishRecovery();
  }

  // Over a base checkpoint, hash mode: the newest record of each key of `shard`'s table that the
  // log after the checkpoint holds (kv/FORMAT.md "Recovery from a base"):
  //   - a record written after the checkpoint (its sequence at least the base's next one): a put
  //     gets an entry of its own before any the key had (a blind overwrite, kv/README.md: the
  //     older ones are stale), a delete erases every entry of the key;
  //   - a copy compaction made of an older record: a delete hides nothing the base does not
  //     know of (when it was its key's newest the base holds no entry of the key); a put gets
  //     an entry only when none of the base's entries of the key holds it or a newer record
  //     (compaction copied it from a segment freed since, or kept it where damage hid which of
  //     the key's records was current).
  // The base's entries of a key are found by reading the pages of its tag's entries; entries on
  // pages of the log after the base are other keys' (two keys with one tag never share a page).
  // A page that cannot be read, or an index that cannot grow, sets the base aside
  // (base_failed_: recovery reads the log instead).
  absl::Status ApplyTailHashed(Sink& sink, Shard& shard, NewestRecords& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    uint64_t puts = 0;
    table.ForEach([&](uint64_t, const NewestRecords::Record& newest) {
      puts += newest.is_delete ? 0 : 1;
    });
    const absl::Status room = shard.index->MakeRoomFor(puts);
    if (!room.ok()) {
      base_failed_ = absl::StrCat("the index cannot grow over the checkpoint: ", room.message());
      return absl::OkStatus();
    }
    std::vector<uint64_t> base_candidates;
    table.ForEach([&](uint64_t hash_lo, const NewestRecords::Record& newest)
                      ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (!base_failed_.empty()) return;
      const bool copy = newest.sequence < base_sequence_;
      if (copy && newest.is_delete) return;
      shard.index->Find(hash_lo, {}, &found_);
      if (!newest.is_delete && !copy) {
        InsertTailPut(sink, shard, hash_lo, newest);
        return;
      }
      base_candidates.clear();
      for (const uint64_t candidate : found_) {
        if (IsBasePage(Location::FromIndexValue(candidate).page)) {
          base_candidates.push_back(candidate);
        }
      }
      uint64_t erased = 0;
      std::optional<uint64_t> base_newest;  // the newest sequence of the key the base holds
      for (const uint64_t candidate : base_candidates) {
        const uint64_t page = Location::FromIndexValue(candidate).page;
        const absl::StatusOr<KeysRecord> found = NewestOfKeyOn(page, hash_lo);
        if (!found.ok()) {
          base_failed_ = std::string(found.status().message());
          return;
        }
        if (!found->holds) continue;  // another key's with the same tag
        if (newest.is_delete) {
          shard.index->Erase(hash_lo, {}, candidate);
          segments_.AddLive(g_.SegmentOf(page), -static_cast<int64_t>(found->record_bytes));
          ++erased;
        } else {
          base_newest = std::max(base_newest.value_or(0), found->sequence);
        }
      }
      if (newest.is_delete) {
        if (erased > 1) shard.ErasedStale(erased - 1);
        return;
      }
      if (base_newest && *base_newest >= newest.sequence) return;  // the base holds it, or newer
      InsertTailPut(sink, shard, hash_lo, newest);  // (found_ is still the tag's entries)
    });
    table.Clear();
    return absl::OkStatus();
  }

  // ApplyTailHashed: `newest`, a put, gets an entry before the key's others (found_ holds the
  // tag's entries), which it probably makes stale.
  void InsertTailPut(Sink& sink, Shard& shard, uint64_t hash_lo,
                     const NewestRecords::Record& newest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    if (!found_.empty()) {
      const uint64_t first = Location::FromIndexValue(found_.front()).page;
      segments_.AddLikelyStale(g_.SegmentOf(first), newest.record_bytes);
      ++shard.stale_entries;
    }
    const absl::Status inserted =
        sink.InsertLive(shard, hash_lo, {}, newest.page, newest.record_bytes);
    if (!inserted.ok()) {
      base_failed_ = absl::StrCat("the index cannot grow over the checkpoint: ",
                                  inserted.message());
    }
  }

  // Whether `page` holds what the base checkpoint knows of the log (not the log after it).
  bool IsBasePage(uint64_t page) const {
    const uint64_t segment = g_.SegmentOf(page);
    return read_before_[segment] && (tail_from_[segment] == 0 || page < tail_from_[segment]);
  }

  // Of the records on a page, the newest of one key (by its hash's low half).
  struct KeysRecord {
    bool holds = false;
    uint64_t sequence = 0;
    uint32_t record_bytes = 0;
  };
  // Reads `page` and finds the newest record on it whose key's hash has the low half `hash_lo`,
  // leaving out the records of batches recovery dropped (as page reads do, page_lookup.cc).
  // kDataLoss when the page cannot be read or verified as a data page.
  absl::StatusOr<KeysRecord> NewestOfKeyOn(uint64_t page, uint64_t hash_lo) {
    absl::StatusOr<KeysRecord> result = KeysRecord{};
    ++report_.pages;
    const absl::Status read = ReadPages({page}, [&](size_t, const uint8_t* data,
                                                    const absl::Status& status) {
      absl::StatusOr<PageHeader> header =
          status.ok() ? VerifyPage(data, g_, shape_.seed, page) : status;
      if (!header.ok() || header->type != static_cast<uint8_t>(PageType::kData)) {
        result = absl::DataLossError(absl::StrCat(
            "page ", page, ", which an entry of the checkpoint names, cannot be read as data"));
        return absl::OkStatus();
      }
      RecordIterator records(data, *header);
      RecordView record;
      KeysRecord newest;
      while (records.Next(&record)) {
        const uint64_t sequence = record.header.sequence;
        if (base_dropped_.DropsRecord(record.header)) continue;
        if (HashKey(record.key).lo != hash_lo) continue;
        if (!newest.holds || sequence > newest.sequence) {
          newest.holds = true;
          newest.sequence = sequence;
          newest.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
        }
      }
      result = newest;
      if (!records.status().ok()) result = records.status();
      return absl::OkStatus();
    });
    if (!read.ok()) return read;
    return result;
  }

  uint64_t TableBytes() const {
    uint64_t bytes = 0;
    for (const NewestRecords& table : newest_) bytes += table.allocated_bytes();
    return bytes;
  }

  uint64_t TableEntries() const {
    uint64_t entries = 0;
    for (const NewestRecords& table : newest_) entries += table.size();
    return entries;
  }

  // Room in the tables for `keys` of this pass's share, all shards together: sized once rather
  // than grown by a quarter at a time (each growth copies a sub-table; for 10M keys that was
  // half of recovery's time).
  void ReserveTables(uint64_t keys) {
    for (NewestRecords& table : newest_) table.Reserve(keys / newest_.size());
  }

  // Segments read whole name their records only as they are read: pass 0 projects how many
  // there are from the first few it read (SampleOf: a kSampleShare-th of them, when there are
  // many), before the tables have grown far, and how large their key filters grow. `read` of the
  // pass's `to_read` segments read whole are scanned; before the first, the tables held
  // `held_before` keys and the key filters took `filters_before` bytes. PlanFor then decides
  // (the next start plans for the projected records and filters); when the passes planned do,
  // the tables take room for the projected keys now, instead of growing step by step.
  absl::Status ProjectWholeRecords(uint64_t held_before, uint64_t filters_before, size_t read,
                                   size_t to_read) {
    // (The keys found so far, taken for every segment to read, run high where later segments
    // overwrite keys of earlier ones: a pass more than needed, rather than tables that outgrow
    // the budget late and make recovery start again then.)
    const uint64_t found = TableEntries() - held_before;
    const uint64_t projected = found * to_read / read;
    const uint64_t share = held_before + projected;  // this pass's
    const uint64_t filters = segments_.filter_bytes();
    const uint64_t whole_filters =
        (filters > filters_before ? filters - filters_before : 0) * to_read / read;
    const absl::Status planned =
        PlanFor(index_entries_before_ + share * passes_, filters_before + whole_filters,
                absl::StrCat(read, " of ", to_read, " segments read whole"));
    const uint64_t all_passes = share * passes_;
    if (passes_needed_ != 0) {
      whole_records_ = projected * passes_;
      whole_filter_bytes_ = whole_filters;
    }
    const absl::Status status = GoOnNarrowed(planned);
    if (status.ok()) ReserveTables(all_passes / passes_);
    return status;
  }

  // `status` of a step of the first pass; OK instead where it asked for more passes
  // (passes_needed_) and the pass goes on as the first of them (NarrowTo).
  absl::Status GoOnNarrowed(absl::Status status) {
    if (status.ok() || !absl::IsResourceExhausted(status) || !WithinCeiling() || pass_ != 0 ||
        passes_needed_ <= passes_ || !refused_.ok() || (shape_.ordered && base_)) {
      return status;
    }
    NarrowTo(passes_needed_);
    return absl::OkStatus();
  }

  // The first pass goes on as the first of `passes`, rather than recovery start again and read
  // once more what it has read: the tables (and in ordered mode the index) drop the keys of the
  // passes after it, which find them again as they read their shares of the log (the segments
  // the first pass read before this keep nothing for them: what it kept of them for the passes
  // planned before holds other shares, and is dropped). Not in ordered mode over
  // a base, whose index holds the base's entries (which the first pass changed), nor once a
  // table had no memory for a record (refused_); nor under a budget the options set, which
  // start again as before (their peaks and passes are what recovery_memory_test and
  // segment_summary_test measure).
  void NarrowTo(uint32_t passes) {
    passes_ = passes;
    report_.passes = passes;
    passes_needed_ = 0;
    for (std::unique_ptr<SummaryBuilder>& kept : kept_) kept.reset();
    kept_bytes_ = 0;
    const auto later = [this](const KeyHash& hash) { return PassOf(hash) != 0; };
    for (NewestRecords& table : newest_) table.EraseIf(later);
    if (!shape_.ordered) return;
    for (const auto& shard : shards_) {
      absl::MutexLock lock(&shard->mu);
      std::vector<std::pair<std::string, uint64_t>> entries;
      std::string after;
      for (bool first = true;; first = false) {
        (void)shard->index->Scan(after, /*exclusive=*/!first, 4096, &entries);
        if (entries.empty()) break;
        for (const auto& [key, value] : entries) {
          const KeyHash hash = HashKey(key);
          if (later(hash)) shard->index->Erase(hash.lo, key, value);
        }
        after = entries.back().first;
      }
    }
  }

  // Plans this start for about `keys` keys of the whole log (every pass's, the index's before
  // it read the log among them) and key filters of `filter_bytes`, as projected from
  // `projected_from`: the budget is lowered to what the ceiling leaves beside the index and the
  // filters (FitWithinCeiling), and when the passes planned would not keep the tables within
  // it, kResourceExhausted with passes_needed_ set (recovery starts again in that many).
  absl::Status PlanFor(uint64_t keys, uint64_t filter_bytes, const std::string& projected_from) {
    NVKV_RETURN_IF_ERROR(FitWithinCeiling(keys, filter_bytes));
    const uint64_t budget = Budget();
    const uint64_t table_keys = keys - std::min(keys, index_entries_before_);
    const uint32_t needed = budget == 0 ? passes_ : PassesFor(table_keys, budget);
    if (needed <= passes_) return absl::OkStatus();
    passes_needed_ = needed;
    return absl::ResourceExhaustedError(absl::StrCat(
        "recovery's tables would outgrow ", budget, " bytes in ", passes_,
        " pass(es), projected from ", projected_from));
  }

  // Without a budget the options set, the tables (and the records the first pass keeps beside
  // them, a kKeptShare-th more) get what the ceiling (the memory the process may still take,
  // as Open started) leaves once the index and the key filters of about `keys` keys
  // (`filter_bytes` of filters) and a margin are set aside: the budget is lowered to that. When
  // that leaves no room for the tables of even kMaxRecoveryPasses passes, the store cannot be
  // opened within that memory: kResourceExhausted (recovery does not start again), rather than
  // a process killed by its memory cgroup part way.
  absl::Status FitWithinCeiling(uint64_t keys, uint64_t filter_bytes) {
    const TableRoom room = TableRoomWithin(keys, filter_bytes);
    if (room.bytes == UINT64_MAX) return absl::OkStatus();
    if (room.bytes < room.least) {
      passes_needed_ = 0;
      constexpr double kMiB = 1 << 20;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "recovery needs about %.0f MiB for the index and key filters of about %d keys, and "
          "%.1f MiB for its tables at the least, but the process may take only %.0f MiB more "
          "(its memory cgroup, RLIMIT_AS, RLIMIT_DATA and the machine's available memory): "
          "give it more memory to open this store",
          static_cast<double>(room.beside) / kMiB, keys, static_cast<double>(room.least) / kMiB,
          static_cast<double>(options_.table_budget_ceiling_bytes) / kMiB));
    }
    budget_ = std::min(budget_, room.bytes);
    return absl::OkStatus();
  }

  // What the ceiling leaves the tables (with the records kept) beside the index and the key
  // filters of about `keys` keys (`filter_bytes` of filters) and a margin: `bytes` (UINT64_MAX
  // without a ceiling, or with a budget the options set), and the least the tables of
  // kMaxRecoveryPasses passes take.
  struct TableRoom {
    uint64_t bytes = UINT64_MAX, least = 0, beside = 0;
  };
  TableRoom TableRoomWithin(uint64_t keys, uint64_t filter_bytes) const {
    const uint64_t ceiling = options_.table_budget_ceiling_bytes;
    TableRoom room;
    if (!WithinCeiling()) return room;
    uint64_t index_bytes = 0;
    for (const auto& shard : shards_) {
      absl::MutexLock lock(&shard->mu);
      index_bytes += shard->index->BytesFor(keys / shards_.size());
    }
    room.beside = index_bytes + filter_bytes;
    const uint64_t reserved = room.beside + ceiling / kCeilingMargin;
    room.bytes = ceiling > reserved ? (ceiling - reserved) / (kKeptShare + 1) * kKeptShare : 0;
    room.least =
        newest_.size() * NewestRecords::BytesFor(keys / kMaxRecoveryPasses / newest_.size());
    return room;
  }
  // The tables, the index and the key filters stay within table_budget_ceiling_bytes: the
  // options set no budget of the tables' own.
  bool WithinCeiling() const {
    return options_.table_budget_bytes == 0 && options_.table_budget_ceiling_bytes != 0;
  }
  // Of the ceiling, a kCeilingMargin-th is left for what else Open allocates.
  static constexpr uint64_t kCeilingMargin = 16;

  // None (0) under kSampleSegments * kSampleShare segments: a few segments say little of a small
  // log, and growing tables or starting again cost little there.
  static size_t SampleOf(size_t segments) {
    return segments < kSampleSegments * kSampleShare ? 0 : segments / kSampleShare;
  }
  static constexpr size_t kSampleSegments = 4;
  static constexpr size_t kSampleShare = 32;

  // The tables' budget in force: budget_, or half of what the tables held when one could not
  // grow, when that is less (0: no bound).
  uint64_t Budget() const {
    if (tables_failed_at_ == 0) return budget_;
    const uint64_t half = std::max<uint64_t>(tables_failed_at_ / 2, 1);
    return budget_ == 0 ? half : std::min(budget_, half);
  }

  // kResourceExhausted, with passes_needed_ set, when the tables hold more than the budget
  // (`bytes` of them now): as many passes as would keep them within it, projected from the
  // share of this pass's pages read so far (a quarter more, so that one restart does), or all of
  // `bytes` when nothing is read yet (the room reserved for the summaries' keys). A table that
  // could not grow (the system had no memory for it: the limits MemoryHeadroomBytes reads are
  // not all there is, and the index and key filters grow beside the tables) makes the budget
  // half of what the tables held then.
  absl::Status CheckBudget(uint64_t bytes) {
    uint64_t budget = Budget();
    // In the first pass the key filters grow beside the tables, and the index (hash mode:
    // built after it): the tables have what the ceiling leaves beside those of the keys found
    // so far.
    const uint64_t filters = pass_ == 0 ? segments_.filter_bytes() : 0;
    if (pass_ == 0 && budget != 0) {
      const TableRoom now = TableRoomWithin(index_entries_before_ + TableEntries() * passes_,
                                            filters);
      budget = std::min(budget, std::max(now.bytes, now.least));
    }
    if (budget == 0 || bytes <= budget || passes_ >= kMaxRecoveryPasses) return absl::OkStatus();
    // What the whole pass reads, per what it has read.
    const double whole = pass_pages_done_ == 0
                             ? 1.0
                             : static_cast<double>(std::max(pass_pages_, pass_pages_done_)) /
                                   static_cast<double>(pass_pages_done_);
    if (pass_ == 0) {
      // And the next start's, projected alike (too early a projection to refuse the Open on:
      // PlanFor does, once the whole pass is known).
      const TableRoom room = TableRoomWithin(
          index_entries_before_ + static_cast<uint64_t>(TableEntries() * passes_ * whole),
          static_cast<uint64_t>(filters * whole));
      budget = std::min(budget, std::max(room.bytes, room.least));
    }
    const double projected =
        static_cast<double>(bytes) * passes_ * (pass_pages_done_ == 0 ? 1.0 : 1.25 * whole);
    const double needed = std::ceil(projected / static_cast<double>(budget));
    passes_needed_ = static_cast<uint32_t>(
        std::clamp<double>(needed, passes_ + 1, kMaxRecoveryPasses));
    return absl::ResourceExhaustedError(absl::StrCat(
        "recovery's tables outgrew ", budget, " bytes in ", passes_, " pass(es)"));
  }

  const RecoveryOptions options_;
  const StoreShape& shape_;
  const bool use_checkpoint_;  // false: the map's checkpoint was set aside once already
  // Over the log, each for a share of the keys (PassOf), planned before the first (PlanPasses).
  uint32_t passes_;
  // Records of every key in the segments read whole, as a start given up projected them (0:
  // not known; ProjectWholeRecords).
  uint64_t whole_records_ = 0;
  uint64_t whole_filter_bytes_ = 0;  // their key filters', as projected with them
  uint64_t index_entries_before_ = 0;  // what the index held before the log was read (a base's)
  // The most bytes the tables of newest records may take: the option's, or a share of the index
  // a base gave (PlanPasses; 0 until then: no bound).
  uint64_t budget_ = 0;
  uint32_t pass_ = 0;          // the one under way
  uint32_t passes_needed_ = 0;  // when the tables outgrew the budget (CheckBudget)
  uint64_t tables_failed_at_ = 0;  // the tables' bytes when one could not grow (0: none failed)
  uint64_t pass_pages_ = 0;  // pages the pass reads (summaries with their last pages, segments)
  uint64_t pass_pages_done_ = 0;  // of them, read and applied
  const Geometry& g_;  // shape_.geometry
  storage::Device& device_;
  SegmentTable& segments_;
  const ShardSet& shards_;
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
  // Per place in to_read_: the records the first pass applied from that segment, for the later
  // passes (ScanRead); null where it kept none. kept_bytes_ is what they take.
  std::vector<std::unique_ptr<SummaryBuilder>> kept_;
  uint64_t kept_bytes_ = 0;
  static constexpr uint64_t kKeptShare = 4;  // of budget_
  // Reads of a later pass that fail where the first pass's worked are tried this many times more.
  static constexpr uint32_t kRereadsInLaterPasses = 3;
  std::vector<uint64_t> to_read_;   // the segments recovery reads, in order
  std::vector<bool> map_in_use_;    // per segment: the map says it holds a log
  std::vector<CheckpointPlace> checkpoint_;  // the checkpoint's segments the map names, in order
  std::string checkpoint_unusable_;  // why the map's marks rule the checkpoint out
  SegmentMapPageHeader floors_{};   // the highest of the map pages' floors
  std::vector<uint64_t> min_seq_, max_seq_;  // record sequences per segment
  uint64_t max_sequence_ = 0;
  uint64_t max_generation_ = 0;
  absl::Status refused_;  // a record recovery cannot keep
  // The checkpoint the map names is a base: the log may have gone on after it (UseBase).
  bool base_ = false;
  std::vector<bool> map_free_;  // per segment: the map says it is free
  // Over a base: per segment, whether the checkpoint knows its log (read_before_), and for a
  // head's segment the first page written after it (tail_from_; 0 for any other segment).
  std::vector<bool> read_before_;
  std::vector<uint64_t> tail_from_;
  uint64_t base_sequence_ = 0, base_generation_ = 0;  // the base's next ones
  SequenceRanges base_dropped_;  // the records of dropped batches the base names
  // Why the base was set aside once recovery had begun to apply the log after it (a page an
  // entry of it names cannot be read): RecoverStore starts again without it.
  std::string base_failed_;
  std::string unread_why_;  // the failed read of the first page NoteUnread noted
};

}  // namespace

uint64_t UnreadSequenceGap(const Geometry& geometry) {
  const uint64_t records_per_page = geometry.payload_bytes() / RecordBytes(0, 0);
  return 2 * geometry.total_pages() * records_per_page;
}

absl::StatusOr<RecoveryReport> RecoverStore(const RecoveryOptions& options,
                                            const StoreShape& shape, storage::Device& device,
                                            SegmentTable& segments,
                                            const ShardSet& shards) {
  PassPlan plan;
  bool use_checkpoint = true;
  std::string checkpoint_unused;
  const absl::Time start = absl::Now();
  uint64_t pages_before = 0;  // read by the starts given up
  uint32_t restarts = 0;
  while (true) {
    Recovery recovery(options, use_checkpoint, plan, shape, device, segments, shards);
    absl::StatusOr<RecoveryReport> report = recovery.Run();
    if (report.ok()) {
      if (!checkpoint_unused.empty()) report->checkpoint_unused = checkpoint_unused;
      report->restarts = restarts;
      report->pages += pages_before;
      report->seconds = absl::ToDoubleSeconds(absl::Now() - start);
    }
    if (!recovery.base_failed().empty()) {
      // The base checkpoint cannot be used after all: start again from nothing, reading the log.
      use_checkpoint = false;
      checkpoint_unused = recovery.base_failed();
    } else if (recovery.plan_needed().passes != 0) {
      // The tables outgrew the budget, or would have: start again from nothing in more passes.
      plan = recovery.plan_needed();
    } else {
      return report;
    }
    pages_before += recovery.pages_read();
    ++restarts;
    shards.ResetIndexes(shape.ordered);
    segments.ForgetRecovered();
  }
}

}  // namespace nvkv::kv

