// WritePath (write_path.h): Write (validation, resolving each key's current record, appending
// under the shard locks, waiting for durability). Appending to a head is HeadAppender
// (head_append.h).
//
// A write goes through three steps:
//  1. Resolve (no lock held while reading): find where each key's current record is. In hash
//     mode the index holds no key bytes, so a candidate page is read to confirm it holds the key
//     (ReadPath::ResolveCurrent); in ordered mode the index answers exactly.
//  2. Append (shard locks held, ascending): re-check that the index still says what step 1
//     saw (else retry), take sequence numbers, append the records to the open page of one head,
//     point the index at them, move live bytes.
//  3. Wait (durable writes): until the head's durable_through covers the last page appended.
#include "kv/write_path.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
      if (prepared[end].current.AddsIndexEntry(prepared[end].op->is_delete)) ++inserts;
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

absl::Status ValidateOps(const Geometry& geometry, uint64_t max_batch_bytes,
                         std::span<const WriteOp> ops) {
  if (ops.empty()) return absl::OkStatus();
  uint64_t total = 0;
  for (const WriteOp& op : ops) {
    if (op.key.empty()) return absl::InvalidArgumentError("empty key");
    if (op.key.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("key of ", op.key.size(), " bytes; the limit is ", kMaxKeyBytes));
    }
    if (!op.is_delete && op.value.size() > geometry.max_value_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("value of ", op.value.size(),
                                                     " bytes; the limit is ",
                                                     geometry.max_value_bytes()));
    }
    if (ops.size() > 1 && !op.is_delete &&
        IsLargeRecord(geometry, op.key.size(), op.value.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a value of ", op.value.size(), " bytes does not fit one page (",
          geometry.payload_bytes(), " bytes with its key); large values cannot be part "
          "of a batch"));
    }
    total += RecordBytes(op.key.size(), op.is_delete ? 0 : op.value.size());
  }
  if (ops.size() > 1 && total > max_batch_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", total, " bytes; the limit is ",
                                                   max_batch_bytes));
  }
  return absl::OkStatus();
}

// --- Write ---

// Points `p` at `op` (its `current` is resolved later, reusing its vectors).
void PointAt(const ShardSet& shards, const WriteOp& op, PreparedOp* p) {
  p->op = &op;
  p->hash = HashKey(op.key);
  p->shard = &shards.For(p->hash);
}

// The ops of a write that decide it, the last of each key, in shard order (the lock order), into
// *prepared, whose elements (and their vectors) are reused: a single op allocates nothing. Only
// std::vector allocates here (a failed allocation leaves *prepared to be prepared again): an
// Abseil table whose growth fails is left broken, even for its destructor.
void PrepareOps(const ShardSet& shards, std::span<const WriteOp> ops,
                std::vector<PreparedOp>* prepared) {
  prepared->resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) PointAt(shards, ops[i], &(*prepared)[i]);
  if (ops.size() == 1) return;
  // By shard, then key, then place in the batch (ops[] is in batch order): each key's ops side
  // by side, its last one last.
  std::sort(prepared->begin(), prepared->end(), [](const PreparedOp& a, const PreparedOp& b) {
    if (a.shard->id != b.shard->id) return a.shard->id < b.shard->id;
    if (a.op->key != b.op->key) return a.op->key < b.op->key;
    return a.op < b.op;
  });
  size_t kept = 0;
  for (size_t i = 0; i < prepared->size(); ++i) {
    const bool last_of_key =
        i + 1 == prepared->size() || (*prepared)[i + 1].op->key != (*prepared)[i].op->key;
    if (!last_of_key) continue;
    if (kept != i) std::swap((*prepared)[kept], (*prepared)[i]);
    ++kept;
  }
  prepared->resize(kept);
}

// Whether every key's index entries are still those its resolve saw. REQUIRES: every shard of
// `prepared` locked.
bool StillAsResolved(const std::vector<PreparedOp>& prepared, std::vector<uint64_t>* scratch) {
  for (const PreparedOp& p : prepared) {
    p.shard->mu.AssertHeld();
    if (!p.shard->StillHasCandidates(p.hash, p.op->key, p.current.candidates, scratch)) {
      return false;
    }
  }
  return true;
}

// Appends the records of `prepared`, in order, with consecutive sequence numbers, at
// `head_shard`'s head, and points each key's index at its record. Room and page buffers were
// reserved, so nothing here waits. Returns the head counter of the last page written to.
// REQUIRES: every shard of `prepared` locked.
uint64_t AppendPrepared(const HeadAppender& appender, UserWriteCounters& counters,
                        Shard& head_shard, const std::vector<PreparedOp>& prepared)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(head_shard.mu) {
  const bool single = prepared.size() == 1;
  const uint64_t first_sequence = appender.TakeSequences(prepared.size());
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
    if (!appender.FitsOpenPage(head_shard.head, bytes, p.op->key, p.hash)) {
      bool awaiting_writer = false;
      const absl::Status opened =
          appender.OpenNewPage(head_shard, SegmentUse::kCompaction, &awaiting_writer);
      NVKV_CHECK(opened.ok() && !awaiting_writer);  // the batch's room was reserved
      // Recovery drops a batch's tail whose first pages were lost (segment_scan.h).
      if (!single && i > 0) head_shard.head.open->builder.MarkContinuesBatch();
    }
    const uint64_t page = appender.AppendToOpenPage(head_shard, header, p.op->key, value, p.hash);
    PageSlot* open = head_shard.head.open;
    last_counter = open->head_counter;
    p.shard->mu.AssertHeld();
    if (p.shard != &head_shard &&
        p.shard->unwritten.emplace(page, UnwrittenPage::InSlot(open)).second) {
      // Readers of this key look in its own shard's map for pages still in memory.
      open->foreign.push_back(p.shard);
    }
    appender.ApplyToIndex(*p.shard, p.op->key, p.hash, p.current, p.op->is_delete, page, bytes,
                          value, HeadAppender::Change::kUserWrite);
    counters.user_bytes.fetch_add(p.op->key.size() + value.size());
    (p.op->is_delete ? counters.deletes : counters.puts).fetch_add(1);
    if (p.current.blind) counters.blind_writes.fetch_add(1, std::memory_order_relaxed);
  }
  if (!single) counters.batches.fetch_add(1);
  return last_counter;
}

// A write's ops as its attempts need them. Each thread reuses one (ThreadWritePlan), so that a
// single Put allocates nothing once the thread has written before.
struct WritePlan {
  std::vector<PreparedOp> prepared;  // in shard order; the first shard's head takes the records
  bool single = false;               // one record: no batch marker, no reservation
  std::vector<PlannedRecord> planned;  // a batch's records, to reserve their pages at once
  uint32_t total_bytes = 0;
  SegmentUse use = SegmentUse::kUserPut;
  std::vector<uint64_t> scratch;  // StillAsResolved's
  Shard& head_shard() const { return *prepared.front().shard; }
  bool single_large(const Geometry& geometry) const {
    const WriteOp& op = *prepared.front().op;
    return single && !op.is_delete && IsLargeRecord(geometry, op.key.size(), op.value.size());
  }
};

// This thread's plan, for one Write at a time (Write never runs inside another on one thread).
WritePlan& ThreadWritePlan() {
  thread_local WritePlan plan;
  return plan;
}

// The plan of `ops` into *plan (its vectors reused).
void PlanOps(const ShardSet& shards, std::span<const WriteOp> ops, WritePlan* plan) {
  PrepareOps(shards, ops, &plan->prepared);
  plan->single = plan->prepared.size() == 1;
  plan->planned.clear();
  plan->total_bytes = 0;
  bool all_deletes = true;
  for (const PreparedOp& p : plan->prepared) {
    const uint32_t bytes =
        RecordBytes(p.op->key.size(), p.op->is_delete ? 0 : p.op->value.size());
    if (!plan->single) plan->planned.push_back({p.op->key, p.hash, bytes});
    plan->total_bytes += bytes;
    all_deletes = all_deletes && p.op->is_delete;
  }
  plan->use = all_deletes ? SegmentUse::kUserDelete : SegmentUse::kUserPut;
}

// Errors: kResourceExhausted when the plan's vectors cannot grow. Nothing is locked or changed
// yet, and only std::vector allocates, so the failure is safe to return.
absl::Status PlanWrite(const ShardSet& shards, std::span<const WriteOp> ops, WritePlan* plan) {
  try {
    PlanOps(shards, ops, plan);
  } catch (const std::bad_alloc&) {
    plan->prepared.clear();
    plan->planned.clear();
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory to plan a write of ", ops.size(), " ops"));
  }
  return absl::OkStatus();
}

// How one attempt to append a resolved write went.
struct AppendAttempt {
  enum class Outcome {
    kAppended,  // last_counter is the head counter of the last page it wrote to
    kRaced,     // the index changed since the resolve: resolve again
    kNoRoom,    // `status` says why; compaction may free room (kResourceExhausted)
    kFailed,    // `status` says why; final
  };
  Outcome outcome = Outcome::kAppended;
  absl::Status status;
  uint64_t last_counter = 0;
};

// Appends a single large record, written by the calling thread through `queue`.
AppendAttempt AppendLargeWrite(const HeadAppender& appender, UserWriteCounters& counters,
                               const WritePlan& plan, storage::Device& queue, bool durable) {
  const PreparedOp& p = plan.prepared.front();
  AppendAttempt attempt;
  bool lost_race = false;
  attempt.status = appender.AppendLarge(
      plan.head_shard(), queue, MakeHeader(*p.op, 0), p.op->key, p.op->value, p.hash, p.current,
      plan.use, durable, &lost_race, &attempt.last_counter);
  if (!attempt.status.ok()) {
    attempt.outcome = AppendAttempt::Outcome::kNoRoom;
  } else if (lost_race) {
    attempt.outcome = AppendAttempt::Outcome::kRaced;
  } else {
    counters.puts.fetch_add(1);
    counters.user_bytes.fetch_add(p.op->key.size() + p.op->value.size());
    if (p.current.blind) counters.blind_writes.fetch_add(1, std::memory_order_relaxed);
  }
  return attempt;
}

// Appends records that fit pages: makes room on the head shard first (may wait, holding only
// its lock), then locks the other shards in ascending order, re-checks what the resolve saw,
// and appends.
AppendAttempt AppendPageWrite(const HeadAppender& appender, LogWriter& writer,
                              UserWriteCounters& counters, WritePlan& plan, bool durable) {
  Shard& head_shard = plan.head_shard();
  AppendAttempt attempt;
  head_shard.mu.Lock();
  const PreparedOp& first = plan.prepared.front();
  attempt.status =
      plan.single ? appender.EnsureOpenRoom(head_shard, plan.total_bytes, first.op->key,
                                            first.hash, plan.use)
                  : appender.ReserveForBatch(head_shard, plan.planned, plan.use);
  if (!attempt.status.ok()) {
    head_shard.mu.Unlock();
    attempt.outcome = AppendAttempt::Outcome::kNoRoom;
    return attempt;
  }
  const std::vector<Shard*> others = LockOtherShards(plan.prepared, head_shard);
  if (!StillAsResolved(plan.prepared, &plan.scratch)) {
    UnlockShards(head_shard, others);
    attempt.outcome = AppendAttempt::Outcome::kRaced;
    return attempt;
  }
  attempt.status = MakeIndexRoom(plan.prepared);
  if (!attempt.status.ok()) {
    UnlockShards(head_shard, others);
    attempt.outcome = AppendAttempt::Outcome::kFailed;
    return attempt;
  }
  attempt.last_counter = AppendPrepared(appender, counters, head_shard, plan.prepared);
  bool sealed_foreign = false;
  if (head_shard.head.open != nullptr && !head_shard.head.open->foreign.empty()) {
    // Other shards' readers read this page under their own locks: it must not change anymore
    // (pages the batch filled before were sealed when it moved on).
    appender.SealOpenPage(head_shard);
    sealed_foreign = true;
  }
  if (!durable) {
    // Make sure the writer knows there is an open page to age out.
    head_shard.wants_writer.store(true, std::memory_order_release);
    head_shard.NoteNonDurable(attempt.last_counter);
  }
  UnlockShards(head_shard, others);
  if (sealed_foreign) writer.Wake();
  return attempt;
}

}  // namespace

absl::Status WritePath::Write(std::span<const WriteOp> ops, bool durable) {
  if (engine_.error.failed()) return engine_.error.status();
  if (ops.empty()) return absl::OkStatus();
  NVKV_ASSIGN_OR_RETURN(const AppendedWrite appended, AppendWrite(ops, durable));
  // 3. Wait (durable writes).
  if (!durable) return absl::OkStatus();
  // A delete of a key that is not there wrote nothing. But the key may be absent only because
  // of a write that is not durable yet (another thread's delete, or a batch on any head): a
  // durable delete returns once everything its answer rests on is durable.
  if (appended.head_shard == nullptr) return engine_.writer.WaitAllDurable();
  NVKV_RETURN_IF_ERROR(engine_.writer.WaitDurable(*appended.head_shard, appended.last_counter));
  return engine_.writer.WaitEarlierNonDurable();
}

absl::Status WritePath::WriteAsync(std::span<const WriteOp> ops, bool durable,
                                   WriteCallback done) {
  if (engine_.error.failed()) return engine_.error.status();
  NVKV_ASSIGN_OR_RETURN(ReadQueue* queue, engine_.reads.ThisThreadQueue());
  AsyncWrites& writes = queue->writes;
  if (writes.pending() >= engine_.write_queue_depth) {
    return absl::UnavailableError(absl::StrCat(
        "too many asynchronous writes pending on this thread (", writes.pending(),
        "; write_queue_depth ", engine_.write_queue_depth, "): Poll first"));
  }
  if (durable) NVKV_RETURN_IF_ERROR(writes.PrepareToWait());
  NVKV_ASSIGN_OR_RETURN(const AppendedWrite appended, AppendWrite(ops, durable));
  if (!durable || ops.empty()) {
    writes.AddReady(std::move(done), absl::OkStatus());
    return absl::OkStatus();
  }
  // What Write would wait for (above), as marks for Poll to check.
  DurabilityMarks& marks = writes.next_marks();
  if (appended.head_shard == nullptr) {
    engine_.writer.MarkAllAssigned(&marks);
  } else {
    marks.emplace_back(appended.head_shard, appended.last_counter);
    engine_.writer.MarkEarlierNonDurable(&marks);
  }
  engine_.writer.Request(marks);
  writes.AddWaiting(std::move(done));
  return absl::OkStatus();
}

absl::StatusOr<WritePath::AppendedWrite> WritePath::AppendWrite(
    std::span<const WriteOp> ops, bool durable) {
  NVKV_RETURN_IF_ERROR(ValidateOps(engine_.shape.geometry, engine_.max_batch_bytes, ops));
  if (ops.empty()) return AppendedWrite{};
  WritePlan& plan = ThreadWritePlan();
  NVKV_RETURN_IF_ERROR(PlanWrite(engine_.shards, ops, &plan));
  bool may_write_blind = true;
  for (int attempt = 0; attempt < kMaxResolveRetries; ++attempt) {
    // 1. Resolve every key's current record without holding locks.
    bool any_blind = false;
    for (PreparedOp& p : plan.prepared) {
      const bool read_all = p.op->is_delete || !may_write_blind;
      NVKV_RETURN_IF_ERROR(engine_.reads.ResolveCurrent(p.op->key, p.hash, read_all, &p.current));
      any_blind = any_blind || p.current.blind;
    }
    // A delete of a key that is not there writes nothing (see Write for its durability).
    if (plan.single && plan.prepared[0].op->is_delete && !plan.prepared[0].current.found) {
      return AppendedWrite{};
    }
    // 2. Append (3 steps inside), not while a checkpoint is written (Checkpoint).
    AppendAttempt appended;
    if (plan.single_large(engine_.shape.geometry)) {
      NVKV_ASSIGN_OR_RETURN(ReadQueue* queue, engine_.reads.ThisThreadQueue());
      absl::ReaderMutexLock gate(&engine_.append_gate);
      appended = AppendLargeWrite(engine_.appender, counters_, plan, *queue->device, durable);
    } else {
      absl::ReaderMutexLock gate(&engine_.append_gate);
      appended = AppendPageWrite(engine_.appender, engine_.writer, counters_, plan, durable);
    }
    switch (appended.outcome) {
      case AppendAttempt::Outcome::kAppended:
        break;
      case AppendAttempt::Outcome::kRaced:
        continue;
      case AppendAttempt::Outcome::kNoRoom:
        // Store full: compaction may free a segment (once per attempt).
        if (CompactionFreedRoom(appended.status, plan.use, attempt)) continue;
        return appended.status;
      case AppendAttempt::Outcome::kFailed:
        if (any_blind && absl::IsResourceExhausted(appended.status)) {
          // The index cannot grow: an overwrite must replace its key's entry, not add one.
          may_write_blind = false;
          continue;
        }
        return appended.status;
    }
    return AppendedWrite{&plan.head_shard(), appended.last_counter};
  }
  return absl::AbortedError("write kept racing with concurrent writers of the same keys");
}

bool WritePath::CompactionFreedRoom(const absl::Status& status, SegmentUse use,
                                    int attempt) {
  if (!absl::IsResourceExhausted(status) || attempt + 1 >= kMaxResolveRetries) return false;
  if (!engine_.background_compaction) return false;
  engine_.compactor.Wake();
  return engine_.segments.WaitForFree(use, absl::Seconds(2));
}

}  // namespace nvkv::kv
