// Reading a segment's log back: the rules shared by recovery, compaction and `check`.
//
// A segment holds the log of one generation: the pages that verify, carry that generation, sit
// at the index they claim and carry the head sequence that index implies (page i of a log has
// head_sequence = base + i, as the writer assigns both together). The generation is page 0's
// when page 0 is a data page newer than the last page's free marker (else page 0 is a stale
// log's, its own marker lost); when page 0 is damaged or was never written, it is the newest
// generation found on the other pages at their places (the log went on after its first page);
// a segment whose page 0 is a free marker, or with no page of any log, holds nothing. Compaction
// writes its free marker on the last page first, which no log uses (Geometry::log_pages): a log
// older than that marker is the segment's stale one (its records were copied or dead) and never
// counts.
//
// The log ends at its last page. A page before that end that does not belong to the log is a
// *hole* (media damage, or a crash that left a write of the log in flight while later ones
// landed): its records are lost, the scan goes on after it, and a batch that straddles it is
// dropped whole (kPageContinuesBatch tells a batch's tail after a hole from a batch that starts
// there; a page without the flag continues a batch when its first record is the batch's next, as
// stores written before the flag existed have it). Pages after the end are a torn tail or older
// data, never reported as holes.
#ifndef NVKV_KV_SEGMENT_SCAN_H_
#define NVKV_KV_SEGMENT_SCAN_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/page_format.h"
#include "kv/sequence_ranges.h"

namespace nvkv::kv {

struct ScannedRecord {
  RecordHeader header;
  std::string_view key;
  std::string_view value;  // whole value (large values assembled when asked for)
  uint64_t page_number = 0;
  uint32_t page_index = 0;  // within the segment
  uint32_t pages = 1;       // pages the record occupies (large records: more than one)
};

// Pages inside a log that the scan could not use, with why ("checksum mismatch", ...).
struct SegmentHole {
  uint32_t first_page = 0;  // index within the segment
  uint32_t page_count = 0;
  std::string reason;
};

struct SegmentScanResult {
  bool in_use = false;          // the segment holds a log (see above)
  uint64_t generation = 0;      // of the log
  uint32_t log_pages = 0;       // pages from page 0 to the log's end, holes included
  uint64_t max_generation = 0;  // highest generation of any verifying page, log or not
  uint64_t max_sequence = 0;    // highest record sequence on any verifying data page
  uint64_t records = 0;         // records read from the log, dead or not
  uint64_t batches_discarded = 0;  // batches cut by a hole or the log's end
  SequenceRanges dropped;          // the sequences of those batches' records that were read
  std::vector<SegmentHole> holes;  // in page order
  uint32_t hole_pages = 0;         // pages in `holes`
  bool torn_tail = false;          // the page right after the log's end is damaged
  std::string stop_reason;  // why the log ends before the segment does, when a page says so
  // The summary pages that end the log (segment_summary.h), if it ends with some; whether they
  // make a valid summary is ReadSummary's to say.
  SummaryPlace summary;
};

// Why VerifyPage refused a page, without its "page N: " prefix: "never written (all zero
// bytes)", "checksum mismatch", ... (the caller says which page).
std::string PageFault(const absl::Status& status);

// `page_at(i)` returns the bytes of page i of the segment (all pages_per_segment of them), or
// null for a page the device could not read (segment_read.h), which counts as damaged.
// `on_record` sees the records recovery applies, in log order: those of the log outside its
// holes, a batch's only once its last record was read. Recovery, compaction and check all read
// a segment through these rules: a record of a batch cut short (by a crash, which recovery
// dropped, or by damage since, which the next recovery drops) counts nowhere, so compaction
// never copies one back to life as a lone record.
SegmentScanResult ScanSegment(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                              const std::function<const uint8_t*(uint32_t)>& page_at,
                              bool assemble_large_values,
                              const std::function<void(const ScannedRecord&)>& on_record);

// What compaction and check take from a segment: its scan, and of the records recovery applies
// the newest of each key on each page (an older one on the same page is dead, whatever the
// index says), in log order, with large values assembled.
struct SegmentRecords {
  SegmentScanResult scan;
  std::vector<ScannedRecord> records;
  std::deque<std::string> values;  // the assembled large values `records` point at
};
void CollectNewestRecords(const Geometry& geometry, uint64_t store_seed, uint64_t segment,
                          const std::function<const uint8_t*(uint32_t)>& page_at,
                          SegmentRecords* out);

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_SCAN_H_
