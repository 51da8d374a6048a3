// Recovery (recovery.h): the driver. Every Open reads what the segment map says
// (recovery_map.h), loads the base it names when it can be used (recovery_base.h: a clean
// Close's checkpoint, which is all there is, or a base with the log written after it; else an
// empty base), then replays the log after the base (log_replay.h) into the record sink
// (recovery_sink.h), in as many passes as keep its tables within their budget
// (recovery_budget.h).
#include "kv/recovery.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "kv/log_replay.h"
#include "kv/recovery_base.h"
#include "kv/recovery_budget.h"
#include "kv/recovery_map.h"
#include "kv/recovery_sink.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// One start of recovery. RecoverStore starts again, from nothing, when this one sets the base
// aside once it had begun to apply the log over it (base_failed), or when its tables outgrew
// their budget and its first pass could not go on as the first of more passes (plan_needed).
class Recovery {
 public:
  Recovery(const RecoveryOptions& options, bool use_checkpoint, const PassPlan& plan,
           const StoreShape& shape, storage::Device& device, SegmentTable& segments,
           const ShardSet& shards)
      : options_(options),
        shape_(shape),
        use_checkpoint_(use_checkpoint),
        device_(device),
        segments_(segments),
        budget_(options, plan, shards),
        base_(shape, device, segments, shards, map_),
        sink_(shape, segments, shards, budget_, base_, report_) {}

  // Why the base was set aside after recovery had begun to apply the log after it (Run then
  // returned kDataLoss): the caller starts again without it. Empty otherwise.
  const std::string& base_failed() const { return base_failed_; }
  // More passes than this start was given (Run then returned kResourceExhausted): the caller
  // starts again with this plan. Passes 0 otherwise.
  PassPlan plan_needed() const { return budget_.needed(); }
  uint64_t pages_read() const { return report_.pages; }  // so far, for a Run that did not finish

  absl::StatusOr<RecoveryReport> Run() {
    NVKV_ASSIGN_OR_RETURN(map_, ReadMapView(shape_, device_, segments_, options_.read_all));
    report_.start = RecoveryStart::kLog;  // unless a checkpoint is used
    report_.segments_skipped = map_.segments_skipped;
    report_.map_pages_damaged = map_.pages_damaged;
    std::vector<uint64_t> to_read = std::move(map_.to_read);
    std::vector<Summarized> summarized = std::move(map_.summarized);
    if (!map_.checkpoint.empty() && !options_.read_all && use_checkpoint_) {
      const absl::Status loaded = map_.base ? base_.LoadBase(to_read, summarized, report_)
                                            : base_.LoadAfterCleanClose(report_);
      if (loaded.ok() && !map_.base) return std::move(report_);  // a clean Close: nothing else
      if (!loaded.ok()) report_.checkpoint_unused = std::string(loaded.message());
    }
    if (!base_.over_base()) {
      // A checkpoint not used holds no log; its segments are read like any the map does not say
      // are free (and found to hold none).
      for (const CheckpointPlace& place : map_.checkpoint) to_read.push_back(place.segment);
    }
    LogReplay replay(shape_, device_, segments_, budget_, base_, sink_, report_,
                     std::move(to_read), std::move(summarized), map_.floors);
    budget_.Plan(replay.SummarizedRecords(), base_.over_base());
    report_.passes = budget_.passes();
    const auto go_on = [&](absl::Status status) { return GoOnNarrowed(replay, status); };
    for (uint32_t pass = 0; pass < budget_.passes(); ++pass) {
      budget_.StartPass(pass, 0);
      NVKV_RETURN_IF_ERROR(replay.ReadSummaries());
      // The summaries' keys are known now, and those of the segments read whole when a start
      // given up projected them.
      if (pass == 0) {
        NVKV_RETURN_IF_ERROR(go_on(PlanFirstPass(
            budget_.whole_records(), budget_.whole_filter_bytes(), "the summaries")));
      }
      NVKV_RETURN_IF_ERROR(replay.ReadSegments(go_on));
      // Every key of this pass's share is known, and every key filter made.
      if (pass == 0) NVKV_RETURN_IF_ERROR(go_on(PlanFirstPass(0, 0, "the first pass")));
      if (pass > 0) {
        NVKV_RETURN_IF_ERROR(replay.ApplyKeptRecords());
        NVKV_RETURN_IF_ERROR(budget_.Check(sink_.tables(), segments_.contents().filter_bytes()));
      }
      NVKV_RETURN_IF_ERROR(replay.refused());
      NVKV_RETURN_IF_ERROR(sink_.refused());
      if (pass == 0) replay.RecoverSegments();
      if (replay.base_failed().empty()) NVKV_RETURN_IF_ERROR(sink_.BuildPassIndexes());
      NVKV_RETURN_IF_ERROR(BaseStands(replay));
      if (!report_.unread_pages.empty() && !options_.open_degraded) return replay.UnreadRefusal();
    }
    if (shape_.ordered) sink_.AddLiveOfIndexes();
    segments_.SetNextGeneration(std::max({replay.max_generation() + 1,
                                          replay.floors().generation,
                                          base_.next_generation()}));
    if (base_.over_base()) base_.Keep();
    segments_.FinishRecovery();
    report_.next_sequence =
        std::max({sink_.max_sequence() + 1, replay.max_sequence() + 1,
                  replay.floors().sequence, base_.next_sequence()});
    if (!report_.unread_pages.empty()) report_.next_sequence += UnreadSequenceGap(shape_.geometry);
    return std::move(report_);
  }

 private:
  // Within the ceiling, the first pass plans for the keys found so far (this pass's share of
  // them in the tables, taken for every pass) and `more_records` besides, and the key filters
  // made so far and `more_filter_bytes` (RecoveryBudget::PlanFor).
  absl::Status PlanFirstPass(uint64_t more_records, uint64_t more_filter_bytes,
                             const std::string& projected_from) {
    if (!budget_.WithinCeiling()) return absl::OkStatus();
    return budget_.PlanFor(
        budget_.index_entries_before() + sink_.tables().entries * budget_.passes() + more_records,
        segments_.contents().filter_bytes() + more_filter_bytes, projected_from);
  }

  // `status` of a step of the first pass; OK instead where it asked for more passes and the pass
  // goes on as the first of them, rather than recovery start again and read once more what it
  // has read: the tables (and in ordered mode the index) drop the keys of the passes after it,
  // which find them again as they read their shares of the log (the segments the first pass
  // read before this keep nothing for them: what it kept of them for the passes planned before
  // holds other shares, and is dropped). Not in ordered mode over a base, whose index holds the
  // base's entries (which the first pass changed), nor once a record or a filter was refused;
  // nor under a budget the options set, which start again as before (their peaks and passes are
  // what recovery_memory_test and segment_summary_test measure).
  absl::Status GoOnNarrowed(LogReplay& replay, const absl::Status& status) {
    if (status.ok() || !budget_.MayNarrow(status) || !sink_.refused().ok() ||
        !replay.refused().ok() || (shape_.ordered && base_.over_base())) {
      return status;
    }
    budget_.NarrowToNeeded();
    report_.passes = budget_.passes();
    replay.DropKept();
    sink_.DropLaterPasses();
    return absl::OkStatus();
  }

  // kDataLoss when the pass found that the base cannot be used after all (base_failed).
  absl::Status BaseStands(const LogReplay& replay) {
    base_failed_ = replay.base_failed().empty() ? sink_.base_failed() : replay.base_failed();
    if (base_failed_.empty()) return absl::OkStatus();
    return absl::DataLossError(base_failed_);
  }

  const RecoveryOptions options_;
  const StoreShape& shape_;
  const bool use_checkpoint_;  // false: the map's checkpoint was set aside once already
  storage::Device& device_;
  SegmentTable& segments_;
  RecoveryReport report_;
  MapView map_;            // what the segment map says
  RecoveryBudget budget_;  // the tables' budget, and the passes
  RecoveryBase base_;      // the checkpoint the log is applied over, if any
  RecordSink sink_;        // the tables and indexes the records go to
  std::string base_failed_;
};

}  // namespace

uint64_t UnreadSequenceGap(const Geometry& geometry) {
  const uint64_t records_per_page = geometry.payload_bytes() / RecordBytes(0, 0);
  return 2 * geometry.total_pages() * records_per_page;
}

absl::StatusOr<RecoveryReport> RecoverStore(const RecoveryOptions& options,
                                            const StoreShape& shape, storage::Device& device,
                                            SegmentTable& segments,
                                            const ShardSet& shards) {
  PassPlan plan;
  bool use_checkpoint = true;
  std::string checkpoint_unused;
  const absl::Time start = absl::Now();
  uint64_t pages_before = 0;  // read by the starts given up
  uint32_t restarts = 0;
  while (true) {
    Recovery recovery(options, use_checkpoint, plan, shape, device, segments, shards);
    absl::StatusOr<RecoveryReport> report = recovery.Run();
    if (report.ok()) {
      if (!checkpoint_unused.empty()) report->checkpoint_unused = checkpoint_unused;
      report->restarts = restarts;
      report->pages += pages_before;
      report->seconds = absl::ToDoubleSeconds(absl::Now() - start);
    }
    if (!recovery.base_failed().empty()) {
      // The base checkpoint cannot be used after all: start again from nothing, reading the log.
      use_checkpoint = false;
      checkpoint_unused = recovery.base_failed();
    } else if (recovery.plan_needed().passes != 0) {
      // The tables outgrew the budget, or would have: start again from nothing in more passes.
      plan = recovery.plan_needed();
    } else {
      return report;
    }
    pages_before += recovery.pages_read();
    ++restarts;
    shards.ResetIndexes(shape.ordered);
    segments.ForgetRecovered();
  }
}

}  // namespace nvkv::kv

