// Recovery (recovery.h): reads every segment at Open and rebuilds the indexes.
#include "kv/recovery.h"

#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/newest_records.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// What recovery keeps per key while it scans: the newest record seen so far. Hash mode keeps
// it in a NewestRecords per shard (24 bytes per entry, no key bytes). Ordered mode keeps the
// key bytes too, which its index holds anyway.
struct NewestWithKey {
  uint64_t sequence = 0;
  uint64_t page = 0;
  uint32_t record_bytes = 0;
  bool is_delete = false;
  std::string key;
};

NewestRecords::Record NewestOf(const ScannedRecord& record) {
  NewestRecords::Record newest;
  newest.sequence = record.header.sequence;
  newest.page = record.page_number;
  newest.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
  newest.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
  return newest;
}

void KeepIfNewer(absl::flat_hash_map<KeyHash, NewestWithKey>& table, const KeyHash& hash,
                 const ScannedRecord& record) {
  NewestWithKey& entry = table[hash];
  // Equal sequences are the same record copied by compaction: either copy will do.
  if (entry.sequence != 0 && entry.sequence >= record.header.sequence) return;
  const NewestRecords::Record newest = NewestOf(record);
  entry.sequence = newest.sequence;
  entry.page = newest.page;
  entry.record_bytes = newest.record_bytes;
  entry.is_delete = newest.is_delete;
  entry.key.assign(record.key);
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

absl::Status DrainOrdered(Sink& sink, Shard& shard,
                          absl::flat_hash_map<KeyHash, NewestWithKey>& table)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  uint64_t live = 0;
  for (const auto& [hash, newest] : table) live += newest.is_delete ? 0 : 1;
  shard.index->Reserve(live);
  for (const auto& [hash, newest] : table) {
    if (newest.is_delete) continue;
    NVKV_RETURN_IF_ERROR(
        sink.InsertLive(shard, hash.lo, newest.key, newest.page, newest.record_bytes));
  }
  absl::flat_hash_map<KeyHash, NewestWithKey>().swap(table);
  return absl::OkStatus();
}

// What an ordered-mode table holds: its slots and the key bytes beyond each string's own.
uint64_t KeyedTableBytes(const absl::flat_hash_map<KeyHash, NewestWithKey>& table) {
  uint64_t bytes = table.bucket_count() * (sizeof(std::pair<KeyHash, NewestWithKey>) + 1);
  for (const auto& [hash, newest] : table) {
    const char* inline_bytes = reinterpret_cast<const char*>(&newest.key);
    const bool on_heap = newest.key.data() < inline_bytes ||
                         newest.key.data() >= inline_bytes + sizeof(newest.key);
    if (on_heap) bytes += newest.key.capacity() + 1;
  }
  return bytes;
}

// One segment being read: its chunk buffers and how many reads are still out.
struct SegmentRead {
  uint64_t segment = 0;
  std::vector<storage::Buffer> chunks;
  std::vector<storage::IoRequest> requests;
  uint32_t pending = 0;
  absl::Status status;
};

void OnChunkRead(storage::IoRequest* request) {
  auto* read = static_cast<SegmentRead*>(request->context);
  if (!request->status.ok() && read->status.ok()) read->status = request->status;
  --read->pending;
}

}  // namespace

absl::StatusOr<RecoveryReport> RecoverStore(const RecoveryOptions& options,
                                            const Geometry& geometry, storage::Device& device,
                                            SegmentTable& segments,
                                            const std::vector<std::unique_ptr<Shard>>& shards) {
  const absl::Time start = absl::Now();
  const Geometry& g = geometry;
  const bool ordered = options.ordered;
  const uint32_t blocks_per_page = options.blocks_per_page;
  auto lba_of = [blocks_per_page](uint64_t page) { return page * blocks_per_page; };
  Sink sink{geometry, ordered, segments};
  RecoveryReport report;
  storage::BufferPool& pool = device.buffers();
  const uint32_t pages_per_chunk = pool.chunk_bytes() / g.page_bytes;
  const uint32_t chunks_per_segment = (g.pages_per_segment + pages_per_chunk - 1) / pages_per_chunk;
  const uint32_t parallel = std::max<uint32_t>(1, pool.chunk_count() / chunks_per_segment);
  if (pool.chunk_count() < chunks_per_segment) {
    return absl::InvalidArgumentError(absl::StrCat("segments of ", g.segment_bytes(),
                                                   " bytes are too large to recover"));
  }

  // One table per shard: the index of a shard is built from its table alone, which is then freed
  // before the next shard's index is built. Hash mode fills `newest`, ordered mode
  // `newest_keyed`.
  std::vector<NewestRecords> newest(ordered ? 0 : shards.size());
  std::vector<absl::flat_hash_map<KeyHash, NewestWithKey>> newest_keyed(ordered ? shards.size()
                                                                                : 0);
  uint64_t max_sequence = 0;
  uint64_t max_generation = 0;
  std::vector<SegmentScanResult> scans(g.segment_count);
  std::vector<uint64_t> min_seq(g.segment_count, UINT64_MAX), max_seq(g.segment_count, 0);

  absl::Status refused;  // a record recovery cannot keep
  std::deque<SegmentRead> reads;
  uint64_t next_segment = 0;
  auto issue = [&](uint64_t segment) -> absl::Status {
    SegmentRead& read = reads.emplace_back();
    read.segment = segment;
    read.requests.resize(chunks_per_segment);
    for (uint32_t c = 0; c < chunks_per_segment; ++c) {
      storage::Buffer chunk = pool.GetChunk();
      NVKV_CHECK(chunk.valid());
      read.chunks.push_back(chunk);
      const uint32_t first = c * pages_per_chunk;
      const uint32_t count = std::min(pages_per_chunk, g.pages_per_segment - first);
      storage::IoRequest& request = read.requests[c];
      request.op = storage::IoOp::kRead;
      request.lba = lba_of(g.FirstPageOf(segment) + first);
      request.lba_count = count * blocks_per_page;
      request.buffer = chunk;
      request.on_done = OnChunkRead;
      request.context = &read;
      ++read.pending;
      absl::Status status = device.Enqueue(&request);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  };

  while (next_segment < g.segment_count || !reads.empty()) {
    while (next_segment < g.segment_count && reads.size() < parallel) {
      absl::Status status = issue(next_segment++);
      if (!status.ok()) return status;
    }
    SegmentRead& read = reads.front();
    while (read.pending > 0) {
      absl::StatusOr<uint32_t> reaped = device.Reap(1);
      if (!reaped.ok()) return reaped.status();
    }
    const uint64_t segment = read.segment;
    // Pages the device cannot read are damaged ones (segment_read.h), unless none of the
    // segment can be read: then the device, not a block, is failing, and a store opened without
    // it would look empty there.
    std::vector<bool> unreadable;
    if (!read.status.ok()) {
      unreadable.assign(g.pages_per_segment, false);
      uint32_t failed = 0;
      for (uint32_t c = 0; c < chunks_per_segment; ++c) {
        const storage::IoRequest& request = read.requests[c];
        if (request.status.ok()) continue;
        failed += RereadPageByPage(device, request.lba, request.lba_count / blocks_per_page,
                                   blocks_per_page, g.page_bytes, read.chunks[c],
                                   c * pages_per_chunk, &unreadable);
      }
      if (failed == g.pages_per_segment) {
        return absl::Status(read.status.code(),
                            absl::StrCat("segment ", segment, ": no page of it can be read: ",
                                         read.status.message()));
      }
      report.unreadable_pages += failed;
    }
    auto page_at = [&](uint32_t i) {
      return PageInChunks(read.chunks, pages_per_chunk, g.page_bytes, unreadable, i);
    };
    scans[segment] = ScanSegment(g, options.store_seed, segment, page_at, /*assemble=*/false,
                                 [&](const ScannedRecord& record) {
      const KeyHash hash = HashKey(record.key);
      const uint32_t shard = ShardIndexFor(hash, shards.size());
      if (ordered) {
        KeepIfNewer(newest_keyed[shard], hash, record);
      } else {
        if (!newest[shard].KeepIfNewer(hash, NewestOf(record)) && refused.ok()) {
          refused = absl::DataLossError(absl::StrCat(
              "page ", record.page_number, ": record sequence ", record.header.sequence,
              " is not below 2^56, which no nvkv store reaches"));
        }
      }
      min_seq[segment] = std::min(min_seq[segment], record.header.sequence);
      max_seq[segment] = std::max(max_seq[segment], record.header.sequence);
      max_sequence = std::max(max_sequence, record.header.sequence);
      segments.NoteRecord(segment, hash, record.header.sequence,
                            RecordBytes(record.key.size(), record.header.value_bytes),
                            record.header.type == static_cast<uint8_t>(RecordType::kDelete));
      ++report.records;
    });
    max_generation = std::max(max_generation, scans[segment].max_generation);
    // Sequences of pages outside every log count too: a new record must never lose to an old one
    // that a later recovery might read.
    max_sequence = std::max(max_sequence, scans[segment].max_sequence);
    report.pages += g.pages_per_segment;
    report.batches_discarded += scans[segment].batches_discarded;
    report.dropped_batch_records.AddAll(scans[segment].dropped);
    report.damaged_pages += scans[segment].hole_pages;
    for (const storage::Buffer& chunk : read.chunks) pool.PutChunk(chunk);
    reads.pop_front();
  }

  if (!refused.ok()) return refused;
  for (uint64_t s = 0; s < g.segment_count; ++s) {
    segments.RecoverSegment(s, scans[s].in_use, min_seq[s], max_seq[s]);
  }
  for (const auto& shard : shards) {
    report.table_bytes_peak =
        std::max(report.table_bytes_peak, ordered ? KeyedTableBytes(newest_keyed[shard->id])
                                                  : newest[shard->id].allocated_bytes());
    absl::MutexLock lock(&shard->mu);
    absl::Status drained = ordered ? DrainOrdered(sink, *shard, newest_keyed[shard->id])
                                   : DrainHashed(sink, *shard, newest[shard->id]);
    if (!drained.ok()) return drained;
  }
  segments.SetNextGeneration(max_generation + 1);
  segments.FinishRecovery();
  report.next_sequence = max_sequence + 1;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return report;
}

}  // namespace nvkv::kv
