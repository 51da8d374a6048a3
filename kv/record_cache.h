// RecordCache: the values of recently used keys, with where their records are, held in memory
// so that a Get of a hot key reads no page and a hash-mode overwrite of a cached key needs no
// page read to find its current record.
//
// One RecordCache per shard, guarded by that shard's lock (Shard::mu): the index and the cache
// change together under it, so a reader never sees one without the other. A cached entry always
// says what the index and the log say: HeadAppender::ApplyToIndex, the one place the index
// changes after recovery, updates it (a user's put writes its value through, a delete erases
// it, compaction's copy moves its location); a read fills it only while the index still gives
// the key the candidates the read started from.
//
// Policy: S3-FIFO (Yang et al., SOSP 2023). New keys enter a small FIFO (a tenth of the entries'
// bytes); a key read again before it leaves the small FIFO moves to the main FIFO, the rest are
// evicted and remembered by hash in a ghost FIFO; a key found in the ghost enters the main FIFO
// directly. The main FIFO gives each entry as many more rounds as it was read since (at most
// three). One pass over many keys (a scan, a load) thus goes through the small FIFO without
// touching the main one.
//
// Memory: capacity_bytes bounds the entries (key and value bytes, the entry, its map slot) and
// the ghost, plus one spare entry. A hit allocates nothing; an insert into a full cache reuses
// the entry it evicted (no allocation when the value fits its old capacity).
//
// Not thread-safe: the owning shard's lock guards every call.
#ifndef NVKV_KV_RECORD_CACHE_H_
#define NVKV_KV_RECORD_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kv/keyed_table.h"
#include "kv/location.h"

namespace nvkv::kv {

class RecordCache {
 public:
  // What a cached key holds: its current value and its record's place as the index keeps it.
  struct Entry {
    std::string key;
    std::string value;
    Location location;

   private:
    friend class RecordCache;
    enum class Queue : uint8_t { kSmall, kMain };
    uint64_t hash_lo = 0;  // remembered in the ghost when evicted from the small FIFO
    Queue queue = Queue::kSmall;
    uint8_t reads = 0;  // reads since it entered its queue or last went round, at most 3
    Entry* newer = nullptr;
    Entry* older = nullptr;
  };

  struct Counters {
    uint64_t hits = 0, misses = 0, evictions = 0;
    uint64_t bytes = 0;    // held now: entries and ghost
    uint64_t entries = 0;  // keys held now
  };

  // Bytes an entry of these sizes is charged (key, value, the entry, its map slot).
  static uint64_t ChargeFor(size_t key_bytes, size_t value_bytes);

  // capacity_bytes 0: holds nothing.
  explicit RecordCache(uint64_t capacity_bytes);
  ~RecordCache();
  RecordCache(const RecordCache&) = delete;
  RecordCache& operator=(const RecordCache&) = delete;

  // The entry of `key`, counted as a hit (and as a read for the policy), or null (a miss).
  // Valid until the next non-const call.
  const Entry* Find(std::string_view key);
  // The entry of `key` without counting anything (a write finding its current record).
  const Entry* Peek(std::string_view key) const;

  // `key` now has `value` at `location`: replaces its entry, or adds one (`hash_lo`: the key's
  // hash, for the ghost). A value too large to cache leaves no entry; so does one whose bytes
  // the system has no memory for (a write must not fail for its cache).
  void Put(std::string_view key, uint64_t hash_lo, std::string_view value, Location location);
  // `key`'s record moved from `from` to `to` (compaction): its entry, if it has one there,
  // follows.
  void Move(std::string_view key, Location from, Location to);
  // `key` has no cached value any more (deleted, or written in a way not cached).
  void Erase(std::string_view key);

  Counters counters() const;
  uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct List {
    Entry* newest = nullptr;
    Entry* oldest = nullptr;
    uint64_t bytes = 0;
  };
  static constexpr uint64_t kGhostEntryBytes = 24;  // a hash in the FIFO and in the set

  // The ghost: the hashes of the last `capacity` keys evicted from the small FIFO, in a ring (the
  // oldest overwritten first) and in a set to look them up (linear probing over twice as many
  // slots as the ring, erased by shifting back, 0 meaning empty). Both grow by doubling as the
  // ghost fills, up to `capacity`; a growth the system has no memory for is skipped (the ghost
  // stays smaller and forgets sooner), so remembering a hash never throws.
  class Ghost {
   public:
    explicit Ghost(uint64_t capacity) : capacity_(capacity) {}
    // Remembers `hash`, forgetting the oldest when full.
    void Remember(uint64_t hash);
    // Forgets `hash`; whether it was remembered.
    bool Forget(uint64_t hash);
    uint64_t size() const { return size_; }

   private:
    static constexpr uint64_t kMinRing = 64;
    static uint64_t Stored(uint64_t hash) { return hash == 0 ? 1 : hash; }
    uint64_t Home(uint64_t stored) const {
      return static_cast<uint64_t>((static_cast<unsigned __int128>(stored) * set_slots_) >> 64);
    }
    uint64_t Next(uint64_t pos) const { return pos + 1 == set_slots_ ? 0 : pos + 1; }
    // The slot holding `stored`, or set_slots_.
    uint64_t SlotOf(uint64_t stored) const;
    void Place(uint64_t stored);
    // Doubles the ring and the set (at most to capacity_); false when the system has no memory.
    bool Grow();

    const uint64_t capacity_;
    std::unique_ptr<uint64_t[]> ring_;  // the FIFO; ring_[next_] the oldest once it is full
    uint64_t ring_slots_ = 0;
    uint64_t next_ = 0;
    uint64_t ring_used_ = 0;
    std::unique_ptr<uint64_t[]> set_;
    uint64_t set_slots_ = 0;
    uint64_t size_ = 0;
  };
  struct KeyOfEntry {
    std::string_view operator()(const Entry* entry) const { return entry->key; }
  };

  List& ListOf(const Entry& entry) {
    return entry.queue == Entry::Queue::kSmall ? small_ : main_;
  }
  void PushNewest(Entry* entry, Entry::Queue queue);
  void Unlink(Entry* entry);
  // Drops the entry (erased) and frees it.
  void Remove(Entry* entry);
  // Drops an evicted entry and keeps it as spare_, unlinked and out of the map.
  void Recycle(Entry* entry);
  // Evicts until `incoming` more bytes fit.
  void MakeRoom(uint64_t incoming);
  // One step of eviction: from the small FIFO while it holds more than its share, else from the
  // main FIFO.
  void EvictOne();
  void RememberGhost(uint64_t hash_lo);
  uint64_t entry_bytes() const { return small_.bytes + main_.bytes; }

  const uint64_t capacity_bytes_;
  const uint64_t ghost_capacity_;       // ghost hashes kept
  const uint64_t entries_capacity_;     // bytes for entries: capacity less the ghost's share
  KeyedTable<Entry, KeyOfEntry> map_;
  // The last evicted entry, kept for the next insert (its strings' capacity is not charged: one
  // entry's worth, whatever the capacity).
  Entry* spare_ = nullptr;
  List small_, main_;
  Ghost ghost_;
  Counters counters_;  // hits, misses, evictions (bytes and entries are computed)
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECORD_CACHE_H_
