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
  // The map slot: a string_view and a pointer, one control byte, at most 7/8 full.
  constexpr uint64_t kSlotBytes = (sizeof(std::string_view) + sizeof(Entry*) + 1) * 8 / 7;
  return sizeof(Entry) + kSlotBytes + key_bytes + value_bytes;
}

RecordCache::RecordCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes),
      ghost_capacity_(capacity_bytes / kGhostShareDivisor / kGhostEntryBytes),
      entries_capacity_(capacity_bytes - ghost_capacity_ * kGhostEntryBytes) {}

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
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++counters_.misses;
    return nullptr;
  }
  Entry* entry = it->second;
  entry->reads = static_cast<uint8_t>(std::min<int>(entry->reads + 1, kMaxReads));
  ++counters_.hits;
  return entry;
}

const RecordCache::Entry* RecordCache::Peek(std::string_view key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

void RecordCache::Put(std::string_view key, uint64_t hash_lo, std::string_view value,
                      Location location) {
  const uint64_t charge = ChargeFor(key.size(), value.size());
  auto it = map_.find(key);
  if (charge > entries_capacity_ / kSmallShareDivisor) {
    // Larger than the small FIFO's share: it would flush the hot set. Not cached.
    if (it != map_.end()) Remove(it->second);
    return;
  }
  if (it != map_.end()) {
    // An overwrite: the entry keeps its place and its reads; only its size changes.
    Entry* entry = it->second;
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
    // not cached. The cache is only ever a shortcut to what the index says. (Only std::string
    // and new are caught: they leave everything as it was, where Abseil's tables promise
    // nothing after a failed allocation.)
    spare_ = raw;
    return;
  }
  map_.emplace(std::string_view(raw->key), raw);
  raw->location = location;
  raw->hash_lo = hash_lo;
  raw->reads = 0;
  // A key evicted from the small FIFO not long ago was wanted again: straight to the main one.
  const bool was_ghost = ghost_.erase(hash_lo) > 0;
  PushNewest(raw, was_ghost ? Entry::Queue::kMain : Entry::Queue::kSmall);
}

RecordCache::Counters RecordCache::counters() const {
  Counters counters = counters_;
  counters.bytes = entry_bytes() + ghost_.size() * kGhostEntryBytes;
  counters.entries = map_.size();
  return counters;
}

void RecordCache::Move(std::string_view key, Location from, Location to) {
  auto it = map_.find(key);
  if (it != map_.end() && it->second->location == from) it->second->location = to;
}

void RecordCache::Erase(std::string_view key) {
  auto it = map_.find(key);
  if (it != map_.end()) Remove(it->second);
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
  map_.erase(std::string_view(entry->key));
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
  map_.erase(std::string_view(entry->key));
  delete spare_;
  spare_ = entry;
}

void RecordCache::RememberGhost(uint64_t hash_lo) {
  if (ghost_capacity_ == 0) return;
  if (!ghost_.insert(hash_lo).second) return;
  ghost_fifo_.push_back(hash_lo);
  while (ghost_fifo_.size() > ghost_capacity_) {
    // A hash that left the ghost early (its key came back) is gone from the set already.
    ghost_.erase(ghost_fifo_.front());
    ghost_fifo_.pop_front();
  }
}

}  // namespace nvkv::kv
