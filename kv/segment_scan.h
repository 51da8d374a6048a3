// Reading a segment's log back: the rules shared by recovery, compaction and `check`.
//
// A segment's valid part is the run of pages from page 0 that all verify, all carry page 0's
// generation, sit at the index they claim, and are data pages or the continuation pages of a
// large record that starts before them. The first page that breaks the run ends the segment:
// later pages are either older generations or writes that never became durable. Records of an
// atomic batch are reported only once the batch's last record has been seen.
#ifndef NVKV_KV_SEGMENT_SCAN_H_
#define NVKV_KV_SEGMENT_SCAN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "kv/page_format.h"

namespace nvkv::kv {

struct ScannedRecord {
  RecordHeader header;
  std::string_view key;
  std::string_view value;  // whole value (large values assembled when asked for)
  uint64_t page_number = 0;
  uint32_t page_index = 0;  // within the segment
  uint32_t pages = 1;       // pages the record occupies (large records: more than one)
};

struct SegmentScanResult {
  bool in_use = false;          // page 0 is a valid data page
  uint32_t generation = 0;      // of the valid part
  uint32_t valid_pages = 0;     // pages in the valid part
  uint32_t max_generation = 0;  // highest generation of any verifying page, valid part or not
  uint64_t records = 0;
  uint64_t batches_discarded = 0;
  std::string stop_reason;      // why the valid part ended before the segment did ("" if not)
};

// `page_at(i)` returns the bytes of page i of the segment (all pages_per_segment of them).
// `on_record` sees every record of the valid part, batches only when complete, in log order.
SegmentScanResult ScanSegment(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                              const std::function<const uint8_t*(uint32_t)>& page_at,
                              bool assemble_large_values,
                              const std::function<void(const ScannedRecord&)>& on_record);

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_SCAN_H_
