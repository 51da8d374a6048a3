// The log replay of a recovery (recovery.h): reads the log the base does not hold (the summaries
// the map names, and every other segment whole, many reads in flight) and hands each record to
// the RecordSink. The first pass notes what it finds of each segment (whether it holds a log,
// its generation, its summary, holes, dropped batches, pages the device cannot read) and keeps
// records for the passes after it where the budget allows; a later pass must find the same.
#ifndef NVKV_KV_LOG_REPLAY_H_
#define NVKV_KV_LOG_REPLAY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kv/page_format.h"
#include "kv/recovery.h"
#include "kv/recovery_base.h"
#include "kv/recovery_budget.h"
#include "kv/recovery_map.h"
#include "kv/recovery_sink.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "kv/segment_summary.h"
#include "kv/segment_table.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

class LogReplay {
 public:
  // Reads `to_read` whole and the summaries `summarized` (what the map and the base leave),
  // starting from the map's `floors`. Fills `report`'s counts of what it read and found.
  LogReplay(const StoreShape& shape, storage::Device& device, SegmentTable& segments,
            RecoveryBudget& budget, const RecoveryBase& base, RecordSink& sink,
            RecoveryReport& report, std::vector<uint64_t> to_read,
            std::vector<Summarized> summarized, const Floors& floors);

  // About how many records the summaries to read name (an entry is 32 bytes and its key's, in
  // ordered mode).
  uint64_t SummarizedRecords() const;

  // Reads the summaries (with each segment's last page, for a free marker newer than the
  // summary), many in flight at once, and applies those that verify; the segment of any other
  // is read whole instead. The first pass reads the summaries the map names; a later one those
  // the first used.
  absl::Status ReadSummaries();
  // What a step of the first pass does with a budget check's status: OK where the pass goes on
  // as the first of more passes (the driver narrows it).
  using GoOn = absl::FunctionRef<absl::Status(absl::Status)>;
  // Reads the segments this pass reads whole, several in flight at once (as many as the queue's
  // chunks allow), and scans each in segment order as its reads complete.
  absl::Status ReadSegments(GoOn go_on);
  // A later pass: applies the records the first kept of segments it read whole, as if read
  // again.
  absl::Status ApplyKeptRecords();
  // The records the first pass kept for the passes planned before are dropped (other shares).
  void DropKept();
  // After the first pass: what it found of each segment, for the segment table.
  void RecoverSegments();

  // Why an Open that is not degraded fails when pages of the log could not be read
  // (RecoveryReport::unread_pages).
  absl::Status UnreadRefusal() const;
  // A key filter recovery could not size (no memory): recovery fails with it.
  const absl::Status& refused() const { return refused_; }
  // Why the base was set aside: a head's segment the base knows holds another log. Empty else.
  const std::string& base_failed() const { return base_failed_; }
  // The highest sequence and generation of every page read (in a log or not), and the highest
  // floors of the map and of the summaries used.
  uint64_t max_sequence() const { return max_sequence_; }
  uint64_t max_generation() const { return max_generation_; }
  const Floors& floors() const { return floors_; }

 private:
  // What the first pass's scan found of each segment read whole (to_read_'s order), which every
  // later pass must find again.
  struct ScanFacts {
    bool in_use = false;
    uint64_t generation = 0, hole_pages = 0, records = 0, batches_discarded = 0;
    uint32_t unreadable_pages = 0;
    bool operator==(const ScanFacts&) const = default;
  };

  void ReadWholeInstead(const Summarized& s);
  void ApplySummaryRecords(uint64_t segment, absl::Span<const SummaryRecord> records);
  bool ApplySummary(const Summarized& summarized, const uint8_t* pages);
  std::vector<size_t> SegmentsToReadThisPass() const;
  absl::Status ScanRead(SegmentBuffer& read, size_t position);
  void NoteUnread(const SegmentBuffer& read, const SegmentScanResult& scan);
  // Zoned: whether the device reports `segment`'s zone offline (its data gone).
  bool ZoneOffline(uint64_t segment);
  absl::Status ProjectWholeRecords(uint64_t held_before, uint64_t filters_before, size_t read,
                                   size_t to_read, GoOn go_on);
  absl::Status CheckBudget() {
    return budget_.Check(sink_.tables(), segments_.contents().filter_bytes());
  }
  uint32_t pass() const { return budget_.pass(); }

  // Reads of a later pass that fail where the first pass's worked are tried this many times more.
  static constexpr uint32_t kRereadsInLaterPasses = 3;

  const StoreShape& shape_;
  const Geometry& g_;  // shape_.geometry
  storage::Device& device_;
  SegmentTable& segments_;
  RecoveryBudget& budget_;
  const RecoveryBase& base_;
  RecordSink& sink_;
  RecoveryReport& report_;
  std::vector<uint64_t> to_read_;       // the segments read whole, in order
  std::vector<Summarized> summarized_;  // the segments the map says are summarized, and where
  std::vector<Summarized> used_;        // of them, those whose summaries the first pass used
  std::vector<bool> in_use_;            // per segment: it holds a log
  std::vector<uint64_t> generation_;    // per segment: its log's
  std::vector<SummaryPlace> summary_;   // per segment: its summary, when the map may name it
  std::vector<ScanFacts> scanned_;
  // Per place in to_read_: the records the first pass applied from that segment, for the later
  // passes (ScanRead); null where it kept none. kept_bytes_ is what they take.
  std::vector<std::unique_ptr<SummaryBuilder>> kept_;
  uint64_t kept_bytes_ = 0;
  Floors floors_;
  uint64_t max_sequence_ = 0;
  uint64_t max_generation_ = 0;
  absl::Status refused_;
  std::string base_failed_;
  std::string unread_why_;  // the failed read of the first page NoteUnread noted
  bool unread_zone_offline_ = false;  // some unread pages lie in a zone the device took offline
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_LOG_REPLAY_H_
