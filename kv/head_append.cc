// Appending to the shards' log heads (head_append.h).
#include "kv/head_append.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/page_runs.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

uint64_t NowMicros() { return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())); }

// The index tag of a key. Two different keys with equal tags never share a page, in either
// index mode, so that a store may be reopened in hash mode whichever mode wrote it.
uint32_t TagOf(const KeyHash& hash) { return Index::Tag(hash.lo); }

// True when `key` may not join `slot`'s page: another key with the same index tag is on it.
bool TagClash(const PageSlot& slot, std::string_view key, uint32_t tag) {
  for (const auto& [other_tag, offset] : slot.tags) {
    if (other_tag != tag) continue;
    RecordHeader header;
    std::memcpy(&header, slot.buffer.data + offset, sizeof(header));
    const std::string_view other(
        reinterpret_cast<const char*>(slot.buffer.data + offset + sizeof(header)),
        header.key_bytes);
    if (other != key) return true;
  }
  return false;
}

}  // namespace

HeadAppender::HeadAppender(const Options& options, const StoreShape& shape,
                           const ShardSet& shards,
                           SegmentTable& segments, LogWriter& writer,
                           std::atomic<uint64_t>& next_sequence)
    : options_(options),
      shape_(shape),
      shards_(shards),
      segments_(segments),
      writer_(writer),
      next_sequence_(next_sequence) {}

absl::Status HeadAppender::EnsureSegmentRoom(Shard& shard, uint32_t pages,
                                             uint64_t summary_bytes, SegmentUse use,
                                             bool* awaiting_writer) const {
  LogHead& head = shard.head;
  *awaiting_writer = false;
  if (head.has_segment && pages > 0 && head.reserved_pages >= pages &&
      head.next_page + pages <= shape_.geometry.log_pages()) {
    // A batch's page: its room, summary entries included, was reserved (ReserveForBatch).
    head.reserved_pages -= pages;
    return segments_.CheckReserve(use);
  }
  if (RoomFor(head, pages, summary_bytes)) {
    // The head's segment may be one compaction took from the reserve: user writes must not
    // fill it while the store is down to what they must leave.
    return segments_.CheckReserve(use);
  }
  if (pages > shape_.geometry.log_pages()) {
    // No segment is large enough: taking another would not help (and callers that loop until
    // the room is there would take every free segment).
    return absl::InvalidArgumentError(absl::StrCat(pages, " pages do not fit one segment's log of ",
                                                   shape_.geometry.log_pages()));
  }
  SealOpenPage(shard);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> segment = segments_.Allocate(use, &generation, awaiting_writer);
  // Taken or not, the writer announces the next segments for the heads.
  writer_.Wake();
  if (!segment.ok() || *awaiting_writer) return segment.status();
  if (head.has_segment) LeaveSegment(shard);
  head.has_segment = true;
  head.segment = *segment;
  head.generation = generation;
  head.next_page = 0;
  head.reserved_pages = 0;
  if (options_.summaries) head.summary.Reset(shape_.ordered, shape_.geometry);
  return absl::OkStatus();
}

bool HeadAppender::RoomFor(const LogHead& head, uint32_t pages, uint64_t summary_bytes) const {
  if (!head.has_segment) return false;
  // A summary that would outgrow its limit keeps no room (it is abandoned once it does); nor
  // does one in a segment with nothing in it yet (whatever is to be written goes there: another
  // segment would have no more room, and callers would take one after another).
  const uint32_t summary = options_.summaries && head.next_page > 0
                               ? head.summary.PagesWith(summary_bytes, shape_.geometry).value_or(0)
                               : 0;
  return head.next_page + pages + summary <= shape_.geometry.log_pages();
}

void HeadAppender::LeaveSegment(Shard& shard) const {
  LogHead& head = shard.head;
  SummaryBuilder& summary = head.summary;
  // 0 when there is none (abandoned, or no record).
  const uint32_t pages =
      options_.summaries ? summary.PagesWith(0, shape_.geometry).value_or(0) : 0;
  // Room was kept for the summary as estimated (RoomFor); when the estimate fell short, the
  // segment goes without one.
  if (pages > 0 && head.next_page + pages <= shape_.geometry.log_pages()) {
    const SegmentMapPageHeader floors = segments_.MapFloors();
    SummaryWrite write;
    write.shard = &shard;
    write.segment = head.segment;
    write.generation = head.generation;
    write.first_in_segment = head.next_page;
    write.first_page = shape_.geometry.FirstPageOf(head.segment) + head.next_page;
    write.pages = pages;
    write.first_counter = head.next_counter;
    write.bytes =
        summary.Take(head.next_page, pages, floors.sequence_floor, floors.generation_floor);
    for (uint32_t i = 0; i < pages; ++i) head.durable.Assign(write.first_counter + i, 1);
    head.next_page += pages;
    head.next_counter += pages;
    segments_.AddPending(head.segment, static_cast<int32_t>(pages));
    writer_.QueueSummary(std::move(write));
  }
  summary.Abandon();  // until the next segment's
  // A zone stays active on the device until its pages land and fill it, or it is finished: the
  // writer gives its token back then (at once for a zone never written to), a write of the
  // segment still to come until that (so that compaction does not take it first and reset a
  // zone a finish would then make full).
  if (shape_.geometry.zoned()) segments_.AddPending(head.segment, 1);
  segments_.Seal(head.segment, LastWrite{shard.id, head.next_counter - 1});
  if (shape_.geometry.zoned()) {
    const bool partly_written = head.next_page > 0 && head.next_page < shape_.geometry.log_pages();
    writer_.QueueLeftZone(shard, head.segment, head.next_counter - 1, /*finish=*/partly_written);
  }
}

// Mirrors the append loop of the write path (AppendPrepared): a record goes to a new page when
// it does not fit or when its tag clashes with another key's on the current page.
uint32_t HeadAppender::PlanFreshPages(const LogHead& head,
                                      const std::vector<PlannedRecord>& records) const {
  uint32_t fresh = 0;
  bool on_open = head.open != nullptr;
  uint32_t free_bytes = on_open ? head.open->builder.free_bytes() : 0;
  std::vector<std::pair<uint32_t, std::string_view>> placed;
  for (const PlannedRecord& r : records) {
    bool clash = false;
    const uint32_t tag = TagOf(r.hash);
    if (on_open && TagClash(*head.open, r.key, tag)) clash = true;
    for (const auto& [other_tag, other_key] : placed) {
      if (other_tag == tag && other_key != r.key) clash = true;
    }
    if (r.bytes > free_bytes || clash) {
      ++fresh;
      on_open = false;
      free_bytes = shape_.geometry.payload_bytes();
      placed.clear();
    }
    free_bytes -= r.bytes;
    placed.emplace_back(tag, r.key);
  }
  return fresh;
}

absl::Status HeadAppender::WaitForWriter(Shard& shard) const {
  // Back-pressure: every page buffer is sealed or in flight, or no segment is announced in the
  // segment map yet. The writer frees a buffer or announces a segment soon.
  writer_.Wake();
  if (absl::Status writer = writer_.Status(); !writer.ok()) return writer;
  shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(100));
  return absl::OkStatus();
}

void HeadAppender::SealOpenPage(Shard& shard) const {
  LogHead& head = shard.head;
  if (head.open == nullptr) return;
  head.open->builder.Finish(shape_.seed, head.open->page_number);
  head.sealed.push_back(head.open);
  head.open = nullptr;
  shard.wants_writer.store(true, std::memory_order_release);
}

absl::Status HeadAppender::OpenNewPage(Shard& shard, SegmentUse use, bool* awaiting_writer) const {
  LogHead& head = shard.head;
  SealOpenPage(shard);
  // The summary bytes of a page to come: as many as the most a page gave so far.
  absl::Status room =
      EnsureSegmentRoom(shard, 1, head.summary.bytes_per_page(), use, awaiting_writer);
  if (!room.ok() || *awaiting_writer) return room;
  PageSlot* slot = head.TakeFreeSlot();
  slot->segment = head.segment;
  slot->page_number = shape_.geometry.FirstPageOf(head.segment) + head.next_page;
  slot->head_counter = head.next_counter++;
  slot->builder.Start(slot->buffer.data, shape_.geometry, PageType::kData, head.generation,
                      head.next_page, slot->head_counter);
  slot->tags.clear();
  slot->foreign.clear();
  ++head.next_page;
  head.open = slot;
  head.open_since_us = NowMicros();
  head.durable.Assign(slot->head_counter, 1);
  segments_.AddPending(head.segment, 1);
  shard.unwritten.insert_or_assign(slot->page_number, UnwrittenPage::InSlot(slot));
  return absl::OkStatus();
}

bool HeadAppender::FitsOpenPage(const LogHead& head, uint32_t bytes, std::string_view key,
                                const KeyHash& hash) const {
  if (head.open == nullptr || head.open->builder.free_bytes() < bytes) return false;
  // Kept in ordered mode too: the store may be reopened in hash mode, which relies on it.
  return !TagClash(*head.open, key, TagOf(hash));
}

absl::Status HeadAppender::EnsureOpenRoom(Shard& shard, uint32_t bytes, std::string_view key,
                                          const KeyHash& hash, SegmentUse use) const {
  LogHead& head = shard.head;
  while (!FitsOpenPage(head, bytes, key, hash)) {
    if (head.open != nullptr) {
      SealOpenPage(shard);
      writer_.Wake();
    }
    if (!head.free_slots.empty()) {
      bool awaiting_writer = false;
      NVKV_RETURN_IF_ERROR(OpenNewPage(shard, use, &awaiting_writer));
      if (!awaiting_writer) return absl::OkStatus();
    }
    NVKV_RETURN_IF_ERROR(WaitForWriter(shard));
  }
  return absl::OkStatus();
}

absl::Status HeadAppender::ReserveForBatch(Shard& shard,
                                           const std::vector<PlannedRecord>& records,
                                           SegmentUse use) const {
  LogHead& head = shard.head;
  head.reserved_pages = 0;  // an earlier batch's, unused
  while (true) {
    const uint32_t fresh = PlanFreshPages(head, records);
    // Waiting for more page buffers than the shard owns, or for more pages than a segment has,
    // would never end. max_batch_bytes() keeps every batch below both, except in hash mode when
    // keys of the batch collide on their index tags and must go to different pages.
    const uint64_t owned = std::min<uint64_t>(shard.slots.size(), shape_.geometry.log_pages());
    if (fresh > owned) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", records.size(), " records needs ", fresh,
                       " pages; a shard has ", shard.slots.size(), " page buffers and a segment ",
                       shape_.geometry.log_pages(), " pages for its log"));
    }
    uint64_t summary_bytes = 0;
    for (const PlannedRecord& r : records) summary_bytes += head.summary.EntryBytes(r.key.size());
    if (!RoomFor(head, fresh, summary_bytes)) {
      bool awaiting_writer = false;
      NVKV_RETURN_IF_ERROR(EnsureSegmentRoom(shard, fresh, summary_bytes, use, &awaiting_writer));
      if (awaiting_writer) NVKV_RETURN_IF_ERROR(WaitForWriter(shard));
      continue;  // the open page was sealed: plan again
    }
    // The head's segment may be one compaction took from the reserve: a batch must not fill it
    // while the store is down to what user writes must leave, as a single put must not
    // (EnsureSegmentRoom). Its pages then open as compaction's, within the room reserved here.
    NVKV_RETURN_IF_ERROR(segments_.CheckReserve(use));
    if (head.free_slots.size() >= fresh) {
      head.reserved_pages = fresh;
      return absl::OkStatus();
    }
    NVKV_RETURN_IF_ERROR(WaitForWriter(shard));
  }
}

uint64_t HeadAppender::AppendToOpenPage(Shard& shard, const RecordHeader& header,
                                        std::string_view key, std::string_view value,
                                        const KeyHash& hash) const {
  PageSlot* open = shard.head.open;
  NVKV_CHECK(open != nullptr);
  const uint32_t offset = open->builder.AddRecord(header, key, value);
  NVKV_CHECK(offset != 0);
  open->tags.emplace_back(TagOf(hash), offset);
  shard.head.summary.Add(hash, key, header, shape_.geometry.PageInSegment(open->page_number));
  segments_.contents().Note(open->segment, hash, header.sequence,
                       RecordBytes(key.size(), value.size()),
                       header.type == static_cast<uint8_t>(RecordType::kDelete));
  return open->page_number;
}

void HeadAppender::ApplyToIndex(Shard& shard, std::string_view key, const KeyHash& hash,
                                const CurrentRecord& current, bool is_delete, uint64_t new_page,
                                uint32_t record_bytes, std::string_view value,
                                Change change) const {
  if (current.found) {
    segments_.AddLive(shape_.geometry.SegmentOf(current.location.page),
                      -static_cast<int64_t>(current.record_bytes));
  }
  if (current.blind) {
    segments_.AddLikelyStale(shape_.geometry.SegmentOf(current.likely_replaced), record_bytes);
    ++shard.stale_entries;
  }
  for (const auto& [location, bytes] : current.stale) {
    if (shard.index->Erase(hash.lo, key, location.index_value())) {
      segments_.AddLive(shape_.geometry.SegmentOf(location.page), -static_cast<int64_t>(bytes));
      shard.ErasedStale(1);
    }
  }
  if (is_delete) {
    if (current.found) shard.index->Erase(hash.lo, key, current.location.index_value());
    shard.cache->Erase(key);
    return;
  }
  const Location new_location = shape_.IndexedAt(new_page, record_bytes);
  if (change == Change::kRelocation) {
    shard.cache->Move(key, current.location, new_location);
  } else {
    shard.cache->Put(key, hash.lo, value, new_location);
  }
  const uint64_t location = new_location.index_value();
  bool placed = false;
  if (current.found) {
    placed = shard.index->Replace(hash.lo, key, current.location.index_value(), location);
    // A current entry was re-checked under this lock, so it is there; unless it is a damaged
    // one, which is only possibly the key's: another op of the same batch (a key with the same
    // tag) may have replaced it already, and then this key gets an entry of its own.
    NVKV_CHECK(placed || current.damaged);
  }
  if (!placed) {
    // Cannot fail: Open rules out page numbers beyond the index's range, and the caller made
    // room for the entry (MakeRoomFor) before it appended the record.
    const absl::Status inserted = shard.index->Insert(hash.lo, key, location);
    NVKV_CHECK(inserted.ok());
  }
  segments_.AddLive(shape_.geometry.SegmentOf(new_page), record_bytes);
}

absl::Status HeadAppender::AppendLarge(Shard& shard, storage::Device& queue,
                                       const RecordHeader& header, std::string_view key,
                                       std::string_view value, const KeyHash& hash,
                                       const CurrentRecord& current, SegmentUse use, bool fua,
                                       bool* lost_race, uint64_t* last_counter) const {
  const Geometry& g = shape_.geometry;
  const uint32_t count = LargeRecordPages(g, key.size(), value.size());
  const uint32_t record_bytes = RecordBytes(key.size(), value.size());
  LargeRun run{.pages = count};
  RecordHeader h = header;
  h.flags |= kRecordLarge;
  {
    absl::MutexLock lock(&shard.mu);
    std::vector<uint64_t> scratch;
    LogHead& head = shard.head;
    while (true) {
      // Compaction passes the record's own page as `current` with candidates it checked itself.
      const bool still_current =
          use == SegmentUse::kCompaction
              ? shard.IndexPointsAt(hash, key, current.location)
              : shard.StillHasCandidates(hash, key, current.candidates, &scratch);
      if (!still_current) {
        *lost_race = true;
        return absl::OkStatus();
      }
      if (current.AddsIndexEntry(/*is_delete=*/false)) {
        NVKV_RETURN_IF_ERROR(shard.index->MakeRoomFor(1));
      }
      bool awaiting_writer = false;
      const uint64_t entry = head.summary.EntryBytes(key.size());  // one for the whole run
      NVKV_RETURN_IF_ERROR(EnsureSegmentRoom(shard, count, entry, use, &awaiting_writer));
      if (!awaiting_writer) {
        SealOpenPage(shard);  // the run must come after every page already assigned
        if (RoomFor(head, count, entry)) break;
        NVKV_RETURN_IF_ERROR(EnsureSegmentRoom(shard, count, entry, use, &awaiting_writer));
        if (!awaiting_writer) break;
      }
      // Waiting releases the lock: what was checked above is checked again.
      NVKV_RETURN_IF_ERROR(WaitForWriter(shard));
    }
    if (use != SegmentUse::kCompaction) h.sequence = TakeSequences(1);
    run.first_page = g.FirstPageOf(head.segment) + head.next_page;
    run.first_in_segment = head.next_page;
    run.generation = head.generation;
    run.first_counter = head.next_counter;
    head.next_page += count;
    head.next_counter += count;
    head.durable.Assign(run.first_counter, count);
    segments_.AddPending(head.segment, static_cast<int32_t>(count));
    segments_.contents().Note(head.segment, hash, h.sequence, record_bytes, /*is_delete=*/false);
    head.summary.Add(hash, key, h, run.first_in_segment);
    for (uint32_t i = 0; i < count; ++i) {
      shard.unwritten.insert_or_assign(run.first_page + i, UnwrittenPage::LargeRunInFlight());
    }
    ApplyToIndex(shard, key, hash, current, /*is_delete=*/false, run.first_page, record_bytes,
                 value, use == SegmentUse::kCompaction ? Change::kRelocation : Change::kUserWrite);
    writer_.Wake();  // the sealed page before the run
  }
  // A durable run goes with FUA, or plainly and then the writer's flush (WaitDurable asks it).
  const bool device_fua = writer_.FuaFor(fua);
  absl::Status written = WriteLargeRun(queue, shape_, run, h, key, value, device_fua);
  {
    absl::MutexLock lock(&shard.mu);
    for (uint32_t i = 0; i < count; ++i) shard.unwritten.erase(run.first_page + i);
    writer_.PagesWritten(shard, run.first_counter, g.SegmentOf(run.first_page), count, written,
                         device_fua);
    if (!fua && use != SegmentUse::kCompaction) {
      shard.NoteNonDurable(run.first_counter + count - 1);
    }
  }
  // The writer holds this head's next waited-on page until the run is written (group commit),
  // and flushes the run when it went without FUA.
  writer_.Wake();
  if (!written.ok()) return written;
  *last_counter = run.first_counter + count - 1;
  return absl::OkStatus();
}

absl::StatusOr<bool> HeadAppender::Relocate(const ScannedRecord& record, const KeyHash& hash,
                                            storage::Device& queue) {
  Shard& shard = shards_.For(hash);
  const RecordHeader& header = record.header;
  const std::string_view key = record.key;
  const std::string_view value = record.value;
  const bool is_delete = header.type == static_cast<uint8_t>(RecordType::kDelete);
  CurrentRecord current;
  current.found = !is_delete;
  current.record_bytes = RecordBytes(key.size(), header.value_bytes);
  current.location = shape_.IndexedAt(record.page_number, current.record_bytes);
  if (!is_delete && IsLargeRecord(shape_.geometry, key.size(), header.value_bytes)) {
    // AppendLarge checks under the lock that the index still points here.
    bool lost_race = false;
    uint64_t last_counter = 0;
    NVKV_RETURN_IF_ERROR(AppendLarge(shard, queue, header, key, value, hash, current,
                                     SegmentUse::kCompaction, /*fua=*/false, &lost_race,
                                     &last_counter));
    return !lost_race;
  }
  absl::MutexLock lock(&shard.mu);
  if (!is_delete && !shard.IndexPointsAt(hash, key, current.location)) {
    return false;  // overwritten or deleted since compaction looked
  }
  const uint32_t bytes = RecordBytes(key.size(), value.size());
  NVKV_RETURN_IF_ERROR(EnsureOpenRoom(shard, bytes, key, hash, SegmentUse::kCompaction));
  // EnsureOpenRoom may have waited: check again that the key did not move meanwhile.
  if (!is_delete && !shard.IndexPointsAt(hash, key, current.location)) return false;
  RecordHeader h = header;
  h.flags &= static_cast<uint8_t>(~kRecordInBatch);  // a lone copy is no longer part of a batch
  h.batch_remaining = 0;
  const uint64_t page = AppendToOpenPage(shard, h, key, value, hash);
  if (!is_delete) {
    ApplyToIndex(shard, key, hash, current, false, page, bytes, value, Change::kRelocation);
  }
  return true;
}

uint64_t HeadAppender::HeadCountersSum() const {
  uint64_t sum = 0;
  for (const auto& shard : shards_) {
    absl::MutexLock shard_lock(&shard->mu);
    sum += shard->head.next_counter;
  }
  return sum;
}

void HeadAppender::SealOpenPages() {
  for (const auto& shard : shards_) {
    absl::MutexLock shard_lock(&shard->mu);
    SealOpenPage(*shard);
  }
  writer_.Wake();
}

void HeadAppender::SealHeads() {
  for (const auto& shard : shards_) {
    absl::MutexLock shard_lock(&shard->mu);
    LogHead& head = shard->head;
    SealOpenPage(*shard);
    if (head.has_segment) {
      LeaveSegment(*shard);
      head.has_segment = false;
    }
  }
  writer_.Wake();
}

}  // namespace nvkv::kv
