// The write path: Write (validation, resolving each key's current record, appending under the
// shard locks, waiting for durability), and the RecordMover compaction uses. Appending to a
// head is head_append.h.
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
#include "kv/head_append.h"
#include "kv/read_queue.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

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

// --- Validation ---

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

// --- Write ---

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
