// The base a recovery starts from (recovery.h): the checkpoint the segment map names when it can
// be used, else nothing (an empty base: the whole log is read). After a clean Close the
// checkpoint is all there is; after a crash it is the base of the log written after it
// (kv/FORMAT.md "Recovery from a base"): RecoveryBase loads it, finds which segments hold log
// written since, and answers what the base knows of a segment or a page while that log is
// applied over it.
#ifndef NVKV_KV_RECOVERY_BASE_H_
#define NVKV_KV_RECOVERY_BASE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/checkpoint.h"
#include "kv/recovery.h"
#include "kv/recovery_map.h"
#include "kv/segment_table.h"
#include "kv/sequence_ranges.h"
#include "kv/shard.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

class RecoveryBase {
 public:
  RecoveryBase(const StoreShape& shape, storage::Device& device, SegmentTable& segments,
               const ShardSet& shards, const MapView& map);

  // After a clean Close: loads the checkpoint the map names, the heads resume in their segments,
  // and the indexes and the table are ready (nothing else is read). Fills `report` (start,
  // checkpoint, pages, next sequence, dropped batches, heads resumed). When the checkpoint
  // cannot be used, the indexes and the table are made anew and the reason returned.
  absl::Status LoadAfterCleanClose(RecoveryReport& report);

  // After a crash: loads the checkpoint the map names as the base of the log written after it,
  // forgets what it says of segments compaction freed since (their last pages tell), and keeps
  // in `to_read` and `summarized` only the segments holding log written after it (the heads'
  // segments among them, from where the base ends their logs). Fills `report`'s base fields.
  // When that cannot be told apart, the base is set aside (the indexes and the table made anew)
  // and the reason returned.
  absl::Status LoadBase(std::vector<uint64_t>& to_read, std::vector<Summarized>& summarized,
                        RecoveryReport& report);

  // Recovery applies the log after a base over it (LoadBase succeeded).
  bool over_base() const { return over_base_; }
  // Per segment: the base knows its log (it is not read again, but for a head's tail).
  bool knows(uint64_t segment) const { return knows_[segment]; }
  // For a head's segment the base knows, the first page written after the base; 0 otherwise.
  uint64_t tail_from(uint64_t segment) const { return tail_from_[segment]; }
  // Whether `page` holds what the base knows of the log (not the log after it).
  bool IsBasePage(uint64_t page) const;
  // The base's next sequence and generation (0 without a base).
  uint64_t next_sequence() const { return next_sequence_; }
  uint64_t next_generation() const { return next_generation_; }

  // Of the records on a page, the newest of one key (by its hash's low half).
  struct KeysRecord {
    bool holds = false;
    uint64_t sequence = 0;
    uint32_t record_bytes = 0;
  };
  // Reads `page` and finds the newest record on it whose key's hash has the low half `hash_lo`,
  // leaving out the records of batches the base dropped (as page reads do, page_lookup.cc).
  // kDataLoss when the page cannot be read or verified as a data page.
  absl::StatusOr<KeysRecord> NewestOfKeyOn(uint64_t page, uint64_t hash_lo);

  // The checkpoint recovery started from stays on the device, the base of the next recovery
  // after a crash: the map says so from the Open's first map write on (MapState::kBaseCheckpoint).
  void Keep();

 private:
  // LoadBase: which segments hold log written after the checkpoint `loaded`, and what it knows
  // of segments compaction freed since (which it forgets). Fails when a segment's last page
  // cannot tell whether it was freed.
  absl::Status FindTail(const LoadedCheckpoint& loaded, std::vector<uint64_t>& to_read,
                        std::vector<Summarized>& summarized, RecoveryReport& report);
  // What a checkpoint set aside had filled is made anew.
  void ForgetAll();

  const StoreShape& shape_;
  storage::Device& device_;
  SegmentTable& segments_;
  const ShardSet& shards_;
  const MapView& map_;
  bool over_base_ = false;
  std::vector<bool> knows_;
  std::vector<uint64_t> tail_from_;
  uint64_t next_sequence_ = 0, next_generation_ = 0;
  SequenceRanges dropped_;  // the records of dropped batches the base names
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECOVERY_BASE_H_
