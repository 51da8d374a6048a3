// Appending to a shard's log head (callers hold the shard's lock unless said otherwise): the
// open page, new pages and segments, index and live-byte updates, batch reservations, and large
// records written by the calling thread. The write path (write_path.cc) and compaction's
// Relocate build on these.
#ifndef NVKV_KV_HEAD_APPEND_H_
#define NVKV_KV_HEAD_APPEND_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kv/engine_impl.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "storage/device.h"

namespace nvkv::kv {

// Finishes the open page, if any, and queues it for the writer.
void SealOpenPage(Engine::Impl& engine, Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Opens a fresh page at the head (a free slot must be there).
absl::Status OpenNewPage(Engine::Impl& engine, Shard& shard, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Whether a record of `bytes` for `key` can go into the open page as it is.
bool FitsOpenPage(const Engine::Impl& engine, const LogHead& head, uint32_t bytes,
                  std::string_view key, const KeyHash& hash);

// Makes the open page one that takes a record of `bytes` for `key`. May wait for a free page
// buffer, releasing shard.mu meanwhile, so only callers holding no other lock may use it, and
// they must re-check what they read before.
absl::Status EnsureOpenRoom(Engine::Impl& engine, Shard& shard, uint32_t bytes,
                            std::string_view key, const KeyHash& hash, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Appends one small record to the open page (room already ensured). Returns its page number.
uint64_t AppendToOpenPage(Engine::Impl& engine, Shard& shard, const RecordHeader& header,
                          std::string_view key, std::string_view value, const KeyHash& hash)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Records that the page of head counter `counter` holds a non-durable write about to be
// acknowledged (Shard::nondurable_through).
void NoteNonDurable(Shard& shard, uint64_t counter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// True when writing `current`'s key adds an index entry rather than changing one (see
// ApplyToIndex): the key has no record, or only a damaged candidate that may not be its own.
bool AddsIndexEntry(const CurrentRecord& current, bool is_delete);

// Applies a record's effect on the index and live bytes. `current` is where the key's record
// was; `new_page` where the new one is (ignored for deletes).
void ApplyToIndex(Engine::Impl& engine, Shard& shard, std::string_view key, const KeyHash& hash,
                  const CurrentRecord& current, bool is_delete, uint64_t new_page,
                  uint32_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Whether the index still gives the candidates `current` was resolved from (a write that
// raced with another writer of the key, or with compaction, must resolve again).
bool SameCandidates(Shard& shard, const KeyHash& hash, std::string_view key,
                    const CurrentRecord& current, std::vector<uint64_t>* scratch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// A record a batch is about to append, for planning its pages (ReserveForBatch).
struct PlannedRecord {
  std::string_view key;
  KeyHash hash;
  uint32_t bytes;
};

// Reserves segment room and page buffers for a batch at the head, so that appending it later,
// with other shards' locks held, never waits.
absl::Status ReserveForBatch(Engine::Impl& engine, Shard& shard,
                             const std::vector<PlannedRecord>& records, SegmentUse use)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

// Appends one large record (a Put whose record exceeds a page) for the key in `shard`, written
// with `queue`. On success *last_counter is the last head counter it used.
absl::Status AppendLarge(Engine::Impl& engine, Shard& shard, storage::Device& queue,
                         const RecordHeader& header, std::string_view key, std::string_view value,
                         const KeyHash& hash, const CurrentRecord& current, SegmentUse use,
                         bool fua, bool* lost_race, uint64_t* last_counter);

}  // namespace nvkv::kv

#endif  // NVKV_KV_HEAD_APPEND_H_
