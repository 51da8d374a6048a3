#include "kv/segment_scan.h"

#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace nvkv::kv {
namespace {

bool IsLogPageType(uint8_t type) {
  return type == static_cast<uint8_t>(PageType::kData) ||
         type == static_cast<uint8_t>(PageType::kContinuation);
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
  // Logs of generations up to the last page's free marker are from before the segment was freed.
  const absl::StatusOr<PageHeader>& last = headers.back();
  const uint64_t freed_at =
      last.ok() && last->type == static_cast<uint8_t>(PageType::kFree) ? GenerationOf(*last) : 0;
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

SegmentScanResult ScanSegment(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                              const std::function<const uint8_t*(uint32_t)>& page_at,
                              bool assemble_large_values,
                              const std::function<void(const ScannedRecord&)>& on_record) {
  SegmentScanResult result;
  const uint64_t first_page = geometry.FirstPageOf(segment);
  const uint32_t pages = geometry.pages_per_segment;
  std::vector<absl::StatusOr<PageHeader>> headers;
  headers.reserve(pages);
  for (uint32_t i = 0; i < pages; ++i) {
    const uint8_t* bytes = page_at(i);
    if (bytes == nullptr) {
      headers.push_back(absl::DataLossError(absl::StrCat(
          "page ", first_page + i, ": unreadable (the device failed to read it)")));
      continue;
    }
    headers.push_back(VerifyPage(bytes, geometry, store_seed, first_page + i));
    const absl::StatusOr<PageHeader>& h = headers.back();
    if (h.ok()) result.max_generation = std::max(result.max_generation, GenerationOf(*h));
  }
  LogIdentity log;
  const bool in_use = IdentifyLog(headers, &log);
  uint32_t end = 0;
  for (uint32_t i = 0; in_use && i < pages; ++i) {
    if (Belongs(headers[i], i, log)) end = i + 1;
  }
  // Every verifying data page counts for the sequences recovery hands out next, whether it is
  // part of the log or not: those of the log's pages are taken as the walk below reads them.
  for (uint32_t i = 0; i < pages; ++i) {
    const absl::StatusOr<PageHeader>& h = headers[i];
    if (!h.ok() || h->type != static_cast<uint8_t>(PageType::kData)) continue;
    if (i < end && Belongs(h, i, log)) continue;
    RecordIterator it(page_at(i), *h);
    RecordView view;
    while (it.Next(&view)) {
      result.max_sequence = std::max(result.max_sequence, view.header.sequence);
    }
  }
  if (!in_use) return result;  // free, or never written
  result.in_use = true;
  result.generation = log.generation;
  result.log_pages = end;
  result.torn_tail = end < pages && absl::IsDataLoss(headers[end].status());

  auto add_hole = [&result](uint32_t i, std::string reason) {
    if (!result.holes.empty() &&
        result.holes.back().first_page + result.holes.back().page_count == i) {
      ++result.holes.back().page_count;
    } else {
      result.holes.push_back(SegmentHole{i, 1, std::move(reason)});
    }
    ++result.hole_pages;
  };
  std::vector<ScannedRecord> batch;      // records of an unfinished batch
  // The batch cut by the last hole was counted already when its tail turns up after the hole.
  bool counted_at_hole = false;
  auto drop_batch = [&] {
    if (batch.empty()) return false;
    ++result.batches_discarded;
    result.dropped.Add(batch.front().header.sequence, batch.back().header.sequence);
    batch.clear();
    return true;
  };
  std::deque<std::string> large_values;  // assembled values; a deque never moves them
  uint32_t i = 0;
  while (i < end) {
    const absl::StatusOr<PageHeader>& header = headers[i];
    if (!Belongs(header, i, log)) {
      add_hole(i, WhyNotInLog(header, i, log));
      counted_at_hole = drop_batch() || counted_at_hole;
      ++i;
      continue;
    }
    if (header->type != static_cast<uint8_t>(PageType::kData)) {
      add_hole(i, "continues a large value whose first page is lost");
      counted_at_hole = drop_batch() || counted_at_hole;
      ++i;
      continue;
    }
    const uint8_t* page = page_at(i);
    // Does the page go on with the pending batch? Its first record says so (pages written before
    // kPageContinuesBatch existed carry no flag).
    bool follows_pending = false;
    if (!batch.empty()) {
      RecordIterator peek(page, *header);
      RecordView first;
      const RecordHeader& prev = batch.back().header;
      follows_pending = peek.Next(&first) && (first.header.flags & kRecordInBatch) != 0 &&
                        first.header.sequence == prev.sequence + 1 &&
                        first.header.batch_remaining + 1 == prev.batch_remaining;
    }
    bool dropping_tail = false;
    if (!follows_pending) {
      // A pending batch that does not go on here was cut short; a flagged page whose batch was
      // not seen starting holds the tail of a batch whose start was lost in a hole.
      counted_at_hole = drop_batch() || counted_at_hole;
      dropping_tail = (header->flags & kPageContinuesBatch) != 0;
      if (dropping_tail && !counted_at_hole) ++result.batches_discarded;
    }
    counted_at_hole = false;
    RecordIterator it(page, *header);
    RecordView view;
    uint32_t advance = 1;
    while (it.Next(&view)) {
      ScannedRecord record;
      record.header = view.header;
      record.key = view.key;
      record.value = view.value;
      record.page_number = first_page + i;
      record.page_index = i;
      ++result.records;
      result.max_sequence = std::max(result.max_sequence, view.header.sequence);
      const bool in_batch = (view.header.flags & kRecordInBatch) != 0;
      if (dropping_tail) {
        if (in_batch) {
          result.dropped.Add(view.header.sequence, view.header.sequence);
          if (view.header.batch_remaining == 0) dropping_tail = false;
          continue;
        }
        dropping_tail = false;
      }
      if ((view.header.flags & kRecordLarge) != 0) {
        record.pages = LargeRecordPages(geometry, view.key.size(), view.header.value_bytes);
        advance = std::min(record.pages, end - i);
        if (i + record.pages > pages) {
          result.stop_reason =
              absl::StrCat("page ", first_page + i, ": large value runs past the segment");
          continue;
        }
        bool complete = true;
        std::string assembled;
        if (assemble_large_values) assembled.assign(view.value);
        for (uint32_t c = 1; c < record.pages; ++c) {
          const absl::StatusOr<PageHeader>& cont = headers[i + c];
          if (!Belongs(cont, i + c, log) ||
              cont->type != static_cast<uint8_t>(PageType::kContinuation)) {
            complete = false;
            if (i + c < end) add_hole(i + c, WhyNotInLog(cont, i + c, log));
            continue;
          }
          if (assemble_large_values) {
            assembled.append(reinterpret_cast<const char*>(page_at(i + c)) + sizeof(PageHeader),
                             cont->used_bytes);
          }
        }
        if (!complete) {
          if (i + record.pages > end) {
            result.stop_reason = absl::StrCat("page ", first_page + i, ": large value incomplete");
          }
          continue;
        }
        if (assemble_large_values) {
          if (assembled.size() != view.header.value_bytes) {
            add_hole(i, "large value has the wrong length");
            continue;
          }
          large_values.push_back(std::move(assembled));
          record.value = large_values.back();
        }
      }
      if (in_batch) {
        batch.push_back(record);
        if (record.header.batch_remaining == 0) {
          for (const ScannedRecord& r : batch) on_record(r);
          batch.clear();
        }
        continue;
      }
      drop_batch();  // a batch cut short by a plain record: cannot happen when intact
      on_record(record);
    }
    if (!it.status().ok()) {
      // The checksum matched but a record does not decode (a writer bug): the rest of the page
      // is lost like a hole.
      add_hole(i, std::string(it.status().message()));
      drop_batch();
    }
    i += advance;
  }
  drop_batch();  // cut by the log's end
  return result;
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
