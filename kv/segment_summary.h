// Segment summaries: what recovery needs of a sealed log's records, written after them in the
// same segment, so that Open reads a few pages instead of the whole segment (kv/FORMAT.md
// "Segment summaries").
//
// A log head builds its segment's summary as it appends (SummaryBuilder, one per head): for
// each record its key's hash (and, in ordered mode, the key), sequence, kind, page and sizes.
// When the head leaves the segment, the summary follows the log's last data page as kSummary
// pages of the same log (same generation, head sequence going on), and once those pages are
// durable the segment map says where it is (MapState::kSummarized). Recovery then reads the
// summary and the segment's last page (a free marker newer than the summary says the segment
// was freed since) instead of the segment; a summary that fails to verify makes it read the
// segment, as it would without one.
//
// Room. The head keeps room in its segment for the summary it is building: a page it adds must
// leave room for the summary as it would be with that page's records (SummaryBuilder::
// PagesWith estimates them from the most summary bytes a page gave so far). When the estimate
// falls short after all, or a summary would take more than MaxSummaryPages (small records: the
// summary would cost much space and save little reading), the segment gets none and recovery
// reads it whole. Small segments get none either (EngineSeams::summary_min_segment_pages).
//
// Thread contract: SummaryBuilder is its head's, under the shard's lock; the functions are pure.
#ifndef NVKV_KV_SEGMENT_SUMMARY_H_
#define NVKV_KV_SEGMENT_SUMMARY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kv/key_hash.h"
#include "kv/page_format.h"

namespace nvkv::kv {

// The most pages a segment's summary may take: a sixteenth of its log (a page at least). Records
// of about 500 bytes or less would need more (32 bytes each, and the key's in ordered mode):
// such a segment gets no summary, and recovery reads it whole.
// And never more than kMaxSummaryPagesCap pages (256 KiB of 4 KiB pages), which recovery reads
// in one request with the segment's last page.
inline constexpr uint32_t kMaxSummaryPagesCap = 64;
uint32_t MaxSummaryPages(const Geometry& geometry);
// Pages a summary of `summary_bytes` (header included) takes.
uint32_t SummaryPagesFor(uint64_t summary_bytes, const Geometry& geometry);

// One record of a summary, as recovery applies it.
struct SummaryRecord {
  KeyHash hash;
  std::string_view key;  // empty unless the summary has keys; valid while the records are visited
  uint64_t sequence = 0;
  bool is_delete = false;
  uint32_t page_in_segment = 0;
  uint32_t record_bytes = 0;
};

class SummaryBuilder {
 public:
  // Starts the summary of a fresh segment; `with_keys` keeps the keys' bytes (ordered mode).
  void Reset(bool with_keys, const Geometry& geometry);
  // The segment will have no summary: forgets what was built.
  void Abandon();
  bool abandoned() const { return abandoned_; }
  uint32_t entry_count() const { return entry_count_; }

  // A record appended at page `page_in_segment` of the segment (its first, for a large one).
  // Abandons the summary when it outgrows MaxSummaryPages.
  void Add(const KeyHash& hash, std::string_view key, const RecordHeader& header,
           uint32_t page_in_segment);

  // Summary pages needed once entries of `more_bytes` are added (0 when abandoned or empty),
  // or nullopt when that exceeds MaxSummaryPages: the summary keeps no room then (it is
  // abandoned if it does outgrow the limit).
  std::optional<uint32_t> PagesWith(uint64_t more_bytes, const Geometry& geometry) const;
  // The most entry bytes one page's records added so far: the estimate for a page to come.
  uint64_t bytes_per_page() const;
  // The bytes the entry of a record of `key_bytes` takes.
  uint64_t EntryBytes(size_t key_bytes) const {
    return sizeof(SummaryEntry) + (with_keys_ ? key_bytes : 0);
  }

  // The summary's bytes: header (with the fields given) and entries. Leaves the builder
  // abandoned until the next Reset.
  std::string Take(uint32_t data_pages, uint32_t summary_pages, uint64_t sequence_floor,
                   uint64_t generation_floor);
  // Gives back the room Reset reserved beyond what it holds (a builder kept once built); returns
  // the bytes it then takes.
  uint64_t ShrinkToFit() {
    entries_.shrink_to_fit();
    return entries_.capacity();
  }
  // One call of `visit` sees the records added so far (as ReadSummary's: keys valid during the
  // call). kDataLoss when the entries are not what a builder makes (as Resume).
  absl::Status Visit(const Geometry& geometry,
                     const std::function<void(absl::Span<const SummaryRecord>)>& visit) const;
  // Header and entries' bytes as they stand.
  uint64_t summary_bytes() const { return sizeof(SummaryHeader) + entries_.size(); }
  // The entries' bytes as they stand (Take puts a header before them).
  std::string_view entries() const { return entries_; }

  // Goes on with the summary of a segment its head returns to (the clean-close checkpoint,
  // checkpoint.h): `entries`, `entry_count` and `page_bytes` as entries(), entry_count() and
  // bytes_per_page() gave them, of a log whose data pages are [0, data_pages) and whose records
  // are all below `next_sequence`. Once they are known to be good, one call of `visit` sees
  // their records (as ReadSummary's). kDataLoss, and the builder abandoned, when they are not
  // what a builder gives. (An abandoned summary is resumed by Abandon.)
  absl::Status Resume(bool with_keys, const Geometry& geometry, std::string_view entries,
                      uint32_t entry_count, uint64_t page_bytes, uint32_t data_pages,
                      uint64_t next_sequence,
                      const std::function<void(absl::Span<const SummaryRecord>)>& visit);

 private:
  std::string entries_;
  uint64_t limit_bytes_ = 0;  // MaxSummaryPages' worth, header included
  uint32_t entry_count_ = 0;
  bool with_keys_ = false;
  bool abandoned_ = true;  // until the first Reset
  uint32_t page_ = UINT32_MAX;  // the page of the last record added
  uint64_t page_start_ = 0;     // entries_.size() when that page's first record was added
  uint64_t max_page_bytes_ = 0;  // most entry bytes of a page before it
};

// A summary that verified.
struct SummaryFound {
  SummaryHeader header{};
  uint64_t generation = 0;  // of the log it summarizes
  uint64_t base = 0;        // the log's head sequence at page 0
};

// Reads the summary of a segment at pages [first, first + count) of it: `page_at(i)` gives page
// first + i (null when the device could not read it). Every page must verify as a kSummary page
// of one log at its place, and the header and entries must account for every byte; then one
// call of `visit` sees every record, in log order (their keys valid during the call). kDataLoss
// saying what failed otherwise, before any visit. `with_keys` asks for keys (kFailedPrecondition
// when the summary has none). A log of a generation up to `newer_than` (the segment's last free
// marker's) was freed since: kDataLoss.
absl::StatusOr<SummaryFound> ReadSummary(
    const Geometry& geometry, uint64_t store_seed, uint64_t segment, uint32_t first,
    uint32_t count, bool with_keys, const std::function<const uint8_t*(uint32_t)>& page_at,
    const std::function<void(absl::Span<const SummaryRecord>)>& visit, uint64_t newer_than);

// Builds page `index` of a summary (`summary` as SummaryBuilder::Take gave it) of the log of
// `generation` whose first summary page is `first_in_segment` with head counter
// `first_counter`, into `page`, ready to write at `page_number`.
void EncodeSummaryPage(uint8_t* page, const Geometry& geometry, uint64_t store_seed,
                       std::string_view summary, uint32_t index, uint64_t generation,
                       uint32_t first_in_segment, uint64_t first_counter, uint64_t page_number);

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_SUMMARY_H_
