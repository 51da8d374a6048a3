#include "kv/segment_scan.h"

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace nvkv::kv {
namespace {

bool IsLogPageType(uint8_t type) {
  return type == static_cast<uint8_t>(PageType::kData) ||
         type == static_cast<uint8_t>(PageType::kContinuation) ||
         type == static_cast<uint8_t>(PageType::kSummary);
}

// The log a segment holds: its generation and the head sequence of its page 0.
struct LogIdentity {
  uint64_t generation = 0;
  uint64_t base = 0;  // page i of the log carries head_sequence base + i
};

bool Belongs(const absl::StatusOr<PageHeader>& header, uint32_t i, const LogIdentity& log) {
  return header.ok() && GenerationOf(*header) == log.generation && header->page_in_segment == i &&
         header->head_sequence == log.base + i && IsLogPageType(header->type);
}

// Why page i is not part of the log, for a hole's report.
std::string WhyNotInLog(const absl::StatusOr<PageHeader>& header, uint32_t i,
                        const LogIdentity& log) {
  if (!header.ok()) return PageFault(header.status());
  if (GenerationOf(*header) != log.generation) {
    return absl::StrCat("holds generation ", GenerationOf(*header), " where the log's is ",
                        log.generation);
  }
  if (header->page_in_segment != i) {
    return absl::StrCat("says it is page ", header->page_in_segment, " of its segment");
  }
  if (!IsLogPageType(header->type)) return "is not a data page";
  return absl::StrCat("holds head sequence ", header->head_sequence, " where the log's is ",
                      log.base + i);
}

// Finds the log of a segment from its page headers; false when it holds none.
bool IdentifyLog(const std::vector<absl::StatusOr<PageHeader>>& headers, LogIdentity* log) {
  const absl::StatusOr<PageHeader>& first = headers[0];
  if (first.ok() && first->type == static_cast<uint8_t>(PageType::kFree)) return false;
  // Logs of generations up to the last page's free marker are from before the segment was freed,
  // and so are logs of generations below a checkpoint written over the free segment's pages. Not
  // one of its own generation: a checkpoint whose marks never reached the map (a cut, or a failed
  // map write, at Close) left no floor above its generation, so the next Open may give that same
  // generation to a head, whose log is then the newer.
  const absl::StatusOr<PageHeader>& last = headers.back();
  uint64_t freed_at =
      last.ok() && last->type == static_cast<uint8_t>(PageType::kFree) ? GenerationOf(*last) : 0;
  for (const absl::StatusOr<PageHeader>& h : headers) {
    if (h.ok() && h->type == static_cast<uint8_t>(PageType::kCheckpoint) && GenerationOf(*h) > 0) {
      freed_at = std::max(freed_at, GenerationOf(*h) - 1);
    }
  }
  if (first.ok() && first->type == static_cast<uint8_t>(PageType::kData) &&
      first->page_in_segment == 0) {
    if (GenerationOf(*first) <= freed_at) return false;  // the marker on page 0 was lost
    *log = LogIdentity{GenerationOf(*first), first->head_sequence};
    return true;
  }
  // Page 0 is lost: the newest log found at its own places on the other pages, if it is newer
  // than the segment's last free marker.
  bool found = false;
  for (uint32_t i = 1; i < headers.size(); ++i) {
    const absl::StatusOr<PageHeader>& h = headers[i];
    if (!h.ok() || h->page_in_segment != i || !IsLogPageType(h->type) || h->head_sequence < i ||
        GenerationOf(*h) <= freed_at) {
      continue;
    }
    if (!found || GenerationOf(*h) > log->generation) {
      *log = LogIdentity{GenerationOf(*h), h->head_sequence - i};
      found = true;
    }
  }
  return found;
}

}  // namespace

std::string PageFault(const absl::Status& status) {
  if (absl::IsNotFound(status)) return "never written (all zero bytes)";
  std::string message(status.message());
  if (message.starts_with("page ")) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) message.erase(0, colon + 2);
  }
  return message;
}

namespace {

// One segment's scan: its page headers, its log, and the walk along the log that hands out
// whole batches and lone records (segment_scan.h states the rules).
class LogWalk {
 public:
  LogWalk(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
          const std::function<const uint8_t*(uint32_t)>& page_at, bool assemble_large_values,
          const std::function<void(const ScannedRecord&)>& on_record)
      : g_(geometry),
        store_seed_(store_seed),
        first_page_(geometry.FirstPageOf(segment)),
        pages_(geometry.pages_per_segment),
        page_at_(page_at),
        assemble_(assemble_large_values),
        on_record_(on_record) {}

  SegmentScanResult Run() {
    ReadHeaders();
    const bool in_use = IdentifyLog(headers_, &log_);
    for (uint32_t i = 0; in_use && i < pages_; ++i) {
      if (Belongs(headers_[i], i, log_)) end_ = i + 1;
    }
    CountSequencesOutsideLog();
    if (!in_use) return std::move(result_);  // free, or never written
    result_.in_use = true;
    result_.generation = log_.generation;
    result_.log_pages = end_;
    // The segment's last page is never the log's (Geometry::log_pages): a log that fills the
    // rest has no tail to tear.
    result_.torn_tail = end_ + 1 < pages_ && absl::IsDataLoss(headers_[end_].status());
    uint32_t i = 0;
    while (i < end_) i += WalkPage(i);
    DropBatch();  // cut by the log's end
    if (result_.summary.first + result_.summary.pages != end_) result_.summary = SummaryPlace{};
    return std::move(result_);
  }

 private:
  // Verifies every page's header (an unreadable page gets a kDataLoss of its own).
  void ReadHeaders() {
    headers_.reserve(pages_);
    for (uint32_t i = 0; i < pages_; ++i) {
      const uint8_t* bytes = page_at_(i);
      if (bytes == nullptr) {
        headers_.push_back(absl::DataLossError(absl::StrCat(
            "page ", first_page_ + i, ": unreadable (the device failed to read it)")));
        continue;
      }
      headers_.push_back(VerifyPage(bytes, g_, store_seed_, first_page_ + i));
      const absl::StatusOr<PageHeader>& h = headers_.back();
      if (h.ok()) result_.max_generation = std::max(result_.max_generation, GenerationOf(*h));
    }
  }

  // Every verifying data page counts for the sequences recovery hands out next, whether it is
  // part of the log or not: those of the log's pages are taken as the walk reads them.
  void CountSequencesOutsideLog() {
    for (uint32_t i = 0; i < pages_; ++i) {
      const absl::StatusOr<PageHeader>& h = headers_[i];
      if (!h.ok() || h->type != static_cast<uint8_t>(PageType::kData)) continue;
      if (i < end_ && Belongs(h, i, log_)) continue;
      RecordIterator it(page_at_(i), *h);
      RecordView view;
      while (it.Next(&view)) {
        result_.max_sequence = std::max(result_.max_sequence, view.header.sequence);
      }
    }
  }

  void AddHole(uint32_t i, std::string reason) {
    std::vector<SegmentHole>& holes = result_.holes;
    if (!holes.empty() && holes.back().first_page + holes.back().page_count == i) {
      ++holes.back().page_count;
    } else {
      holes.push_back(SegmentHole{i, 1, std::move(reason)});
    }
    ++result_.hole_pages;
  }

  // Drops the pending batch, if any; true when there was one.
  bool DropBatch() {
    if (batch_.empty()) return false;
    ++result_.batches_discarded;
    result_.dropped.Add(batch_.front().header.sequence, batch_.back().header.sequence);
    batch_.clear();
    return true;
  }

  // Page i of the log is not one whose records can be read: a hole, which cuts a pending batch.
  void HoleAt(uint32_t i, std::string reason) {
    AddHole(i, std::move(reason));
    counted_at_hole_ = DropBatch() || counted_at_hole_;
  }

  // Whether page i (a data page of the log) goes on with the pending batch. Its first record
  // says so (pages written before kPageContinuesBatch existed carry no flag).
  bool FollowsPendingBatch(const uint8_t* page, const PageHeader& header) const {
    if (batch_.empty()) return false;
    RecordIterator peek(page, header);
    RecordView first;
    const RecordHeader& prev = batch_.back().header;
    return peek.Next(&first) && (first.header.flags & kRecordInBatch) != 0 &&
           first.header.sequence == prev.sequence + 1 &&
           first.header.batch_remaining + 1 == prev.batch_remaining;
  }

  // Walks log page i; returns how many pages it covered (a large value's run counts whole).
  uint32_t WalkPage(uint32_t i) {
    const absl::StatusOr<PageHeader>& header = headers_[i];
    if (!Belongs(header, i, log_)) {
      HoleAt(i, WhyNotInLog(header, i, log_));
      return 1;
    }
    if (header->type == static_cast<uint8_t>(PageType::kSummary)) {
      // A summary page holds no records; the summary is the log's last pages.
      SummaryPlace& summary = result_.summary;
      if (summary.pages > 0 && summary.first + summary.pages == i) {
        ++summary.pages;
      } else {
        summary = SummaryPlace{i, 1};
      }
      return 1;
    }
    if (header->type != static_cast<uint8_t>(PageType::kData)) {
      HoleAt(i, "continues a large value whose first page is lost");
      return 1;
    }
    const uint8_t* page = page_at_(i);
    bool dropping_tail = false;
    if (!FollowsPendingBatch(page, *header)) {
      // A pending batch that does not go on here was cut short; a flagged page whose batch was
      // not seen starting holds the tail of a batch whose start was lost in a hole.
      counted_at_hole_ = DropBatch() || counted_at_hole_;
      dropping_tail = (header->flags & kPageContinuesBatch) != 0;
      if (dropping_tail && !counted_at_hole_) ++result_.batches_discarded;
    }
    counted_at_hole_ = false;
    RecordIterator it(page, *header);
    RecordView view;
    uint32_t advance = 1;
    while (it.Next(&view)) {
      ScannedRecord record;
      record.header = view.header;
      record.key = view.key;
      record.value = view.value;
      record.page_number = first_page_ + i;
      record.page_index = i;
      ++result_.records;
      result_.max_sequence = std::max(result_.max_sequence, view.header.sequence);
      const bool in_batch = (view.header.flags & kRecordInBatch) != 0;
      if (dropping_tail) {
        if (in_batch) {
          result_.dropped.Add(view.header.sequence, view.header.sequence);
          if (view.header.batch_remaining == 0) dropping_tail = false;
          continue;
        }
        dropping_tail = false;
      }
      if ((view.header.flags & kRecordLarge) != 0 && !TakeLargeValue(i, view, &record, &advance)) {
        continue;
      }
      Deliver(record, in_batch);
    }
    if (!it.status().ok()) {
      // The checksum matched but a record does not decode (a writer bug): the rest of the page
      // is lost like a hole.
      AddHole(i, std::string(it.status().message()));
      DropBatch();
    }
    return advance;
  }

  // A large record on page i: checks (and assembles, if asked) its continuation pages. False
  // when the value is incomplete: then the record is not delivered.
  bool TakeLargeValue(uint32_t i, const RecordView& view, ScannedRecord* record,
                      uint32_t* advance) {
    record->pages = LargeRecordPages(g_, view.key.size(), view.header.value_bytes);
    *advance = std::min(record->pages, end_ - i);
    if (i + record->pages > pages_) {
      result_.stop_reason =
          absl::StrCat("page ", first_page_ + i, ": large value runs past the segment");
      return false;
    }
    bool complete = true;
    std::string assembled;
    if (assemble_) assembled.assign(view.value);
    for (uint32_t c = 1; c < record->pages; ++c) {
      const absl::StatusOr<PageHeader>& cont = headers_[i + c];
      if (!Belongs(cont, i + c, log_) ||
          cont->type != static_cast<uint8_t>(PageType::kContinuation)) {
        complete = false;
        if (i + c < end_) AddHole(i + c, WhyNotInLog(cont, i + c, log_));
        continue;
      }
      if (assemble_) {
        assembled.append(reinterpret_cast<const char*>(page_at_(i + c)) + sizeof(PageHeader),
                         cont->used_bytes);
      }
    }
    if (!complete) {
      if (i + record->pages > end_) {
        result_.stop_reason = absl::StrCat("page ", first_page_ + i, ": large value incomplete");
      }
      return false;
    }
    if (assemble_) {
      if (assembled.size() != view.header.value_bytes) {
        AddHole(i, "large value has the wrong length");
        return false;
      }
      large_values_.push_back(std::move(assembled));
      record->value = large_values_.back();
    }
    return true;
  }

  // A batch's records go out together once its last one is seen; a lone record at once.
  void Deliver(const ScannedRecord& record, bool in_batch) {
    if (in_batch) {
      batch_.push_back(record);
      if (record.header.batch_remaining == 0) {
        for (const ScannedRecord& r : batch_) on_record_(r);
        batch_.clear();
      }
      return;
    }
    DropBatch();  // a batch cut short by a plain record: cannot happen when intact
    on_record_(record);
  }

  const Geometry& g_;
  const uint64_t store_seed_;
  const uint64_t first_page_;
  const uint32_t pages_;
  const std::function<const uint8_t*(uint32_t)>& page_at_;
  const bool assemble_;
  const std::function<void(const ScannedRecord&)>& on_record_;

  SegmentScanResult result_;
  std::vector<absl::StatusOr<PageHeader>> headers_;
  LogIdentity log_;
  uint32_t end_ = 0;                    // the log's pages are [0, end_)
  std::vector<ScannedRecord> batch_;    // records of an unfinished batch
  // The batch cut by the last hole was counted already when its tail turns up after the hole.
  bool counted_at_hole_ = false;
  std::deque<std::string> large_values_;  // assembled values; a deque never moves them
};

}  // namespace

SegmentScanResult ScanSegment(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                              const std::function<const uint8_t*(uint32_t)>& page_at,
                              bool assemble_large_values,
                              const std::function<void(const ScannedRecord&)>& on_record) {
  return LogWalk(geometry, store_seed, segment, page_at, assemble_large_values, on_record).Run();
}

void CollectNewestRecords(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                          const std::function<const uint8_t*(uint32_t)>& page_at,
                          SegmentRecords* out) {
  out->records.clear();
  out->values.clear();
  absl::flat_hash_map<std::pair<uint64_t, std::string_view>, size_t> newest;
  out->scan = ScanSegment(geometry, store_seed, segment, page_at, /*assemble_large_values=*/true,
                          [&](const ScannedRecord& record) {
                            ScannedRecord copy = record;
                            if ((record.header.flags & kRecordLarge) != 0) {
                              // The scan's assembled value dies with the callback.
                              out->values.emplace_back(record.value);
                              copy.value = out->values.back();
                            }
                            auto [it, inserted] = newest.try_emplace(
                                {record.page_number, record.key}, out->records.size());
                            if (inserted) {
                              out->records.push_back(copy);
                            } else if (out->records[it->second].header.sequence <
                                       record.header.sequence) {
                              out->records[it->second] = copy;
                            }
                          });
}

}  // namespace nvkv::kv
