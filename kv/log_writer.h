// The log writer: the thread that writes every shard's sealed pages, the FUA/flush policy, and
// the one routine that turns completed writes into durability (group commit). Writers append to
// their shard's head under its lock and wake the writer; a durable write then waits here until
// its pages are durable.
//
// Durability rule. NVMe orders nothing between commands in flight, and a completed write may sit
// in a volatile cache. A page counts as durable when its write completed with FUA, or completed
// before a flush that then completed (or the device has no volatile cache). A head's
// durable_through() moves only over a prefix of its pages that are all durable (DurablePrefix,
// durable_prefix.h), so without media damage no acknowledged write lies beyond the end of a
// segment's log that recovery finds.
//
// How a durable write's pages become durable (Options::durable_by_fua, from Options::
// durable_writes): written with FUA, or written plainly and then covered by a flush. With
// flushes, durable writes that arrive while one is in flight fill pages that the next one
// covers: one flush per group, however many pages and writers it holds.
//
// When the writer flushes (device with a volatile write cache). For a durable writer whose pages
// completed without FUA (DurablePrefix::NeedsFlush), at once. And on a timer, so that
// non-durable writes become durable within a bound even when no one waits
// (Options::max_write_delay_us): once some page has completed without being durable, and no
// flush in flight covers it, for max_write_delay_us. At most one flush is in flight; one covers
// every page completed before it was sent, so a steady non-durable load costs one flush per
// max_write_delay_us or per flush time, whichever is longer, not one per page. A write thus
// waits up to max_write_delay_us in an open page, its page's write time, up to
// max_write_delay_us (or the rest of a flush in flight, if longer), and a flush: durable within
// 2 x max_write_delay_us plus the device's write and flush time (plus one more flush time when
// flushes take longer than max_write_delay_us).
//
// The segment map and the summaries. The writer is also the map's writer (free_segments.h),
// and writes the summaries of sealed segments: its MetadataWriter (metadata_writer.h) does both
// on its thread. It exits only once the map on the device says what the table does (a clean
// Close leaves an exact map).
//
// Thread contract: Start and Stop from the engine's owner thread; everything else from any
// thread. The writer thread takes each shard's lock in turn, never two at once.
#ifndef NVKV_KV_LOG_WRITER_H_
#define NVKV_KV_LOG_WRITER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kv/metadata_writer.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "kv/sticky_error.h"
#include "storage/device.h"
#include "storage/event_fd.h"

namespace nvkv::kv {

// Counters of page writes, kept by whoever writes pages (the log writer, compaction's free
// markers) and read by Stats.
struct WriteCounters {
  std::atomic<uint64_t> pages_written{0};
  std::atomic<uint64_t> page_write_commands{0};  // that wrote pages_written
  std::atomic<uint64_t> device_bytes{0};  // page bytes written
  std::atomic<uint64_t> fua_writes{0};    // write commands sent with FUA
  std::atomic<uint64_t> flushes{0};
};

// What a write waits for to be durable: for each shard listed, its head's pages through the
// counter given.
using DurabilityMarks = std::vector<std::pair<Shard*, uint64_t>>;

class LogWriter;

// A thread's asynchronous durable writes, as the log writer sees them (AsyncWrites is one): the
// writer asks it, each time a durable prefix moved, whether one of its writes is now durable,
// and signals it only then (and always when the writer fails or exits), so that no thread is
// woken for pages only other threads wait for.
class DurabilityListener {
 public:
  // Whether some write the listener waits for is durable now (LogWriter::Covers). Called by
  // the writer thread, under LogWriter's listeners mutex.
  virtual bool AnyCovered(const LogWriter& writer) = 0;
  // Wakes the listener's thread (never blocks).
  virtual void Signal() = 0;

 protected:
  ~DurabilityListener() = default;
};

class LogWriter {
 public:
  struct Options {
    uint32_t max_write_delay_us = 2000;
    bool volatile_cache = true;  // the device's: without one every completed write is durable
    // DurableWrites::kFua: a page someone waits on is written with FUA. Otherwise (kFlush) it is
    // written plainly and the flush that follows its completion makes it durable.
    bool durable_by_fua = true;
  };
  // Writes the pages of `shards` through `queue` (as deep as the shards have page buffers, plus
  // a flush, an event wait, and MetadataWriter::kPageWrites; its pool holds as many page buffers
  // beyond the shards', for the MetadataWriter). `wake_event` wakes
  // the thread while it waits for completions. Every argument must outlive the writer.
  LogWriter(const Options& options, const StoreShape& shape,
            const ShardSet& shards, SegmentTable& segments,
            StickyError& error, WriteCounters& counters,
            std::unique_ptr<storage::Device> queue, std::unique_ptr<storage::EventFd> wake_event);
  ~LogWriter();  // Stop()
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Writes a summary whose pages a head assigned (HeadAppender) as MetadataWriter says. Any
  // thread; shard locks may be held.
  void QueueSummary(SummaryWrite write);
  // Gives back the zone of `segment` that `shard`'s head left (finishing it when not full, as
  // `finish` says), as MetadataWriter says: once its pages through head counter `last_counter`
  // are durable, which it asks for now (not at the timed flush: heads may wait for an active
  // zone, and compaction for victims, meanwhile).
  void QueueLeftZone(Shard& shard, uint64_t segment, uint64_t last_counter, bool finish)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // The queue the pages are written with: the shards' page buffers come from its pool.
  storage::Device& queue() { return *queue_; }

  // kResourceExhausted when the system will not start the thread.
  absl::Status Start();
  bool started() const { return thread_.joinable(); }
  // Writes every page still sealed or open, and returns once the thread has exited. Waiters
  // then find Status() failing. Idempotent.
  void Stop();
  // Tells the writer that a head has pages to write or a waiter. The writer wakes at once, also
  // when it is waiting for completions of its queue (through wake_event_, armed on the queue
  // where the backend allows; otherwise its queue completes everything inside Reap anyway).
  void Wake();

  // Whether a page write goes with FUA: only when someone waits for it to be durable, the device
  // has a volatile cache, and durable writes go by FUA (else a flush follows). The one place the
  // FUA policy lives: the writer's own pages and a large record's run ask it alike.
  bool FuaFor(bool waited_on) const {
    return waited_on && options_.volatile_cache && options_.durable_by_fua;
  }

  // OK while the writer serves: otherwise the sticky failure, or kFailedPrecondition once the
  // writer has exited (nothing more becomes durable, no page buffer comes back).
  absl::Status Status() const;

  // Waits until `shard`'s pages through head counter `counter` are durable.
  absl::Status WaitDurable(Shard& shard, uint64_t counter);
  // Waits until the map change of `ticket` is on the device (the writer writes it), or the
  // store failed.
  absl::Status WaitMapDurable(const SegmentMap::Ticket& ticket);
  // Waits until every page assigned so far, on every shard, is durable.
  absl::Status WaitAllDurable();
  // Waits until no segment sealed by now has a write pending (SegmentTable::AddPending): after
  // WaitAllDurable, on zones, until the writer gave back the zones the heads left (LeftZone), so
  // that compaction may take them.
  absl::Status WaitSealedSettled();
  // Makes durable every non-durable write that any shard acknowledged before now
  // (Shard::nondurable_through): a durable write calls it once its own pages are durable, since
  // options.h promises that a later durable write makes earlier ones durable, whatever their
  // shards.
  absl::Status WaitEarlierNonDurable();

  // The same waits without blocking, for asynchronous writes: marks name what to wait for, the
  // writer is asked for them, and the waiter checks Covers when a listener of its is signalled.
  // Adds each shard's last page assigned so far (WaitAllDurable's marks).
  void MarkAllAssigned(DurabilityMarks* marks);
  // Adds the pages of non-durable writes acknowledged so far (WaitEarlierNonDurable's marks).
  void MarkEarlierNonDurable(DurabilityMarks* marks);
  // Tells the writer that someone waits for `marks` (seals and writes those pages soon).
  void Request(const DurabilityMarks& marks);
  // Whether every page `marks` names is durable; takes no lock.
  bool Covers(const DurabilityMarks& marks) const;
  // `listener` is signalled when a head's durable prefix moved and it reports a write of its
  // durable (AnyCovered), and when the writer fails or exits (Status). Remove it before it is
  // destroyed.
  void AddListener(DurabilityListener* listener);
  void RemoveListener(DurabilityListener* listener);

  // `count` pages of `shard`'s head from `first_counter`, in `segment`, finished writing with
  // `status`; `fua` says whether they were sent with FUA. The one place a completed write
  // reaches a head's DurablePrefix (Flushed, for a flush): the writer's own pages, and a large
  // record's run that another thread wrote itself.
  void PagesWritten(Shard& shard, uint64_t first_counter, uint64_t segment, uint32_t count,
                    const absl::Status& status, bool fua) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  // For the writer's thread and its MetadataWriter: sends one write of `pages` pages from
  // `buffer` (which starts the run) to page `page_number` on (with `append`, a Zone Append to the
  // zone that starts at page `page_number`), in `request` (the one place a page write of the
  // writer's queue is made up), to placement handle `placement` (StoreShape::placement's); when
  // the queue refuses it, completes it at once with that error (`on_done` runs) and returns
  // false.
  bool EnqueuePageWrite(storage::IoRequest& request, uint64_t page_number, uint32_t pages,
                        const storage::Buffer& buffer, bool fua, bool append, uint8_t placement,
                        void (*on_done)(storage::IoRequest*), void* context);
  // How far `shard`'s head is durable, read without its lock (DurablePrefix::
  // durable_through_unlocked, the one part of a head meant to be read so).
  static uint64_t DurableThroughUnlocked(const Shard& shard) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return shard.head.durable.durable_through_unlocked();
  }

 private:
  // What one pass of the writer over the shards found.
  struct WriterPass {
    std::vector<PageSlot*> pages;  // sealed pages to write now
    bool want_flush = false;
    bool open_pages = false;  // open pages with records, not yet aged
    bool unflushed = false;   // some completed page is neither durable nor covered by a flush
    bool unfinished = false;  // some assigned page has not completed (a large run)
  };
  void Loop();
  // Seals `shard`'s open page when due and takes its sealed pages into `pass`.
  void CollectShard(Shard& shard, uint64_t now, bool stopping, WriterPass* pass);
  // Tells `shard`'s head that someone waits until its pages through `counter` are durable (the
  // writer seals and writes them with that in mind); false when they are durable already. The
  // caller wakes the writer.
  bool WantLocked(Shard& shard, uint64_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Sends the pages a pass found, each run of consecutive pages of a head whose buffers lie back
  // to back (HeadAppender takes them so) in one write command: a durable group of pages costs
  // the device one write (and one FUA) per run, not one per page.
  void SubmitPages(const std::vector<PageSlot*>& pages);
  // Whether the command that carries `last` can carry `next` too: the next page of the same head
  // and segment, its buffer right after last's in the same registered region (an unregistered
  // pool's pages may then cross from one region to the next: plain I/O takes any address).
  bool OneCommandCarries(const PageSlot& last, const PageSlot& next) const;
  // When a durable prefix moved since the last call, signals each listener one of whose writes
  // it made durable; with `always`, every listener.
  void NotifyListeners(bool always);
  // Waits for at least one completion of the writer's I/O, or a Wake, whichever comes first.
  absl::Status ReapOrWake();
  // Requests in flight on the queue other than the armed wake event.
  uint32_t IoInFlight() const { return queue_->in_flight() - (wake_event_->armed() ? 1 : 0); }
  void SubmitFlush();
  // Waits for a Wake, or until the first of the timers `pass` implies falls due.
  void Sleep(const WriterPass& pass, uint64_t now, uint64_t flush_due_us);
  // The completion of a command of SubmitPages: every page it carried (PageSlot::
  // next_in_command from the first).
  static void OnPagesWritten(storage::IoRequest* request);
  static void OnFlushDone(storage::IoRequest* request);

  const Options options_;
  const StoreShape shape_;
  // Pages one write command carries at most (MaxCommandPages).
  const uint32_t max_command_pages_;
  const ShardSet& shards_;
  SegmentTable& segments_;
  StickyError& error_;
  WriteCounters& counters_;
  // Declared before queue_, so destroyed after it: a wait armed on the queue reads into it.
  std::unique_ptr<storage::EventFd> wake_event_;
  std::unique_ptr<storage::Device> queue_;

  std::thread thread_;
  absl::Mutex mu_;  // a leaf: Wake takes it under shard locks
  absl::CondVar wake_cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  // Set while the thread waits in its queue's Reap: Wake then signals wake_event_ too. Stored
  // before the thread reads wake_ under mu_, read by Wake after it set wake_ under mu_: one of
  // the two always sees the other.
  std::atomic<bool> reaping_{false};
  // Set when a head's durable prefix may have moved (PagesWritten, a flush): the writer's next
  // pass signals the listeners.
  std::atomic<bool> durability_moved_{false};
  // Taken before a listener's own mutex (AnyCovered); under ReadQueueSet's mutex only (a
  // thread's queue, destroyed at the thread's exit, stops listening), no engine lock.
  absl::Mutex listeners_mu_;
  std::vector<DurabilityListener*> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  std::atomic<bool> stopping_{false};
  // Set by the thread as it exits (stopping, or its queue broke).
  std::atomic<bool> exited_{false};
  std::atomic<uint64_t> flush_epoch_{1};  // bumped at each flush submission
  // The map's pages and the summaries, written beside the log by this thread. After queue_:
  // destroyed before it, giving its buffers back to the queue's pool.
  MetadataWriter metadata_;
  // The writer thread's own: the flush in flight, if any.
  storage::IoRequest flush_request_;
  bool flush_in_flight_ = false;
  uint64_t flush_request_epoch_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_LOG_WRITER_H_
