// The compactor (compactor.h): its thread, CompactAll, and the cleaning of one segment.
#include "kv/compactor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/key_entries.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "storage/base/check.h"
#include "storage/base/start_thread.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

Compactor::Compactor(const Options& options, const StoreShape& shape,
                     const ShardSet& shards, SegmentTable& segments,
                     LogWriter& writer, StickyError& error, WriteCounters& counters,
                     RecordMover& mover, const std::atomic<uint64_t>& next_sequence,
                     std::unique_ptr<storage::Device> queue)
    : options_(options),
      shape_(shape),
      shards_(shards),
      segments_(segments),
      writer_(writer),
      error_(error),
      counters_(counters),
      mover_(mover),
      next_sequence_(next_sequence),
      queue_(std::move(queue)) {}

Compactor::~Compactor() {
  Stop();
  if (read_page_.valid()) queue_->buffers().PutPage(read_page_);
  for (const storage::Buffer& buffer : prefetch_buffers_) queue_->buffers().PutPage(buffer);
}

absl::Status Compactor::Start() {
  NVKV_CHECK(!thread_.joinable());
  return StartThread("the compaction thread", thread_, [this] { Loop(); });
}

void Compactor::Stop() {
  stopping_.store(true);
  if (!thread_.joinable()) return;
  Wake();
  thread_.join();
}

void Compactor::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
  wake_cv_.Signal();
}

void Compactor::Loop() {
  // Clean before writers hit their reserve (SegmentTable::UserReserveFor), or puts would fail
  // "store full" while compaction, not yet below its mark, found nothing to do.
  const uint64_t low_water =
      std::max<uint64_t>(segments_.user_reserve() + 3, segments_.count() / 16);
  absl::Time last_retained_check = absl::Now();
  while (!stopping_.load()) {
    uint64_t compact_all_through = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!wake_) wake_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
      wake_ = false;
      if (compact_all_requested_ > compact_all_done_) compact_all_through = compact_all_requested_;
    }
    if (compact_all_through != 0) {
      // One run answers every request made before it started.
      absl::Status status;
      {
        absl::MutexLock cleaning(&cleaning_mu_);
        status = CompactAllNow();
      }
      absl::MutexLock lock(&mu_);
      compact_all_done_ = compact_all_through;
      compact_all_status_ = status;
      compact_all_cv_.SignalAll();
    }
    if (!options_.background || error_.failed()) continue;
    if (absl::Now() - last_retained_check > absl::Seconds(1)) {
      RecheckRetained();  // O(index) per retained segment: not more often
      last_retained_check = absl::Now();
    }
    while (!stopping_.load() && segments_.free_count() < low_water) {
      std::optional<uint64_t> victim =
          segments_.PickVictim(options_.compaction_policy, next_sequence_.load(), true);
      if (!victim) break;
      if (options_.victim_picked != nullptr) (*options_.victim_picked)(*victim);
      absl::Status status;
      {
        absl::MutexLock cleaning(&cleaning_mu_);
        status = CleanSegment(*victim);
      }
      if (!status.ok()) {
        segments_.Unpick(*victim);
        if (!absl::IsResourceExhausted(status)) {
          error_.Set(status);
          writer_.Wake();  // it tells the asynchronous writes waiting that none will be durable
        }
        break;
      }
    }
  }
  // Closing: answer the requests this thread will not run. CompactAll checks stopping_ under
  // mu_ before it asks, so none arrives after this.
  absl::MutexLock lock(&mu_);
  if (compact_all_requested_ > compact_all_done_) {
    compact_all_done_ = compact_all_requested_;
    compact_all_status_ = absl::FailedPreconditionError("the store is closed");
    compact_all_cv_.SignalAll();
  }
}

absl::Status Compactor::CompactAll() {
  absl::MutexLock lock(&mu_);
  if (stopping_.load()) return absl::FailedPreconditionError("the store is closed");
  const uint64_t request = ++compact_all_requested_;
  wake_ = true;
  wake_cv_.Signal();
  while (compact_all_done_ < request) compact_all_cv_.Wait(&mu_);
  return compact_all_status_;
}

absl::Status Compactor::CompactAllNow() {
  // Close the heads' current segments so that they can be cleaned too.
  mover_.SealHeads();
  absl::Status flushed = writer_.WaitAllDurable();
  if (!flushed.ok()) return flushed;
  NVKV_RETURN_IF_ERROR(writer_.WaitSealedSettled());
  RecheckRetained();
  // Every sealed segment with garbage, once each (segments written meanwhile wait for the next
  // call).
  std::vector<uint64_t> done;
  for (uint64_t round = 0; round < segments_.count(); ++round) {
    std::optional<uint64_t> victim =
        segments_.PickVictim(CompactionPolicy::kGreedy, next_sequence_.load(), true);
    if (!victim) break;
    if (std::find(done.begin(), done.end(), *victim) != done.end()) {
      segments_.Unpick(*victim);
      break;
    }
    absl::Status status = CleanSegment(*victim);
    if (!status.ok()) {
      segments_.Unpick(*victim);
      return status;
    }
    done.push_back(*victim);
  }
  return absl::OkStatus();
}

absl::flat_hash_map<uint64_t, uint64_t> Compactor::IndexEntriesIn(
    const std::vector<uint64_t>& segments) {
  absl::flat_hash_map<uint64_t, uint64_t> entries;
  for (uint64_t segment : segments) entries[segment] = 0;
  if (entries.empty()) return entries;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->index->ForEachValue([&](uint64_t location) {
      const uint64_t page = Location::FromIndexValue(location).page;
      if (page < kSuperblockPages) return;
      auto it = entries.find(shape_.geometry.SegmentOf(page));
      if (it != entries.end()) ++it->second;
    });
  }
  return entries;
}

void Compactor::RecheckRetained() {
  // One walk of the index for all of them. Entries only leave a retained segment (writes go to
  // the heads), so none now means none ever again.
  for (const auto& [segment, count] : IndexEntriesIn(segments_.retained())) {
    if (count == 0) segments_.Unretain(segment);
  }
}

absl::Status Compactor::CleanSegment(uint64_t segment) {
  // The victim's own pages must be durable before any of its records is copied: a copy is a
  // lone record (no batch marker, on its key's shard's head), so if power failed while the
  // victim still sat in a volatile cache, copies that landed could show part of a batch whose
  // original was lost. Once the victim is durable its batches are whole on the device until
  // the free marker, which comes after every copy is durable (below).
  if (std::optional<LastWrite> last = segments_.last_write(segment)) {
    absl::Status durable = writer_.WaitDurable(shards_[last->shard], last->head_counter);
    if (!durable.ok()) return durable;
  }
  // Pages the device cannot read are damaged ones (segment_read.h): their records stay where
  // they are, and so does the segment while any of them is indexed (below).
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuffer> victim,
                        SegmentBuffer::Make(*queue_, shape_));
  NVKV_ASSIGN_OR_RETURN(const uint32_t failed, victim->Read(segment));
  unreadable_pages_.fetch_add(failed);
  if (failed == shape_.geometry.pages_per_segment) {
    // Nothing of it can be read: leave it as it is, out of compaction's way.
    damaged_pages_.fetch_add(failed);
    segments_.Retain(segment);
    return absl::OkStatus();
  }
  // The victim as recovery reads it: a record recovery would not apply (a batch cut short by a
  // crash or by damage) is never copied, or a cut batch's delete or put would come back to
  // life alone. A live record of a batch that damage cut since Open stays indexed where it
  // is, and keeps the segment (below).
  SegmentRecords collected;
  CollectNewestRecords(shape_.geometry, shape_.seed, segment,
                       [&](uint32_t i) { return victim->page(i); }, &collected);
  if (options_.dropped_batch_records != nullptr && !options_.dropped_batch_records->empty()) {
    std::erase_if(collected.records, [&](const ScannedRecord& record) {
      return options_.dropped_batch_records->DropsRecord(record.header);
    });
  }
  // A damaged page's records cannot be copied: those still indexed keep the segment (below).
  damaged_pages_.fetch_add(collected.scan.hole_pages);
  victim_pages_.clear();  // a new victim: its pages are unchecked
  NVKV_RETURN_IF_ERROR(CopyLiveRecords(segment, *victim, collected.records));
  // Records that could not be copied (on damaged pages, or in a batch that damage cut) are
  // still live where they are: never free a segment that an index entry points into. The index
  // says so, not the live bytes, an estimate that can drift. (Asked while the records' keys,
  // in the victim's buffers, are there; no entry into the victim is made after its copies.)
  const bool still_indexed = IndexPointsInto(segment, collected, failed);
  victim.reset();
  // Before the victim's records disappear, whatever replaced them must be durable: the copies
  // made above, and also the newer records that made the others dead. Those may still be in an
  // open page or waiting for a flush (non-durable writes, or durable ones not yet acknowledged);
  // if power failed after the free marker, the old record and its replacement would both be
  // lost, and a durably written key would read back absent, or as an older value still found
  // in another segment. Every record that replaced one of the victim's was appended before the
  // scan above looked at the index, so Flush, which waits for every page assigned by now,
  // covers them all.
  absl::Status durable = writer_.WaitAllDurable();
  if (!durable.ok()) return durable;
  if (still_indexed) {
    segments_.Retain(segment);
    return absl::OkStatus();
  }
  storage::ZoneState out_of_service = storage::ZoneState::kEmpty;
  if (absl::Status emptied = EmptySegment(segment, &out_of_service); !emptied.ok()) {
    error_.Set(emptied);
    return emptied;
  }
  if (storage::OutOfService(out_of_service)) {
    // Read-only: its old log stays there (SegmentTable::Retire), read where it landed.
    const bool holds_log = out_of_service == storage::ZoneState::kReadOnly;
    segments_.Retire(segment, holds_log);
    if (!holds_log) shape_.places->Clear(segment);
  } else {
    segments_.Free(segment);
  }
  segments_cleaned_.fetch_add(1);
  return absl::OkStatus();
}

bool Compactor::IndexPointsInto(uint64_t segment, const SegmentRecords& collected,
                                uint32_t unreadable_pages) {
  const SegmentScanResult& scan = collected.scan;
  if (unreadable_pages > 0 || scan.hole_pages > 0 || scan.torn_tail ||
      scan.batches_discarded > 0) {
    // Records it could not take (a damaged page, one right after the log's end, a batch that
    // damage cut) may be indexed, by keys it does not know: walk the whole index.
    return IndexEntriesIn({segment})[segment] != 0;
  }
  // Every record of the victim was read: an entry into it is an entry of one of their keys.
  std::vector<uint64_t> candidates;
  for (const ScannedRecord& record : collected.records) {
    const KeyHash hash = HashKey(record.key);
    Shard& shard = shards_.For(hash);
    absl::MutexLock lock(&shard.mu);
    shard.index->Find(hash.lo, record.key, &candidates);
    for (const uint64_t candidate : candidates) {
      const uint64_t page = Location::FromIndexValue(candidate).page;
      if (page >= kSuperblockPages && shape_.geometry.SegmentOf(page) == segment) return true;
    }
  }
  return false;
}

absl::Status Compactor::CopyLiveRecords(uint64_t segment, const SegmentBuffer& victim,
                                        const std::vector<ScannedRecord>& records) {
  const uint64_t tombstone_floor = segments_.contents().MinSequenceExcept(segment);
  for (size_t i = 0; i < records.size(); ++i) {
    if (!shape_.ordered && i % kSettleWindow == 0) {
      const size_t end = std::min(records.size(), i + kSettleWindow);
      NVKV_RETURN_IF_ERROR(
          PrefetchForSettling(segment, victim, std::span(records).subspan(i, end - i)));
    }
    const ScannedRecord& record = records[i];
    const bool is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
    if (is_delete && record.header.sequence < tombstone_floor) continue;  // nothing left to hide
    const KeyHash hash = HashKey(record.key);
    if (is_delete &&
        !segments_.contents().MayHoldOlder(hash, record.header.sequence, segment)) {
      continue;
    }
    if (!is_delete && !shape_.ordered) {
      if (!SettleEntries(segment, victim, record, hash)) continue;
    }
    NVKV_ASSIGN_OR_RETURN(const bool moved, mover_.Relocate(record, hash, *queue_));
    if (moved) copied_bytes_.fetch_add(RecordBytes(record.key.size(), record.value.size()));
  }
  prefetched_.clear();
  return absl::OkStatus();
}

absl::Status Compactor::PrefetchForSettling(uint64_t segment, const SegmentBuffer& victim,
                                            std::span<const ScannedRecord> records) {
  prefetched_.clear();
  // The page each put's settling will read first: its key's first candidate that neither the
  // victim, memory nor the cache answers for. (Later reads, rarer, go one at a time.)
  std::vector<uint64_t> pages;
  std::vector<uint64_t> candidates;
  for (const ScannedRecord& record : records) {
    if (record.header.type != static_cast<uint8_t>(RecordType::kPut)) continue;
    const KeyHash hash = HashKey(record.key);
    Shard& shard = shards_.For(hash);
    absl::MutexLock lock(&shard.mu);
    shard.index->Find(hash.lo, record.key, &candidates);
    if (candidates.size() < 2 || shard.cache->Peek(record.key) != nullptr) continue;
    for (uint64_t candidate : candidates) {
      const uint64_t page = Location::FromIndexValue(candidate).page;
      if (page >= kSuperblockPages && shape_.geometry.SegmentOf(page) == segment) {
        const uint8_t* bytes = PageForSettling(segment, victim, page);
        PageHeader header;
        if (bytes == nullptr) continue;
        std::memcpy(&header, bytes, sizeof(header));
        if (KeyRecordBytesOn(bytes, header, record.key)) break;
        continue;
      }
      const InMemory in_memory = LookInMemory(shard, page, record.key);
      if (in_memory == InMemory::kHoldsNot) continue;
      if (in_memory == InMemory::kNo &&
          std::find(pages.begin(), pages.end(), page) == pages.end()) {
        pages.push_back(page);
      }
      break;
    }
  }
  if (pages.empty()) return absl::OkStatus();
  storage::BufferPool& pool = queue_->buffers();
  while (prefetch_buffers_.size() < pages.size()) {
    storage::Buffer buffer = pool.GetPage();
    if (!buffer.valid()) break;  // read the rest one at a time
    prefetch_buffers_.push_back(buffer);
  }
  pages.resize(std::min(pages.size(), prefetch_buffers_.size()));
  std::vector<storage::IoRequest> reads(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    reads[i].op = storage::IoOp::kRead;
    reads[i].lba = shape_.ReadLbaOf(pages[i]);
    reads[i].lba_count = shape_.blocks_per_page;
    reads[i].buffer = prefetch_buffers_[i];
  }
  NVKV_RETURN_IF_ERROR(storage::RunAll(*queue_, std::span(reads)));
  settle_page_reads_.fetch_add(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    const uint8_t* bytes = prefetch_buffers_[i].data;
    prefetched_[pages[i]] =
        reads[i].status.ok() && IsDataPage(bytes, pages[i]) ? bytes : nullptr;
  }
  return absl::OkStatus();
}

bool Compactor::SettleEntries(uint64_t segment, const SegmentBuffer& victim,
                              const ScannedRecord& record, const KeyHash& hash) {
  Shard& shard = shards_.For(hash);
  const PageSource source = [&](uint64_t page) {
    return PageForSettling(segment, victim, page);
  };
  // The key's entries into the victim, with its record bytes on each page.
  const std::vector<std::pair<uint64_t, uint32_t>> in_victim =
      EntriesInSegment(shard, hash, record.key, shape_.geometry, segment, source);
  if (in_victim.empty()) return false;  // overwritten or deleted since
  const CurrentEntry current = FindCurrentEntry(shard, hash, record.key, source);
  if (current.standing != EntryStanding::kCurrent) {
    // A damaged page before the key's entries: nothing is proved stale; keep the record.
    return std::any_of(in_victim.begin(), in_victim.end(),
                       [&](const auto& entry) { return entry.first == record.page_number; });
  }
  // Every other entry of the key into the victim comes after its current one: stale.
  for (const auto& [page, record_bytes] : in_victim) {
    if (page == current.page) continue;
    absl::MutexLock lock(&shard.mu);
    if (shard.index->Erase(hash.lo, record.key, page)) {
      segments_.AddLive(segment, -static_cast<int64_t>(record_bytes));
      shard.ErasedStale(1);
      stale_entries_settled_.fetch_add(1);
    }
  }
  return current.page == record.page_number;
}

const uint8_t* Compactor::PageForSettling(uint64_t segment, const SegmentBuffer& victim,
                                          uint64_t page) {
  const Geometry& g = shape_.geometry;
  if (g.SegmentOf(page) == segment) {
    // Settling asks for the victim's pages again and again: verify each once.
    const uint32_t index = g.PageInSegment(page);
    if (victim_pages_.empty()) victim_pages_.assign(g.pages_per_segment, PageCheck::kUnchecked);
    if (victim_pages_[index] == PageCheck::kUnchecked) {
      const uint8_t* data = victim.page(index);
      victim_pages_[index] = data != nullptr && IsDataPage(data, page) ? PageCheck::kData
                                                                       : PageCheck::kUnusable;
    }
    return victim_pages_[index] == PageCheck::kData ? victim.page(index) : nullptr;
  }
  if (auto it = prefetched_.find(page); it != prefetched_.end()) {
    return it->second;  // verified when it was read
  }
  if (!read_page_.valid()) read_page_ = queue_->buffers().GetPage();
  if (!read_page_.valid()) return nullptr;
  settle_page_reads_.fetch_add(1);
  if (!storage::ReadBlocks(*queue_, shape_.ReadLbaOf(page), shape_.blocks_per_page, read_page_)
           .ok()) {
    return nullptr;
  }
  return IsDataPage(read_page_.data, page) ? read_page_.data : nullptr;
}

bool Compactor::IsDataPage(const uint8_t* bytes, uint64_t page) const {
  absl::StatusOr<PageHeader> header = VerifyPage(bytes, shape_.geometry, shape_.seed, page);
  return header.ok() && header->type == static_cast<uint8_t>(PageType::kData);
}

absl::Status Compactor::EmptySegment(uint64_t segment, storage::ZoneState* out_of_service) {
  if (!shape_.geometry.zoned()) return WriteFreeMarkers(segment);
  // A reset zone, durably (a reset a cut undoes would bring the old log back): only then may a
  // head take it, and its positions land anew.
  const uint64_t zone = kMetadataZones + segment;
  if (absl::Status status = storage::ResetZone(*queue_, zone); !status.ok()) {
    // A zone the device took out of service (read-only or offline) is retired: what it held
    // was copied out, and it is never written again. Any other failure is the store's error.
    const absl::StatusOr<storage::ZoneDescriptor> report = storage::ReportZone(*queue_, zone);
    if (!report.ok() || !storage::OutOfService(report->state)) return status;
    *out_of_service = report->state;
    return absl::OkStatus();
  }
  NVKV_RETURN_IF_ERROR(storage::FlushDevice(*queue_));
  shape_.places->Clear(segment);
  zone_resets_.fetch_add(1);
  return absl::OkStatus();
}

absl::Status Compactor::WriteFreeMarkers(uint64_t segment) {
  // On its last page first, which no log uses (Geometry::log_pages), then on its first. If the
  // last page's write is torn, the log is whole as it was (and its records' copies are
  // interchangeable with them); if page 0's is, or page 0 is later lost (a torn first write of
  // the next log, or media damage), the last page's marker tells the segment's stale log, whose
  // records were copied or dead (and whose tombstones may be gone), from a log written after
  // the marker. Freeing is all or nothing for recovery: no marker may cut a log short, or a
  // tombstone dropped here could lose its batch while older records of its key stay.
  const Geometry& g = shape_.geometry;
  storage::BufferPool& pool = queue_->buffers();
  storage::Buffer page = pool.GetPage();
  NVKV_CHECK(page.valid());
  const uint64_t first_page = g.FirstPageOf(segment);
  const uint64_t generation = segments_.NextGeneration();
  absl::Status status;
  for (const uint32_t index : {g.pages_per_segment - 1, 0u}) {
    EncodeFreePage(page.data, g, generation, shape_.seed, first_page + index, index);
    status = storage::WriteBlocks(*queue_, shape_.LbaOf(first_page + index), shape_.blocks_per_page,
                                  page, /*fua=*/true, shape_.placement.log);
    if (!status.ok()) break;
    counters_.device_bytes.fetch_add(g.page_bytes);
  }
  pool.PutPage(page);
  return status;
}

}  // namespace nvkv::kv
