// ReadPath (read_path.h): Get, MultiGet, GetAsync and Poll on per-thread read queues, ordered
// scans, and the identity check the write path needs in hash mode (ResolveCurrent).
#include "kv/read_path.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/key_entries.h"
#include "kv/page_lookup.h"
#include "kv/read_queue.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

ReadPath::ReadPath(const EngineParts& engine)
    : engine_(engine),
      lookup_(engine.shape, engine.shards, engine.dropped_batch_records, engine.segments),
      queues_(std::make_shared<ReadQueueSet>()) {}

ReadPath::~ReadPath() { Close(); }

void ReadPath::Close() { queues_->Close(); }

size_t ReadPath::queue_count() const { return queues_->size(); }

absl::Status ReadPath::GetAsync(std::string_view key, GetCallback callback) {
  return StartRead(key, std::move(callback), ReadPurpose::kAsync);
}

absl::Status ReadPath::StartRead(std::string_view key, GetCallback callback,
                                 ReadPurpose purpose) {
  NVKV_RETURN_IF_ERROR(engine_.check_open());
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key of ", key.size(), " bytes; keys are 1 to ",
                                                   kMaxKeyBytes, " bytes"));
  }
  absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
  if (!queue.ok()) return queue.status();
  if ((*queue)->free_ops.empty()) {
    return absl::UnavailableError("too many reads in flight on this thread: Poll first");
  }
  ReadOp* op = (*queue)->free_ops.back();
  (*queue)->free_ops.pop_back();
  gets_.fetch_add(1, std::memory_order_relaxed);
  op->key.assign(key);
  op->hash = HashKey(key);
  op->restarts = 0;
  op->purpose = purpose;
  op->callback = std::move(callback);
  // Answers found during GetAsync itself wait in `ready` for Poll: one contract for callers.
  op->state = ReadState::kStarting;
  lookup_.Start(op);
  // Unless it finished already (then it is free, or a callback run meanwhile reused it).
  if (op->state == ReadState::kStarting) op->state = ReadState::kRunning;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadPath::Poll(uint32_t min_complete) {
  absl::StatusOr<ReadQueue*> queue_or = ThisThreadQueue();
  if (!queue_or.ok()) return queue_or.status();
  ReadQueue& queue = **queue_or;
  AsyncWrites& writes = queue.writes;
  const uint64_t before = queue.finished;
  // Runs every callback that is due, reads' and writes'.
  auto run_ready = [&queue, &writes] {
    while (!queue.ready.empty() || writes.has_ready()) {
      // Swap out first: callbacks may start reads that land in `ready` again.
      auto batch = std::move(queue.ready);
      queue.ready.clear();
      for (auto& [callback, result] : batch) {
        ++queue.finished;
        callback(std::move(result));
      }
      queue.finished += writes.RunReady();
    }
  };
  writes.Collect();
  run_ready();
  while (true) {
    const bool satisfied = queue.finished - before >= min_complete;
    const bool reads = queue.reads_in_flight() > 0;
    if (satisfied) {
      // A last pass that does not wait: submits what GetAsync queued, harvests what is done.
      if (reads) {
        absl::StatusOr<uint32_t> reaped = queue.device->Reap(0);
        if (!reaped.ok()) return reaped.status();
        writes.Collect();
        run_ready();
      }
      break;
    }
    if (!reads && !writes.has_waiting()) break;  // nothing more can finish
    // Checked once more before any wait, after every write added so far (callbacks that ran
    // above may have started some): the writer signals this thread only for a write it finds
    // waiting when it sees a move, so a write that became durable before it was added, or
    // before the writer looked, is seen here. Callbacks that are due run first.
    writes.Collect();
    if (writes.has_ready()) {
      run_ready();
      continue;
    }
    if (reads || writes.wake_armed()) {
      // Wait for reads, or, with writes waiting, for the writer's signal (an event armed on
      // this queue where it can carry one, or still armed from an earlier wait; elsewhere Reap
      // finishes every read without blocking). With only reads to wait for, as many as
      // callbacks are still wanted, in one wait (one wake-up, not one per read), but no more
      // than are in flight, each of which completes. With writes waiting, the first completion
      // or the writer's signal: a durable write's callback is not held back behind reads.
      const uint64_t wanted = min_complete - (queue.finished - before);
      uint32_t wait_for = 1;
      if (writes.has_waiting()) {
        writes.wake()->ArmOn(*queue.device);
      } else {
        wait_for = static_cast<uint32_t>(
            std::max<uint64_t>(1, std::min<uint64_t>(wanted, queue.reads_in_flight())));
      }
      absl::StatusOr<uint32_t> reaped = queue.device->Reap(wait_for);
      if (!reaped.ok()) return reaped.status();
    } else if (writes.has_waiting()) {
      writes.wake()->Wait();
    }
    // Whatever woke the thread (a stale signal at worst: the loop checks again) is handled here.
    writes.Collect();
    run_ready();
  }
  // No write waits any more: end the event's wait now, on this thread (the only one that may
  // enter this queue's ring), so that nothing is left in flight when another thread closes the
  // store and destroys the queue.
  if (!writes.has_waiting() && writes.wake_armed()) {
    absl::Status disarmed = writes.wake()->Disarm(*queue.device);
    if (!disarmed.ok()) return disarmed;
    run_ready();  // reads that completed meanwhile
  }
  return static_cast<uint32_t>(queue.finished - before);
}

uint32_t ReadPath::pending_reads() {
  absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
  if (!queue.ok()) return 0;
  return static_cast<uint32_t>((*queue)->ops.size() - (*queue)->free_ops.size() +
                               (*queue)->ready.size());
}

uint32_t ReadPath::pending_writes() {
  absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
  if (!queue.ok()) return 0;
  return (*queue)->writes.pending();
}

absl::Status ReadPath::ReapInternally(ReadQueue& queue) {
  ReapScope scope(queue);
  return queue.device->Reap(1).status();
}

absl::StatusOr<std::string> ReadPath::Get(std::string_view key) {
  std::vector<std::string_view> keys{key};
  std::vector<absl::StatusOr<std::string>> values;
  MultiGet(keys, &values);
  return std::move(values.front());
}

void ReadPath::MultiGet(std::span<const std::string_view> keys,
                        std::vector<absl::StatusOr<std::string>>* values) {
  values->assign(keys.size(), absl::UnknownError("read did not finish"));
  absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
  if (!queue.ok()) {
    values->assign(keys.size(), queue.status());
    return;
  }
  size_t remaining = keys.size();
  auto fail_rest = [&](const absl::Status& status) {
    for (auto& value : *values) {
      if (absl::IsUnknown(value.status())) value = status;
    }
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    auto on_done = [values, i, &remaining](absl::StatusOr<std::string> value) {
      (*values)[i] = std::move(value);
      --remaining;
    };
    absl::Status started = StartRead(keys[i], on_done, ReadPurpose::kSync);
    while (absl::IsUnavailable(started)) {
      // Every slot is busy: let one finish, then go on issuing. Reads issued so far are all in
      // flight while we wait.
      absl::Status reaped = ReapInternally(**queue);
      if (!reaped.ok()) {
        fail_rest(reaped);
        return;
      }
      started = StartRead(keys[i], on_done, ReadPurpose::kSync);
    }
    if (!started.ok()) {
      (*values)[i] = started;
      --remaining;
    }
  }
  while (remaining > 0) {
    absl::Status reaped = ReapInternally(**queue);
    if (!reaped.ok()) {
      fail_rest(reaped);
      return;
    }
  }
}

absl::Status ReadPath::ResolveCurrent(std::string_view key, const KeyHash& hash,
                                      bool read_all, CurrentRecord* current) {
  current->Reset();
  Shard& shard = engine_.shards.For(hash);
  {
    absl::MutexLock lock(&shard.mu);
    shard.index->Find(hash.lo, key, &current->candidates);
    if (engine_.shape.ordered) {
      current->exact_candidates = true;
      if (!current->candidates.empty()) {
        current->found = true;
        current->location = Location::FromIndexValue(current->candidates.front());
        current->record_bytes = current->location.record_bytes;
      }
      return absl::OkStatus();
    }
    if (ResolveWithoutReading(shard, key, read_all, current)) return absl::OkStatus();
  }
  return ResolveByReading(key, hash, current);
}

bool ReadPath::ResolveWithoutReading(Shard& shard, std::string_view key, bool read_all,
                                     CurrentRecord* current) {
  // No candidate at all: a new key.
  if (current->candidates.empty()) return true;
  // A cached key's entry says where its current record is (record_cache.h). The entry's place is
  // one of the key's index entries; one that is not would make the write replace another key's
  // entry, so it is never trusted blindly.
  if (const RecordCache::Entry* cached = shard.cache->Find(key)) {
    const bool indexed =
        std::find(current->candidates.begin(), current->candidates.end(),
                  cached->location.index_value()) != current->candidates.end();
    NVKV_DCHECK(indexed);
    if (indexed && (!read_all || current->candidates.size() == 1)) {
      current->found = true;
      current->location = cached->location;
      current->record_bytes = RecordBytes(key.size(), cached->value.size());
      return true;
    }
    if (!indexed) shard.cache->Erase(key);
  }
  if (read_all) return false;
  // A candidate in a segment compaction retained may be on a damaged page: read them, so that
  // the write replaces a damaged entry of the key (PageLookup) and the segment can be freed.
  for (uint64_t candidate : current->candidates) {
    const uint64_t page = Location::FromIndexValue(candidate).page;
    if (page >= kSuperblockPages &&
        engine_.segments.IsRetained(engine_.shape.geometry.SegmentOf(page))) {
      return false;
    }
  }
  // The first candidate that is the key's, or that is not in memory, decides.
  std::optional<uint64_t> first_unseen;  // page of the first candidate not in memory
  for (uint64_t candidate : current->candidates) {
    const Location location = Location::FromIndexValue(candidate);
    uint32_t record_bytes = 0;
    const InMemory in_memory = LookInMemory(shard, location.page, key, &record_bytes);
    if (in_memory == InMemory::kHoldsNot) continue;
    if (in_memory == InMemory::kHoldsKey) {
      // Rare behind a candidate on the device: the new record may go to this very page, whose
      // entry must then be replaced, not added again. Read.
      if (first_unseen) return false;
      current->found = true;
      current->location = location;
      current->record_bytes = record_bytes;
      return true;
    }
    if (!first_unseen) first_unseen = location.page;
  }
  if (!first_unseen) return true;  // every candidate is another key's, in memory
  // On the device, or a large value being written: the key's current record is probably there
  // (a candidate of another key is rare, Index::Find), but the write does not wait to find out.
  // Its new entry goes first; compaction settles the rest (key_entries.h).
  current->blind = true;
  current->likely_replaced = *first_unseen;
  return true;
}

absl::Status ReadPath::ResolveByReading(std::string_view key, const KeyHash& hash,
                                        CurrentRecord* current) {
  absl::StatusOr<ReadQueue*> queue = ThisThreadQueue();
  if (!queue.ok()) return queue.status();
  ReadOp op;
  op.lookup = &lookup_;
  op.queue = *queue;
  op.page = (*queue)->device->buffers().GetPage();
  if (!op.page.valid()) return absl::ResourceExhaustedError("no page buffer for a key check");
  op.key.assign(key);
  op.hash = hash;
  op.purpose = ReadPurpose::kKeyCheck;
  op.state = ReadState::kRunning;
  op.resolved = current;
  lookup_.Start(&op);
  {
    ReapScope scope(**queue);
    while (op.state != ReadState::kFinished) {
      absl::StatusOr<uint32_t> reaped = (*queue)->device->Reap(1);
      if (!reaped.ok()) {
        op.key_check_status = reaped.status();
        break;
      }
    }
  }
  (*queue)->device->buffers().PutPage(op.page);
  if (op.chunk.valid()) (*queue)->device->buffers().PutChunk(op.chunk);
  if (!op.key_check_status.ok()) return op.key_check_status;
  verify_reads_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status ReadPath::Scan(std::string_view start, std::string_view end, size_t limit,
                            std::vector<std::pair<std::string, std::string>>* out) {
  out->clear();
  NVKV_RETURN_IF_ERROR(engine_.check_open());
  if (!engine_.shape.ordered) {
    return absl::FailedPreconditionError(
        "scans need an ordered store (open with index_mode = kOrdered)");
  }
  std::string cursor(start);
  bool exclusive = false;
  while (out->size() < limit) {
    // Take the next keys from every shard and merge: the smallest `want` overall are exact.
    const size_t want = std::min<size_t>(limit - out->size(), 256);
    std::vector<std::pair<std::string, uint64_t>> merged, part;
    for (auto& shard : engine_.shards) {
      absl::MutexLock lock(&shard->mu);
      absl::Status status = shard->index->Scan(cursor, exclusive, want, &part);
      if (!status.ok()) return status;
      for (auto& entry : part) merged.push_back(std::move(entry));
    }
    std::sort(merged.begin(), merged.end());
    if (merged.size() > want) merged.resize(want);
    if (!end.empty()) {
      while (!merged.empty() && merged.back().first >= end) merged.pop_back();
    }
    if (merged.empty()) break;
    std::vector<std::string_view> keys;
    keys.reserve(merged.size());
    for (const auto& entry : merged) keys.push_back(entry.first);
    std::vector<absl::StatusOr<std::string>> values;
    MultiGet(keys, &values);
    for (size_t i = 0; i < merged.size(); ++i) {
      if (absl::IsNotFound(values[i].status())) continue;  // deleted since the index said so
      if (!values[i].ok()) return values[i].status();
      out->emplace_back(merged[i].first, std::move(*values[i]));
    }
    cursor = merged.back().first;
    exclusive = true;
    if (merged.size() < want) break;
  }
  return absl::OkStatus();
}

}  // namespace nvkv::kv
