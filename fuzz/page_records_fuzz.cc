// The page and record decoder (kv/page_format.h VerifyPage, RecordIterator, FindRecord) on
// arbitrary page bytes.
//
// The input is one 4096-byte page (shorter inputs are padded with zero bytes), checked at page
// number kPageNumber; a page with the page magic gets the right checksum first (fuzz_pages.h).
// Properties: a refused page is kDataLoss or kNotFound (all zero) with a message; an accepted
// page has a known type and used_bytes within the payload; every record the iterator yields lies
// inside the page's used bytes, right after the previous one, with the key and value sizes its
// header gives (the value: all of it, or for a large record the rest of the page, as the last
// record); the iterator ends OK only after record_count records; FindRecord finds each key's
// first record; and a page of small records that the decoder took whole is what PageBuilder
// writes for those records. A summary page is read as a one-page summary (ReadSummary): refused
// whole, or every record it names is one nvkv could have written.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_pages.h"
#include "kv/page_format.h"
#include "kv/segment_summary.h"

namespace nvkv::kv {
namespace {

constexpr uint64_t kPageNumber = 37;

Geometry FuzzGeometry() {
  Geometry g;
  g.page_bytes = 4096;
  g.pages_per_segment = 16;
  g.segment_count = 4;
  return g;
}

bool AllZero(const uint8_t* data, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != 0) return false;
  }
  return true;
}

// A summary page taken as a one-page summary at its place (segment_summary.h ReadSummary): it is
// refused with kDataLoss (or kFailedPrecondition, keys asked of a summary without them), or every
// record it hands out describes a record nvkv writes, on a page before the summary.
void CheckSummaryPage(const uint8_t* page, const Geometry& g, uint64_t seed) {
  const uint64_t segment = g.SegmentOf(kPageNumber);
  const uint32_t first = g.PageInSegment(kPageNumber);
  for (bool with_keys : {false, true}) {
    uint32_t visited = 0;
    absl::StatusOr<SummaryFound> found = ReadSummary(
        g, seed, segment, first, 1, with_keys, [&](uint32_t) { return page; },
        [&](absl::Span<const SummaryRecord> records) {
          for (const SummaryRecord& r : records) {
            ++visited;
            FUZZ_REQUIRE(r.page_in_segment < first);
            FUZZ_REQUIRE(r.sequence > 0);
            FUZZ_REQUIRE(r.record_bytes > sizeof(RecordHeader));
            FUZZ_REQUIRE(r.record_bytes <= sizeof(RecordHeader) + kMaxKeyBytes +
                                               g.max_value_bytes());
            FUZZ_REQUIRE(with_keys == !r.key.empty());
          }
        },
        /*newer_than=*/0);
    if (!found.ok()) {
      FUZZ_REQUIRE(absl::IsDataLoss(found.status()) ||
                       (with_keys && absl::IsFailedPrecondition(found.status())),
                   "%s", found.status().ToString().c_str());
      FUZZ_REQUIRE(visited == 0, "a refused summary handed out records");
      continue;
    }
    FUZZ_REQUIRE(visited == found->header.entry_count);
  }
}

void CheckPage(const uint8_t* page) {
  const Geometry g = FuzzGeometry();
  const uint64_t seed = fuzz::FuzzStoreSeed();
  absl::StatusOr<PageHeader> header = VerifyPage(page, g, seed, kPageNumber);
  if (!header.ok()) {
    FUZZ_REQUIRE(absl::IsDataLoss(header.status()) || absl::IsNotFound(header.status()),
                 "%s", header.status().ToString().c_str());
    FUZZ_REQUIRE(absl::IsNotFound(header.status()) == AllZero(page, g.page_bytes));
    FUZZ_REQUIRE(!header.status().message().empty());
    return;
  }
  FUZZ_REQUIRE(header->magic == kPageMagic);
  FUZZ_REQUIRE((header->type >= static_cast<uint8_t>(PageType::kFree) &&
                header->type <= static_cast<uint8_t>(PageType::kContinuation)) ||
               header->type == static_cast<uint8_t>(PageType::kSummary) ||
               header->type == static_cast<uint8_t>(PageType::kCheckpoint));
  FUZZ_REQUIRE(header->used_bytes <= g.payload_bytes());
  if (header->type == static_cast<uint8_t>(PageType::kSummary)) {
    CheckSummaryPage(page, g, seed);
    return;
  }
  if (header->type != static_cast<uint8_t>(PageType::kData)) return;

  const uint8_t* used_begin = page + sizeof(PageHeader);
  const uint8_t* used_end = used_begin + header->used_bytes;
  RecordIterator it(page, *header);
  RecordView view;
  std::vector<RecordView> records;
  uint32_t next_offset = sizeof(PageHeader);
  bool any_large = false;
  while (it.Next(&view)) {
    const RecordHeader& h = view.header;
    FUZZ_REQUIRE(records.size() < header->record_count);
    FUZZ_REQUIRE(view.offset == next_offset, "record at %u, expected %u", view.offset,
                 next_offset);
    FUZZ_REQUIRE(std::memcmp(&h, page + view.offset, sizeof(h)) == 0);
    FUZZ_REQUIRE(h.type == static_cast<uint8_t>(RecordType::kPut) ||
                 h.type == static_cast<uint8_t>(RecordType::kDelete));
    const auto* key = reinterpret_cast<const uint8_t*>(view.key.data());
    const auto* value = reinterpret_cast<const uint8_t*>(view.value.data());
    FUZZ_REQUIRE(key == page + view.offset + sizeof(RecordHeader));
    FUZZ_REQUIRE(view.key.size() == h.key_bytes);
    FUZZ_REQUIRE(value == key + view.key.size());
    FUZZ_REQUIRE(key >= used_begin && value + view.value.size() <= used_end);
    if ((h.flags & kRecordLarge) != 0) {
      any_large = true;
      FUZZ_REQUIRE(value + view.value.size() == used_end, "a large record fills the page");
      FUZZ_REQUIRE(records.size() + 1 == header->record_count, "a large record is the last");
    } else {
      FUZZ_REQUIRE(view.value.size() == h.value_bytes);
    }
    next_offset = static_cast<uint32_t>(value + view.value.size() - page);
    records.push_back(view);
  }
  if (it.status().ok()) {
    FUZZ_REQUIRE(records.size() == header->record_count);
  } else {
    FUZZ_REQUIRE(absl::IsDataLoss(it.status()) && !it.status().message().empty());
    FUZZ_REQUIRE(!it.Next(&view), "an iterator that failed stays failed");
  }

  // FindRecord answers with the first record of each key.
  for (size_t i = 0; i < records.size(); ++i) {
    size_t first = 0;
    while (records[first].key != records[i].key) ++first;
    absl::StatusOr<RecordView> found = FindRecord(page, *header, records[i].key);
    FUZZ_REQUIRE(found.ok(), "%s", found.status().ToString().c_str());
    FUZZ_REQUIRE(found->offset == records[first].offset);
  }

  // Round trip: small records that the decoder read to the last used byte are what the page
  // builder writes for them (header fields, records, zero padding and so the checksum too).
  const bool whole = it.status().ok() &&
                     next_offset == sizeof(PageHeader) + header->used_bytes &&
                     (header->flags & ~kPageContinuesBatch) == 0 && !any_large &&
                     AllZero(used_end, page + g.page_bytes - used_end);
  if (!whole) return;
  std::vector<uint8_t> rebuilt(g.page_bytes);
  PageBuilder builder;
  builder.Start(rebuilt.data(), g, PageType::kData, GenerationOf(*header),
                header->page_in_segment, header->head_sequence);
  if ((header->flags & kPageContinuesBatch) != 0) builder.MarkContinuesBatch();
  for (const RecordView& r : records) {
    const uint32_t offset = builder.AddRecord(r.header, r.key, r.value);
    FUZZ_REQUIRE(offset == r.offset, "rebuilt record at %u, decoded at %u", offset, r.offset);
  }
  builder.Finish(seed, kPageNumber);
  FUZZ_REQUIRE(std::memcmp(rebuilt.data(), page, g.page_bytes) == 0, "rebuilt page differs");
}

}  // namespace
}  // namespace nvkv::kv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint32_t kPageBytes = 4096;
  if (size > kPageBytes) return 0;
  std::vector<uint8_t> page(kPageBytes, 0);
  if (size > 0) std::memcpy(page.data(), data, size);
  nvkv::fuzz::FixChecksum(page.data(), kPageBytes, nvkv::kv::kPageNumber);
  nvkv::kv::CheckPage(page.data());
  return 0;
}
