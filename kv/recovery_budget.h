// Recovery's memory: the budget of its tables of newest records, and the passes over the log
// that keep them within it (recovery.h "Memory" and "Passes"). RecoveryBudget decides; the
// driver, the log replay and the record sink (recovery.cc) ask it and tell it what they hold.
#ifndef NVKV_KV_RECOVERY_BUDGET_H_
#define NVKV_KV_RECOVERY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kv/key_hash.h"
#include "kv/recovery.h"
#include "kv/shard.h"

namespace nvkv::kv {

// How a start of recovery reads the log: in `passes` (RecoveryBudget::Plan may add more), with
// tables sized for `whole_segment_records` records of every key in the segments it reads whole,
// and `whole_segment_filter_bytes` of key filters for those segments, when a start given up
// projected them (0: not known).
struct PassPlan {
  uint32_t passes = 1;
  uint64_t whole_segment_records = 0;
  uint64_t whole_segment_filter_bytes = 0;
};

// What the tables of newest records hold now, all shards together.
struct TableUse {
  uint64_t bytes = 0;
  uint64_t entries = 0;
};

// The budget of one start of recovery, and its passes: which is under way, how many there are,
// which pass takes a key, and how many a start given up needs instead.
class RecoveryBudget {
 public:
  RecoveryBudget(const RecoveryOptions& options, const PassPlan& plan, const ShardSet& shards);

  uint32_t pass() const { return pass_; }  // the pass under way: 0 is the first
  uint32_t passes() const { return passes_; }
  // The pass that takes `hash`'s key: hash.hi bits 23..31, which the tables keep in each entry
  // (NewestRecords::kHiBitsKept) but place nothing by, as neither does the shard (bits 32..63),
  // so that each pass's keys spread over every shard and sub-table. (The keys of one pass agree
  // in some of the bits a table compares, but only they share its table: the chance that two
  // keys are taken for one stays as it was.)
  uint32_t PassOf(const KeyHash& hash) const;

  // Before the first pass: the tables' budget, and as many passes as keep the tables the
  // summaries call for (`summarized_records`) within it. The index holds what a base gave it
  // when `over_base`.
  void Plan(uint64_t summarized_records, bool over_base);
  // Starts pass `pass`, which reads `pages` (summaries with their last pages, and segments).
  void StartPass(uint32_t pass, uint64_t pages);
  void AddPassPages(uint64_t pages) { pass_pages_ += pages; }
  void PagesApplied(uint64_t pages) { pass_pages_done_ += pages; }

  // Records of every key in the segments read whole, as a start given up projected them (0: not
  // known).
  uint64_t whole_records() const { return whole_records_; }
  uint64_t whole_filter_bytes() const { return whole_filter_bytes_; }
  uint64_t index_entries_before() const { return index_entries_before_; }  // a base's
  // The most the records the first pass keeps for later ones may take (a quarter of the budget).
  uint64_t kept_limit() const { return budget_ / kKeptShare; }

  // Plans this start for about `keys` keys of the whole log (every pass's, the index's before
  // it read the log among them) and key filters of `filter_bytes`, as projected from
  // `projected_from`: the budget is lowered to what the ceiling leaves beside the index and the
  // filters, and when the passes planned would not keep the tables within it,
  // kResourceExhausted with needed() set.
  absl::Status PlanFor(uint64_t keys, uint64_t filter_bytes, const std::string& projected_from);
  // kResourceExhausted, with needed() set, when `tables` take more than the budget: as many
  // passes as would keep them within it, projected from the share of this pass's pages applied
  // so far (a quarter more, so that one restart does), or from all of them when nothing is
  // applied yet (the room reserved for the summaries' keys). `filter_bytes`: the key filters
  // made so far (the first pass makes them beside the tables).
  absl::Status Check(const TableUse& tables, uint64_t filter_bytes);
  // Pass 0 projects the keys of the `to_read` segments read whole from the first `read` of them:
  // the tables held `held_before` keys and the filters `filters_before` bytes before the first,
  // and hold `tables` and `filter_bytes` now. PlanFor decides (the next start plans for the
  // projection). Returns the keys of this pass's share the tables are to take room for.
  absl::Status ProjectWholeRecords(uint64_t held_before, uint64_t filters_before,
                                   const TableUse& tables, uint64_t filter_bytes, size_t read,
                                   size_t to_read, uint64_t* share);
  // A table could not grow, holding `tables_bytes` with the others: the budget becomes half of
  // that, when less.
  void TablesFailed(uint64_t tables_bytes) {
    if (tables_failed_at_ == 0) tables_failed_at_ = tables_bytes;
  }

  // The tables, the index and the key filters stay within the options' ceiling: they set no
  // budget of the tables' own.
  bool WithinCeiling() const {
    return options_.table_budget_bytes == 0 && options_.table_budget_ceiling_bytes != 0;
  }
  // Whether the first pass may go on as the first of needed() passes (RecoveryBudget::NarrowTo)
  // after a step of it returned `status`, rather than recovery start again: the tables outgrew
  // a budget the ceiling set (not one the options set).
  bool MayNarrow(const absl::Status& status) const;
  void NarrowToNeeded();
  // The plan the next start needs, when this one's tables outgrew the budget or would have;
  // passes 0 when none does.
  PassPlan needed() const { return PassPlan{passes_needed_, whole_records_, whole_filter_bytes_}; }


 private:
  struct TableRoom {
    uint64_t bytes = UINT64_MAX, least = 0, beside = 0;
  };
  uint32_t PassesFor(uint64_t records, uint64_t budget) const;
  absl::Status FitWithinCeiling(uint64_t keys, uint64_t filter_bytes);
  TableRoom TableRoomWithin(uint64_t keys, uint64_t filter_bytes) const;
  uint64_t Budget() const;

  // Of the ceiling, a kCeilingMargin-th is left for what else Open allocates.
  static constexpr uint64_t kCeilingMargin = 16;
  static constexpr uint64_t kKeptShare = 4;  // of budget_

  const RecoveryOptions options_;
  const ShardSet& shards_;
  uint32_t pass_ = 0;
  // Over the log, each for a share of the keys (PassOf), planned before the first (Plan).
  uint32_t passes_;
  uint32_t passes_needed_ = 0;  // when the tables outgrew the budget, or would have
  uint64_t whole_records_;
  uint64_t whole_filter_bytes_;  // the whole segments' key filters', projected with them
  uint64_t index_entries_before_ = 0;  // what the index held before the log was read (a base's)
  // The most bytes the tables of newest records may take: the option's, or what Plan set (0
  // until then: no bound).
  uint64_t budget_;
  uint64_t tables_failed_at_ = 0;  // the tables' bytes when one could not grow (0: none failed)
  uint64_t pass_pages_ = 0;       // pages the pass reads
  uint64_t pass_pages_done_ = 0;  // of them, read and applied
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_RECOVERY_BUDGET_H_
