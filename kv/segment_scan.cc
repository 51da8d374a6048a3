#include "kv/segment_scan.h"

#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nvkv::kv {

SegmentScanResult ScanSegment(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                              const std::function<const uint8_t*(uint32_t)>& page_at,
                              bool assemble_large_values,
                              const std::function<void(const ScannedRecord&)>& on_record) {
  SegmentScanResult result;
  const uint64_t first_page = geometry.FirstPageOf(segment);
  const uint32_t pages = geometry.pages_per_segment;
  // Generations of every verifying page, to give the segment a fresh one when it is reused.
  for (uint32_t i = 0; i < pages; ++i) {
    absl::StatusOr<PageHeader> header = VerifyPage(page_at(i), geometry, store_seed, first_page + i);
    if (header.ok() && header->generation > result.max_generation) {
      result.max_generation = header->generation;
    }
  }
  absl::StatusOr<PageHeader> first = VerifyPage(page_at(0), geometry, store_seed, first_page);
  if (!first.ok() || first->type != static_cast<uint8_t>(PageType::kData) ||
      first->page_in_segment != 0) {
    return result;  // free, never written, or its first page was lost: holds nothing
  }
  result.in_use = true;
  result.generation = first->generation;

  std::vector<ScannedRecord> batch;  // records of an unfinished batch
  std::deque<std::string> large_values;  // assembled values; a deque never moves them
  uint32_t i = 0;
  while (i < pages) {
    const uint8_t* page = page_at(i);
    absl::StatusOr<PageHeader> header = VerifyPage(page, geometry, store_seed, first_page + i);
    if (!header.ok()) {
      result.stop_reason = std::string(header.status().message());
      break;
    }
    if (header->generation != result.generation || header->page_in_segment != i ||
        header->type != static_cast<uint8_t>(PageType::kData)) {
      result.stop_reason = absl::StrCat("page ", first_page + i, ": not part of this generation");
      break;
    }
    RecordIterator it(page, *header);
    RecordView view;
    uint32_t advance = 1;
    bool stop = false;
    while (it.Next(&view)) {
      ScannedRecord record;
      record.header = view.header;
      record.key = view.key;
      record.value = view.value;
      record.page_number = first_page + i;
      record.page_index = i;
      if ((view.header.flags & kRecordLarge) != 0) {
        record.pages = LargeRecordPages(geometry, view.key.size(), view.header.value_bytes);
        if (i + record.pages > pages) {
          stop = true;
          break;
        }
        std::string assembled;
        if (assemble_large_values) assembled.assign(view.value);
        for (uint32_t c = 1; c < record.pages; ++c) {
          const uint8_t* next = page_at(i + c);
          absl::StatusOr<PageHeader> cont = VerifyPage(next, geometry, store_seed, first_page + i + c);
          if (!cont.ok() || cont->type != static_cast<uint8_t>(PageType::kContinuation) ||
              cont->generation != result.generation || cont->page_in_segment != i + c) {
            stop = true;
            break;
          }
          if (assemble_large_values) {
            assembled.append(reinterpret_cast<const char*>(next) + sizeof(PageHeader),
                             cont->used_bytes);
          }
        }
        if (stop) break;
        if (assemble_large_values) {
          if (assembled.size() != view.header.value_bytes) {
            stop = true;
            break;
          }
          large_values.push_back(std::move(assembled));
          record.value = large_values.back();
        }
        advance = record.pages;
      }
      ++result.records;
      if ((record.header.flags & kRecordInBatch) != 0) {
        batch.push_back(record);
        if (record.header.batch_remaining == 0) {
          for (const ScannedRecord& r : batch) on_record(r);
          batch.clear();
        }
        continue;
      }
      if (!batch.empty()) {  // a batch cut short by a plain record: cannot happen when intact
        ++result.batches_discarded;
        batch.clear();
      }
      on_record(record);
    }
    if (!it.status().ok()) {
      result.stop_reason = std::string(it.status().message());
      break;
    }
    if (stop) {
      result.stop_reason = absl::StrCat("page ", first_page + i, ": large value incomplete");
      break;
    }
    i += advance;
    result.valid_pages = i;
  }
  if (!batch.empty()) ++result.batches_discarded;
  return result;
}

}  // namespace nvkv::kv
