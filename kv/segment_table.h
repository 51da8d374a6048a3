// SegmentTable: what the engine knows about each segment — state, live bytes, generation, and
// (its SegmentContents) what its log holds — and which segments are free. Shared by the write
// path (heads take free segments), compaction (chooses victims, frees them) and recovery (fills
// it in).
//
// Thread contract: thread-safe. State changes take `mu_` (rare: once per segment fill or
// clean); live-byte accounting is an atomic add on the hot path. What each segment's log holds
// (its records' sequences and bytes, its key filter and tombstone sample) is the table's
// SegmentContents (segment_contents.h), which the table tells when a log begins, is sealed and
// ends, and which the writers of records tell of each record (contents().Note).
//
// Liveness. live_bytes counts the records the index points at (stale entries' too: kv/README.md
// "Blind overwrites"); deletes are never live. A segment is worth cleaning (PickVictim's
// only_with_garbage) when at least a page of its records is dead, counting the tombstones
// cleaning would keep as kept (SegmentContents::EstimateCleaning), or when what it keeps is so
// little that it repacks into fewer pages: pages are at least half full once packed, so that
// holds below (pages_per_segment - 2) / 2 pages of payload. Cleaning a segment that gains nothing
// would only rewrite it, over and over when the store is full of live data.
//
// The segment map (segment_map.h). A table given a map keeps it saying what recovery must read:
// which segments hold a log, and which free ones the heads may take (announced: FreeSegments,
// free_segments.h). The log writer writes the map's changed pages (TakeMapWrite).
#ifndef NVKV_KV_SEGMENT_TABLE_H_
#define NVKV_KV_SEGMENT_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "kv/engine.h"
#include "kv/free_segments.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"
#include "kv/segment_contents.h"
#include "kv/segment_map.h"
#include "kv/zeroed_block.h"

namespace nvkv::kv {

enum class SegmentState : uint8_t {
  kFree,        // holds nothing (free marker or never written); on the free list
  kOpen,        // a log head is filling it
  kSealed,      // full or closed; a compaction candidate once its writes are done
  kCompacting,  // being cleaned
  kRetained,    // cleaned, but records on damaged pages are still indexed: never picked until
                // no index entry points into it (Unretain)
  kHeld,        // holds no log but a checkpoint's pages (Hold): not free until given back, or,
                // kept, until a newer set replaces it or a delete or compaction finds no other
                // free segment (CheckReserve)
  kRetired,     // zoned: holds nothing the store needs, in a zone the device took out of service
                // (read-only or offline): never written, reset nor picked by compaction again
                // (Retire)
};

// The head that wrote a segment and the head counter of its last page. Compaction waits until
// that head is durable through it before it copies records out (compactor.cc).
struct LastWrite {
  uint32_t shard = 0;
  uint64_t head_counter = 0;
};

// Who asks for a free segment; each may dig deeper into the reserve.
enum class SegmentUse : uint8_t {
  kUserPut,     // leaves `reserve_user` segments free
  kUserDelete,  // leaves one segment free
  kCompaction,  // may take the last one
};

class SegmentTable {
 public:
  // `geometry` gives the segment count and shape; `reserve_user` is what kUserPut must leave.
  // With a `map` (the engine's; tests of the table alone may leave it out, and then every free
  // segment may be taken at once), `next_sequence` is the engine's sequence counter, for the
  // floors a map page carries. Both must outlive the table.
  SegmentTable(const Geometry& geometry, uint32_t reserve_user, SegmentMap* map = nullptr,
               const std::atomic<uint64_t>* next_sequence = nullptr);

  // The free segments user puts must leave for a store of `shard_count` shards. Compaction
  // copies a victim's live records to the log head of each record's shard, so one victim may
  // need a fresh segment for every head (each head's segment may be nearly full): one per
  // shard. Two more let deletes (which leave only one) write tombstones on a store that refuses
  // puts, and keep a segment spare for compaction's next victim.
  static uint32_t UserReserveFor(uint32_t shard_count) { return shard_count + 2; }
  uint32_t user_reserve() const { return reserve_user_; }

  uint64_t count() const { return segment_count_; }

  // Takes a free segment for a log head and gives it a fresh generation. kResourceExhausted
  // when the free list is down to what `use` must leave. With a map, only an announced segment
  // is taken, and on zones only with a zone token (UseZoneTokens): when there is none yet,
  // *awaiting_writer is set and nothing is taken (the caller wakes the writer, which announces
  // segments and gives tokens back, and tries again later).
  absl::StatusOr<uint64_t> Allocate(SegmentUse use, uint64_t* generation, bool* awaiting_writer);

  // A zoned store: a head's segment is a zone, and the device keeps only so many zones active
  // (kv/FORMAT.md "Open and active zones"). The heads share `tokens` of them: a head's zone holds
  // one from Allocate until the writer found it full, or finished it, once its pages are durable
  // (ZoneDone). Before any Allocate.
  void UseZoneTokens(uint32_t tokens);
  // A head's zone is no longer active on the device: its token is free again. The caller wakes
  // the heads that wait.
  void ZoneDone();
  // Tokens free now (Stats); nullopt without zones.
  std::optional<uint32_t> zone_tokens_free();

  // The segment map (null without one), and what its writer does with it.
  SegmentMap* map() const { return map_; }
  // Marks free segments in use in the map until announced_target() of them are announced or
  // being announced; their map pages are then written (SegmentMap::TakeWrite).
  void AnnounceMore() { free_.AnnounceMore(); }
  // The map's one write protocol, for its two writers (the log writer while it runs, Open and
  // Close before and after): the next changed map page, encoded into `page` with the floors of
  // this moment, to be written; none when nothing changed.
  std::optional<SegmentMap::PageWrite> TakeMapWrite(uint8_t* page);
  // The write TakeMapWrite prepared completed with `status` (OK: the page is on the device, as
  // durable as the map needs). On success, the segments whose marks are on the device may now
  // be taken; a failure comes back saying the map's write failed (a failed page stays changed,
  // to be written again).
  absl::Status MapPageWritten(const SegmentMap::PageWrite& write, const absl::Status& status);
  // The store is closing: announced segments (and ones being announced) are free again, and
  // marked so in the map.
  void WithdrawAnnouncements();
  // Free segments kept announced: one per head (every shard's, for compaction's copies too) and
  // two, so that a head moving on rarely waits for a map write.
  uint32_t announced_target() const { return reserve_user_; }
  // The floors a map page written now carries: the next sequence and generation.
  SegmentMapPageHeader MapFloors() const;
  // kResourceExhausted when the free list is down to what `use` must leave (as Allocate would
  // fail): a head's segment taken by compaction from the reserve is for compaction's copies.
  // Puts never take the kept held segments; deletes and compaction free them when nothing else
  // is free (ReleaseKept), rather than be refused.
  absl::Status CheckReserve(SegmentUse use);
  // A head is done with `segment` (full or closing); its contents are sealed.
  // `last_write` says which head wrote it up to which page (none: recovered from the device,
  // durable already).
  void Seal(uint64_t segment, std::optional<LastWrite> last_write = std::nullopt);
  std::optional<LastWrite> last_write(uint64_t segment);
  // Compaction: picks a sealed segment with no writes in flight, marks it kCompacting. With
  // `only_with_garbage`, only a segment whose cleaning reclaims space (see above).
  std::optional<uint64_t> PickVictim(CompactionPolicy policy, uint64_t now_sequence,
                                     bool only_with_garbage);
  // Compaction gave up on `segment` (error): back to kSealed.
  void Unpick(uint64_t segment);
  // Compaction cleaned `segment` and wrote its free markers (their generation came from
  // NextGeneration): kCompacting -> kFree, back on the free list.
  void Free(uint64_t segment);
  // Compaction cleaned `segment` but could not empty it (damaged pages): kCompacting ->
  // kRetained.
  void Retain(uint64_t segment);
  // Zoned: `segment`, free or emptied by compaction (kCompacting), lies in a zone the device
  // took out of service: kRetired, off the free list. Without `holds_log` (offline: the data is
  // gone; or a free zone, empty) it holds nothing: free in the map, and every Open retires it
  // again from the zone's state. With it (read-only: compaction moved its records out, but the
  // old log stays readable there and cannot be erased) the map goes on saying it is in use and
  // its contents stay known: every Open reads the log (whose records are all older than what
  // replaced them), and no tombstone it needs is dropped meanwhile (a deleted key's old record
  // there would otherwise come back at an Open that reads it).
  void Retire(uint64_t segment, bool holds_log);
  uint64_t retired_count() const { return retired_count_.load(std::memory_order_relaxed); }
  // No index entry points into retained `segment` any more: back to kSealed with no live bytes,
  // so that compaction frees it.
  void Unretain(uint64_t segment);
  std::vector<uint64_t> retained();
  // The sealed segments with writes still pending (AddPending): pages not landed, or on zones a
  // zone whose head left it and whose token the writer has not given back yet. Compaction takes
  // none of them until then.
  std::vector<uint64_t> SealedWithWritesPending();
  bool WritesPending(uint64_t segment) const {
    return info_[segment].pages_pending.load(std::memory_order_acquire) > 0;
  }
  // A degraded Open could not read pages of `segment` (RecoveryReport::unread_pages): it is never
  // a victim while this engine runs, so that no record of those pages, should they read again,
  // is taken alone from a batch recovery did not apply, and the next Open finds them.
  void HoldUnread(uint64_t segment);
  // Whether `segment` is retained; without a lock while none is (the common case).
  bool IsRetained(uint64_t segment);

  // Hot path: record bytes entering or leaving a segment. Live bytes count the records the index
  // points at, stale entries' too (kv/README.md "Blind overwrites").
  void AddLive(uint64_t segment, int64_t bytes) {
    info_[segment].live_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  // A blind overwrite probably made `bytes` of `segment`'s indexed records stale (its key's
  // previous entry points there, or another key's with the same tag: it does not know which).
  // An estimate for choosing victims only; cleaning the segment settles what is really live.
  void AddLikelyStale(uint64_t segment, int64_t bytes) {
    info_[segment].likely_stale_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  // What the segments' logs hold: the writers of records note each one there.
  SegmentContents& contents() { return contents_; }
  void AddPending(uint64_t segment, int32_t pages) {
    info_[segment].pages_pending.fetch_add(pages, std::memory_order_acq_rel);
  }

  uint64_t NextGeneration() { return next_generation_.fetch_add(1); }

  // How often a head (Allocate) or compaction (PickVictim) took a segment, or compaction freed
  // one (Free), since the table was made. Every page of the log is written into a segment taken
  // so, and a segment leaves the log only so: unchanged, the segments holding a log are those
  // they were (a victim picked before a checkpoint and freed after it counts at its free).
  uint64_t segment_changes() const { return changes_.load(std::memory_order_relaxed); }

  // A sealed segment's summary is durable at `summary` (segment_summary.h): the map says so,
  // unless the segment no longer holds the log of `generation` (freed since). Returns whether
  // it does.
  bool MarkSummarized(uint64_t segment, uint64_t generation, const SummaryPlace& summary);

  // What recovery found of one segment.
  struct RecoveredSegment {
    bool in_use = false;  // it holds a log
    uint64_t generation = 0;  // the log's
    uint64_t min_sequence = UINT64_MAX, max_sequence = 0;  // of its records
    SummaryPlace summary;  // a durable summary of the whole log, if it has one
    // The segment was restored from a checkpoint (a head's, whose log went on after it): its
    // records were noted on top of what the checkpoint gave, sequences included.
    bool extends_restored = false;
  };
  // Recovery fills these before the engine starts (contents().Note first, for every record it
  // finds; RecoverSegment then says whether the segment holds a log, SegmentContents::Recover).
  void RecoverSegment(uint64_t segment, const RecoveredSegment& found);
  void SetNextGeneration(uint64_t generation) { next_generation_.store(generation); }
  // Builds the free list from the recovered states, and makes the map say the same of every
  // segment (the pages that change are written by the map's writer).
  void FinishRecovery();

  // What the table knows of a segment holding a log, apart from its contents: what a checkpoint
  // saves of it (saved_segment.h).
  struct LogFacts {
    uint64_t generation = 0;  // of its log
    SummaryPlace summary;     // a durable summary of the whole log, if it has one
    int64_t live_bytes = 0;
    int64_t likely_stale_bytes = 0;
  };
  // None when `segment` holds no log (free or held).
  std::optional<LogFacts> log_facts(uint64_t segment);
  // Recovery from a checkpoint, before FinishRecovery: free `segment` holds a sealed log, as
  // `facts` say (its contents are restored apart: RestoreSavedSegment). kDataLoss when it is
  // beyond the store or given twice, or the facts are no log's (no generation, negative live
  // bytes, a summary beyond the segment's log pages).
  absl::Status RestoreLog(uint64_t segment, const LogFacts& facts);
  // Recovery from a checkpoint: restored `segment` is the log of `generation` a head goes on
  // with (kOpen again). False, and nothing changes, when it is no restored sealed log of that
  // generation without a summary (a head goes on only with a log it has not finished).
  bool ReopenLog(uint64_t segment, uint64_t generation);
  // Recovery set aside a checkpoint it had partly restored: every segment free and empty again.
  void ForgetRecovered();
  // Recovery over a checkpoint: restored `segment` was freed since; free and empty again.
  void ForgetRecoveredSegment(uint64_t segment);
  // Held segments (kHeld): neither free nor holding a log, for a checkpoint's pages (what
  // they hold is CheckpointKeeper's and recovery's to know). One set of them is *kept*: the map
  // names each of its segments with its place (SummaryPlace: its position in the set and its
  // pages), and when nothing else is free, a delete or compaction frees the set rather than be
  // refused (CheckReserve); puts never take its room.
  // Takes `count` free segments (the highest numbers when the free list is as recovery made
  // it: heads fill the device from the front), leaving at least `keep` free; none when there
  // are not as many (false). Segments announced to the map for heads are not taken.
  bool Hold(uint64_t count, uint64_t keep, std::vector<uint64_t>* taken);
  // Held `segments`, not kept, are free again.
  void Unhold(std::span<const uint64_t> segments);
  // Held `segments` become the kept set, `pages[i]` of them in the i-th: the set kept before is
  // free again, and the map says `mark` of the new set's segments with their places and free of
  // the old one's, once written. Returns the map changes that name the new set, for the caller
  // to wait on (SegmentMap::Durable). (A cut that leaves part of those map writes on the device
  // leaves marks that do not line up: recovery then reads the log.)
  std::vector<SegmentMap::Ticket> KeepHeld(std::span<const uint64_t> segments,
                                           std::span<const uint32_t> pages, MapState mark);
  // Recovery, before FinishRecovery: free `segment` is the next of the kept set, holding
  // `pages`. FinishRecovery has the map say it is a part of the base (MapState::kBaseCheckpoint):
  // the log is written after it from now on.
  void KeepFound(uint64_t segment, uint32_t pages);
  // The map says `mark` of the kept set's segments again (with their places).
  void MarkKept(MapState mark);
  // The kept set is free again (the map says so once written).
  void ReleaseKept();
  // Segments in the kept set.
  uint64_t kept_count();
  // A map write to come whose floors are above every generation taken so far (a page written
  // again): a checkpoint's pages go into segments the map calls free, which recovery does not
  // read, so such a floor must be durable before they are written (kv/FORMAT.md "Checkpoint").
  // No map: a ticket that is durable already.
  SegmentMap::Ticket RaiseMapFloors();
  // Whether the map change of `ticket` is on the device (no map: true).
  bool MapDurable(const SegmentMap::Ticket& ticket) const;
  // The generation of the log `segment` holds (0: free).
  uint64_t generation(uint64_t segment);
  // Recovery over a checkpoint, ordered mode: every segment's live bytes 0, before the index's
  // entries are counted again (AddLive).
  void ClearLiveBytes();

  uint64_t free_count() { return free_.count(); }
  uint64_t live_bytes_total() const;
  int64_t live_bytes(uint64_t segment) const {
    return info_[segment].live_bytes.load(std::memory_order_relaxed);
  }
  SegmentState state(uint64_t segment);

  // Blocks until Allocate(use) would find a free segment (more than `use` must leave), or until
  // compaction cannot free one anymore (no segment is being cleaned and none is worth
  // cleaning), or `timeout` passes; returns whether a free segment is there. A store full of
  // live data answers at once. Waits on the table's state itself, not for a Free call, so a
  // segment freed before the wait begins is not missed.
  bool WaitForFree(SegmentUse use, absl::Duration timeout);

  // Log space user puts may fill: every segment but the `reserve_user` ones kept for
  // compaction (and deletes) and the kept held ones, each but its last page
  // (Geometry::log_pages). Live bytes stay below it: records are packed whole into pages, and
  // when the store fills up, the open segment of each log head but the one that ran out may be
  // partly unused.
  uint64_t usable_bytes();

 private:
  struct Info {
    std::atomic<int64_t> live_bytes{0};
    std::atomic<int64_t> likely_stale_bytes{0};  // AddLikelyStale's estimate, within live_bytes
    std::atomic<int32_t> pages_pending{0};  // pages assigned whose writes have not completed
    uint64_t generation = 0;   // of the log it holds (0: free); guarded by mu_
    // Where the map says its summary is (kHeld and kept: its place in the kept set); guarded by
    // mu_.
    SummaryPlace summary;
    SegmentState state = SegmentState::kFree;
    bool held_unread = false;             // HoldUnread; guarded by mu_
    std::optional<LastWrite> last_write;  // guarded by mu_
  };

  // Free segments a `use` must leave.
  uint64_t KeepFor(SegmentUse use) const;
  // The best victim PickVictim would take (without marking it); with `with_writes_in_flight`,
  // also among sealed segments whose writes have not completed yet.
  std::optional<uint64_t> BestVictim(CompactionPolicy policy, uint64_t now_sequence,
                                     bool only_with_garbage, bool with_writes_in_flight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `segment` holds no log any more (free or held): its counts and contents are forgotten.
  void Empty(uint64_t segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t segment_count_;
  SegmentMap* const map_;
  std::optional<uint32_t> zone_tokens_ ABSL_GUARDED_BY(mu_);  // free ones, on zones
  const std::atomic<uint64_t>* const next_sequence_;
  const uint64_t capacity_bytes_;  // what one segment's log may hold (all but its last page)
  const uint32_t log_pages_;       // the pages of a segment a log may use
  const uint64_t page_payload_bytes_;  // record bytes one page holds
  const uint64_t sparse_bytes_;        // kept bytes below which a segment repacks smaller
  const uint32_t reserve_user_;
  std::unique_ptr<Info[]> info_;
  SegmentContents contents_;
  std::atomic<uint64_t> next_generation_{1};
  std::atomic<uint64_t> changes_{0};  // segment_changes()
  std::atomic<uint64_t> retained_count_{0};  // segments in kRetained
  std::atomic<uint64_t> retired_count_{0};   // segments in kRetired
  absl::Mutex mu_;
  // Which segments are free is changed only under mu_ (FreeSegments' thread contract).
  FreeSegments free_;
  // Frees held `segments`.
  void UnholdLocked(std::span<const uint64_t> segments) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseKeptLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckReserveLocked(SegmentUse use) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The kept held segments, in their order.
  std::vector<uint64_t> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_TABLE_H_
