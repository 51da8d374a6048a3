// Recovery: rebuilds the index and the segment table from the log at Open.
//
// Damaged pages inside a segment's log are holes (segment_scan.h): their records are lost and
// counted in recovery_damaged_pages, and recovery goes on with the rest of the segment. A
// segment counts as free only when it holds no log at all.
//
// Every segment is read whole with large reads kept in flight together (device bandwidth, not
// latency, bounds it), then scanned by ScanSegment. For each key the record with the highest
// sequence wins; a winning delete means the key is absent. Keys are told apart by their 128-bit
// hash while recovering, so the key bytes need not be kept (ordered mode keeps them anyway, for
// its index).
#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/engine_impl.h"
#include "kv/segment_scan.h"
#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

// What recovery keeps per key while it scans: the newest record seen so far. The table holds
// every key of the store at once, beside the index being built, so an entry is kept small: the
// key is known by the 128-bit hash the table is keyed by, and the record by 16 bytes (a slot of
// 32 bytes in hash mode, where a std::string key would double it). Ordered mode keeps the key
// bytes too (LatestWithKey): its index holds them anyway.
struct Latest {
  uint64_t sequence = 0;
  uint32_t page : 31 = 0;  // OpenStore refuses stores of 2^31 pages or more
  uint32_t is_delete : 1 = 0;
  uint32_t record_bytes = 0;

  std::string_view key() const { return {}; }
  void set_key(std::string_view) {}
};
static_assert(sizeof(Latest) == 16);

struct LatestWithKey : Latest {
  std::string key_bytes;

  std::string_view key() const { return key_bytes; }
  void set_key(std::string_view key) { key_bytes.assign(key); }
};

// One table per shard: the index of a shard is built from its table alone, which is then freed
// before the next shard's index is built, and a table that grows copies a shard's entries, not
// all of them.
template <typename Entry>
using LatestTables = std::vector<absl::flat_hash_map<KeyHash, Entry>>;

// Keeps `record` for its key when it is newer than what the table holds.
template <typename Entry>
void KeepIfNewer(absl::flat_hash_map<KeyHash, Entry>& table, const KeyHash& hash,
                 const ScannedRecord& record) {
  Entry& entry = table[hash];
  // Equal sequences are the same record copied by compaction: either copy will do.
  if (entry.sequence != 0 && entry.sequence >= record.header.sequence) return;
  NVKV_DCHECK(record.page_number < (uint64_t{1} << 31));
  entry.sequence = record.header.sequence;
  entry.page = static_cast<uint32_t>(record.page_number);
  entry.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
  entry.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
  entry.set_key(record.key);
}

// Hands every live key of `table` to `insert(hash, key, page, record_bytes)`, after reserving
// `reserve(live)` room, then frees the table. Stops at the first error.
template <typename Entry, typename Reserve, typename Insert>
absl::Status DrainTable(absl::flat_hash_map<KeyHash, Entry>& table, Reserve reserve,
                        Insert insert) {
  uint64_t live = 0;
  for (const auto& [hash, entry] : table) live += entry.is_delete ? 0 : 1;
  reserve(live);
  for (const auto& [hash, entry] : table) {
    if (entry.is_delete) continue;
    absl::Status inserted = insert(hash, entry.key(), uint64_t{entry.page}, entry.record_bytes);
    if (!inserted.ok()) return inserted;
  }
  absl::flat_hash_map<KeyHash, Entry>().swap(table);
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

  // Hash mode fills `latest`, ordered mode `latest_keyed`.
  LatestTables<Latest> latest(ordered_ ? 0 : shards_.size());
  LatestTables<LatestWithKey> latest_keyed(ordered_ ? shards_.size() : 0);
  uint64_t max_sequence = 0;
  uint32_t max_generation = 0;
  std::vector<SegmentScanResult> scans(g.segment_count);
  std::vector<uint64_t> min_seq(g.segment_count, UINT64_MAX), max_seq(g.segment_count, 0);

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
    if (!read.status.ok()) return read.status;
    const uint64_t segment = read.segment;
    auto page_at = [&](uint32_t i) -> const uint8_t* {
      return read.chunks[i / pages_per_chunk].data + size_t{i % pages_per_chunk} * g.page_bytes;
    };
    scans[segment] = ScanSegment(g, store_seed_, segment, page_at, /*assemble=*/false,
                                 /*whole_batches_only=*/true,
                                 [&](const ScannedRecord& record) {
      const KeyHash hash = HashKey(record.key);
      const uint32_t shard = ShardFor(hash).id;
      if (ordered_) {
        KeepIfNewer(latest_keyed[shard], hash, record);
      } else {
        KeepIfNewer(latest[shard], hash, record);
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
    recovery_damaged_pages_ += scans[segment].hole_pages;
    for (const storage::Buffer& chunk : read.chunks) pool.PutChunk(chunk);
    reads.pop_front();
  }

  for (uint64_t s = 0; s < g.segment_count; ++s) {
    segments_->RecoverSegment(s, scans[s].in_use, min_seq[s], max_seq[s]);
  }
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    auto reserve = [&](uint64_t live) { shard->index->Reserve(live); };
    auto insert = [&](const KeyHash& hash, std::string_view key, uint64_t page,
                      uint32_t record_bytes) -> absl::Status {
      absl::Status inserted =
          shard->index->Insert(hash.lo, key, EncodeLocation(page, record_bytes));
      if (inserted.ok()) segments_->AddLive(g.SegmentOf(page), record_bytes);
      return inserted;
    };
    absl::Status drained = ordered_ ? DrainTable(latest_keyed[shard->id], reserve, insert)
                                    : DrainTable(latest[shard->id], reserve, insert);
    if (!drained.ok()) return drained;
  }
  segments_->SetNextGeneration(uint64_t{max_generation} + 1);
  segments_->FinishRecovery();
  next_sequence_.store(max_sequence + 1);
  recovery_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace nvkv::kv
