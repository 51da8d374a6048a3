// Recovery: rebuilds the index and the segment table from the log at Open.
//
// Damaged pages inside a segment's log are holes (segment_scan.h): their records are lost and
// counted in recovery_damaged_pages, and recovery goes on with the rest of the segment. A
// segment counts as free only when it holds no log at all.
//
// Every segment is read whole with large reads kept in flight together (device bandwidth, not
// latency, bounds it), then scanned by ScanSegment. For each key the record with the highest
// sequence wins; a winning delete means the key is absent. Hash mode tells keys apart by their
// hash while recovering (87 of its bits, kv/newest_records.h), so the key bytes need not be kept;
// ordered mode keeps them, for its index.
#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/engine_impl.h"
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

// Adds one live key to `shard`'s index and its bytes to its segment's live bytes.
absl::Status InsertLive(Engine::Impl& engine, Shard& shard, uint64_t hash_lo, std::string_view key,
                        uint64_t page, uint32_t record_bytes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  NVKV_RETURN_IF_ERROR(
      shard.index->Insert(hash_lo, key, engine.IndexedAt(page, record_bytes).index_value()));
  engine.segments_->AddLive(engine.geometry_.SegmentOf(page), record_bytes);
  return absl::OkStatus();
}

// Builds `shard`'s index from the newest record of each of its keys, then frees the table.
absl::Status DrainHashed(Engine::Impl& engine, Shard& shard, NewestRecords& table)
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
    status = InsertLive(engine, shard, hash_lo, {}, newest.page, newest.record_bytes);
  });
  table.Clear();
  return status;
}

absl::Status DrainOrdered(Engine::Impl& engine, Shard& shard,
                          absl::flat_hash_map<KeyHash, NewestWithKey>& table)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  uint64_t live = 0;
  for (const auto& [hash, newest] : table) live += newest.is_delete ? 0 : 1;
  shard.index->Reserve(live);
  for (const auto& [hash, newest] : table) {
    if (newest.is_delete) continue;
    NVKV_RETURN_IF_ERROR(
        InsertLive(engine, shard, hash.lo, newest.key, newest.page, newest.record_bytes));
  }
  absl::flat_hash_map<KeyHash, NewestWithKey>().swap(table);
  return absl::OkStatus();
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

absl::Status Engine::Impl::Recover() {
  const absl::Time start = absl::Now();
  const Geometry& g = geometry_;
  storage::Device& device = *device_;
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
  std::vector<NewestRecords> newest(ordered_ ? 0 : shards_.size());
  std::vector<absl::flat_hash_map<KeyHash, NewestWithKey>> newest_keyed(
      ordered_ ? shards_.size() : 0);
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
      request.lba = LbaOf(g.FirstPageOf(segment) + first);
      request.lba_count = count * blocks_per_page_;
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
        failed += RereadPageByPage(device, request.lba, request.lba_count / blocks_per_page_,
                                   blocks_per_page_, g.page_bytes, read.chunks[c],
                                   c * pages_per_chunk, &unreadable);
      }
      if (failed == g.pages_per_segment) {
        return absl::Status(read.status.code(),
                            absl::StrCat("segment ", segment, ": no page of it can be read: ",
                                         read.status.message()));
      }
      recovery_unreadable_pages_ += failed;
    }
    auto page_at = [&](uint32_t i) {
      return PageInChunks(read.chunks, pages_per_chunk, g.page_bytes, unreadable, i);
    };
    scans[segment] = ScanSegment(g, store_seed_, segment, page_at, /*assemble=*/false,
                                 [&](const ScannedRecord& record) {
      const KeyHash hash = HashKey(record.key);
      const uint32_t shard = ShardFor(hash).id;
      if (ordered_) {
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
      segments_->NoteRecord(segment, hash, record.header.sequence,
                            RecordBytes(record.key.size(), record.header.value_bytes),
                            record.header.type == static_cast<uint8_t>(RecordType::kDelete));
      ++recovery_records_;
    });
    max_generation = std::max(max_generation, scans[segment].max_generation);
    // Sequences of pages outside every log count too: a new record must never lose to an old one
    // that a later recovery might read.
    max_sequence = std::max(max_sequence, scans[segment].max_sequence);
    recovery_pages_ += g.pages_per_segment;
    recovery_batches_discarded_ += scans[segment].batches_discarded;
    dropped_batch_records_.AddAll(scans[segment].dropped);
    recovery_damaged_pages_ += scans[segment].hole_pages;
    for (const storage::Buffer& chunk : read.chunks) pool.PutChunk(chunk);
    reads.pop_front();
  }

  if (!refused.ok()) return refused;
  for (uint64_t s = 0; s < g.segment_count; ++s) {
    segments_->RecoverSegment(s, scans[s].in_use, min_seq[s], max_seq[s]);
  }
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    absl::Status drained = ordered_ ? DrainOrdered(*this, *shard, newest_keyed[shard->id])
                                    : DrainHashed(*this, *shard, newest[shard->id]);
    if (!drained.ok()) return drained;
  }
  segments_->SetNextGeneration(max_generation + 1);
  segments_->FinishRecovery();
  next_sequence_.store(max_sequence + 1);
  recovery_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace nvkv::kv
