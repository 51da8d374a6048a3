// Where recovery puts the records it reads (recovery.h "Memory"): per shard, a table of each
// key's newest record seen so far (NewestRecords: 24 bytes an entry, no key bytes). Hash mode
// builds the shard's index from its table after each pass; ordered mode builds its index as it
// reads (the index holds the keys, its entries the records' places and sizes), and its tables
// keep only each key's newest sequence, to tell a record that replaces the key's entry from an
// older one. Over a base checkpoint the records are applied over the base's entries. The first
// pass also gives the segment table every record.
#ifndef NVKV_KV_RECOVERY_SINK_H_
#define NVKV_KV_RECOVERY_SINK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kv/key_hash.h"
#include "kv/lookahead.h"
#include "kv/newest_records.h"
#include "kv/recovery.h"
#include "kv/recovery_base.h"
#include "kv/recovery_budget.h"
#include "kv/segment_table.h"
#include "kv/shard.h"
#include "kv/store_shape.h"

namespace nvkv::kv {

// A record recovery applies, read from a segment's pages or from its summary.
struct FoundRecord {
  KeyHash hash;
  std::string_view key;  // empty in hash mode when read from a summary
  uint64_t page_number = 0;
  uint32_t record_bytes = 0;
  uint64_t sequence = 0;
  bool is_delete = false;
};

class RecordSink {
 public:
  // Fills `report`'s records, table_bytes_peak, and pages for the base's pages it reads.
  RecordSink(const StoreShape& shape, SegmentTable& segments, const ShardSet& shards,
             RecoveryBudget& budget, RecoveryBase& base, RecoveryReport& report);

  // One record found in `segment`, of this pass's keys or (first pass only) of another's, for
  // the segment table. It waits in a short queue while the table slot it will probe is fetched:
  // the caller runs Flush while its key is still valid, and before records of another segment.
  void Add(uint64_t segment, const FoundRecord& record);
  // Applies every record Add holds, in the order added.
  void Flush() {
    noted_.Drain([this](const Noted& noted) { Apply(noted); });
  }

  // What the tables hold now.
  TableUse tables() const;
  // Room in the tables for `keys` of this pass's share, all shards together: sized once rather
  // than grown by a quarter at a time (each growth copies a sub-table; for 10M keys that was
  // half of recovery's time).
  void ReserveTables(uint64_t keys);

  // A record recovery cannot keep (a sequence no store reaches, no memory for a table or the
  // ordered index): recovery fails with it.
  const absl::Status& refused() const { return refused_; }
  // The highest sequence of every record added; per segment, the lowest and highest (the first
  // pass's).
  uint64_t max_sequence() const { return max_sequence_; }
  uint64_t min_sequence(uint64_t segment) const { return min_seq_[segment]; }
  uint64_t max_sequence(uint64_t segment) const { return max_seq_[segment]; }

  // After each pass, each shard's index entries of the pass's keys: hash mode builds them from
  // the shard's table, which is freed before the next shard's are built; ordered mode has built
  // them already.
  absl::Status BuildPassIndexes();
  // Why the base was set aside while the log after it was applied (a page an entry of it names
  // cannot be read, an index that cannot grow): recovery starts again without it. Empty else.
  const std::string& base_failed() const { return base_failed_; }
  // After the last pass, ordered mode: every index entry's record is live.
  void AddLiveOfIndexes();
  // The first pass goes on as the first of more passes: the tables (and in ordered mode the
  // index) drop the keys of the passes after it.
  void DropLaterPasses();

 private:
  struct Noted {
    uint64_t segment = 0;
    uint32_t shard = 0;    // the record's
    bool in_pass = false;  // its key is this pass's
    FoundRecord record;
  };
  void Apply(const Noted& noted);
  void ApplyToOrderedIndex(Shard& shard, const KeyHash& hash, const FoundRecord& record);
  absl::Status InsertLive(Shard& shard, uint64_t hash_lo, uint64_t page, uint32_t record_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  absl::Status DrainHashed(Shard& shard, NewestRecords& table, uint32_t passes_left)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  absl::Status ApplyTailHashed(Shard& shard, NewestRecords& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void InsertTailPut(Shard& shard, uint64_t hash_lo, const NewestRecords::Record& newest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  uint32_t pass() const { return budget_.pass(); }

  const StoreShape& shape_;
  SegmentTable& segments_;
  const ShardSet& shards_;
  RecoveryBudget& budget_;
  RecoveryBase& base_;
  RecoveryReport& report_;
  std::vector<NewestRecords> newest_;  // one table per shard
  Lookahead<Noted> noted_;             // records added and not yet applied
  std::vector<uint64_t> found_;  // a probe's entries, kept to save an allocation per record
  std::vector<uint64_t> min_seq_, max_seq_;
  uint64_t max_sequence_ = 0;
  absl::Status refused_;
  std::string base_failed_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECOVERY_SINK_H_
