// DurablePrefix: the pages a log head has assigned, which of them are durable, and how far the
// head is durable without a gap.
//
// NVMe orders nothing among commands in flight, and a completed write may sit in a volatile
// cache. A page counts as durable when its write completed with FUA (or the device has no
// volatile cache), or completed before a flush that then completed. durable_through() moves
// only over a prefix of pages that are all durable, so a write acknowledged as durable never
// depends on a page that a power cut could still lose.
//
// Pages are tracked in ranges (one per page, or one per large record's run of pages), by head
// counter. Thread contract: not thread-safe; the owning shard's mutex guards it, except that
// durable_through_unlocked() may be read without it.
#ifndef NVKV_KV_DURABLE_PREFIX_H_
#define NVKV_KV_DURABLE_PREFIX_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstddef>
#include <vector>

#include "storage/base/check.h"

namespace nvkv::kv {

class DurablePrefix {
 public:
  // A head that goes on with a log written before (a resumed head, checkpoint.h): every page
  // up to `counter` is durable already, and the next assigned is counter + 1. Only before
  // anything is assigned.
  void StartAfter(uint64_t counter) {
    NVKV_CHECK(ranges_.empty());
    durable_through_.store(counter, std::memory_order_release);
  }

  // Pages [counter_begin, counter_begin + count) of the head are assigned; their writes
  // follow. Counters grow with each call.
  void Assign(uint64_t counter_begin, uint64_t count) {
    Range range;
    range.counter_begin = counter_begin;
    range.counter_end = counter_begin + count;
    ranges_.push_back(range);
    ++unwritten_ranges_;
  }

  // The write of pages [counter_begin, counter_begin + pages) completed, whole ranges only (one
  // range, a large record's run, or several pages written by one command): `failed` (the pages
  // stay in memory and never become durable), else `durable` when written with FUA or without a
  // volatile cache. `flush_epoch` is the writer's flush epoch at completion: a flush requested
  // after it covers the ranges.
  void Complete(uint64_t counter_begin, uint64_t pages, bool failed, bool durable,
                uint64_t flush_epoch) {
    auto it = std::lower_bound(
        ranges_.begin() + static_cast<ptrdiff_t>(front_), ranges_.end(), counter_begin,
        [](const Range& range, uint64_t counter) { return range.counter_begin < counter; });
    for (; it != ranges_.end() && it->counter_begin < counter_begin + pages; ++it) {
      NVKV_CHECK(it->counter_end <= counter_begin + pages);
      if (!it->completed) --unwritten_ranges_;
      it->completed = true;
      it->failed = failed;
      it->durable = !failed && durable;
      it->completed_epoch = flush_epoch;
    }
    Advance();
  }

  // A flush requested at `flush_epoch` completed: every range that completed at or before that
  // epoch (and did not fail) is durable.
  void Flushed(uint64_t flush_epoch) {
    for (size_t i = front_; i < ranges_.size(); ++i) {
      Range& range = ranges_[i];
      if (range.completed && !range.failed && range.completed_epoch <= flush_epoch) {
        range.durable = true;
      }
    }
    Advance();
  }

  // Ranges assigned whose writes have not completed: the open page, sealed pages, pages and
  // large runs being written.
  uint64_t unwritten_ranges() const { return unwritten_ranges_; }

  // Every page with a counter up to this one is durable.
  uint64_t durable_through() const { return durable_through_.load(std::memory_order_relaxed); }
  // The same without the shard's lock (an asynchronous write's check, from its own thread): a
  // value that has moved since may be seen late, never early.
  uint64_t durable_through_unlocked() const {
    return durable_through_.load(std::memory_order_acquire);
  }

  // Some writer waits until durable_through() >= counter.
  void Want(uint64_t counter) { wanted_ = std::max(wanted_, counter); }
  uint64_t wanted() const { return wanted_; }

  // True when a waiter's pages have all completed but are not all durable: only a flush can
  // finish them (one still being written, or failed, is waited for instead).
  bool NeedsFlush() const {
    if (wanted_ <= durable_through()) return false;
    bool gap = false;
    for (size_t i = front_; i < ranges_.size(); ++i) {
      const Range& range = ranges_[i];
      if (range.counter_begin > wanted_) break;
      if (!range.completed || range.failed) return false;
      if (!range.durable) gap = true;
    }
    return gap;
  }

  // True when a page completed without being durable and the flush in flight (if any, requested
  // at `flush_request_epoch`) does not cover it: a timed flush is due for it. Sets *unfinished
  // when some range is still being written (a large record's run, written by its writer's
  // thread, which does not wake the writer thread).
  bool HasUnflushed(bool flush_in_flight, uint64_t flush_request_epoch, bool* unfinished) const {
    for (size_t i = front_; i < ranges_.size(); ++i) {
      const Range& range = ranges_[i];
      if (!range.completed) {
        *unfinished = true;
        continue;
      }
      if (range.durable || range.failed) continue;
      if (flush_in_flight && range.completed_epoch <= flush_request_epoch) continue;
      return true;
    }
    return false;
  }

 private:
  struct Range {
    uint64_t counter_begin = 0;
    uint64_t counter_end = 0;  // exclusive
    bool completed = false;
    bool durable = false;
    bool failed = false;
    uint64_t completed_epoch = 0;
  };

  // The one place durable_through_ moves: over the durable ranges at the front.
  void Advance() {
    while (front_ < ranges_.size() && ranges_[front_].completed && ranges_[front_].durable) {
      durable_through_.store(ranges_[front_].counter_end - 1, std::memory_order_release);
      ++front_;
    }
    // Drop the ranges passed once they are most of the vector: it keeps its capacity, so a
    // steady stream of pages allocates nothing.
    if (front_ == ranges_.size()) {
      ranges_.clear();
      front_ = 0;
    } else if (front_ >= 64 && front_ * 2 >= ranges_.size()) {
      DropPassed();
    }
  }

  // Out of line: GCC 12 inlines the erase into callers where it cannot see the vector's size
  // and reports a false -Wstringop-overread.
  [[gnu::noinline]] void DropPassed() {
    ranges_.erase(ranges_.begin(), ranges_.begin() + static_cast<ptrdiff_t>(front_));
    front_ = 0;
  }

  // Assigned and not yet in the durable prefix, in counter order: ranges_[front_..]; those
  // before front_ are passed and wait to be dropped.
  std::vector<Range> ranges_;
  size_t front_ = 0;
  std::atomic<uint64_t> durable_through_{0};  // written under the shard's lock only
  uint64_t wanted_ = 0;
  uint64_t unwritten_ranges_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_DURABLE_PREFIX_H_
