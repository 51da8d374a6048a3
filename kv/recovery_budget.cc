// Recovery's table budget and passes (recovery_budget.h).
#include "kv/recovery_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kv/newest_records.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

RecoveryBudget::RecoveryBudget(const RecoveryOptions& options, const PassPlan& plan,
                               const ShardSet& shards)
    : options_(options),
      shards_(shards),
      passes_(plan.passes),
      whole_records_(plan.whole_segment_records),
      whole_filter_bytes_(plan.whole_segment_filter_bytes),
      budget_(options.table_budget_bytes) {}

uint32_t RecoveryBudget::PassOf(const KeyHash& hash) const {
  constexpr int kPassBitsFirst = 23;
  static_assert((NewestRecords::kHiBitsKept & (uint64_t{0x1ff} << kPassBitsFirst)) ==
                uint64_t{0x1ff} << kPassBitsFirst);
  return static_cast<uint32_t>((((hash.hi >> kPassBitsFirst) & 0x1ff) * passes_) >> 9);
}

// Unless the options give one: over a base, a share of the index it gave (Open's memory is to
// stay within the index plus a tenth, and reading the segments read whole needs some too; the
// log after a base is a small part of the store). Without a base the tables hold a record of
// every key of the log, and a pass more reads the whole log again: the budget is what the
// machine's and the cgroup's memory leave (table_budget_ceiling_bytes), so that recovery stays
// one pass wherever memory allows (no bound when no limit can be read: /proc/meminfo at least
// always can). (At least kMinTableBudget, and twice what the shards' tables take empty, else no
// number of passes fits; at most the ceiling.)
void RecoveryBudget::Plan(uint64_t summarized_records, bool over_base) {
  const uint64_t records = summarized_records + whole_records_;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    index_entries_before_ += shard->index->stats().entries;
  }
  if (budget_ == 0) {
    const uint64_t ceiling = options_.table_budget_ceiling_bytes;
    uint64_t wanted = ceiling != 0 ? ceiling : UINT64_MAX;
    if (over_base) {
      uint64_t index_bytes = 0;
      for (const auto& shard : shards_) {
        absl::MutexLock lock(&shard->mu);
        index_bytes += shard->index->stats().memory_bytes;
      }
      wanted = index_bytes / kTableShareOfIndex;
    }
    const uint64_t empty_tables = shards_.size() * NewestRecords::BytesFor(0);
    budget_ = std::max({wanted, kMinTableBudget, 2 * empty_tables});
    if (ceiling != 0) budget_ = std::min(budget_, ceiling);
  }
  passes_ = std::max(passes_, PassesFor(records, budget_));
}

void RecoveryBudget::StartPass(uint32_t pass, uint64_t pages) {
  pass_ = pass;
  pass_pages_ = pages;
  pass_pages_done_ = 0;
}

// The fewest passes whose tables hold `records` (of every key of the log) within `budget`.
uint32_t RecoveryBudget::PassesFor(uint64_t records, uint64_t budget) const {
  const uint64_t tables = shards_.size();
  uint32_t passes = 1;
  while (passes < kMaxRecoveryPasses &&
         tables * NewestRecords::BytesFor(records / passes / tables) > budget) {
    ++passes;
  }
  return passes;
}

absl::Status RecoveryBudget::PlanFor(uint64_t keys, uint64_t filter_bytes,
                                     const std::string& projected_from) {
  NVKV_RETURN_IF_ERROR(FitWithinCeiling(keys, filter_bytes));
  const uint64_t budget = Budget();
  const uint64_t table_keys = keys - std::min(keys, index_entries_before_);
  const uint32_t needed = budget == 0 ? passes_ : PassesFor(table_keys, budget);
  if (needed <= passes_) return absl::OkStatus();
  passes_needed_ = needed;
  return absl::ResourceExhaustedError(absl::StrCat("recovery's tables would outgrow ", budget,
                                                   " bytes in ", passes_,
                                                   " pass(es), projected from ", projected_from));
}

// Without a budget the options set, the tables (and the records the first pass keeps beside
// them, a kKeptShare-th more) get what the ceiling (the memory the process may still take, as
// Open started) leaves once the index and the key filters of about `keys` keys (`filter_bytes`
// of filters) and a margin are set aside: the budget is lowered to that. When that leaves no room
// for the tables of even kMaxRecoveryPasses passes, the store cannot be opened within that memory:
// kResourceExhausted (recovery does not start again), rather than a process killed by its memory
// cgroup part way.
absl::Status RecoveryBudget::FitWithinCeiling(uint64_t keys, uint64_t filter_bytes) {
  const TableRoom room = TableRoomWithin(keys, filter_bytes);
  if (room.bytes == UINT64_MAX) return absl::OkStatus();
  if (room.bytes < room.least) {
    passes_needed_ = 0;
    constexpr double kMiB = 1 << 20;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "recovery needs about %.0f MiB for the index and key filters of about %d keys, and "
        "%.1f MiB for its tables at the least, but the process may take only %.0f MiB more "
        "(its memory cgroup, RLIMIT_AS, RLIMIT_DATA and the machine's available memory): "
        "give it more memory to open this store",
        static_cast<double>(room.beside) / kMiB, keys, static_cast<double>(room.least) / kMiB,
        static_cast<double>(options_.table_budget_ceiling_bytes) / kMiB));
  }
  budget_ = std::min(budget_, room.bytes);
  return absl::OkStatus();
}

// What the ceiling leaves the tables (with the records kept) beside the index and the key
// filters of about `keys` keys (`filter_bytes` of filters) and a margin: `bytes` (UINT64_MAX
// without a ceiling, or with a budget the options set), and the least the tables of
// kMaxRecoveryPasses passes take.
RecoveryBudget::TableRoom RecoveryBudget::TableRoomWithin(uint64_t keys,
                                                          uint64_t filter_bytes) const {
  const uint64_t ceiling = options_.table_budget_ceiling_bytes;
  TableRoom room;
  if (!WithinCeiling()) return room;
  uint64_t index_bytes = 0;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    index_bytes += shard->index->BytesFor(keys / shards_.size());
  }
  room.beside = index_bytes + filter_bytes;
  const uint64_t reserved = room.beside + ceiling / kCeilingMargin;
  room.bytes = ceiling > reserved ? (ceiling - reserved) / (kKeptShare + 1) * kKeptShare : 0;
  room.least = shards_.size() * NewestRecords::BytesFor(keys / kMaxRecoveryPasses / shards_.size());
  return room;
}

// The tables' budget in force: budget_, or half of what the tables held when one could not
// grow, when that is less (0: no bound).
uint64_t RecoveryBudget::Budget() const {
  if (tables_failed_at_ == 0) return budget_;
  const uint64_t half = std::max<uint64_t>(tables_failed_at_ / 2, 1);
  return budget_ == 0 ? half : std::min(budget_, half);
}

// A table that could not grow (the system had no memory for it: the limits MemoryHeadroomBytes
// reads are not all there is, and the index and key filters grow beside the tables) makes the
// budget half of what the tables held then.
absl::Status RecoveryBudget::Check(const TableUse& tables, uint64_t filter_bytes) {
  uint64_t budget = Budget();
  // In the first pass the key filters grow beside the tables, and the index (hash mode: built
  // after it): the tables have what the ceiling leaves beside those of the keys found so far.
  const uint64_t filters = pass_ == 0 ? filter_bytes : 0;
  if (pass_ == 0 && budget != 0) {
    const TableRoom now =
        TableRoomWithin(index_entries_before_ + tables.entries * passes_, filters);
    budget = std::min(budget, std::max(now.bytes, now.least));
  }
  if (budget == 0 || tables.bytes <= budget || passes_ >= kMaxRecoveryPasses) {
    return absl::OkStatus();
  }
  // What the whole pass reads, per what it has read.
  const double whole = pass_pages_done_ == 0
                           ? 1.0
                           : static_cast<double>(std::max(pass_pages_, pass_pages_done_)) /
                                 static_cast<double>(pass_pages_done_);
  if (pass_ == 0) {
    // And the next start's, projected alike (too early a projection to refuse the Open on:
    // PlanFor does, once the whole pass is known).
    const TableRoom room = TableRoomWithin(
        index_entries_before_ + static_cast<uint64_t>(tables.entries * passes_ * whole),
        static_cast<uint64_t>(filters * whole));
    budget = std::min(budget, std::max(room.bytes, room.least));
  }
  const double projected =
      static_cast<double>(tables.bytes) * passes_ * (pass_pages_done_ == 0 ? 1.0 : 1.25 * whole);
  const double needed = std::ceil(projected / static_cast<double>(budget));
  passes_needed_ =
      static_cast<uint32_t>(std::clamp<double>(needed, passes_ + 1, kMaxRecoveryPasses));
  return absl::ResourceExhaustedError(
      absl::StrCat("recovery's tables outgrew ", budget, " bytes in ", passes_, " pass(es)"));
}

// (The keys found so far, taken for every segment to read, run high where later segments
// overwrite keys of earlier ones: a pass more than needed, rather than tables that outgrow the
// budget late and make recovery start again then.)
absl::Status RecoveryBudget::ProjectWholeRecords(uint64_t held_before, uint64_t filters_before,
                                                 const TableUse& tables, uint64_t filter_bytes,
                                                 size_t read, size_t to_read, uint64_t* share) {
  const uint64_t found = tables.entries - held_before;
  const uint64_t projected = found * to_read / read;
  *share = held_before + projected;  // this pass's
  const uint64_t whole_filters =
      (filter_bytes > filters_before ? filter_bytes - filters_before : 0) * to_read / read;
  const absl::Status planned =
      PlanFor(index_entries_before_ + *share * passes_, filters_before + whole_filters,
              absl::StrCat(read, " of ", to_read, " segments read whole"));
  if (passes_needed_ != 0) {
    whole_records_ = projected * passes_;
    whole_filter_bytes_ = whole_filters;
  }
  return planned;
}

bool RecoveryBudget::MayNarrow(const absl::Status& status) const {
  return absl::IsResourceExhausted(status) && WithinCeiling() && pass_ == 0 &&
         passes_needed_ > passes_;
}

void RecoveryBudget::NarrowToNeeded() {
  passes_ = passes_needed_;
  passes_needed_ = 0;
}

}  // namespace nvkv::kv
