// A read's way through the index and the pages (page_lookup.h): candidates, in-memory pages,
// page reads, large values' continuation pages, restarts when the index changed.
//
// A lookup takes the key's shard lock only to ask the index for candidate pages and to look at
// pages still in memory. Each device candidate costs one page read on the calling thread's own
// queue; a key is found on the first candidate that holds it, because pages never hold two
// different keys with the same index tag (head_append.cc seals a page rather than let that
// happen), so a tag's entry on a page can only belong to the one key with that tag there.
#include "kv/page_lookup.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/read_queue.h"
#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

constexpr int kMaxRestarts = 16;

// The newest record of `key` on a verified data page, if any, leaving out the records of
// batches that recovery dropped: the page may hold one after the key's current record.
std::optional<RecordView> FindNewest(const uint8_t* page, const PageHeader& header,
                                     std::string_view key, const SequenceRanges& dropped,
                                     absl::Status* status) {
  RecordIterator it(page, header);
  RecordView record;
  std::optional<RecordView> newest;
  while (it.Next(&record)) {
    if (record.key != key) continue;
    if ((record.header.flags & kRecordInBatch) != 0 && dropped.Contains(record.header.sequence)) {
      continue;
    }
    if (!newest || record.header.sequence > newest->header.sequence) newest = record;
  }
  *status = it.status();
  return newest;
}

void ReleaseOp(ReadOp* op) {
  if (op->chunk.valid()) {
    op->queue->device->buffers().PutChunk(op->chunk);
    op->chunk = storage::Buffer{};
  }
  op->callback = nullptr;
  op->candidates.clear();
  op->looked_up.clear();
  op->unreadable.clear();
  op->unreadable_status = absl::OkStatus();
  op->value.clear();
  op->state = ReadState::kFree;
  op->queue->free_ops.push_back(op);
}

// A key check has its answer (in `resolved`, filled by the caller) or failed with `status`.
// Its op is not the queue's: ResolveCurrent's stack frame owns it.
void FinishKeyCheck(ReadOp* op, absl::Status status) {
  op->key_check_status = std::move(status);
  op->state = ReadState::kFinished;
}

}  // namespace

// The end of a read: a value, kNotFound or an error. A key check takes kNotFound as "no record
// of the key" (`resolved` stays as it was).
void FinishOp(ReadOp* op, absl::StatusOr<std::string> result) {
  if (op->purpose == ReadPurpose::kKeyCheck) {
    FinishKeyCheck(op, result.ok() || absl::IsNotFound(result.status()) ? absl::OkStatus()
                                                                        : result.status());
    return;
  }
  GetCallback callback = std::move(op->callback);
  ReadQueue* queue = op->queue;
  const bool to_ready = op->purpose == ReadPurpose::kAsync &&
                        (op->state == ReadState::kStarting || queue->internal_reaps > 0);
  ReleaseOp(op);
  if (to_ready) {
    queue->ready.emplace_back(std::move(callback), std::move(result));
    return;
  }
  ++queue->finished;
  callback(std::move(result));
}

PageLookup::PageLookup(const Options& options, const Geometry& geometry,
                       const std::vector<std::unique_ptr<Shard>>& shards,
                       const SequenceRanges& dropped_batch_records)
    : options_(options), geometry_(geometry), shards_(shards), dropped_(dropped_batch_records) {}

// Looks at the index and at in-memory pages; issues the first device read or finishes.
void PageLookup::Start(ReadOp* op) const {
  Shard& shard = ShardFor(op->hash);
  std::vector<uint64_t> device_candidates;
  {
    absl::MutexLock lock(&shard.mu);
    if (op->purpose != ReadPurpose::kKeyCheck) {
      if (const RecordCache::Entry* cached = shard.cache->Find(op->key)) {
        FinishOp(op, cached->value);
        return;
      }
    }
    for (;;) {
      shard.index->Find(op->hash.lo, op->key, &op->candidates);
      bool pending_large = false;
      device_candidates.clear();
      for (uint64_t location : op->candidates) {
        const uint64_t page_number = Location::FromIndexValue(location).page;
        auto it = shard.unwritten.find(page_number);
        if (it == shard.unwritten.end()) {
          device_candidates.push_back(page_number);
          continue;
        }
        if (it->second.large_run_in_flight()) {
          pending_large = true;  // wait for it
          break;
        }
        const PageSlot& slot = *it->second.slot();
        const uint8_t* page = slot.buffer.data;
        PageHeader header;
        std::memcpy(&header, page, sizeof(header));
        // The open page's header is not finished yet: take counts from the builder.
        header.record_count = slot.builder.record_count();
        header.used_bytes = slot.builder.used_bytes();
        absl::Status status;
        std::optional<RecordView> record =
            FindNewest(page, header, op->key, dropped_, &status);
        if (record && record->header.type == static_cast<uint8_t>(RecordType::kPut)) {
          if (op->purpose == ReadPurpose::kKeyCheck) {
            op->resolved->found = true;
            op->resolved->location = Location::FromIndexValue(location);
            op->resolved->record_bytes = RecordBytes(op->key.size(), record->header.value_bytes);
            op->resolved->candidates = op->candidates;
            FinishKeyCheck(op, absl::OkStatus());
          } else {
            FinishOp(op, std::string(record->value));
          }
          return;
        }
      }
      if (!pending_large) break;
      shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(10));
    }
    if (op->purpose == ReadPurpose::kKeyCheck) op->resolved->candidates = op->candidates;
    op->looked_up = op->candidates;
    std::sort(op->looked_up.begin(), op->looked_up.end());
  }
  op->unreadable.clear();
  op->unreadable_status = absl::OkStatus();
  op->candidates = std::move(device_candidates);
  op->next_candidate = 0;
  IssueCandidate(op);
}

void PageLookup::IssueCandidate(ReadOp* op) const {
  if (op->next_candidate >= op->candidates.size()) {
    FinishMiss(op);
    return;
  }
  const uint64_t page_number = op->candidates[op->next_candidate++];
  op->request.op = storage::IoOp::kRead;
  op->request.fua = false;
  op->request.lba = LbaOf(page_number);
  op->request.lba_count = options_.blocks_per_page;
  op->request.buffer = op->page;
  op->request.on_done = OnPageRead;
  op->request.context = op;
  page_reads_.fetch_add(1, std::memory_order_relaxed);
  absl::Status status = op->queue->device->Enqueue(&op->request);
  if (!status.ok()) FinishOp(op, status);
}

// The index changed under a read (compaction moved the record, or a writer replaced it): look
// again, a bounded number of times.
void PageLookup::Restart(ReadOp* op, const absl::Status& why) const {
  if (++op->restarts > kMaxRestarts) {
    // A damaged candidate seen on the last try is the better answer than a bare miss.
    FinishOp(op, op->unreadable.empty() ? why : op->unreadable_status);
    return;
  }
  Start(op);
}

bool PageLookup::IndexStillHas(const ReadOp* op, uint64_t page_number) const {
  Shard& shard = ShardFor(op->hash);
  absl::MutexLock lock(&shard.mu);
  std::vector<uint64_t> now;
  shard.index->Find(op->hash.lo, op->key, &now);
  for (uint64_t location : now) {
    if (Location::FromIndexValue(location).page == page_number &&
        shard.unwritten.find(page_number) == shard.unwritten.end()) {
      return true;
    }
  }
  return false;
}

// True when the index still gives the key the candidates the lookup saw, and those read from
// the device are still there: then what the reads found is the answer. Otherwise a candidate
// may have moved (compaction) or been replaced since, and a miss is no proof of absence.
void PageLookup::FillCache(const ReadOp* op, uint64_t page_number,
                           std::string_view value) const {
  Shard& shard = ShardFor(op->hash);
  absl::MutexLock lock(&shard.mu);
  if (!IndexUnchangedLocked(shard, op)) return;  // a write or compaction came in between
  shard.cache->Put(op->key, op->hash.lo, value,
                   IndexedAt(page_number, RecordBytes(op->key.size(), value.size())));
}

bool PageLookup::IndexUnchanged(const ReadOp* op) const {
  Shard& shard = ShardFor(op->hash);
  absl::MutexLock lock(&shard.mu);
  return IndexUnchangedLocked(shard, op);
}

bool PageLookup::IndexUnchangedLocked(Shard& shard, const ReadOp* op) const {
  std::vector<uint64_t> now;
  shard.index->Find(op->hash.lo, op->key, &now);
  std::sort(now.begin(), now.end());
  if (now != op->looked_up) return false;
  // A page read from the device that is in memory again was reused by a new write.
  for (uint64_t page_number : op->candidates) {
    if (shard.unwritten.contains(page_number)) return false;
  }
  return true;
}

// No candidate read held the key. The answer is final only if the index did not change under
// the reads; then a damaged candidate may have held it (Get: kDataLoss; a write's key check: the
// damaged entry is the key's, so the write replaces it), and otherwise the key is absent.
void PageLookup::FinishMiss(ReadOp* op) const {
  if (!IndexUnchanged(op)) {
    Restart(op, absl::NotFoundError("key not found"));
    return;
  }
  if (op->unreadable.empty()) {
    FinishOp(op, absl::NotFoundError("key not found"));
    return;
  }
  if (op->purpose != ReadPurpose::kKeyCheck) {
    FinishOp(op, op->unreadable_status);
    return;
  }
  op->resolved->found = true;
  op->resolved->damaged = true;
  op->resolved->location = Location{op->unreadable.front(), 0};
  op->resolved->record_bytes = 0;
  FinishKeyCheck(op, absl::OkStatus());
}

void PageLookup::OnPageRead(storage::IoRequest* request) {
  auto* op = static_cast<ReadOp*>(request->context);
  op->lookup->PageRead(op);
}

void PageLookup::PageRead(ReadOp* op) const {
  storage::IoRequest* request = &op->request;
  const uint64_t page_number = op->candidates[op->next_candidate - 1];
  if (!request->status.ok()) {
    FinishOp(op, request->status);
    return;
  }
  absl::StatusOr<PageHeader> header =
      VerifyPage(op->page.data, geometry_, options_.store_seed, page_number);
  if (!header.ok() || header->type != static_cast<uint8_t>(PageType::kData)) {
    // A damaged page, or one reused since the lookup (then look again). A damaged candidate
    // is not the answer yet: the key may be on another one.
    if (!IndexStillHas(op, page_number)) {
      Restart(op, header.status());
      return;
    }
    if (op->unreadable.empty()) {
      op->unreadable_status =
          header.ok() ? absl::DataLossError(absl::StrCat("page ", page_number,
                                                         ": expected a data page"))
                      : header.status();
    }
    op->unreadable.push_back(page_number);
    IssueCandidate(op);
    return;
  }
  absl::Status status;
  std::optional<RecordView> record =
      FindNewest(op->page.data, *header, op->key, dropped_, &status);
  if (!status.ok()) {
    FinishOp(op, status);
    return;
  }
  if (!record || record->header.type != static_cast<uint8_t>(RecordType::kPut)) {
    IssueCandidate(op);  // the next candidate, or the final miss
    return;
  }
  if (op->purpose == ReadPurpose::kKeyCheck) {
    op->resolved->found = true;
    op->resolved->location =
        IndexedAt(page_number, RecordBytes(op->key.size(), record->header.value_bytes));
    op->resolved->record_bytes = RecordBytes(op->key.size(), record->header.value_bytes);
    FinishKeyCheck(op, absl::OkStatus());
    return;
  }
  if ((record->header.flags & kRecordLarge) == 0) {
    FillCache(op, page_number, record->value);
    FinishOp(op, std::string(record->value));
    return;
  }
  // A large value: the rest is on the following pages of the same segment.
  op->value.assign(record->value);
  op->large_value_bytes = record->header.value_bytes;
  op->large_generation = GenerationOf(*header);
  op->large_next_page = page_number + 1;
  op->large_pages_left =
      LargeRecordPages(geometry_, record->key.size(), record->header.value_bytes) - 1;
  // The rest is read a chunk at a time. The queue has only a few chunks: when other large reads
  // of this thread hold them all, read a page at a time into the op's own page buffer (the first
  // page's part of the value is copied out above) rather than fail the read.
  if (!op->chunk.valid()) op->chunk = op->queue->device->buffers().GetChunk();
  op->request.buffer = op->chunk.valid() ? op->chunk : op->page;
  op->request.on_done = OnContinuationRead;
  IssueContinuation(op);
}

void PageLookup::IssueContinuation(ReadOp* op) const {
  op->large_batch_pages =
      std::min(op->large_pages_left, op->request.buffer.bytes / geometry_.page_bytes);
  op->request.lba = LbaOf(op->large_next_page);
  op->request.lba_count = op->large_batch_pages * options_.blocks_per_page;
  absl::Status status = op->queue->device->Enqueue(&op->request);
  if (!status.ok()) FinishOp(op, status);
}

void PageLookup::OnContinuationRead(storage::IoRequest* request) {
  auto* op = static_cast<ReadOp*>(request->context);
  op->lookup->ContinuationRead(op);
}

void PageLookup::ContinuationRead(ReadOp* op) const {
  storage::IoRequest* request = &op->request;
  if (!request->status.ok()) {
    FinishOp(op, request->status);
    return;
  }
  const Geometry& g = geometry_;
  for (uint32_t i = 0; i < op->large_batch_pages; ++i) {
    const uint8_t* page = op->request.buffer.data + size_t{i} * g.page_bytes;
    const uint64_t page_number = op->large_next_page + i;
    absl::StatusOr<PageHeader> header = VerifyPage(page, g, options_.store_seed, page_number);
    if (!header.ok() || header->type != static_cast<uint8_t>(PageType::kContinuation) ||
        GenerationOf(*header) != op->large_generation) {
      Restart(op, header.ok() ? absl::DataLossError(absl::StrCat(
                                    "page ", page_number, ": large value continuation missing"))
                              : header.status());
      return;
    }
    op->value.append(reinterpret_cast<const char*>(page) + sizeof(PageHeader), header->used_bytes);
  }
  op->large_next_page += op->large_batch_pages;
  op->large_pages_left -= op->large_batch_pages;
  if (op->large_pages_left == 0) {
    if (op->value.size() != op->large_value_bytes) {
      FinishOp(op, absl::DataLossError("large value has the wrong length"));
    } else {
      FinishOp(op, std::move(op->value));
    }
    return;
  }
  IssueContinuation(op);
}

}  // namespace nvkv::kv
