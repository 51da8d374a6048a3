// CheckpointKeeper (checkpoint_keeper.h).
#include "kv/checkpoint_keeper.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kv/metadata_writer.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

CheckpointKeeper::CheckpointKeeper(const EngineParts& engine, const Checkpointer::Options& when)
    : engine_(engine),
      checkpointer_(std::make_unique<Checkpointer>(
          when, [this] { return engine_.appender.HeadCountersSum(); },
          [this]() -> absl::StatusOr<uint64_t> {
            absl::MutexLock lock(&mu_);
            return CheckpointLocked();
          })) {}

CheckpointKeeper::~CheckpointKeeper() { checkpointer_->Stop(); }

void CheckpointKeeper::StartFrom(const RecoveryReport& recovery) {
  // The log recovery read beyond the checkpoint it started from (all of it without one): the
  // next crash would read it again, until a checkpoint stands for it.
  const uint32_t log_pages = engine_.shape.geometry.log_pages();
  uint64_t log_pages_after = 0;
  switch (recovery.start) {
    case RecoveryStart::kCleanClose:
      break;
    case RecoveryStart::kBaseCheckpoint:
      log_pages_after = recovery.segments_after_base * log_pages;
      break;
    case RecoveryStart::kNewStore:
    case RecoveryStart::kLog:
      log_pages_after = (engine_.segments.count() - engine_.segments.free_count()) * log_pages;
      break;
  }
  const uint64_t log_pages_now = engine_.appender.HeadCountersSum();
  checkpointer_->StartFrom(log_pages_now, recovery.checkpoint_pages, log_pages_after);
  absl::MutexLock lock(&mu_);
  kept_is_current_ = recovery.start == RecoveryStart::kCleanClose;
  head_counters_at_kept_ = log_pages_now;
  segment_changes_at_kept_ = engine_.segments.segment_changes();
}

absl::Status CheckpointKeeper::WriteMapNow(storage::Device& queue) {
  return WriteMapAlone(engine_.segments, engine_.shape, queue, engine_.volatile_write_cache);
}

void CheckpointKeeper::Stop() {
  checkpointer_->Stop();
  absl::MutexLock lock(&mu_);  // an Engine::Checkpoint under way finishes
}

absl::StatusOr<uint64_t> CheckpointKeeper::Checkpoint() {
  absl::MutexLock lock(&mu_);
  return CheckpointLocked();
}

absl::Status CheckpointKeeper::WriteAtClose() {
  absl::MutexLock lock(&mu_);
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<storage::Device> queue, engine_.open_queue());
  if (KeptIsCurrent()) {
    // Nothing was written since the checkpoint kept was: it stands for the log as it is again,
    // and its pages are intact (held since: SegmentTable::KeepHeld, KeepFound).
    engine_.segments.MarkKept(MapState::kCheckpoint);
    return WriteMapNow(*queue);
  }
  // A checkpoint that cannot be written leaves the one kept, if any, the next Open's base.
  NVKV_ASSIGN_OR_RETURN(Taken taken, TakeNow());
  NVKV_RETURN_IF_ERROR(
      WriteThrough(*queue, taken, MapState::kCheckpoint, /*keep_free=*/0, nullptr).status());
  // The pages are made durable before the map names them: WriteMapAlone flushes first.
  return WriteMapNow(*queue);
}

bool CheckpointKeeper::KeptIsCurrent() {
  // (A victim compaction picked before the checkpoint may be freed after it without a record to
  // copy: hence the segment changes too.)
  return kept_is_current_ && engine_.segments.kept_count() > 0 &&
         engine_.segments.segment_changes() == segment_changes_at_kept_ &&
         engine_.appender.HeadCountersSum() == head_counters_at_kept_;
}

absl::StatusOr<CheckpointKeeper::Taken> CheckpointKeeper::TakeNow(TakenCheckpoint room) {
  CheckpointGlobals globals;
  globals.next_sequence = engine_.next_sequence.load();
  globals.dropped = &engine_.dropped;
  Taken taken;
  NVKV_ASSIGN_OR_RETURN(taken.checkpoint, TakeCheckpoint(engine_.shape, globals, engine_.segments,
                                                         engine_.shards, std::move(room)));
  taken.head_counters = engine_.appender.HeadCountersSum();
  taken.segment_changes = engine_.segments.segment_changes();
  return taken;
}

absl::StatusOr<uint64_t> CheckpointKeeper::WriteThrough(storage::Device& queue, Taken& taken,
                                                        MapState mark, uint64_t keep_free,
                                                        std::vector<SegmentMap::Ticket>* tickets) {
  // Called within WriteCheckpoint, mu_ still held.
  auto make_map_durable = [&](const SegmentMap::Ticket& ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // While running the writer writes the map; at Close it has stopped.
    return engine_.writer.started() ? engine_.writer.WaitMapDurable(ticket)
                                    : WriteMapNow(queue);
  };
  NVKV_ASSIGN_OR_RETURN(const WrittenCheckpoint written,
                        WriteCheckpoint(engine_.shape, queue, taken.checkpoint, keep_free,
                                        engine_.segments, make_map_durable));
  if (mark == MapState::kBaseCheckpoint && engine_.volatile_write_cache) {
    // The writer writes the map that names it: its pages must be durable before.
    const absl::Status flushed = storage::FlushDevice(queue);
    if (!flushed.ok()) {
      engine_.segments.Unhold(written.segments);
      return flushed;
    }
  }
  std::vector<SegmentMap::Ticket> naming =
      engine_.segments.KeepHeld(written.segments, written.pages, mark);
  if (tickets != nullptr) *tickets = std::move(naming);
  // It stands for the log as it was taken: written since, the engine is not where it stands.
  kept_is_current_ = true;
  head_counters_at_kept_ = taken.head_counters;
  segment_changes_at_kept_ = taken.segment_changes;
  return written.total_pages();
}

absl::StatusOr<uint64_t> CheckpointKeeper::CheckpointLocked() {
  NVKV_RETURN_IF_ERROR(engine_.may_write());
  const Geometry& g = engine_.shape.geometry;
  SegmentTable& segments = engine_.segments;
  // The heads and compaction must still find free segments afterwards.
  const uint64_t keep_free = segments.user_reserve() + engine_.shards.size();
  // Without room for one as large as the last, writes are not held back to find that out.
  const uint64_t needed = (checkpointer_->last_pages() + g.log_pages() - 1) / g.log_pages();
  if (segments.free_count() < needed + keep_free) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no room for a checkpoint: ", segments.free_count(), " free segments, ", needed,
        " for it and ", keep_free, " to keep free"));
  }
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<storage::Device> queue, engine_.open_queue());
  uint64_t pages = 0;
  std::vector<SegmentMap::Ticket> tickets;
  const absl::Time start = absl::Now();
  absl::Duration held;
  {
    // No victim is being cleaned meanwhile, until the table keeps it: compaction copies a
    // record only while it is its key's newest, which a copy decided before the checkpoint was
    // taken and written after would not be; and the segments it names must stay as it took them.
    Compactor::Pause pause(engine_.compactor);
    // Memory for it before writes are held back: as much as the last one took, and a quarter
    // more (the log grew since).
    TakenCheckpoint room;
    MakeRoomToTake(checkpointer_->last_pages() * g.payload_bytes() / 4 * 5, room);
    absl::StatusOr<Taken> taken;
    {
      // Writes wait only while it is taken. Every page written so far durable first: its
      // entries point at them. The heads go on in their segments afterwards, as after a clean
      // Close: what they write from then on is the log after it.
      absl::MutexLock gate(&engine_.append_gate);
      const absl::Time gate_start = absl::Now();
      engine_.appender.SealOpenPages();
      NVKV_RETURN_IF_ERROR(engine_.writer.WaitAllDurable());
      taken = TakeNow(std::move(room));
      held = absl::Now() - gate_start;
    }
    NVKV_RETURN_IF_ERROR(taken.status());
    NVKV_ASSIGN_OR_RETURN(pages, WriteThrough(*queue, *taken, MapState::kBaseCheckpoint,
                                              keep_free, &tickets));
    checkpointer_->Wrote(head_counters_at_kept_, pages);
  }
  // Writes go on while the writer writes the map pages that name it; it counts once they are
  // on the device.
  for (const SegmentMap::Ticket& ticket : tickets) {
    NVKV_RETURN_IF_ERROR(engine_.writer.WaitMapDurable(ticket));
  }
  nanos_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
  held_nanos_.fetch_add(absl::ToInt64Nanoseconds(held));
  return pages;
}

}  // namespace nvkv::kv
