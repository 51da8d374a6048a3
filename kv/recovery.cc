// Recovery (recovery.h): reads every segment at Open and rebuilds the indexes.
#include "kv/recovery.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/newest_records.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// What recovery keeps per key while it scans: the newest record seen so far, in a NewestRecords
// per shard (24 bytes per entry, no key bytes). Hash mode builds its index from those tables
// once every segment is read. Ordered mode builds its index as it reads (the index holds the
// keys, and its entries the records' places and sizes); its tables keep only each key's newest
// sequence, to tell a record that replaces the key's entry from an older one.
NewestRecords::Record NewestOf(const ScannedRecord& record) {
  NewestRecords::Record newest;
  newest.sequence = record.header.sequence;
  newest.page = record.page_number;
  newest.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
  newest.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
  return newest;
}

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

// Builds `shard`'s index from the newest record of each of its keys, then frees the table.
absl::Status DrainHashed(Sink& sink, Shard& shard, NewestRecords& table)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  uint64_t live = 0;
  table.ForEach([&](uint64_t, const NewestRecords::Record& newest) {
    live += newest.is_delete ? 0 : 1;
  });
  shard.index->Reserve(live);
  absl::Status status;
  table.ForEach([&](uint64_t hash_lo, const NewestRecords::Record& newest)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!status.ok() || newest.is_delete) return;
    status = sink.InsertLive(shard, hash_lo, {}, newest.page, newest.record_bytes);
  });
  table.Clear();
  return status;
}

// Ordered mode: `shard`'s index was built during the scan; its entries' records are live.
void AddLiveOfIndex(Sink& sink, Shard& shard, NewestRecords& table)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  shard.index->ForEachValue([&](uint64_t value) {
    const Location location = Location::FromIndexValue(value);
    sink.segments.AddLive(sink.geometry.SegmentOf(location.page), location.record_bytes);
  });
  table.Clear();
}

// One recovery: what it gathers while it reads the segments, and how it builds the indexes.
class Recovery {
 public:
  Recovery(const RecoveryOptions& options, const Geometry& geometry, storage::Device& device,
           SegmentTable& segments, const std::vector<std::unique_ptr<Shard>>& shards)
      : options_(options),
        g_(geometry),
        device_(device),
        segments_(segments),
        shards_(shards),
        newest_(shards.size()),
        in_use_(geometry.segment_count, false),
        min_seq_(geometry.segment_count, UINT64_MAX),
        max_seq_(geometry.segment_count, 0) {}

  absl::StatusOr<RecoveryReport> Run() {
    const absl::Time start = absl::Now();
    NVKV_RETURN_IF_ERROR(ReadMap());
    NVKV_RETURN_IF_ERROR(ReadAllSegments());
    if (!refused_.ok()) return refused_;
    NVKV_RETURN_IF_ERROR(BuildIndexes());
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
    if (map != nullptr) {
      storage::Buffer chunk = device_.buffers().GetChunk();
      if (!chunk.valid()) return absl::InternalError("no buffer to read the segment map into");
      const uint32_t per_page = MapEntriesPerPage(g_.page_bytes);
      const uint64_t pages_per_chunk = chunk.bytes / g_.page_bytes;
      absl::Status status;
      for (uint64_t first = 0; first < g_.map_pages() && status.ok(); first += pages_per_chunk) {
        const uint64_t count = std::min(pages_per_chunk, g_.map_pages() - first);
        const absl::Status read = storage::ReadBlocks(
            device_, (g_.map_first_page() + first) * options_.blocks_per_page,
            static_cast<uint32_t>(count * options_.blocks_per_page), chunk);
        if (!read.ok()) {
          // Read what it names, all of it; a failing device shows itself in the segments.
          report_.map_pages_damaged += count;
          continue;
        }
        for (uint64_t i = 0; i < count; ++i) {
          const uint64_t index = first + i;
          const SegmentMapEntry* entries = nullptr;
          absl::StatusOr<SegmentMapPageHeader> floors =
              DecodeMapPage(chunk.data + i * g_.page_bytes, g_, options_.store_seed,
                            g_.map_first_page() + index, &entries);
          if (!floors.ok()) {
            ++report_.map_pages_damaged;
            continue;
          }
          floors_.sequence_floor = std::max(floors_.sequence_floor, floors->sequence_floor);
          floors_.generation_floor = std::max(floors_.generation_floor, floors->generation_floor);
          const uint64_t segments =
              std::min<uint64_t>(per_page, g_.segment_count - index * per_page);
          map->LoadPage(index, entries);
          for (uint64_t e = 0; e < segments; ++e) {
            free[index * per_page + e] = entries[e].state == static_cast<uint8_t>(MapState::kFree);
          }
        }
      }
      device_.buffers().PutChunk(chunk);
    }
    for (uint64_t s = 0; s < g_.segment_count; ++s) {
      if (free[s] && !options_.read_all) {
        ++report_.segments_skipped;
      } else {
        to_read_.push_back(s);
      }
    }
    return absl::OkStatus();
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
      NVKV_RETURN_IF_ERROR(ScanRead(read));
      in_flight.pop_front();
    }
    return absl::OkStatus();
  }

  // Scans one segment read whole into `read`.
  absl::Status ScanRead(SegmentBuffer& read) {
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
    report_.unreadable_pages += failed;
    const SegmentScanResult scan = ScanSegment(g_, options_.store_seed, segment,
                       [&read](uint32_t i) { return read.page(i); }, /*assemble=*/false,
                       [&](const ScannedRecord& record) { NoteRecord(segment, record); });
    in_use_[segment] = scan.in_use;
    max_generation_ = std::max(max_generation_, scan.max_generation);
    // Sequences of pages outside every log count too: a new record must never lose to an old one
    // that a later recovery might read.
    max_sequence_ = std::max(max_sequence_, scan.max_sequence);
    report_.pages += g_.pages_per_segment;
    report_.batches_discarded += scan.batches_discarded;
    report_.dropped_batch_records.AddAll(scan.dropped);
    report_.damaged_pages += scan.hole_pages;
    return absl::OkStatus();
  }

  // One record recovery applies, found in `segment`.
  void NoteRecord(uint64_t segment, const ScannedRecord& record) {
    const KeyHash hash = HashKey(record.key);
    const uint32_t shard = ShardIndexFor(hash, shards_.size());
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
              "page ", record.page_number, ": record sequence ", record.header.sequence,
              " is not below 2^56, which no nvkv store reaches"));
        }
        break;
    }
    min_seq_[segment] = std::min(min_seq_[segment], record.header.sequence);
    max_seq_[segment] = std::max(max_seq_[segment], record.header.sequence);
    max_sequence_ = std::max(max_sequence_, record.header.sequence);
    segments_.NoteRecord(segment, hash, record.header.sequence,
                         RecordBytes(record.key.size(), record.header.value_bytes),
                         record.header.type == static_cast<uint8_t>(RecordType::kDelete));
    ++report_.records;
  }

  // Ordered mode: `record` is its key's newest so far: the key's entry says so (a delete removes
  // it).
  void ApplyToOrderedIndex(Shard& shard, const KeyHash& hash, const ScannedRecord& record) {
    absl::MutexLock lock(&shard.mu);
    shard.index->Find(hash.lo, record.key, &found_);
    if (record.header.type == static_cast<uint8_t>(RecordType::kDelete)) {
      if (!found_.empty()) shard.index->Erase(hash.lo, record.key, found_.front());
      return;
    }
    const uint64_t value =
        Location::Indexed(record.page_number, RecordBytes(record.key.size(), record.header.value_bytes),
                          /*index_keeps_size=*/true)
            .index_value();
    if (found_.empty()) {
      const absl::Status inserted = shard.index->Insert(hash.lo, record.key, value);
      if (!inserted.ok() && refused_.ok()) refused_ = inserted;
    } else {
      shard.index->Replace(hash.lo, record.key, found_.front(), value);
    }
  }

  // The segment table, then each shard's index: hash mode builds it from the shard's table,
  // which is freed before the next shard's index is built; ordered mode has built it already.
  absl::Status BuildIndexes() {
    for (uint64_t s = 0; s < g_.segment_count; ++s) {
      segments_.RecoverSegment(s, in_use_[s], min_seq_[s], max_seq_[s]);
    }
    Sink sink{g_, options_.ordered, segments_};
    for (const auto& shard : shards_) {
      NewestRecords& table = newest_[shard->id];
      report_.table_bytes_peak = std::max(report_.table_bytes_peak, table.allocated_bytes());
      absl::MutexLock lock(&shard->mu);
      if (options_.ordered) {
        AddLiveOfIndex(sink, *shard, table);
      } else {
        NVKV_RETURN_IF_ERROR(DrainHashed(sink, *shard, table));
      }
    }
    segments_.SetNextGeneration(std::max(max_generation_ + 1, floors_.generation_floor));
    segments_.FinishRecovery();
    return absl::OkStatus();
  }

  const RecoveryOptions options_;
  const Geometry& g_;
  storage::Device& device_;
  SegmentTable& segments_;
  const std::vector<std::unique_ptr<Shard>>& shards_;
  RecoveryReport report_;
  // The newest record of each key, one table per shard.
  std::vector<NewestRecords> newest_;
  std::vector<uint64_t> found_;  // ApplyToOrderedIndex's, kept to save an allocation per record
  std::vector<bool> in_use_;        // per segment: it holds a log
  std::vector<uint64_t> to_read_;   // the segments recovery reads, in order
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
  return Recovery(options, geometry, device, segments, shards).Run();
}

}  // namespace nvkv::kv
