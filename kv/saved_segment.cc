#include "kv/saved_segment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

bool SaveSegments(SegmentTable& table, uint64_t& next,
                  const std::vector<uint64_t>& filters_left_out,
                  const std::function<bool(const SavedSegment&)>& visit) {
  SavedSegment saved;
  while (next < table.count()) {
    const uint64_t s = next++;
    const std::optional<SegmentTable::LogFacts> log = table.log_facts(s);
    if (!log) continue;
    CheckpointSegment& f = saved.fields;
    f = CheckpointSegment{};
    f.segment = s;
    f.generation = log->generation;
    f.live_bytes = log->live_bytes;
    f.likely_stale_bytes = log->likely_stale_bytes;
    f.summary_first = log->summary.first;
    f.summary_pages = log->summary.pages;
    const bool left_out = std::find(filters_left_out.begin(), filters_left_out.end(), s) !=
                          filters_left_out.end();
    table.contents().Save(s, left_out, &f, &saved.tombstones, &saved.filter);
    if (!visit(saved)) return next == table.count();
  }
  return true;
}

absl::Status RestoreSavedSegment(SegmentTable& table, const SavedSegment& saved) {
  const CheckpointSegment& f = saved.fields;
  // Every check before anything changes.
  NVKV_RETURN_IF_ERROR(
      table.contents().CheckSaved(f.segment, f, saved.tombstones, saved.filter));
  NVKV_RETURN_IF_ERROR(table.RestoreLog(
      f.segment, {.generation = f.generation,
                  .summary = SummaryPlace{f.summary_first, f.summary_pages},
                  .live_bytes = f.live_bytes,
                  .likely_stale_bytes = f.likely_stale_bytes}));
  return table.contents().Restore(f.segment, f, saved.tombstones, saved.filter);
}

absl::Status ResumeSavedHead(SegmentTable& table, uint64_t segment, uint64_t generation,
                             absl::Span<const KeyHash> puts) {
  if (!table.contents().CanResumeOpen(segment, puts.size()) ||
      !table.ReopenLog(segment, generation)) {
    return absl::DataLossError(absl::StrCat("segment ", segment,
                                            " is not a log a head could go on with"));
  }
  table.contents().ResumeOpen(segment, puts);
  return absl::OkStatus();
}

}  // namespace nvkv::kv
