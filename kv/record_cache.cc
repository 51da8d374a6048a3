// The record cache (record_cache.h): S3-FIFO over a shard's hot keys.
#include "kv/record_cache.h"

#include <algorithm>
#include <new>
#include <utility>

#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

// The ghost's share of the capacity, and the small FIFO's share of the entries' bytes.
constexpr uint64_t kGhostShareDivisor = 20;  // 5%
constexpr uint64_t kSmallShareDivisor = 10;  // 10%
constexpr uint8_t kMaxReads = 3;

}  // namespace

uint64_t RecordCache::ChargeFor(size_t key_bytes, size_t value_bytes) {
  // The map slot (a pointer and a control byte), the map at most 7/8 full.
  constexpr uint64_t kSlotBytes = decltype(map_)::kSlotBytes * 8 / 7;
  return sizeof(Entry) + kSlotBytes + key_bytes + value_bytes;
}

RecordCache::RecordCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes),
      ghost_capacity_(capacity_bytes / kGhostShareDivisor / kGhostEntryBytes),
      entries_capacity_(capacity_bytes - ghost_capacity_ * kGhostEntryBytes),
      ghost_(ghost_capacity_) {}

RecordCache::~RecordCache() {
  delete spare_;
  for (List* list : {&small_, &main_}) {
    while (list->oldest != nullptr) {
      Entry* entry = list->oldest;
      Unlink(entry);
      delete entry;
    }
  }
}

const RecordCache::Entry* RecordCache::Find(std::string_view key) {
  Entry* entry = map_.Find(key);
  if (entry == nullptr) {
    ++counters_.misses;
    return nullptr;
  }
  entry->reads = static_cast<uint8_t>(std::min<int>(entry->reads + 1, kMaxReads));
  ++counters_.hits;
  return entry;
}

const RecordCache::Entry* RecordCache::Peek(std::string_view key) const {
  return map_.Find(key);
}

void RecordCache::Put(std::string_view key, uint64_t hash_lo, std::string_view value,
                      Location location) {
  const uint64_t charge = ChargeFor(key.size(), value.size());
  Entry* entry = map_.Find(key);
  if (charge > entries_capacity_ / kSmallShareDivisor) {
    // Larger than the small FIFO's share: it would flush the hot set. Not cached.
    if (entry != nullptr) Remove(entry);
    return;
  }
  if (entry != nullptr) {
    // An overwrite: the entry keeps its place and its reads; only its size changes.
    const uint64_t old_charge = ChargeFor(entry->key.size(), entry->value.size());
    try {
      entry->value.assign(value);  // unchanged if it throws
    } catch (const std::bad_alloc&) {
      // No memory for the new value: the entry would say what the index no longer does.
      Remove(entry);
      return;
    }
    entry->location = location;
    List& list = ListOf(*entry);
    list.bytes = list.bytes - old_charge + charge;
    MakeRoom(0);
    return;
  }
  if (!map_.MakeRoomFor(1)) return;  // no memory for the map to grow: the key is not cached
  MakeRoom(charge);
  // The entry evicted last, if any, with its strings' memory: a cache that is full evicts one
  // entry for each it takes in, and reusing it spares the allocations.
  Entry* raw = std::exchange(spare_, nullptr);
  try {
    if (raw == nullptr) raw = new Entry;
    raw->key.assign(key);
    raw->value.assign(value);
  } catch (const std::bad_alloc&) {
    // No memory for the entry's bytes (under a tight memory limit): the key, which had none, is
    // not cached. The cache is only ever a shortcut to what the index says. (std::string and
    // new leave everything as it was when they throw; the tables here never throw.)
    spare_ = raw;
    return;
  }
  map_.Insert(raw);
  raw->location = location;
  raw->hash_lo = hash_lo;
  raw->reads = 0;
  // A key evicted from the small FIFO not long ago was wanted again: straight to the main one.
  const bool was_ghost = ghost_.Forget(hash_lo);
  PushNewest(raw, was_ghost ? Entry::Queue::kMain : Entry::Queue::kSmall);
}

RecordCache::Counters RecordCache::counters() const {
  Counters counters = counters_;
  counters.bytes = entry_bytes() + ghost_.size() * kGhostEntryBytes;
  counters.entries = map_.size();
  return counters;
}

void RecordCache::Move(std::string_view key, Location from, Location to) {
  Entry* entry = map_.Find(key);
  if (entry != nullptr && entry->location == from) entry->location = to;
}

void RecordCache::Erase(std::string_view key) {
  if (Entry* entry = map_.Find(key)) Remove(entry);
}

void RecordCache::PushNewest(Entry* entry, Entry::Queue queue) {
  entry->queue = queue;
  List& list = ListOf(*entry);
  entry->older = list.newest;
  entry->newer = nullptr;
  if (list.newest != nullptr) list.newest->newer = entry;
  list.newest = entry;
  if (list.oldest == nullptr) list.oldest = entry;
  list.bytes += ChargeFor(entry->key.size(), entry->value.size());
}

void RecordCache::Unlink(Entry* entry) {
  List& list = ListOf(*entry);
  if (entry->newer != nullptr) {
    entry->newer->older = entry->older;
  } else {
    list.newest = entry->older;
  }
  if (entry->older != nullptr) {
    entry->older->newer = entry->newer;
  } else {
    list.oldest = entry->newer;
  }
  entry->newer = entry->older = nullptr;
  list.bytes -= ChargeFor(entry->key.size(), entry->value.size());
}

void RecordCache::Remove(Entry* entry) {
  Unlink(entry);
  map_.Erase(entry);
  delete entry;
}

void RecordCache::MakeRoom(uint64_t incoming) {
  while (entry_bytes() + incoming > entries_capacity_ && entry_bytes() > 0) EvictOne();
}

void RecordCache::EvictOne() {
  if (small_.oldest != nullptr &&
      (small_.bytes > entries_capacity_ / kSmallShareDivisor || main_.oldest == nullptr)) {
    Entry* entry = small_.oldest;
    Unlink(entry);
    if (entry->reads > 0) {
      // Read again while in the small FIFO: it earns a place in the main one.
      entry->reads = 0;
      PushNewest(entry, Entry::Queue::kMain);
      return;
    }
    RememberGhost(entry->hash_lo);
    Recycle(entry);
    ++counters_.evictions;
    return;
  }
  // The main FIFO: an entry read since it last came round goes round once more.
  Entry* entry = main_.oldest;
  NVKV_CHECK(entry != nullptr);
  Unlink(entry);
  if (entry->reads > 0) {
    --entry->reads;
    PushNewest(entry, Entry::Queue::kMain);
    return;
  }
  Recycle(entry);
  ++counters_.evictions;
}

void RecordCache::Recycle(Entry* entry) {
  map_.Erase(entry);
  delete spare_;
  spare_ = entry;
}

void RecordCache::RememberGhost(uint64_t hash_lo) { ghost_.Remember(hash_lo); }

// --- Ghost ---

uint64_t RecordCache::Ghost::SlotOf(uint64_t stored) const {
  if (set_slots_ == 0) return 0;
  for (uint64_t pos = Home(stored);; pos = Next(pos)) {
    if (set_[pos] == stored) return pos;
    if (set_[pos] == 0) return set_slots_;
  }
}

void RecordCache::Ghost::Place(uint64_t stored) {
  uint64_t pos = Home(stored);
  while (set_[pos] != 0) pos = Next(pos);
  set_[pos] = stored;
  ++size_;
}

bool RecordCache::Ghost::Grow() {
  const uint64_t ring_slots = std::min(capacity_, std::max(kMinRing, 2 * ring_slots_));
  std::unique_ptr<uint64_t[]> ring(new (std::nothrow) uint64_t[ring_slots]);
  std::unique_ptr<uint64_t[]> set(new (std::nothrow) uint64_t[2 * ring_slots]());
  if (ring == nullptr || set == nullptr) return false;
  // The ring's hashes oldest first (it is full when it grows), then the set anew.
  for (uint64_t i = 0; i < ring_used_; ++i) ring[i] = ring_[(next_ + i) % ring_slots_];
  const std::unique_ptr<uint64_t[]> old_set = std::exchange(set_, std::move(set));
  const uint64_t old_set_slots = std::exchange(set_slots_, 2 * ring_slots);
  ring_ = std::move(ring);
  ring_slots_ = ring_slots;
  next_ = ring_used_;
  size_ = 0;
  for (uint64_t i = 0; i < old_set_slots; ++i) {
    if (old_set[i] != 0) Place(old_set[i]);
  }
  return true;
}

void RecordCache::Ghost::Remember(uint64_t hash) {
  if (capacity_ == 0) return;
  const uint64_t stored = Stored(hash);
  if (SlotOf(stored) != set_slots_) return;
  if (ring_used_ == ring_slots_ && (ring_slots_ == capacity_ || !Grow())) {
    if (ring_slots_ == 0) return;  // not even the first ring could be had
    // Full: the oldest goes. A hash that left the ghost early (its key came back) is gone from
    // the set already.
    Forget(ring_[next_]);
  } else {
    ++ring_used_;
  }
  ring_[next_] = stored;
  next_ = next_ + 1 == ring_slots_ ? 0 : next_ + 1;
  Place(stored);
}

bool RecordCache::Ghost::Forget(uint64_t hash) {
  uint64_t hole = SlotOf(Stored(hash));
  if (hole == set_slots_) return false;
  // Backward shift: move each later hash of the run into the hole when the hole lies between
  // its home and its slot (cyclically), so that no probe meets an empty slot before its hash.
  for (uint64_t pos = Next(hole); set_[pos] != 0; pos = Next(pos)) {
    const uint64_t home = Home(set_[pos]);
    const bool hole_on_its_path =
        hole <= pos ? (home <= hole || home > pos) : (home <= hole && home > pos);
    if (hole_on_its_path) {
      set_[hole] = set_[pos];
      hole = pos;
    }
  }
  set_[hole] = 0;
  --size_;
  return true;
}

}  // namespace nvkv::kv
