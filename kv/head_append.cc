// Appending to a shard's log head (head_append.h).
#include "kv/head_append.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

uint64_t NowMicros() { return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())); }

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

// Makes sure the head's segment has `pages` unassigned pages, moving to a new segment if not.
absl::Status EnsureSegmentRoom(Engine::Impl& engine, Shard& shard, uint32_t pages, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  if (head.has_segment && head.next_page + pages <= engine.geometry_.pages_per_segment) {
    // The head's segment may be one compaction took from the reserve: user writes must not
    // fill it while the store is down to what they must leave.
    return engine.segments_->CheckReserve(use);
  }
  if (pages > engine.geometry_.pages_per_segment) {
    // No segment is large enough: taking another would not help (and callers that loop until
    // the room is there would take every free segment).
    return absl::InvalidArgumentError(absl::StrCat(pages, " pages do not fit one segment of ",
                                                   engine.geometry_.pages_per_segment));
  }
  SealOpenPage(engine, shard);
  uint64_t generation = 0;
  absl::StatusOr<uint64_t> segment = engine.segments_->Allocate(use, &generation);
  if (!segment.ok()) return segment.status();
  if (head.has_segment) {
    engine.segments_->Seal(head.segment, LastWrite{shard.id, head.next_counter - 1});
  }
  head.has_segment = true;
  head.segment = *segment;
  head.generation = generation;
  head.next_page = 0;
  return absl::OkStatus();
}

// Fresh pages `records` need at the head, appended in order after what the open page holds.
// Mirrors the append loop in Write: a record goes to a new page when it does not fit or when
// its tag clashes with another key's on the current page.
uint32_t PlanFreshPages(const Engine::Impl& engine, const LogHead& head,
                        const std::vector<PlannedRecord>& records) {
  uint32_t fresh = 0;
  bool on_open = head.open != nullptr;
  uint32_t free_bytes = on_open ? head.open->builder.free_bytes() : 0;
  std::vector<std::pair<uint32_t, std::string_view>> placed;
  for (const PlannedRecord& r : records) {
    bool clash = false;
    const uint32_t tag = engine.TagOf(r.hash);
    if (on_open && TagClash(*head.open, r.key, tag)) clash = true;
    for (const auto& [other_tag, other_key] : placed) {
      if (other_tag == tag && other_key != r.key) clash = true;
    }
    if (r.bytes > free_bytes || clash) {
      ++fresh;
      on_open = false;
      free_bytes = engine.geometry_.payload_bytes();
      placed.clear();
    }
    free_bytes -= r.bytes;
    placed.emplace_back(tag, r.key);
  }
  return fresh;
}

// Writes a large record into `count` pages starting at `first_page` with `queue`.
absl::Status WriteLargeRun(Engine::Impl& engine, storage::Device& queue, uint64_t first_page,
                           uint32_t first_in_segment, uint64_t generation, uint64_t first_counter,
                           uint32_t count, const RecordHeader& header, std::string_view key,
                           std::string_view value, bool fua) {
  const Geometry& g = engine.geometry_;
  // A chunk at a time; a page at a time when this thread's reads of large values hold every
  // chunk of its queue (its page buffers: one per read slot, plus spares).
  storage::Buffer chunk = queue.buffers().GetChunk();
  const bool whole_chunk = chunk.valid();
  if (!whole_chunk) chunk = queue.buffers().GetPage();
  if (!chunk.valid()) return absl::InternalError("no buffer to write a large value from");
  const uint32_t pages_per_chunk = chunk.bytes / g.page_bytes;
  absl::Status status;
  size_t value_done = 0;
  uint32_t page = 0;
  while (page < count && status.ok()) {
    const uint32_t batch = std::min(pages_per_chunk, count - page);
    for (uint32_t i = 0; i < batch; ++i) {
      uint8_t* out = chunk.data + size_t{i} * g.page_bytes;
      const uint32_t index = page + i;
      PageBuilder builder;
      builder.Start(out, g, index == 0 ? PageType::kData : PageType::kContinuation, generation,
                    first_in_segment + index, first_counter + index);
      if (index == 0) {
        value_done = builder.StartLargeRecord(header, key, value);
      } else {
        value_done += builder.AddContinuation(value.substr(value_done));
      }
      builder.Finish(engine.store_seed_, first_page + index);
    }
    status = storage::WriteBlocks(queue, engine.LbaOf(first_page + page),
                                  batch * engine.blocks_per_page_, chunk, fua);
    page += batch;
  }
  if (whole_chunk) {
    queue.buffers().PutChunk(chunk);
  } else {
    queue.buffers().PutPage(chunk);
  }
  if (status.ok()) NVKV_CHECK(value_done == value.size());
  return status;
}

}  // namespace

// Finishes the open page, if any, and queues it for the writer.
void SealOpenPage(Engine::Impl& engine, Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  if (head.open == nullptr) return;
  head.open->builder.Finish(engine.store_seed_, head.open->page_number);
  head.sealed.push_back(head.open);
  head.open = nullptr;
  shard.wants_writer.store(true, std::memory_order_release);
}

// Opens a fresh page at the head (a free slot must be there).
absl::Status OpenNewPage(Engine::Impl& engine, Shard& shard, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  SealOpenPage(engine, shard);
  absl::Status room = EnsureSegmentRoom(engine, shard, 1, use);
  if (!room.ok()) return room;
  NVKV_CHECK(!head.free_slots.empty());
  PageSlot* slot = head.free_slots.back();
  head.free_slots.pop_back();
  slot->segment = head.segment;
  slot->page_number = engine.geometry_.FirstPageOf(head.segment) + head.next_page;
  slot->head_counter = head.next_counter++;
  slot->builder.Start(slot->buffer.data, engine.geometry_, PageType::kData, head.generation,
                      head.next_page, slot->head_counter);
  slot->tags.clear();
  slot->foreign.clear();
  ++head.next_page;
  head.open = slot;
  head.open_since_us = NowMicros();
  head.durable.Assign(slot->head_counter, 1);
  engine.segments_->AddPending(head.segment, 1);
  shard.unwritten.insert_or_assign(slot->page_number, UnwrittenPage::InSlot(slot));
  return absl::OkStatus();
}

// Whether a record of `bytes` for `key` can go into the open page as it is.
bool FitsOpenPage(const Engine::Impl& engine, const LogHead& head, uint32_t bytes,
                  std::string_view key, const KeyHash& hash) {
  if (head.open == nullptr || head.open->builder.free_bytes() < bytes) return false;
  // Kept in ordered mode too: the store may be reopened in hash mode, which relies on it.
  return !TagClash(*head.open, key, engine.TagOf(hash));
}

// Makes the open page one that takes a record of `bytes` for `key`. May wait for a free page
// buffer, releasing shard.mu meanwhile, so only callers holding no other lock may use it, and
// they must re-check what they read before.
absl::Status EnsureOpenRoom(Engine::Impl& engine, Shard& shard, uint32_t bytes,
                            std::string_view key, const KeyHash& hash, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  while (!FitsOpenPage(engine, head, bytes, key, hash)) {
    if (head.open != nullptr) {
      SealOpenPage(engine, shard);
      engine.writer_->Wake();
    }
    if (!head.free_slots.empty()) return OpenNewPage(engine, shard, use);
    // Back-pressure: every page buffer is sealed or in flight. The writer frees one soon.
    engine.writer_->Wake();
    if (absl::Status writer = engine.writer_->Status(); !writer.ok()) return writer;
    shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

// Appends one small record to the open page (room already ensured). Returns its page number.
uint64_t AppendToOpenPage(Engine::Impl& engine, Shard& shard, const RecordHeader& header,
                          std::string_view key, std::string_view value, const KeyHash& hash)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  PageSlot* open = shard.head.open;
  NVKV_CHECK(open != nullptr);
  const uint32_t offset = open->builder.AddRecord(header, key, value);
  NVKV_CHECK(offset != 0);
  open->tags.emplace_back(engine.TagOf(hash), offset);
  engine.segments_->NoteRecord(open->segment, hash, header.sequence,
                               RecordBytes(key.size(), value.size()),
                               header.type == static_cast<uint8_t>(RecordType::kDelete));
  return open->page_number;
}

// Records that the page of head counter `counter` holds a non-durable write about to be
// acknowledged (Shard::nondurable_through).
void NoteNonDurable(Shard& shard, uint64_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (counter > shard.nondurable_through.load(std::memory_order_relaxed)) {
    shard.nondurable_through.store(counter, std::memory_order_release);
  }
}

// True when writing `current`'s key adds an index entry rather than changing one (see
// ApplyToIndex): the key has no record, or only a damaged candidate that may not be its own.
bool AddsIndexEntry(const CurrentRecord& current, bool is_delete) {
  return !is_delete && (!current.found || current.damaged);
}

// Applies a record's effect on the index and live bytes. `current` is where the key's record
// was; `new_page` where the new one is (ignored for deletes).
void ApplyToIndex(Engine::Impl& engine, Shard& shard, std::string_view key, const KeyHash& hash,
                  const CurrentRecord& current, bool is_delete, uint64_t new_page,
                  uint32_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  const Geometry& g = engine.geometry_;
  if (current.found) {
    engine.segments_->AddLive(g.SegmentOf(current.location.page),
                              -static_cast<int64_t>(current.record_bytes));
  }
  if (is_delete) {
    if (current.found) shard.index->Erase(hash.lo, key, current.location.index_value());
    return;
  }
  const uint64_t location = engine.IndexedAt(new_page, record_bytes).index_value();
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
  engine.segments_->AddLive(g.SegmentOf(new_page), record_bytes);
}

// Whether the index still gives the candidates `current` was resolved from (a write that
// raced with another writer of the key, or with compaction, must resolve again).
bool SameCandidates(Shard& shard, const KeyHash& hash, std::string_view key,
                    const CurrentRecord& current, std::vector<uint64_t>* scratch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  shard.index->Find(hash.lo, key, scratch);
  std::vector<uint64_t> now = *scratch;
  std::vector<uint64_t> then = current.candidates;
  std::sort(now.begin(), now.end());
  std::sort(then.begin(), then.end());
  return now == then;
}

// Reserves segment room and page buffers for a batch at the head, so that appending it later,
// with other shards' locks held, never waits.
absl::Status ReserveForBatch(Engine::Impl& engine, Shard& shard,
                             const std::vector<PlannedRecord>& records, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  while (true) {
    const uint32_t fresh = PlanFreshPages(engine, head, records);
    // Waiting for more page buffers than the shard owns, or for more pages than a segment has,
    // would never end. max_batch_bytes() keeps every batch below both, except in hash mode when
    // keys of the batch collide on their index tags and must go to different pages.
    const uint64_t owned =
        std::min<uint64_t>(shard.slots.size(), engine.geometry_.pages_per_segment);
    if (fresh > owned) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", records.size(), " records needs ", fresh,
                       " pages; a shard has ", shard.slots.size(), " page buffers and a segment ",
                       engine.geometry_.pages_per_segment, " pages"));
    }
    if (!head.has_segment || head.next_page + fresh > engine.geometry_.pages_per_segment) {
      absl::Status room = EnsureSegmentRoom(engine, shard, fresh, use);
      if (!room.ok()) return room;
      continue;  // the open page was sealed: plan again
    }
    if (head.free_slots.size() >= fresh) return absl::OkStatus();
    engine.writer_->Wake();
    if (absl::Status writer = engine.writer_->Status(); !writer.ok()) return writer;
    shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(100));
  }
}

// Appends one large record (a Put whose record exceeds a page) for the key in `shard`, written
// with `queue`. On success *last_counter is the last head counter it used.
absl::Status AppendLarge(Engine::Impl& engine, Shard& shard, storage::Device& queue,
                         const RecordHeader& header, std::string_view key, std::string_view value,
                         const KeyHash& hash, const CurrentRecord& current, SegmentUse use,
                         bool fua, bool* lost_race, uint64_t* last_counter) {
  const Geometry& g = engine.geometry_;
  const uint32_t count = LargeRecordPages(g, key.size(), value.size());
  const uint32_t record_bytes = RecordBytes(key.size(), value.size());
  uint64_t first_page = 0, first_counter = 0;
  uint32_t first_in_segment = 0;
  uint64_t generation = 0;
  RecordHeader h = header;
  h.flags |= kRecordLarge;
  {
    absl::MutexLock lock(&shard.mu);
    std::vector<uint64_t> scratch;
    // Compaction passes the record's own page as `current` with candidates it checked itself.
    if (use != SegmentUse::kCompaction && !SameCandidates(shard, hash, key, current, &scratch)) {
      *lost_race = true;
      return absl::OkStatus();
    }
    if (use == SegmentUse::kCompaction && !shard.IndexPointsAt(hash, key, current.location)) {
      *lost_race = true;
      return absl::OkStatus();
    }
    if (AddsIndexEntry(current, /*is_delete=*/false)) {
      NVKV_RETURN_IF_ERROR(shard.index->MakeRoomFor(1));
    }
    absl::Status room = EnsureSegmentRoom(engine, shard, count, use);
    if (!room.ok()) return room;
    SealOpenPage(engine, shard);  // the run must come after every page already assigned
    LogHead& head = shard.head;
    if (head.next_page + count > g.pages_per_segment) {
      absl::Status again = EnsureSegmentRoom(engine, shard, count, use);
      if (!again.ok()) return again;
    }
    if (use != SegmentUse::kCompaction) h.sequence = engine.next_sequence_.fetch_add(1);
    first_page = g.FirstPageOf(head.segment) + head.next_page;
    first_in_segment = head.next_page;
    generation = head.generation;
    first_counter = head.next_counter;
    head.next_page += count;
    head.next_counter += count;
    head.durable.Assign(first_counter, count);
    engine.segments_->AddPending(head.segment, static_cast<int32_t>(count));
    engine.segments_->NoteRecord(head.segment, hash, h.sequence, record_bytes,
                                 /*is_delete=*/false);
    for (uint32_t i = 0; i < count; ++i) {
      shard.unwritten.insert_or_assign(first_page + i, UnwrittenPage::LargeRunInFlight());
    }
    ApplyToIndex(engine, shard, key, hash, current, /*is_delete=*/false, first_page, record_bytes);
    engine.writer_->Wake();  // the sealed page before the run
  }
  const bool device_fua = fua && engine.device_info_.volatile_write_cache;
  absl::Status written = WriteLargeRun(engine, queue, first_page, first_in_segment, generation,
                                       first_counter, count, h, key, value, device_fua);
  {
    absl::MutexLock lock(&shard.mu);
    for (uint32_t i = 0; i < count; ++i) shard.unwritten.erase(first_page + i);
    engine.writer_->PagesWritten(shard, first_counter, g.SegmentOf(first_page), count, written,
                               device_fua);
    if (!fua && use != SegmentUse::kCompaction) NoteNonDurable(shard, first_counter + count - 1);
  }
  if (!written.ok()) return written;
  *last_counter = first_counter + count - 1;
  return absl::OkStatus();
}

}  // namespace nvkv::kv
