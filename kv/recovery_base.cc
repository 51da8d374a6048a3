// The base recovery starts from (recovery_base.h).
#include "kv/recovery_base.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kv/page_runs.h"
#include "kv/segment_summary.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

RecoveryBase::RecoveryBase(const StoreShape& shape, storage::Device& device,
                           SegmentTable& segments, const ShardSet& shards, const MapView& map)
    : shape_(shape),
      device_(device),
      segments_(segments),
      shards_(shards),
      map_(map),
      knows_(shape.geometry.segment_count, false),
      tail_from_(shape.geometry.segment_count, 0) {}

absl::Status RecoveryBase::LoadAfterCleanClose(RecoveryReport& report) {
  if (!map_.checkpoint_unusable.empty()) return absl::DataLossError(map_.checkpoint_unusable);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(
      shape_, CheckpointLoadOptions{}, device_, map_.checkpoint, &map_.in_use, segments_, shards_);
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
  report.heads_resumed = loaded->heads.size();
  report.start = RecoveryStart::kCleanClose;
  report.checkpoint = map_.checkpoint;
  report.pages += loaded->pages;
  report.checkpoint_pages = loaded->pages;
  report.next_sequence = std::max(loaded->next_sequence, map_.floors.sequence);
  report.dropped_batch_records = std::move(loaded->dropped);
  segments_.SetNextGeneration(std::max(loaded->next_generation, map_.floors.generation));
  Keep();
  segments_.FinishRecovery();
  return absl::OkStatus();
}

void RecoveryBase::ForgetAll() {
  shards_.ResetIndexes(shape_.ordered);
  segments_.ForgetRecovered();
}

void RecoveryBase::Keep() {
  for (size_t i = 0; i < map_.checkpoint.size(); ++i) {
    segments_.KeepFound(map_.checkpoint[i].segment, map_.checkpoint[i].pages);
  }
}

absl::Status RecoveryBase::LoadBase(std::vector<uint64_t>& to_read,
                                    std::vector<Summarized>& summarized, RecoveryReport& report) {
  if (!map_.checkpoint_unusable.empty()) return absl::DataLossError(map_.checkpoint_unusable);
  const Geometry& g = shape_.geometry;
  CheckpointLoadOptions options;
  // Room for the entries the log after it may add (the summaries' records, spread over the
  // shards), made as the index is first sized: growing it later would hold it twice.
  options.room_after = [&](const std::vector<bool>& restored, const std::vector<uint32_t>& log_end,
                           uint64_t put_bytes) {
    std::vector<bool> is_summarized(g.segment_count, false);
    std::vector<Summarized> after;  // the summaries of segments it does not name
    for (const Summarized& s : summarized) {
      is_summarized[s.segment] = true;
      if (!restored[s.segment]) after.push_back(s);
    }
    uint64_t records = RecordsSummarized(shape_, after);
    for (uint64_t s = 0; s < g.segment_count; ++s) {
      // Segments the log after it may have gone on in (read whole): those it does not name,
      // and the heads' after their places.
      if (!map_.in_use[s] || (!restored[s] && is_summarized[s])) continue;
      const uint64_t pages = restored[s] ? g.log_pages() - log_end[s] : g.log_pages();
      records += pages * g.payload_bytes() / put_bytes;
    }
    return records;
  };
  // The heads' segments are read, and their key filters made as they are (one at a time at
  // full size): no head goes on in its segment after a crash.
  options.resume_heads = false;
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(
      shape_, options, device_, map_.checkpoint, /*map_in_use=*/nullptr, segments_, shards_);
  absl::Status status = loaded.status();
  if (status.ok()) status = FindTail(*loaded, to_read, summarized, report);
  if (!status.ok()) {
    ForgetAll();
    tail_from_.assign(g.segment_count, 0);
    knows_.assign(g.segment_count, false);
    report.base_segments_freed = 0;
    return status;
  }
  over_base_ = true;
  report.start = RecoveryStart::kBaseCheckpoint;
  report.checkpoint = map_.checkpoint;
  report.pages += loaded->pages;
  report.checkpoint_pages = loaded->pages;
  report.segments_after_base = summarized.size() + to_read.size();
  next_sequence_ = loaded->next_sequence;
  next_generation_ = loaded->next_generation;
  dropped_ = loaded->dropped;
  report.dropped_batch_records = std::move(loaded->dropped);
  return absl::OkStatus();
}

absl::Status RecoveryBase::FindTail(const LoadedCheckpoint& loaded, std::vector<uint64_t>& to_read,
                                    std::vector<Summarized>& summarized,
                                    RecoveryReport& report) {
  const Geometry& g = shape_.geometry;
  std::vector<bool> restored(g.segment_count, false);
  std::vector<uint64_t> logs;  // the checkpoint's segments holding a log
  for (uint64_t s = 0; s < g.segment_count; ++s) {
    if (segments_.state(s) == SegmentState::kFree) continue;
    restored[s] = true;
    logs.push_back(s);
  }
  for (const CheckpointPlace& place : map_.checkpoint) {
    if (restored[place.segment]) {
      return absl::DataLossError(absl::StrCat("checkpoint: it says segment ", place.segment,
                                              ", where it lies itself, holds a log"));
    }
  }
  // Compaction freed some of those since: the map says so, or, as it says so lazily, the
  // segment's last page does. A segment that still holds the log the checkpoint knows has no
  // free marker newer than that log there: compaction writes one there first when it frees the
  // segment, and a head takes it again only after.
  std::vector<bool> freed(g.segment_count, false);
  std::vector<uint64_t> last_pages, asked;
  for (const uint64_t s : logs) {
    if (map_.free[s]) {
      freed[s] = true;
    } else {
      asked.push_back(s);
      last_pages.push_back(g.FirstPageOf(s) + g.pages_per_segment - 1);
    }
  }
  report.pages += last_pages.size();
  NVKV_RETURN_IF_ERROR(ReadEachPage(
      device_, shape_, last_pages,
      [&](size_t i, const uint8_t* page, const absl::Status& read) -> absl::Status {
        const uint64_t s = asked[i];
        absl::StatusOr<PageHeader> last =
            read.ok() ? VerifyPage(page, g, shape_.seed, last_pages[i]) : read;
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
        return freed[g.SegmentOf(Location::FromIndexValue(value).page)];
      });
      // Some of those may have been stale: the count is an estimate (compaction settles).
      shard->stale_entries = std::min(shard->stale_entries, shard->index->stats().entries);
    }
  }
  report.base_segments_freed = freed_count;
  std::erase_if(logs, [&](uint64_t s) { return freed[s]; });
  for (const ResumedHead& head : loaded.heads) {
    const uint64_t s = head.place.segment;
    if (!freed[s]) tail_from_[s] = g.FirstPageOf(s) + head.place.next_page;
  }
  // The log after the checkpoint: the heads' segments from where the checkpoint ends them, read
  // whole, and every segment it does not know.
  std::erase_if(summarized, [&](const Summarized& s) { return restored[s.segment]; });
  std::erase_if(to_read, [&](uint64_t s) { return restored[s]; });
  for (const ResumedHead& head : loaded.heads) {
    if (restored[head.place.segment]) to_read.push_back(head.place.segment);
  }
  for (const uint64_t s : logs) knows_[s] = true;
  return absl::OkStatus();
}

bool RecoveryBase::IsBasePage(uint64_t page) const {
  const uint64_t segment = shape_.geometry.SegmentOf(page);
  return knows_[segment] && (tail_from_[segment] == 0 || page < tail_from_[segment]);
}

absl::StatusOr<RecoveryBase::KeysRecord> RecoveryBase::NewestOfKeyOn(uint64_t page,
                                                                     uint64_t hash_lo) {
  absl::StatusOr<KeysRecord> result = KeysRecord{};
  const absl::Status read = ReadEachPage(
      device_, shape_, {page},
      [&](size_t, const uint8_t* data, const absl::Status& status) {
        absl::StatusOr<PageHeader> header =
            status.ok() ? VerifyPage(data, shape_.geometry, shape_.seed, page) : status;
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
          if (dropped_.DropsRecord(record.header)) continue;
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

}  // namespace nvkv::kv
