// The log writer (log_writer.h): the writer thread, its flush policy, and durability waits.
#include "kv/log_writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "storage/base/check.h"
#include "storage/base/start_thread.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

uint64_t NowMicros() { return static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())); }

// Pages one write command of the writer carries at most: 256 KiB, or the device's transfer limit
// when lower (0: none).
uint32_t MaxCommandPages(const storage::DeviceInfo& device, uint32_t page_bytes) {
  uint64_t bytes = 256 * 1024;
  if (device.max_transfer_bytes != 0) bytes = std::min<uint64_t>(bytes, device.max_transfer_bytes);
  // On zones every command is a Zone Append, which the device may limit further.
  if (device.zoned && device.zones.max_append_blocks != 0) {
    bytes = std::min<uint64_t>(bytes, uint64_t{device.zones.max_append_blocks} * device.lba_bytes);
  }
  return std::max<uint32_t>(1, static_cast<uint32_t>(bytes / page_bytes));
}

}  // namespace

LogWriter::LogWriter(const Options& options, const StoreShape& shape,
                     const ShardSet& shards, SegmentTable& segments,
                     StickyError& error, WriteCounters& counters,
                     std::unique_ptr<storage::Device> queue,
                     std::unique_ptr<storage::EventFd> wake_event)
    : options_(options),
      shape_(shape),
      max_command_pages_(MaxCommandPages(queue->info(), shape.geometry.page_bytes)),
      shards_(shards),
      segments_(segments),
      error_(error),
      counters_(counters),
      wake_event_(std::move(wake_event)),
      queue_(std::move(queue)),
      metadata_(*this, shape_, shards, segments, error, counters, *queue_,
                options.volatile_cache) {}

LogWriter::~LogWriter() { Stop(); }

void LogWriter::QueueSummary(SummaryWrite write) {
  metadata_.Queue(std::move(write));
  Wake();
}

void LogWriter::QueueLeftZone(Shard& shard, uint64_t segment, uint64_t last_counter,
                              bool finish) {
  WantLocked(shard, last_counter);
  metadata_.QueueLeftZone(LeftZone{&shard, segment, last_counter, finish});
  Wake();
}

absl::Status LogWriter::Start() {
  NVKV_CHECK(!thread_.joinable());
  return StartThread("the log writer thread", thread_, [this] { Loop(); });
}

void LogWriter::Stop() {
  stopping_.store(true);
  if (!thread_.joinable()) return;
  Wake();
  thread_.join();
}

void LogWriter::Wake() {
  {
    absl::MutexLock lock(&mu_);
    wake_ = true;
    wake_cv_.Signal();
  }
  if (reaping_.load()) wake_event_->Signal();
}

absl::Status LogWriter::ReapOrWake() {
  reaping_.store(true);
  bool woken = false;
  {
    absl::MutexLock lock(&mu_);
    woken = wake_;
  }
  // Woken already: collect the new work at once (and whatever completed meanwhile). Else wait
  // for a completion or the wake event; where the event cannot be armed, for a completion only
  // (as on queues that finish everything inside Reap).
  if (!woken) wake_event_->ArmOn(*queue_);
  absl::StatusOr<uint32_t> reaped = queue_->Reap(woken ? 0 : 1);
  reaping_.store(false);
  // A signal sent after the wake_ check above (and not read by an armed wait) stays in the
  // eventfd and only makes the next armed wait end at once: one extra pass, no system call now.
  return reaped.status();
}

absl::Status LogWriter::Status() const {
  if (error_.failed()) return error_.status();
  if (exited_.load()) {
    return absl::FailedPreconditionError(
        "the store is closing: its writer thread has stopped, so nothing more becomes durable");
  }
  return absl::OkStatus();
}

absl::Status LogWriter::WaitDurable(Shard& shard, uint64_t counter) {
  absl::MutexLock lock(&shard.mu);
  LogHead& head = shard.head;
  if (!WantLocked(shard, counter)) return absl::OkStatus();
  Wake();
  while (head.durable.durable_through() < counter) {
    // Only the writer thread makes pages durable: never wait for one that has exited.
    if (absl::Status status = Status(); !status.ok()) return status;
    shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

absl::Status LogWriter::WaitAllDurable() {
  if (error_.failed()) return error_.status();
  DurabilityMarks marks;
  MarkAllAssigned(&marks);
  for (const auto& [shard, counter] : marks) {
    NVKV_RETURN_IF_ERROR(WaitDurable(*shard, counter));
  }
  return absl::OkStatus();
}

absl::Status LogWriter::WaitSealedSettled() {
  const std::vector<uint64_t> sealed = segments_.SealedWithWritesPending();
  Shard& shard = shards_[0];  // the writer signals every shard when it gives a zone back
  for (uint64_t segment : sealed) {
    while (segments_.WritesPending(segment)) {
      if (error_.failed()) return error_.status();
      Wake();
      absl::MutexLock lock(&shard.mu);
      shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(10));
    }
  }
  return absl::OkStatus();
}

absl::Status LogWriter::WaitEarlierNonDurable() {
  // No allocation for the common case (no shard has a non-durable write pending).
  thread_local DurabilityMarks marks;
  marks.clear();
  MarkEarlierNonDurable(&marks);
  for (const auto& [shard, through] : marks) {
    NVKV_RETURN_IF_ERROR(WaitDurable(*shard, through));
    // Durable now: later durable writes need not look again, unless a newer one came meanwhile.
    uint64_t expected = through;
    shard->nondurable_through.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  }
  return absl::OkStatus();
}

absl::Status LogWriter::WaitMapDurable(const SegmentMap::Ticket& ticket) {
  Shard& shard = shards_[0];  // the writer signals every shard after each map page
  while (!segments_.MapDurable(ticket)) {
    if (error_.failed()) return error_.status();
    Wake();
    absl::MutexLock lock(&shard.mu);
    shard.changed.WaitWithTimeout(&shard.mu, absl::Milliseconds(10));
  }
  return absl::OkStatus();
}

bool LogWriter::WantLocked(Shard& shard, uint64_t counter) {
  if (shard.head.durable.durable_through() >= counter) return false;
  shard.head.durable.Want(counter);
  shard.wants_writer.store(true, std::memory_order_release);
  return true;
}

void LogWriter::MarkAllAssigned(DurabilityMarks* marks) {
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    const uint64_t last = shard->head.next_counter - 1;
    if (last > 0) marks->emplace_back(shard.get(), last);
  }
}

void LogWriter::MarkEarlierNonDurable(DurabilityMarks* marks) {
  for (const auto& shard : shards_) {
    const uint64_t through = shard->nondurable_through.load(std::memory_order_acquire);
    if (through > 0) marks->emplace_back(shard.get(), through);
  }
}

void LogWriter::Request(const DurabilityMarks& marks) {
  bool wanted = false;
  for (const auto& [shard, counter] : marks) {
    absl::MutexLock lock(&shard->mu);
    wanted = WantLocked(*shard, counter) || wanted;
  }
  if (wanted) Wake();
}

bool LogWriter::Covers(const DurabilityMarks& marks) const {
  for (const auto& [shard, counter] : marks) {
    if (DurableThroughUnlocked(*shard) < counter) return false;
  }
  return true;
}

void LogWriter::AddListener(DurabilityListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.push_back(listener);
}

void LogWriter::RemoveListener(DurabilityListener* listener) {
  absl::MutexLock lock(&listeners_mu_);
  std::erase(listeners_, listener);
}

void LogWriter::NotifyListeners(bool always) {
  if (!durability_moved_.exchange(false) && !always) return;
  absl::MutexLock lock(&listeners_mu_);
  for (DurabilityListener* listener : listeners_) {
    if (always || listener->AnyCovered(*this)) listener->Signal();
  }
}

void LogWriter::PagesWritten(Shard& shard, uint64_t first_counter, uint64_t segment,
                               uint32_t count, const absl::Status& status, bool fua) {
  if (!status.ok()) error_.Set(status);
  // Ranges are in counter order and can number thousands between flushes of non-durable
  // writes: DurablePrefix finds this one by binary search, not a walk from the front.
  shard.head.durable.Complete(first_counter, count, /*failed=*/!status.ok(),
                              fua || !options_.volatile_cache, flush_epoch_.load());
  durability_moved_.store(true, std::memory_order_release);
  segments_.AddPending(segment, -static_cast<int32_t>(count));
  if (status.ok()) {
    counters_.pages_written.fetch_add(count, std::memory_order_relaxed);
    counters_.page_write_commands.fetch_add(1, std::memory_order_relaxed);
    counters_.device_bytes.fetch_add(uint64_t{count} * shape_.geometry.page_bytes,
                                     std::memory_order_relaxed);
    if (fua) counters_.fua_writes.fetch_add(1, std::memory_order_relaxed);
  }
  shard.changed.SignalAll();
}


void LogWriter::OnPagesWritten(storage::IoRequest* request) {
  PageSlot* const first = static_cast<PageSlot*>(request->context);
  LogWriter& writer = *first->writer;
  Shard& shard = *first->shard;
  uint32_t count = 0;
  for (const PageSlot* slot = first; slot != nullptr; slot = slot->next_in_command) ++count;
  if (request->status.ok() && writer.shape_.places != nullptr) {
    // Where the pages landed, before any leaves memory: a reader that misses a page in
    // `unwritten` reads it at the place the table gives. A place the table cannot take (the
    // device said the append landed elsewhere than in its zone's room) fails the write: the
    // pages stay in memory, and the store fails.
    request->status = writer.shape_.places->Landed(
        first->page_number, count, request->appended_lba / writer.shape_.blocks_per_page);
  }
  const bool ok = request->status.ok();
  for (const PageSlot* slot = first; slot != nullptr; slot = slot->next_in_command) {
    if (!ok) continue;
    // The page is on the device: other shards' readers may read it there. This must happen
    // before the slot is recycled below (readers of those shards hold only their own lock).
    for (Shard* other : slot->foreign) {
      absl::MutexLock other_lock(&other->mu);
      other->unwritten.erase(slot->page_number);
    }
  }
  absl::MutexLock lock(&shard.mu);
  writer.PagesWritten(shard, first->head_counter, first->segment, count, request->status,
                      request->fua);
  // A failed page stays in `unwritten` (reads keep seeing what was acknowledged in memory until
  // the store is reopened) and its buffer is not reused.
  for (PageSlot* slot = first; slot != nullptr;) {
    PageSlot* next = std::exchange(slot->next_in_command, nullptr);
    if (ok) {
      shard.unwritten.erase(slot->page_number);
      shard.head.free_slots.push_back(slot);
    }
    slot = next;
  }
}

void LogWriter::OnFlushDone(storage::IoRequest* request) {
  auto* writer = static_cast<LogWriter*>(request->context);
  writer->flush_in_flight_ = false;
  if (!request->status.ok()) {
    writer->error_.Set(request->status);
  } else {
    writer->counters_.flushes.fetch_add(1, std::memory_order_relaxed);
  }
  for (const auto& shard : writer->shards_) {
    absl::MutexLock lock(&shard->mu);
    if (request->status.ok()) shard->head.durable.Flushed(writer->flush_request_epoch_);
    shard->changed.SignalAll();
  }
  writer->durability_moved_.store(true, std::memory_order_release);
}

void LogWriter::CollectShard(Shard& shard, uint64_t now, bool stopping, WriterPass* pass) {
  const bool volatile_cache = options_.volatile_cache;
  absl::MutexLock lock(&shard.mu);
  LogHead& head = shard.head;
  shard.wants_writer.store(false, std::memory_order_relaxed);
  if (head.open != nullptr) {
    const bool empty = head.open->builder.empty();
    const bool waited_on = head.durable.wanted() >= head.open->head_counter;
    // Group commit: while an earlier page of this head is being written (or about to be), a
    // waited-on open page that is not full stays open and takes the durable writes that arrive
    // meanwhile; the writer seals it in the pass that follows that page's completion. A full
    // page is sealed by its appender, so pages stream when writes come faster than that.
    const bool earlier_unwritten = head.durable.unwritten_ranges() > 1;  // besides this one
    // `now` was read before this lock: a page opened since then has open_since_us > now, and
    // now - open_since_us would wrap around to "aged".
    const bool aged = now >= head.open_since_us + options_.max_write_delay_us;
    // An empty open page is written (empty) only when a flush waits for it: a write that
    // opened it and then retried may have ended up writing nothing (a delete of a key that
    // another thread deleted meanwhile), and Flush waits for every page assigned.
    if ((waited_on && !earlier_unwritten) || (!empty && (aged || stopping))) {
      head.open->builder.Finish(shape_.seed, head.open->page_number);
      head.sealed.push_back(head.open);
      head.open = nullptr;
    } else if (!empty || waited_on) {
      pass->open_pages = true;
    }
  }
  for (PageSlot* slot : head.sealed) {
    // FUA only for pages someone waits on; the rest are made durable by a later flush (and all
    // of them when durable writes go by flush).
    slot->request.fua = FuaFor(head.durable.wanted() >= slot->head_counter);
    pass->pages.push_back(slot);
  }
  head.sealed.clear();
  if (volatile_cache && !flush_in_flight_ && !error_.failed() && head.durable.NeedsFlush()) {
    pass->want_flush = true;  // a failed flush breaks the store: never retried
  }
  if (volatile_cache && !pass->unflushed &&
      head.durable.HasUnflushed(flush_in_flight_, flush_request_epoch_, &pass->unfinished)) {
    pass->unflushed = true;
  }
}

bool LogWriter::EnqueuePageWrite(storage::IoRequest& request, uint64_t page_number,
                                 uint32_t pages, const storage::Buffer& buffer, bool fua,
                                 bool append, uint8_t placement,
                                 void (*on_done)(storage::IoRequest*), void* context) {
  request = storage::IoRequest{};
  request.op = append ? storage::IoOp::kZoneAppend : storage::IoOp::kWrite;
  request.fua = fua;
  request.placement = placement;
  request.lba = shape_.LbaOf(page_number);
  request.lba_count = pages * shape_.blocks_per_page;
  request.buffer = buffer;
  request.buffer.bytes = pages * shape_.geometry.page_bytes;
  request.on_done = on_done;
  request.context = context;
  absl::Status status = queue_->Enqueue(&request);
  if (status.ok()) return true;
  request.status = status;
  on_done(&request);
  return false;
}

bool LogWriter::OneCommandCarries(const PageSlot& last, const PageSlot& next) const {
  return next.shard == last.shard && next.segment == last.segment &&
         next.page_number == last.page_number + 1 && next.head_counter == last.head_counter + 1 &&
         next.buffer.data == last.buffer.data + shape_.geometry.page_bytes &&
         next.buffer.buf_index == last.buffer.buf_index;
}

void LogWriter::SubmitPages(const std::vector<PageSlot*>& pages) {
  // A command of at most max_command_pages_, in one registered region (the pool's invariant
  // for a single buffer).
  for (size_t i = 0; i < pages.size();) {
    PageSlot* const first = pages[i];
    PageSlot* last = first;
    bool fua = first->request.fua;
    uint32_t count = 1;
    while (i + count < pages.size() && count < max_command_pages_ &&
           OneCommandCarries(*last, *pages[i + count])) {
      last->next_in_command = pages[i + count];
      last = last->next_in_command;
      // The FUA a waited-on page asks for covers the whole command.
      fua = fua || last->request.fua;
      ++count;
    }
    last->next_in_command = nullptr;
    // The queue is as deep as there are page slots, so this cannot be refused for space. On
    // zones the pages go by Zone Append to their zone, landing as one run wherever its write
    // pointer is (OnPagesWritten records where).
    const bool append = shape_.geometry.zoned();
    EnqueuePageWrite(first->request,
                     append ? shape_.geometry.FirstPageOf(first->segment) : first->page_number,
                     count, first->buffer, fua, append, shape_.placement.log, OnPagesWritten,
                     first);
    i += count;
  }
}

void LogWriter::SubmitFlush() {
  flush_request_epoch_ = flush_epoch_.fetch_add(1);
  flush_request_ = storage::IoRequest{};
  flush_request_.op = storage::IoOp::kFlush;
  flush_request_.on_done = OnFlushDone;
  flush_request_.context = this;
  flush_in_flight_ = true;
  absl::Status status = queue_->Enqueue(&flush_request_);
  if (!status.ok()) {
    flush_request_.status = status;
    OnFlushDone(&flush_request_);
  }
}

void LogWriter::Sleep(const WriterPass& pass, uint64_t now, uint64_t flush_due_us) {
  absl::MutexLock lock(&mu_);
  if (!wake_) {
    // Wake for the oldest open page to age out, a large run to be flushed once written, and a
    // timed flush to fall due.
    uint64_t delay_us = pass.open_pages || pass.unfinished
                            ? std::max<uint32_t>(options_.max_write_delay_us, 50)
                            : 100000;
    if (pass.unflushed && !flush_in_flight_) {
      delay_us =
          std::min(delay_us, std::max<uint64_t>(flush_due_us - std::min(now, flush_due_us), 50));
    }
    wake_cv_.WaitWithTimeout(&mu_, absl::Microseconds(delay_us));
  }
}

void LogWriter::Loop() {
  storage::Device& queue = *queue_;
  WriterPass pass;
  // Since when (writer's clock, microseconds) some completed page has been neither durable nor
  // covered by a flush in flight; 0 while there is none.
  uint64_t unflushed_since_us = 0;
  // Whether the listeners have heard of the sticky failure: after it nothing more becomes
  // durable, and they must not wait for a move of a durable prefix that will never come.
  bool failure_announced = false;
  while (true) {
    pass.pages.clear();
    pass.want_flush = pass.open_pages = pass.unflushed = pass.unfinished = false;
    {
      // This pass collects whatever woke the thread (and whatever arrives while it runs).
      absl::MutexLock lock(&mu_);
      wake_ = false;
    }
    const bool announce_failure = !failure_announced && error_.failed();
    failure_announced = failure_announced || announce_failure;
    NotifyListeners(/*always=*/announce_failure);
    const uint64_t now = NowMicros();
    const bool stopping = stopping_.load();
    for (const auto& shard : shards_) CollectShard(*shard, now, stopping, &pass);
    if (!pass.unflushed) {
      unflushed_since_us = 0;
    } else if (unflushed_since_us == 0) {
      unflushed_since_us = now;
    }
    const uint64_t flush_due_us = unflushed_since_us + options_.max_write_delay_us;
    if (pass.unflushed && now >= flush_due_us && !flush_in_flight_ && !error_.failed()) {
      pass.want_flush = true;
    }
    SubmitPages(pass.pages);
    const bool summary_submitted = metadata_.SubmitSummaries();
    const bool finish_submitted = metadata_.SubmitLeftZones();
    if (pass.want_flush) {
      unflushed_since_us = 0;  // it covers every page completed so far
      SubmitFlush();
    }
    const bool map_submitted = metadata_.SubmitMapWrites(stopping);
    if (IoInFlight() > 0) {
      // Submits what was queued and waits for at least one completion or a Wake, in one system
      // call; without waiting when this pass submitted something.
      const absl::Status reaped = pass.pages.empty() && !pass.want_flush && !map_submitted &&
                                          !summary_submitted && !finish_submitted
                                      ? ReapOrWake()
                                      : queue.Reap(0).status();
      if (!reaped.ok()) error_.Set(reaped);
      if (!reaped.ok() && queue.in_flight() > 0) {
        // The queue is broken: nothing more will complete. Fail the waiters and stop writing.
        break;
      }
      continue;
    }
    // The map is exact, and the summaries in it, before the thread exits.
    if (stopping && pass.pages.empty() && !pass.want_flush && !pass.open_pages &&
        metadata_.done()) {
      break;
    }
    Sleep(pass, now, flush_due_us);
  }
  // Only this thread may enter its queue's ring: end the wake event's wait here, not in the
  // destructor on the closing thread.
  if (absl::Status disarmed = wake_event_->Disarm(*queue_); !disarmed.ok()) {
    error_.Set(disarmed);
  }
  // Whoever still waits for a page to become durable or for a page buffer would wait forever:
  // wake them all, to find exited_ (Status) under their shard's lock.
  exited_.store(true);
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->changed.SignalAll();
  }
  NotifyListeners(/*always=*/true);
}

}  // namespace nvkv::kv
