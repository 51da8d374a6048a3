// The write path: appending records to a shard's log head, group commit, and the index and
// live-byte updates that make a write visible.
//
// A write goes through three steps:
//  1. Resolve (no lock held while reading): find where each key's current record is. In hash
//     mode the index holds no key bytes, so a candidate page is read to confirm it holds the key
//     (read_path.cc ResolveCurrent); in ordered mode the index answers exactly.
//  2. Append (shard locks held, ascending): re-check that the index still says what step 1
//     saw (else retry), take sequence numbers, append the records to the open page of one head,
//     point the index at them, move live bytes.
//  3. Wait (durable writes): until the head's durable_through covers the last page appended.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/engine_impl.h"
#include "kv/read_queue.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

uint64_t NowMicros() { return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())); }

struct PreparedOp {
  const WriteOp* op;
  KeyHash hash;
  Shard* shard;
  CurrentRecord current;
};

constexpr int kMaxResolveRetries = 64;

// A write locks its head shard by name, then the batch's other shards, a set known only at run
// time. Thread-safety analysis follows locks by name only, so the two helpers below are exempt
// from it, and code that touches another shard under this set says so with AssertHeld.
//
// Locks the shards of `prepared` (sorted by shard id: the lock order) other than `head`, each
// once, and returns them in locking order.
std::vector<Shard*> LockOtherShards(const std::vector<PreparedOp>& prepared, Shard& head)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(head.mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<Shard*> others;
  Shard* last = &head;
  for (const PreparedOp& p : prepared) {
    if (p.shard == last) continue;
    p.shard->mu.Lock();
    others.push_back(p.shard);
    last = p.shard;
  }
  return others;
}

// Unlocks `others` (from LockOtherShards) in reverse order, then `head`.
void UnlockShards(Shard& head, const std::vector<Shard*>& others)
    ABSL_UNLOCK_FUNCTION(head.mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (auto it = others.rbegin(); it != others.rend(); ++it) (*it)->mu.Unlock();
  head.mu.Unlock();
}

}  // namespace

// --- Head management (callers hold shard.mu) ---

namespace {

void SealOpenPage(Engine::Impl& engine, Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  if (head.open == nullptr) return;
  head.open->builder.Finish(engine.store_seed_, head.open->page_number);
  head.sealed.push_back(head.open);
  head.open = nullptr;
  shard.wants_writer.store(true, std::memory_order_release);
}

// Makes sure the head's segment has `pages` unassigned pages, moving to a new segment if not.
absl::Status EnsureSegmentRoom(Engine::Impl& engine, Shard& shard, uint32_t pages,
                               SegmentUse use) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  LogHead& head = shard.head;
  if (head.has_segment && head.next_page + pages <= engine.geometry_.pages_per_segment) {
    // The head's segment may be one compaction took from the reserve: user writes must not
    // fill it while the store is down to what they must leave.
    return engine.segments_->CheckReserve(use);
  }
  if (pages > engine.geometry_.pages_per_segment) {
    // No segment is large enough: taking another would not help (and callers that loop until
    // the room is there would take every free segment).
    return absl::InvalidArgumentError(absl::StrCat(
        pages, " pages do not fit one segment of ", engine.geometry_.pages_per_segment));
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

// True when `key` may not join `slot`'s page: another key with the same index tag is on it.
// Records that the page of head counter `counter` holds a non-durable write about to be
// acknowledged (Shard::nondurable_through).
void NoteNonDurable(Shard& shard, uint64_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (counter > shard.nondurable_through.load(std::memory_order_relaxed)) {
    shard.nondurable_through.store(counter, std::memory_order_release);
  }
}

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

// Whether a record of `bytes` for `key` can go into the open page as it is.
bool FitsOpenPage(const Engine::Impl& engine, const LogHead& head, uint32_t bytes,
                  std::string_view key, const KeyHash& hash) {
  if (head.open == nullptr || head.open->builder.free_bytes() < bytes) return false;
  // Kept in ordered mode too: the store may be reopened in hash mode, which relies on it.
  return !TagClash(*head.open, key, engine.TagOf(hash));
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

// True when writing `current`'s key adds an index entry rather than changing one (see
// ApplyToIndex): the key has no record, or only a damaged candidate that may not be its own.
bool AddsIndexEntry(const CurrentRecord& current, bool is_delete) {
  return !is_delete && (!current.found || current.damaged);
}

// Grows the index of each shard the ops go to, if it must, for the entries they add, so that
// ApplyToIndex cannot fail once their records are appended. REQUIRES: `prepared` sorted by
// shard, every shard's lock held.
absl::Status MakeIndexRoom(const std::vector<PreparedOp>& prepared) {
  for (size_t begin = 0, end = 0; begin < prepared.size(); begin = end) {
    Shard& shard = *prepared[begin].shard;
    uint64_t inserts = 0;
    for (end = begin; end < prepared.size() && prepared[end].shard == &shard; ++end) {
      if (AddsIndexEntry(prepared[end].current, prepared[end].op->is_delete)) ++inserts;
    }
    shard.mu.AssertHeld();
    if (inserts > 0) NVKV_RETURN_IF_ERROR(shard.index->MakeRoomFor(inserts));
  }
  return absl::OkStatus();
}

RecordHeader MakeHeader(const WriteOp& op, uint64_t sequence) {
  RecordHeader header{};
  header.type = static_cast<uint8_t>(op.is_delete ? RecordType::kDelete : RecordType::kPut);
  header.key_bytes = static_cast<uint16_t>(op.key.size());
  header.value_bytes = op.is_delete ? 0 : static_cast<uint32_t>(op.value.size());
  header.sequence = sequence;
  return header;
}

}  // namespace

// Fresh pages `records` need at the head, appended in order after what the open page holds.
// Mirrors the append loop in Write: a record goes to a new page when it does not fit or when
// its tag clashes with another key's on the current page.
struct PlannedRecord {
  std::string_view key;
  KeyHash hash;
  uint32_t bytes;
};

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
    const uint64_t owned = std::min<uint64_t>(shard.slots.size(),
                                              engine.geometry_.pages_per_segment);
    if (fresh > owned) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch of ", records.size(), " records needs ", fresh, " pages; a shard has ",
          shard.slots.size(), " page buffers and a segment ",
          engine.geometry_.pages_per_segment, " pages"));
    }
    if (!head.has_segment ||
        head.next_page + fresh > engine.geometry_.pages_per_segment) {
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

// --- Validation ---

namespace {

absl::Status ValidateOps(const Engine::Impl& engine, std::span<const WriteOp> ops) {
  if (ops.empty()) return absl::OkStatus();
  uint64_t total = 0;
  for (const WriteOp& op : ops) {
    if (op.key.empty()) return absl::InvalidArgumentError("empty key");
    if (op.key.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("key of ", op.key.size(), " bytes; the limit is ", kMaxKeyBytes));
    }
    if (!op.is_delete && op.value.size() > engine.geometry_.max_value_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("value of ", op.value.size(),
                                                     " bytes; the limit is ",
                                                     engine.geometry_.max_value_bytes()));
    }
    if (ops.size() > 1 && !op.is_delete &&
        IsLargeRecord(engine.geometry_, op.key.size(), op.value.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a value of ", op.value.size(), " bytes does not fit one page (",
          engine.geometry_.payload_bytes(), " bytes with its key); large values cannot be part "
          "of a batch"));
    }
    total += RecordBytes(op.key.size(), op.is_delete ? 0 : op.value.size());
  }
  if (ops.size() > 1 && total > engine.max_batch_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", total, " bytes; the limit is ",
                                                   engine.max_batch_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace

// --- Large records: a run of pages written by the calling thread ---

namespace {

// Writes a large record into `count` pages starting at `first_page` with `queue`.
absl::Status WriteLargeRun(Engine::Impl& engine, storage::Device& queue, uint64_t first_page,
                           uint32_t first_in_segment, uint64_t generation,
                           uint64_t first_counter, uint32_t count, const RecordHeader& header,
                           std::string_view key, std::string_view value, bool fua) {
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

namespace {

// Appends one large record (a Put whose record exceeds a page) for the key in `shard`, written
// with `queue`. On success *last_counter is the last head counter it used.
absl::Status AppendLarge(Engine::Impl& engine, Shard& shard, storage::Device& queue,
                         const RecordHeader& header, std::string_view key,
                         std::string_view value, const KeyHash& hash,
                         const CurrentRecord& current, SegmentUse use, bool fua,
                         bool* lost_race, uint64_t* last_counter) {
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
    ApplyToIndex(engine, shard, key, hash, current, /*is_delete=*/false, first_page,
                 record_bytes);
    engine.writer_->Wake();  // the sealed page before the run
  }
  const bool device_fua = fua && engine.device_info_.volatile_write_cache;
  absl::Status written = WriteLargeRun(engine, queue, first_page, first_in_segment, generation,
                                       first_counter, count, h, key, value, device_fua);
  {
    absl::MutexLock lock(&shard.mu);
    for (uint32_t i = 0; i < count; ++i) shard.unwritten.erase(first_page + i);
    engine.writer_->RunWritten(shard, first_counter, g.SegmentOf(first_page), count, written,
                               device_fua);
    if (!fua && use != SegmentUse::kCompaction) NoteNonDurable(shard, first_counter + count - 1);
  }
  if (!written.ok()) return written;
  *last_counter = first_counter + count - 1;
  return absl::OkStatus();
}

}  // namespace

// --- Write ---

namespace {

// The ops of a write that decide it, the last of each key, in shard order (the lock order).
std::vector<PreparedOp> PrepareOps(Engine::Impl& engine, std::span<const WriteOp> ops) {
  std::vector<PreparedOp> prepared;
  prepared.reserve(ops.size());
  absl::flat_hash_map<std::string_view, size_t> last;
  for (size_t i = 0; i < ops.size(); ++i) last[ops[i].key] = i;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (last[ops[i].key] != i) continue;
    PreparedOp p;
    p.op = &ops[i];
    p.hash = HashKey(ops[i].key);
    p.shard = &engine.ShardFor(p.hash);
    prepared.push_back(std::move(p));
  }
  std::sort(prepared.begin(), prepared.end(),
            [](const PreparedOp& a, const PreparedOp& b) { return a.shard->id < b.shard->id; });
  return prepared;
}

// Whether every key's index entries are still those its resolve saw. REQUIRES: every shard of
// `prepared` locked.
bool StillAsResolved(const std::vector<PreparedOp>& prepared) {
  std::vector<uint64_t> scratch;
  for (const PreparedOp& p : prepared) {
    p.shard->mu.AssertHeld();
    if (!SameCandidates(*p.shard, p.hash, p.op->key, p.current, &scratch)) return false;
  }
  return true;
}

// Appends the records of `prepared`, in order, with consecutive sequence numbers, at
// `head_shard`'s head, and points each key's index at its record. Room and page buffers were
// reserved, so nothing here waits. Returns the head counter of the last page written to.
// REQUIRES: every shard of `prepared` locked.
uint64_t AppendPrepared(Engine::Impl& engine, Shard& head_shard,
                        const std::vector<PreparedOp>& prepared)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(head_shard.mu) {
  const bool single = prepared.size() == 1;
  const uint64_t first_sequence = engine.next_sequence_.fetch_add(prepared.size());
  uint64_t last_counter = 0;
  for (size_t i = 0; i < prepared.size(); ++i) {
    const PreparedOp& p = prepared[i];
    RecordHeader header = MakeHeader(*p.op, first_sequence + i);
    if (!single) {
      header.flags |= kRecordInBatch;
      header.batch_remaining = static_cast<uint32_t>(prepared.size() - 1 - i);
    }
    const std::string_view value = p.op->is_delete ? std::string_view() : p.op->value;
    const uint32_t bytes = RecordBytes(p.op->key.size(), value.size());
    if (!FitsOpenPage(engine, head_shard.head, bytes, p.op->key, p.hash)) {
      const absl::Status opened = OpenNewPage(engine, head_shard, SegmentUse::kCompaction);
      NVKV_CHECK(opened.ok());
      // Recovery drops a batch's tail whose first pages were lost (segment_scan.h).
      if (!single && i > 0) head_shard.head.open->builder.MarkContinuesBatch();
    }
    const uint64_t page = AppendToOpenPage(engine, head_shard, header, p.op->key, value, p.hash);
    PageSlot* open = head_shard.head.open;
    last_counter = open->head_counter;
    p.shard->mu.AssertHeld();
    if (p.shard != &head_shard &&
        p.shard->unwritten.emplace(page, UnwrittenPage::InSlot(open)).second) {
      // Readers of this key look in its own shard's map for pages still in memory.
      open->foreign.push_back(p.shard);
    }
    ApplyToIndex(engine, *p.shard, p.op->key, p.hash, p.current, p.op->is_delete, page, bytes);
    engine.user_bytes_.fetch_add(p.op->key.size() + value.size());
    (p.op->is_delete ? engine.deletes_ : engine.puts_).fetch_add(1);
  }
  if (!single) engine.batches_.fetch_add(1);
  return last_counter;
}

}  // namespace

absl::Status Engine::Impl::Write(std::span<const WriteOp> ops, bool durable) {
  absl::Status open = CheckOpen();
  if (!open.ok()) return open;
  if (error_.failed()) return error_.status();
  absl::Status valid = ValidateOps(*this, ops);
  if (!valid.ok() || ops.empty()) return valid;

  std::vector<PreparedOp> prepared = PrepareOps(*this, ops);
  Shard& head_shard = *prepared.front().shard;  // the lowest shard's head takes the records
  const bool single = prepared.size() == 1;
  // A batch reserves room for all its records at once (ReserveForBatch); a single record needs
  // only its size.
  std::vector<PlannedRecord> planned;
  uint32_t total_bytes = 0;
  for (const PreparedOp& p : prepared) {
    const uint32_t bytes =
        RecordBytes(p.op->key.size(), p.op->is_delete ? 0 : p.op->value.size());
    if (!single) planned.push_back({p.op->key, p.hash, bytes});
    total_bytes += bytes;
  }
  const bool all_deletes = std::all_of(prepared.begin(), prepared.end(),
                                       [](const PreparedOp& p) { return p.op->is_delete; });
  const SegmentUse use = all_deletes ? SegmentUse::kUserDelete : SegmentUse::kUserPut;

  // Store full: gives compaction a chance to free a segment, once per attempt. True when it did
  // (the caller tries again); false when the caller should return `status`: at once when
  // nothing cleans in the background, or when nothing is worth cleaning (WaitForFree).
  auto compaction_freed_room = [this, use](const absl::Status& status, int attempt) {
    if (!absl::IsResourceExhausted(status) || attempt + 1 >= kMaxResolveRetries) return false;
    if (!options_.background_compaction) return false;
    compactor_->Wake();
    return segments_->WaitForFree(use, absl::Seconds(2));
  };
  for (int attempt = 0; attempt < kMaxResolveRetries; ++attempt) {
    // 1. Resolve every key's current record without holding locks.
    for (PreparedOp& p : prepared) {
      absl::StatusOr<CurrentRecord> current = ResolveCurrent(p.op->key, p.hash);
      if (!current.ok()) return current.status();
      p.current = std::move(*current);
    }
    // A delete of a key that is not there writes nothing. But the key may be absent only
    // because of a write that is not durable yet (another thread's delete, or a batch on any
    // head): a durable delete returns once everything its answer rests on is durable.
    if (single && prepared[0].op->is_delete && !prepared[0].current.found) {
      return durable ? Flush() : absl::OkStatus();
    }
    uint64_t last_counter = 0;
    const WriteOp& first = *prepared.front().op;
    if (single && !first.is_delete &&
        IsLargeRecord(geometry_, first.key.size(), first.value.size())) {
      absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
      if (!queue.ok()) return queue.status();
      bool lost_race = false;
      absl::Status status = AppendLarge(*this, head_shard, *(*queue)->device, MakeHeader(first, 0),
                                        first.key, first.value, prepared[0].hash,
                                        prepared[0].current, use, durable, &lost_race,
                                        &last_counter);
      if (compaction_freed_room(status, attempt)) continue;
      if (!status.ok()) return status;
      if (lost_race) continue;
      puts_.fetch_add(1);
      user_bytes_.fetch_add(first.key.size() + first.value.size());
    } else {
      // 2. Make room on the head shard first (may wait, holding only its lock), then lock the
      //    other shards in ascending order and re-check what step 1 saw.
      head_shard.mu.Lock();
      absl::Status room =
          single ? EnsureOpenRoom(*this, head_shard, total_bytes, first.key,
                                  prepared.front().hash, use)
                 : ReserveForBatch(*this, head_shard, planned, use);
      if (!room.ok()) {
        head_shard.mu.Unlock();
        if (compaction_freed_room(room, attempt)) continue;
        return room;
      }
      const std::vector<Shard*> others = LockOtherShards(prepared, head_shard);
      if (!StillAsResolved(prepared)) {
        UnlockShards(head_shard, others);
        continue;
      }
      if (absl::Status index_room = MakeIndexRoom(prepared); !index_room.ok()) {
        UnlockShards(head_shard, others);
        return index_room;
      }
      // 3. Append.
      last_counter = AppendPrepared(*this, head_shard, prepared);
      bool sealed_foreign = false;
      if (head_shard.head.open != nullptr && !head_shard.head.open->foreign.empty()) {
        // Other shards' readers read this page under their own locks: it must not change
        // anymore (pages the batch filled before were sealed when it moved on).
        SealOpenPage(*this, head_shard);
        sealed_foreign = true;
      }
      if (!durable) {
        // Make sure the writer knows there is an open page to age out.
        head_shard.wants_writer.store(true, std::memory_order_release);
        NoteNonDurable(head_shard, last_counter);
      }
      UnlockShards(head_shard, others);
      if (sealed_foreign) writer_->Wake();
    }
    // 4. Wait (durable writes).
    if (!durable) return absl::OkStatus();
    NVKV_RETURN_IF_ERROR(writer_->WaitDurable(head_shard, last_counter));
    return writer_->WaitEarlierNonDurable();
  }
  return absl::AbortedError("write kept racing with concurrent writers of the same keys");
}

absl::StatusOr<bool> Engine::Impl::Relocate(const ScannedRecord& record, const KeyHash& hash,
                                            storage::Device& queue) {
  Shard& shard = ShardFor(hash);
  const RecordHeader& header = record.header;
  const std::string_view key = record.key;
  const std::string_view value = record.value;
  const bool is_delete = header.type == static_cast<uint8_t>(RecordType::kDelete);
  CurrentRecord current;
  current.found = !is_delete;
  current.record_bytes = RecordBytes(key.size(), header.value_bytes);
  current.location = IndexedAt(record.page_number, current.record_bytes);
  if (!is_delete && IsLargeRecord(geometry_, key.size(), header.value_bytes)) {
    // AppendLarge checks under the lock that the index still points here.
    bool lost_race = false;
    uint64_t last_counter = 0;
    absl::Status status = AppendLarge(*this, shard, queue, header, key, value, hash, current,
                                      SegmentUse::kCompaction, /*fua=*/false, &lost_race,
                                      &last_counter);
    if (!status.ok()) return status;
    return !lost_race;
  }
  absl::MutexLock lock(&shard.mu);
  if (!is_delete && !shard.IndexPointsAt(hash, key, current.location)) {
    return false;  // overwritten or deleted since compaction looked
  }
  const uint32_t bytes = RecordBytes(key.size(), value.size());
  absl::Status room = EnsureOpenRoom(*this, shard, bytes, key, hash, SegmentUse::kCompaction);
  if (!room.ok()) return room;
  // EnsureOpenRoom may have waited: check again that the key did not move meanwhile.
  if (!is_delete && !shard.IndexPointsAt(hash, key, current.location)) return false;
  RecordHeader h = header;
  h.flags &= static_cast<uint8_t>(~kRecordInBatch);  // a lone copy is no longer part of a batch
  h.batch_remaining = 0;
  const uint64_t page = AppendToOpenPage(*this, shard, h, key, value, hash);
  if (!is_delete) ApplyToIndex(*this, shard, key, hash, current, false, page, bytes);
  return true;
}

void Engine::Impl::SealHeads() {
  for (auto& shard : shards_) {
    absl::MutexLock shard_lock(&shard->mu);
    LogHead& head = shard->head;
    SealOpenPage(*this, *shard);
    if (head.has_segment) {
      segments_->Seal(head.segment, LastWrite{shard->id, head.next_counter - 1});
      head.has_segment = false;
    }
  }
  writer_->Wake();
}

}  // namespace nvkv::kv
