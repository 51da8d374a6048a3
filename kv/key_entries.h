// Which of a key's hash-index entries is its current one (kv/README.md "Blind overwrites").
//
// In hash mode an overwrite of a key that is neither cached nor on a page still in memory does
// not read the key's current page: it appends the new record and inserts a new entry, which
// Index::Find returns before the key's older ones. So a key may have several entries: its
// current record is on the first of them, and the others are stale (their records are dead but
// still counted live, SegmentTable::AddLikelyStale). Reads take the first candidate that holds
// the key (page_lookup.cc) and never need to know. Compaction must (it copies only current
// records, and erases the stale entries pointing into its victim, or the victim could never be
// freed), and so must check and dumps (which list live records): they ask StandingOf.
//
// An entry is stale when an entry before it belongs to the same key. What proves it: the key's
// cached place (record_cache.h: always its current entry), a page still in memory, or a page
// read from the device, holding a record of the key (a page never holds two keys with one tag,
// so the tag's entry on it is that key's). Pages hold their records until compaction frees
// their segment, and only the compactor frees segments: a proof holds while it cleans.
//
// Thread contract: any thread; takes the shard's lock itself (REQUIRES: not held).
#ifndef NVKV_KV_KEY_ENTRIES_H_
#define NVKV_KV_KEY_ENTRIES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/key_hash.h"
#include "kv/page_format.h"
#include "kv/shard.h"

namespace nvkv::kv {

enum class EntryStanding {
  kNotIndexed,  // no entry of the key's tag points at the page
  kCurrent,     // the key's current entry: no entry before it is the key's
  kStale,       // an entry before it is the key's
  kUnknown,     // an entry before it is on a page that cannot be read: nothing is proved
};

// A verified data page's bytes for a page number, or null when it cannot be read or is not a
// data page. Called without any lock held.
using PageSource = std::function<const uint8_t*(uint64_t page)>;

// The bytes of `key`'s newest record on the verified data page `page`, or nullopt when the page
// holds no record of `key`.
std::optional<uint32_t> KeyRecordBytesOn(const uint8_t* page, const PageHeader& header,
                                         std::string_view key);

// Whether page `page` is still in memory (Shard::unwritten) and, if so, whether it holds a record
// of `key` (then `*record_bytes`, when given, is its newest record's size).
enum class InMemory { kNo, kHoldsKey, kHoldsNot, kBeingWritten };
InMemory LookInMemory(const Shard& shard, uint64_t page, std::string_view key,
                      uint32_t* record_bytes = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// `key`'s entries that point into `segment` at pages holding a record of it, each with its page
// and the bytes of the key's newest record there. `segment_page` gives a verified data page of the
// segment (no device read: the segment is in memory) or null. Current and stale alike.
std::vector<std::pair<uint64_t, uint32_t>> EntriesInSegment(Shard& shard, const KeyHash& hash,
                                                            std::string_view key,
                                                            const Geometry& geometry,
                                                            uint64_t segment,
                                                            const PageSource& segment_page);

// Where `key`'s current entry is: the page of the first of its tag's entries that holds it,
// found from the cache, pages in memory, and pages read from `source` one at a time, in order,
// until one holds it. kNotIndexed: no entry is the key's; kUnknown: an unreadable page comes
// before the first that holds it. REQUIRES: hash mode.
struct CurrentEntry {
  EntryStanding standing = EntryStanding::kNotIndexed;  // kCurrent: found, at `page`
  uint64_t page = 0;
};
CurrentEntry FindCurrentEntry(Shard& shard, const KeyHash& hash, std::string_view key,
                              const PageSource& source);

// Whether the hash-index entry of `key` at `page` is the key's current one (FindCurrentEntry).
// REQUIRES: hash mode; `page` holds a record of `key`.
EntryStanding StandingOf(Shard& shard, const KeyHash& hash, std::string_view key, uint64_t page,
                         const PageSource& source);

}  // namespace nvkv::kv

#endif  // NVKV_KV_KEY_ENTRIES_H_
