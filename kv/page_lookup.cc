// A read's way through the index and the pages (page_lookup.h): candidates, in-memory pages,
// page reads, large values' continuation pages, restarts when the index changed.
//
// A lookup takes the key's shard lock only to ask the index for candidate pages and to look at
// pages still in memory. It walks the candidates in the index's order, newest first, and each
// device candidate costs one page read on the calling thread's own queue. The key's current
// record is on the first candidate that holds it: pages never hold two different keys with the
// same index tag (head_append.cc seals a page rather than let that happen), so a tag's entry on
// a page belongs to the one key with that tag there, and a key's later entries are stale
// (key_entries.h). A damaged candidate before it may hold a newer record: then the read fails
// with the damage rather than answer with what may be an older value.
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
    if (dropped.DropsRecord(record.header)) continue;
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
  op->read_pages.clear();
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

PageLookup::PageLookup(const StoreShape& shape,
                       const ShardSet& shards,
                       const SequenceRanges& dropped_batch_records, SegmentTable& segments)
    : shape_(shape),
      shards_(shards),
      dropped_(dropped_batch_records),
      segments_(segments) {}

// Takes the candidates from the index (or the answer from the cache), then walks them.
void PageLookup::Start(ReadOp* op) const {
  Shard& shard = shards_.For(op->hash);
  op->unreadable.clear();
  op->unreadable_status = absl::OkStatus();
  op->read_pages.clear();
  op->next_candidate = 0;
  {
    absl::MutexLock lock(&shard.mu);
    if (op->purpose != ReadPurpose::kKeyCheck) {
      if (const RecordCache::Entry* cached = shard.cache->Find(op->key)) {
        FinishOp(op, cached->value);
        return;
      }
    }
    shard.index->Find(op->hash.lo, op->key, &op->candidates);
    op->index_changes = shard.index->changes();
    op->looked_up = op->candidates;
    std::sort(op->looked_up.begin(), op->looked_up.end());
    if (op->purpose == ReadPurpose::kKeyCheck) {
      CurrentRecord& resolved = *op->resolved;
      resolved.found = false;
      resolved.damaged = false;
      resolved.stale.clear();
      resolved.candidates = op->candidates;
    }
    if (!AdvanceLocked(shard, op)) return;
  }
  IssueRead(op);
}

void PageLookup::Advance(ReadOp* op) const {
  if (op->next_candidate < op->candidates.size()) {
    Shard& shard = shards_.For(op->hash);
    absl::MutexLock lock(&shard.mu);
    if (!AdvanceLocked(shard, op)) return;
  }
  IssueRead(op);
}

// Looks at candidates in order while their pages are in memory. Returns true when the next
// candidate must be read from the device, or when none is left (IssueRead finishes then);
// false when the lookup finished.
bool PageLookup::AdvanceLocked(Shard& shard, ReadOp* op) const {
  while (op->next_candidate < op->candidates.size()) {
    const uint64_t location = op->candidates[op->next_candidate];
    const uint64_t page_number = Location::FromIndexValue(location).page;
    auto it = shard.unwritten.find(page_number);
    if (it == shard.unwritten.end()) return true;  // on the device
    if (it->second.large_run_in_flight()) {
      // A large value being written: wait for it, then look at this candidate again.
      shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(10));
      continue;
    }
    ++op->next_candidate;
    const PageSlot& slot = *it->second.slot();
    absl::Status status;
    std::optional<RecordView> record =
        FindNewest(slot.buffer.data, slot.HeaderSoFar(), op->key, dropped_, &status);
    if (!record || record->header.type != static_cast<uint8_t>(RecordType::kPut)) continue;
    if (op->purpose == ReadPurpose::kKeyCheck) {
      NoteKeyCheckHit(op, Location::FromIndexValue(location),
                      RecordBytes(op->key.size(), record->header.value_bytes));
      continue;
    }
    if (!op->unreadable.empty()) {
      // A damaged candidate before this one may hold the key's current record.
      FinishOp(op, op->unreadable_status);
    } else {
      FinishOp(op, std::string(record->value));
    }
    return false;
  }
  return true;
}

// A key check found the key on a candidate: the first is its current record, the rest stale.
void PageLookup::NoteKeyCheckHit(ReadOp* op, const Location& location,
                                 uint32_t record_bytes) const {
  CurrentRecord& resolved = *op->resolved;
  if (resolved.found) {
    resolved.stale.emplace_back(location, record_bytes);
    return;
  }
  resolved.found = true;
  resolved.location = location;
  resolved.record_bytes = record_bytes;
}

void PageLookup::IssueRead(ReadOp* op) const {
  if (op->next_candidate >= op->candidates.size()) {
    FinishMiss(op);
    return;
  }
  const uint64_t page_number = Location::FromIndexValue(op->candidates[op->next_candidate++]).page;
  op->read_pages.push_back(page_number);
  op->request.op = storage::IoOp::kRead;
  op->request.fua = false;
  op->request.lba = shape_.ReadLbaOf(page_number);
  op->request.lba_count = shape_.blocks_per_page;
  op->request.buffer = op->page;
  op->request.on_done = OnPageRead;
  op->request.context = op;
  page_reads_.fetch_add(1, std::memory_order_relaxed);
  if (op->purpose == ReadPurpose::kKeyCheck) {
    key_check_page_reads_.fetch_add(1, std::memory_order_relaxed);
  }
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
  Shard& shard = shards_.For(op->hash);
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
void PageLookup::FillCache(const ReadOp* op, uint64_t page_number, uint64_t generation,
                           std::string_view value) const {
  Shard& shard = shards_.For(op->hash);
  absl::MutexLock lock(&shard.mu);
  if (!IndexUnchangedLocked(shard, op)) return;  // a write or compaction came in between
  // A segment takes a new generation when a head takes it again: a page of the read's log is
  // not on the device any more, whatever the index says now. (Under the shard lock: a write
  // that lands the key on this page again is applied under it, after the head took the
  // segment.)
  if (segments_.generation(shape_.geometry.SegmentOf(page_number)) != generation) return;
  shard.cache->Put(op->key, op->hash.lo, value,
                   shape_.IndexedAt(page_number, RecordBytes(op->key.size(), value.size())));
}

bool PageLookup::IndexUnchanged(const ReadOp* op) const {
  Shard& shard = shards_.For(op->hash);
  absl::MutexLock lock(&shard.mu);
  return IndexUnchangedLocked(shard, op);
}

bool PageLookup::IndexUnchangedLocked(Shard& shard, const ReadOp* op) const {
  if (shard.index->changes() != op->index_changes) {
    // Something in the shard changed: did the key's entries?
    std::vector<uint64_t> now;
    shard.index->Find(op->hash.lo, op->key, &now);
    std::sort(now.begin(), now.end());
    if (now != op->looked_up) return false;
  }
  // A page read from the device that is in memory again was reused by a new write.
  for (uint64_t page_number : op->read_pages) {
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
  if (op->purpose == ReadPurpose::kKeyCheck && op->resolved->found) {
    // Read every candidate: the key's entries are found, and damaged candidates are taken as
    // the key's too (see below), so that a delete leaves none that reads fail on.
    for (uint64_t page_number : op->unreadable) {
      op->resolved->stale.emplace_back(Location{page_number, 0}, 0);
    }
    FinishKeyCheck(op, absl::OkStatus());
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
  for (size_t i = 1; i < op->unreadable.size(); ++i) {
    op->resolved->stale.emplace_back(Location{op->unreadable[i], 0}, 0);
  }
  FinishKeyCheck(op, absl::OkStatus());
}

void PageLookup::OnPageRead(storage::IoRequest* request) {
  auto* op = static_cast<ReadOp*>(request->context);
  op->lookup->PageRead(op);
}

void PageLookup::PageRead(ReadOp* op) const {
  storage::IoRequest* request = &op->request;
  const uint64_t location = op->candidates[op->next_candidate - 1];
  const uint64_t page_number = Location::FromIndexValue(location).page;
  if (!request->status.ok()) {
    FinishOp(op, request->status);
    return;
  }
  absl::StatusOr<PageHeader> header =
      VerifyPage(op->page.data, shape_.geometry, shape_.seed, page_number);
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
    Advance(op);
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
    Advance(op);  // the next candidate, or the final miss
    return;
  }
  if (op->purpose == ReadPurpose::kKeyCheck) {
    NoteKeyCheckHit(op, Location::FromIndexValue(location),
                    RecordBytes(op->key.size(), record->header.value_bytes));
    Advance(op);  // a delete erases every entry of the key
    return;
  }
  if (!op->unreadable.empty()) {
    // A damaged candidate before this one may hold the key's current record.
    FinishOp(op, op->unreadable_status);
    return;
  }
  if ((record->header.flags & kRecordLarge) == 0) {
    FillCache(op, page_number, GenerationOf(*header), record->value);
    FinishOp(op, std::string(record->value));
    return;
  }
  // A large value: the rest is on the following pages of the same segment.
  op->value.assign(record->value);
  op->large_value_bytes = record->header.value_bytes;
  op->large_generation = GenerationOf(*header);
  op->large_next_page = page_number + 1;
  op->large_pages_left =
      LargeRecordPages(shape_.geometry, record->key.size(), record->header.value_bytes) - 1;
  // The rest is read a chunk at a time. The queue has only a few chunks: when other large reads
  // of this thread hold them all, read a page at a time into the op's own page buffer (the first
  // page's part of the value is copied out above) rather than fail the read.
  if (!op->chunk.valid()) op->chunk = op->queue->device->buffers().GetChunk();
  op->request.buffer = op->chunk.valid() ? op->chunk : op->page;
  op->request.on_done = OnContinuationRead;
  IssueContinuation(op);
}

void PageLookup::IssueContinuation(ReadOp* op) const {
  op->large_batch_pages = shape_.ReadablePagesFrom(
      op->large_next_page,
      std::min(op->large_pages_left, op->request.buffer.bytes / shape_.geometry.page_bytes));
  op->request.lba = shape_.ReadLbaOf(op->large_next_page);
  op->request.lba_count = op->large_batch_pages * shape_.blocks_per_page;
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
  const Geometry& g = shape_.geometry;
  for (uint32_t i = 0; i < op->large_batch_pages; ++i) {
    const uint8_t* page = op->request.buffer.data + size_t{i} * g.page_bytes;
    const uint64_t page_number = op->large_next_page + i;
    absl::StatusOr<PageHeader> header = VerifyPage(page, g, shape_.seed, page_number);
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
