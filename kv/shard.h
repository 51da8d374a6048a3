// A shard: one slice of the keys (by KeyHash::hi, ShardSet::For) with its index, its
// log head and the pages of that head still in memory, all under Shard::mu. Writers of the
// shard's keys append to its head; the log writer (log_writer.h) writes the head's sealed pages
// and moves its durable prefix; readers look in `unwritten` before they read the device.
#ifndef NVKV_KV_SHARD_H_
#define NVKV_KV_SHARD_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kv/durable_prefix.h"
#include "kv/index.h"
#include "kv/key_hash.h"
#include "kv/location.h"
#include "kv/page_format.h"
#include "kv/record_cache.h"
#include "kv/segment_summary.h"
#include "storage/base/check.h"
#include "storage/device.h"

namespace nvkv::kv {

class LogWriter;
class Shard;

// The shard of `shard_count` that owns the keys with `hash` (by the high half's top bits).
inline uint32_t ShardIndexFor(const KeyHash& hash, size_t shard_count) {
  return static_cast<uint32_t>(((hash.hi >> 32) * shard_count) >> 32);
}

// One page buffer of a shard's log head: filled under the shard lock, then written by the
// writer thread. Lives for the whole engine; cycles between the shard's free list, the open
// page, the sealed list and the writer.
struct PageSlot {
  storage::Buffer buffer;  // from the writer queue's registered pool
  PageBuilder builder;
  uint64_t page_number = 0;
  uint64_t head_counter = 0;  // position in the head's page order
  uint64_t segment = 0;
  Shard* shard = nullptr;
  LogWriter* writer = nullptr;  // whose thread writes it
  storage::IoRequest request;   // the write; `context` points back here
  // The next page that the same write command carries (LogWriter::SubmitPages sends consecutive
  // pages whose buffers lie back to back as one command, from the first page's request), or
  // none. Set while the page is in flight.
  PageSlot* next_in_command = nullptr;
  // Hash mode: (index tag, record offset) of every record in the page, to keep two different
  // keys with the same tag off one page.
  std::vector<std::pair<uint32_t, uint32_t>> tags;
  // The page's header as far as it is written: the open page's is not finished yet, so the
  // record count and bytes in use come from the builder.
  PageHeader HeaderSoFar() const {
    PageHeader header;
    std::memcpy(&header, buffer.data, sizeof(header));
    header.record_count = builder.record_count();
    header.used_bytes = builder.used_bytes();
    return header;
  }
  // Other shards with records on this page (a batch's records all go to its first shard's
  // head): their `unwritten` maps list the page too, until it is written. Set under the locks of
  // the batch; the page is sealed before they are released, so the other shards' readers see
  // bytes that no longer change.
  std::vector<Shard*> foreign;
};

// Where a log head goes on with a segment's log after a clean Close (the checkpoint's,
// checkpoint.h): page `next_page` of `segment` is the next it assigns, with head counter
// `next_counter` (page i of the log has counter next_counter - next_page + i).
struct HeadPlace {
  uint64_t segment = 0;
  uint64_t generation = 0;
  uint32_t next_page = 0;
  uint64_t next_counter = 1;
};

// A shard's log head: the segment it appends to and the pages it has assigned. Every page it
// assigns gets the next head counter (the head's page order, across segments), and DurablePrefix
// follows it from assignment until it is durable. Invariants: each of the shard's PageSlots is
// in exactly one place (free_slots, open, sealed, or in flight with the writer); the open page
// and the sealed ones are in Shard::unwritten; next_page <= Geometry::log_pages().
struct LogHead {
  bool has_segment = false;  // false: the next page needs a segment from SegmentTable
  uint64_t segment = 0;
  uint64_t generation = 0;    // of the segment's log
  uint32_t next_page = 0;     // next page index within the segment
  SummaryBuilder summary;     // of the segment's records so far (segment_summary.h)
  // Pages of the segment a batch reserved room for (HeadAppender::ReserveForBatch), its summary
  // entries included: opening them checks no more room, so a batch never moves to another
  // segment midway.
  uint32_t reserved_pages = 0;
  uint64_t next_counter = 1;  // head counter of the next page assigned
  PageSlot* open = nullptr;   // the page being filled, or none
  uint64_t open_since_us = 0;
  DurablePrefix durable;          // the pages assigned, and how far they are durable
  std::vector<PageSlot*> sealed;  // finished pages waiting for the writer
  std::vector<PageSlot*> free_slots;
  // Just past the buffer of the page assigned last (none before the first).
  const uint8_t* last_buffer_end = nullptr;

  // Takes a free slot for the next page: the one whose buffer starts where the last page's
  // ended, when it is free, so that consecutive pages lie back to back in memory and the writer
  // sends them as one command; else the free slot lowest in memory, to start such a run. There
  // must be one.
  PageSlot* TakeFreeSlot() {
    NVKV_CHECK(!free_slots.empty());
    size_t chosen = 0;
    for (size_t i = 0; i < free_slots.size(); ++i) {
      const uint8_t* data = free_slots[i]->buffer.data;
      if (data == last_buffer_end) {
        chosen = i;
        break;
      }
      if (data < free_slots[chosen]->buffer.data) chosen = i;
    }
    PageSlot* slot = free_slots[chosen];
    free_slots[chosen] = free_slots.back();
    free_slots.pop_back();
    last_buffer_end = slot->buffer.data + slot->buffer.bytes;
    return slot;
  }

  // Goes on at `place` (recovery, before the engine writes): the pages before it are durable,
  // and `built` is the summary of their records (abandoned when the segment gets none).
  void Resume(const HeadPlace& place, SummaryBuilder built) {
    NVKV_CHECK(!has_segment && open == nullptr && place.next_counter > place.next_page);
    has_segment = true;
    segment = place.segment;
    generation = place.generation;
    next_page = place.next_page;
    next_counter = place.next_counter;
    reserved_pages = 0;
    summary = std::move(built);
    durable.StartAfter(next_counter - 1);
  }
};

// An entry of Shard::unwritten: a page whose bytes are in a slot, or a page of a large record
// that the writing thread is writing from its own buffer (readers of it wait until it is done).
class UnwrittenPage {
 public:
  static UnwrittenPage InSlot(PageSlot* slot) {
    NVKV_CHECK(slot != nullptr);
    return UnwrittenPage(slot);
  }
  static UnwrittenPage LargeRunInFlight() { return UnwrittenPage(nullptr); }
  bool large_run_in_flight() const { return slot_ == nullptr; }
  PageSlot* slot() const {
    NVKV_CHECK(slot_ != nullptr);
    return slot_;
  }

 private:
  explicit UnwrittenPage(PageSlot* slot) : slot_(slot) {}
  PageSlot* slot_;
};

class Shard {
 public:
  // Whether the index still has `key` at `location` (as the index keeps it:
  // HeadAppender::IndexedAt): the one "is the record still live here?" check of compaction and
  // check.
  bool IndexPointsAt(const KeyHash& hash, std::string_view key, const Location& location) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<uint64_t> candidates;
    index->Find(hash.lo, key, &candidates);
    return std::find(candidates.begin(), candidates.end(), location.index_value()) !=
           candidates.end();
  }

  // Whether the index still gives `key` the candidates `then` (as a write resolved them; any
  // order): a write that raced with another writer of the key, or with compaction, must
  // resolve again. `scratch` saves an allocation per call.
  bool StillHasCandidates(const KeyHash& hash, std::string_view key,
                          const std::vector<uint64_t>& then, std::vector<uint64_t>* scratch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index->Find(hash.lo, key, scratch);
    if (scratch->size() != then.size()) return false;
    if (then.size() <= 1) return *scratch == then;  // the common case
    // The same values, each as often, in any order: a key has a few entries (blind overwrites
    // leave stale ones until compaction), so pairwise counting is cheap and allocates nothing.
    for (uint64_t value : then) {
      if (std::count(then.begin(), then.end(), value) !=
          std::count(scratch->begin(), scratch->end(), value)) {
        return false;
      }
    }
    return true;
  }

  // Records that the page of head counter `counter` holds a non-durable write about to be
  // acknowledged (nondurable_through).
  void NoteNonDurable(uint64_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (counter > nondurable_through.load(std::memory_order_relaxed)) {
      nondurable_through.store(counter, std::memory_order_release);
    }
  }

  uint32_t id = 0;
  absl::Mutex mu;
  std::unique_ptr<Index> index ABSL_GUARDED_BY(mu);
  // Hash mode: how many of the index's entries are probably stale (key_entries.h): one per blind
  // overwrite, less those a delete or compaction erased since. An estimate (a blind write whose
  // candidate was another key's adds none in truth); 0 after recovery, which leaves none.
  uint64_t stale_entries ABSL_GUARDED_BY(mu) = 0;
  void ErasedStale(uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    stale_entries -= std::min(stale_entries, count);
  }
  // The values of the shard's recently used keys; every entry says what the index and the log
  // say (record_cache.h).
  std::unique_ptr<RecordCache> cache ABSL_GUARDED_BY(mu) ABSL_PT_GUARDED_BY(mu);
  LogHead head ABSL_GUARDED_BY(mu);
  // Pages the device may not hold yet: in memory (the open page, sealed and in-flight pages,
  // and another shard's sealed pages holding records of this shard's keys, PageSlot::foreign),
  // or a large record's pages being written by another thread.
  absl::flat_hash_map<uint64_t, UnwrittenPage> unwritten ABSL_GUARDED_BY(mu);
  // durable_through() moved, a slot was freed, or a large write finished.
  absl::CondVar changed;
  std::vector<std::unique_ptr<PageSlot>> slots;  // ownership
  std::atomic<bool> wants_writer{false};
  // The head counter of the last page in this shard's log that holds a non-durable user write
  // (0: none since it was last found durable). Raised under mu as such a write is appended,
  // before it is acknowledged; read without the lock by durable writes, which must make it
  // durable too (WaitEarlierNonDurable).
  std::atomic<uint64_t> nondurable_through{0};
};

// The store's shards, fixed at Open: every key belongs to one, by its hash.
class ShardSet {
 public:
  // Makes `count` shards, each with an empty index of the mode `ordered` and a record cache of
  // `cache_bytes_each`. Once, before anything uses them.
  void Make(uint32_t count, bool ordered, uint64_t cache_bytes_each) {
    NVKV_CHECK(shards_.empty());
    for (uint32_t i = 0; i < count; ++i) {
      auto shard = std::make_unique<Shard>();
      shard->id = i;
      absl::MutexLock lock(&shard->mu);
      shard->index = ordered ? NewOrderedIndex() : NewHashIndex();
      shard->cache = std::make_unique<RecordCache>(cache_bytes_each);
      shards_.push_back(std::move(shard));
    }
  }

  // Makes every shard's index anew, empty (a recovery starting over).
  void ResetIndexes(bool ordered) const {
    for (const auto& shard : shards_) {
      absl::MutexLock lock(&shard->mu);
      shard->index = ordered ? NewOrderedIndex() : NewHashIndex();
      shard->stale_entries = 0;
    }
  }

  // The shard that owns the keys with `hash`.
  Shard& For(const KeyHash& hash) const { return *shards_[ShardIndexFor(hash, shards_.size())]; }
  Shard& operator[](size_t id) const { return *shards_[id]; }
  size_t size() const { return shards_.size(); }
  // Iterates over the shards in id order (as std::unique_ptr<Shard>).
  auto begin() const { return shards_.begin(); }
  auto end() const { return shards_.end(); }

 private:
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_SHARD_H_
