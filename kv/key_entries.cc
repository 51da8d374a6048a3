// Which of a key's hash-index entries is its current one (key_entries.h).
#include "kv/key_entries.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"

namespace nvkv::kv {
namespace {

// A page read from the device that went back into memory, or a large value still being written,
// makes a standing wait; this bounds the tries.
constexpr int kMaxTries = 100;

}  // namespace

InMemory LookInMemory(const Shard& shard, uint64_t page, std::string_view key,
                      uint32_t* record_bytes) {
  auto it = shard.unwritten.find(page);
  if (it == shard.unwritten.end()) return InMemory::kNo;
  if (it->second.large_run_in_flight()) return InMemory::kBeingWritten;
  const PageSlot& slot = *it->second.slot();
  const std::optional<uint32_t> bytes =
      KeyRecordBytesOn(slot.buffer.data, slot.HeaderSoFar(), key);
  if (!bytes) return InMemory::kHoldsNot;
  if (record_bytes != nullptr) *record_bytes = *bytes;
  return InMemory::kHoldsKey;
}

std::optional<uint32_t> KeyRecordBytesOn(const uint8_t* page, const PageHeader& header,
                                         std::string_view key) {
  RecordIterator it(page, header);
  RecordView record;
  std::optional<uint32_t> bytes;
  uint64_t newest = 0;
  while (it.Next(&record)) {
    if (record.key != key) continue;
    if (!bytes || record.header.sequence > newest) {
      newest = record.header.sequence;
      bytes = RecordBytes(record.key.size(), record.header.value_bytes);
    }
  }
  return bytes;
}

std::vector<std::pair<uint64_t, uint32_t>> EntriesInSegment(Shard& shard, const KeyHash& hash,
                                                            std::string_view key,
                                                            const Geometry& geometry,
                                                            uint64_t segment,
                                                            const PageSource& segment_page) {
  std::vector<std::pair<uint64_t, uint32_t>> entries;
  std::vector<uint64_t> candidates;
  absl::MutexLock lock(&shard.mu);
  shard.index->Find(hash.lo, key, &candidates);
  for (uint64_t candidate : candidates) {
    const uint64_t page = Location::FromIndexValue(candidate).page;
    if (page < kSuperblockPages || geometry.SegmentOf(page) != segment) continue;
    const uint8_t* bytes = segment_page(page);
    if (bytes == nullptr) continue;
    PageHeader header;
    std::memcpy(&header, bytes, sizeof(header));
    if (std::optional<uint32_t> size = KeyRecordBytesOn(bytes, header, key)) {
      entries.emplace_back(page, *size);
    }
  }
  return entries;
}

CurrentEntry FindCurrentEntry(Shard& shard, const KeyHash& hash, std::string_view key,
                              const PageSource& source) {
  // What device pages said: whether each holds the key (nullopt: unreadable).
  absl::flat_hash_map<uint64_t, std::optional<bool>> read;
  std::vector<uint64_t> candidates;
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    std::optional<uint64_t> to_read;
    bool wait = false;
    {
      absl::MutexLock lock(&shard.mu);
      shard.index->Find(hash.lo, key, &candidates);
      if (const RecordCache::Entry* cached = shard.cache->Peek(key)) {
        // The cached place is the key's current entry (record_cache.h).
        for (uint64_t candidate : candidates) {
          if (candidate == cached->location.index_value()) {
            return {EntryStanding::kCurrent, cached->location.page};
          }
        }
      }
      bool unreadable = false;
      for (uint64_t candidate : candidates) {
        const uint64_t page = Location::FromIndexValue(candidate).page;
        std::optional<bool> holds;
        switch (LookInMemory(shard, page, key)) {
          case InMemory::kHoldsKey:
            holds = true;
            break;
          case InMemory::kHoldsNot:
            holds = false;
            break;
          case InMemory::kBeingWritten:
            wait = true;
            break;
          case InMemory::kNo:
            if (auto it = read.find(page); it != read.end()) {
              if (!it->second) {
                unreadable = true;
                continue;
              }
              holds = *it->second;
            } else {
              to_read = page;
            }
            break;
        }
        if (!holds) break;  // read it (or wait for it) first
        if (*holds) {
          return {unreadable ? EntryStanding::kUnknown : EntryStanding::kCurrent, page};
        }
      }
      if (!to_read && !wait) {
        return {unreadable ? EntryStanding::kUnknown : EntryStanding::kNotIndexed, 0};
      }
    }
    if (wait) {
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    const uint8_t* bytes = source(*to_read);
    if (bytes == nullptr) {
      read[*to_read] = std::nullopt;
      continue;
    }
    PageHeader header;
    std::memcpy(&header, bytes, sizeof(header));
    read[*to_read] = KeyRecordBytesOn(bytes, header, key).has_value();
  }
  return {EntryStanding::kUnknown, 0};
}

EntryStanding StandingOf(Shard& shard, const KeyHash& hash, std::string_view key, uint64_t page,
                         const PageSource& source) {
  const CurrentEntry current = FindCurrentEntry(shard, hash, key, source);
  if (current.standing == EntryStanding::kCurrent && current.page == page) {
    return EntryStanding::kCurrent;
  }
  {
    absl::MutexLock lock(&shard.mu);
    std::vector<uint64_t> candidates;
    shard.index->Find(hash.lo, key, &candidates);
    const bool indexed = std::any_of(candidates.begin(), candidates.end(), [page](uint64_t c) {
      return Location::FromIndexValue(c).page == page;
    });
    if (!indexed) return EntryStanding::kNotIndexed;
  }
  // Indexed, and `page` holds the key, but another entry is the first that does: stale. Or a
  // damaged page comes first: unknown.
  return current.standing == EntryStanding::kCurrent ? EntryStanding::kStale
                                                     : EntryStanding::kUnknown;
}

}  // namespace nvkv::kv
