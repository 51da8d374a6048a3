// The writer thread: takes sealed pages from every shard, writes them in one submission, and
// turns completions into durability for the writers waiting on them (group commit).
//
// Durability rule. NVMe orders nothing between commands in flight, and a completed write may sit
// in a volatile cache. A page counts as durable when its write completed with FUA, or completed
// before a Flush that then completed (or the device has no volatile cache). A head's
// durable_through() moves only over a prefix of its pages that are all durable (DurablePrefix,
// durable_prefix.h), so without media damage no acknowledged write lies beyond the end of a
// segment's log that recovery finds.
//
// When the writer flushes (device with a volatile write cache). For a durable writer whose pages
// completed without FUA (DurablePrefix::NeedsFlush), at once. And on a timer, so that
// non-durable writes become durable within a bound even when no one waits
// (Options::max_write_delay_us): once some page has completed without being durable, and no
// flush in flight covers it, for max_write_delay_us. At most one flush is in flight; one covers every page completed before it
// was sent, so a steady non-durable load costs one flush per max_write_delay_us or per flush
// time, whichever is longer, not one per page. A write thus waits up to max_write_delay_us in an
// open page, its page's write time, up to max_write_delay_us (or the rest of a flush in flight,
// if longer), and a flush: durable within 2 x max_write_delay_us plus the device's write and
// flush time (plus one more flush time when flushes take longer than max_write_delay_us).
#include <algorithm>

#include "absl/time/clock.h"
#include "kv/engine_impl.h"
#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

uint64_t NowMicros() { return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())); }

}  // namespace

void Engine::Impl::WakeWriter() {
  absl::MutexLock lock(&writer_mu_);
  writer_wake_ = true;
  writer_cv_.Signal();
}

void Engine::Impl::OnPageWritten(storage::IoRequest* request) {
  auto* slot = static_cast<PageSlot*>(request->context);
  Engine::Impl& engine = *slot->engine;
  Shard& shard = *slot->shard;
  const bool ok = request->status.ok();
  if (!ok) engine.SetBroken(request->status);
  if (ok) {
    // The page is on the device: other shards' readers may read it there. This must happen
    // before the slot is recycled below (readers of those shards hold only their own lock).
    for (Shard* other : slot->foreign) {
      absl::MutexLock other_lock(&other->mu);
      other->unwritten.erase(slot->page_number);
    }
  }
  absl::MutexLock lock(&shard.mu);
  // Ranges are in counter order and can number thousands between flushes of non-durable
  // writes: find this page's by binary search, not a walk from the front.
  shard.head.durable.Complete(slot->head_counter, /*failed=*/!ok,
                              request->fua || !engine.device_info_.volatile_write_cache,
                              engine.flush_epoch_.load());
  engine.segments_->AddPending(slot->segment, -1);
  if (ok) {
    engine.pages_written_.fetch_add(1, std::memory_order_relaxed);
    engine.device_bytes_.fetch_add(engine.geometry_.page_bytes, std::memory_order_relaxed);
    if (request->fua) engine.fua_writes_.fetch_add(1, std::memory_order_relaxed);
    shard.unwritten.erase(slot->page_number);
    shard.head.free_slots.push_back(slot);
  }
  // A failed page stays in `unwritten` (reads keep seeing what was acknowledged in memory until
  // the store is reopened) and its buffer is not reused.
  shard.changed.SignalAll();
}

void Engine::Impl::OnFlushDone(storage::IoRequest* request) {
  auto* engine = static_cast<Engine::Impl*>(request->context);
  engine->flush_in_flight_ = false;
  if (!request->status.ok()) {
    engine->SetBroken(request->status);
  } else {
    engine->flushes_.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& shard : engine->shards_) {
    absl::MutexLock lock(&shard->mu);
    if (request->status.ok()) shard->head.durable.Flushed(engine->flush_request_epoch_);
    shard->changed.SignalAll();
  }
}

void Engine::Impl::WriterLoop() {
  storage::Device& queue = *writer_queue_;
  const bool volatile_cache = device_info_.volatile_write_cache;
  std::vector<PageSlot*> batch;
  // Since when (writer's clock, microseconds) some completed page has been neither durable nor
  // covered by a flush in flight; 0 while there is none.
  uint64_t unflushed_since_us = 0;
  while (true) {
    batch.clear();
    bool want_flush = false;
    bool open_pages = false;
    bool unflushed = false;
    bool unfinished = false;
    const uint64_t now = NowMicros();
    const bool stopping = writer_stopping_.load();
    for (auto& shard_ptr : shards_) {
      Shard& shard = *shard_ptr;
      absl::MutexLock lock(&shard.mu);
      LogHead& head = shard.head;
      shard.wants_writer.store(false, std::memory_order_relaxed);
      if (head.open != nullptr) {
        const bool empty = head.open->builder.empty();
        const bool waited_on = head.durable.wanted() >= head.open->head_counter;
        // `now` was read before this lock: a page opened since then has open_since_us > now,
        // and now - open_since_us would wrap around to "aged".
        const bool aged = now >= head.open_since_us + options_.max_write_delay_us;
        // An empty open page is written (empty) only when a flush waits for it: a write that
        // opened it and then retried may have ended up writing nothing (a delete of a key that
        // another thread deleted meanwhile), and Flush waits for every page assigned.
        if (waited_on || (!empty && (aged || stopping))) {
          head.open->builder.Finish(store_seed_, head.open->page_number);
          head.sealed.push_back(head.open);
          head.open = nullptr;
        } else if (!empty) {
          open_pages = true;
        }
      }
      for (PageSlot* slot : head.sealed) {
        // FUA only for pages someone waits on; the rest are made durable by a later Flush.
        slot->request.fua = volatile_cache && head.durable.wanted() >= slot->head_counter;
        batch.push_back(slot);
      }
      head.sealed.clear();
      if (volatile_cache && !flush_in_flight_ && !broken_.load() &&
          head.durable.NeedsFlush()) {
        want_flush = true;  // a failed flush breaks the store: never retried
      }
      if (volatile_cache && !unflushed &&
          head.durable.HasUnflushed(flush_in_flight_, flush_request_epoch_, &unfinished)) {
        unflushed = true;
      }
    }
    if (!unflushed) {
      unflushed_since_us = 0;
    } else if (unflushed_since_us == 0) {
      unflushed_since_us = now;
    }
    const uint64_t flush_due_us = unflushed_since_us + options_.max_write_delay_us;
    if (unflushed && now >= flush_due_us && !flush_in_flight_ && !broken_.load()) {
      want_flush = true;
    }
    for (PageSlot* slot : batch) {
      slot->request.op = storage::IoOp::kWrite;
      slot->request.lba = LbaOf(slot->page_number);
      slot->request.lba_count = blocks_per_page_;
      slot->request.buffer = slot->buffer;
      slot->request.on_done = OnPageWritten;
      slot->request.context = slot;
      // The queue is as deep as there are page slots, so this cannot be refused for space.
      absl::Status status = queue.Enqueue(&slot->request);
      if (!status.ok()) {
        slot->request.status = status;
        OnPageWritten(&slot->request);
      }
    }
    if (want_flush) {
      unflushed_since_us = 0;  // it covers every page completed so far
      flush_request_epoch_ = flush_epoch_.fetch_add(1);
      flush_request_ = storage::IoRequest{};
      flush_request_.op = storage::IoOp::kFlush;
      flush_request_.on_done = OnFlushDone;
      flush_request_.context = this;
      flush_in_flight_ = true;
      absl::Status status = queue.Enqueue(&flush_request_);
      if (!status.ok()) {
        flush_request_.status = status;
        OnFlushDone(&flush_request_);
      }
    }
    if (queue.in_flight() > 0) {
      // Submits what was queued and waits for at least one completion, in one system call.
      absl::StatusOr<uint32_t> reaped = queue.Reap(batch.empty() && !want_flush ? 1 : 0);
      if (!reaped.ok()) SetBroken(reaped.status());
      if (!reaped.ok() && queue.in_flight() > 0) {
        // The queue is broken: nothing more will complete. Fail the waiters and stop writing.
        break;
      }
      continue;
    }
    if (stopping && batch.empty() && !want_flush && !open_pages) break;
    absl::MutexLock lock(&writer_mu_);
    if (!writer_wake_) {
      // Wake for the oldest open page to age out, a large run to be flushed once written, and a
      // timed flush to fall due.
      uint64_t delay_us = open_pages || unfinished
                              ? std::max<uint32_t>(options_.max_write_delay_us, 50)
                              : 100000;
      if (unflushed && !flush_in_flight_) {
        delay_us = std::min(delay_us, std::max<uint64_t>(flush_due_us - std::min(now, flush_due_us),
                                                         50));
      }
      writer_cv_.WaitWithTimeout(&writer_mu_, absl::Microseconds(delay_us));
    }
    writer_wake_ = false;
  }
  // Whoever still waits for a page to become durable or for a page buffer would wait forever:
  // wake them all, to find writer_exited_ (WriterStatus) under their shard's lock.
  writer_exited_.store(true);
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->changed.SignalAll();
  }
}

}  // namespace nvkv::kv
