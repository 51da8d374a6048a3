// The segment scanner and its large-value run decoder (kv/segment_scan.h ScanSegment) on
// arbitrary segment bytes.
//
// Input: byte 0, a mask of the pages whose checksum is left as it is (the others get the right
// one when they carry the page magic, fuzz_pages.h); byte 1, a mask of the pages the "device"
// cannot read (page_at returns null); then the segment's kPages pages of kPageBytes each (short
// inputs are padded with zero bytes). The pages are small (512 bytes, smaller than a store may
// use) so that an input is 4 KiB: nothing in the scan depends on the page size.
//
// The scan runs two ways (compaction's and check's: large values assembled; recovery's: not).
// Properties: the result's counts and holes are consistent with each other and lie inside the
// log; every record handed out lies on a page of the log that verifies with the log's
// generation, is not in a hole, and has the key and value sizes its header gives; an assembled
// large value is exactly the first page's part followed by its continuation pages' payloads; a
// batch is handed out only up to its last record; and the records of the assembling run are
// those of the other, in order, less large values that did not assemble and batch records
// (a batch holding such a value is dropped whole).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_pages.h"
#include "kv/segment_scan.h"

namespace nvkv::kv {
namespace {

constexpr uint32_t kPageBytes = 512;
constexpr uint32_t kPages = 8;
constexpr uint64_t kSegment = 2;

Geometry FuzzGeometry() {
  Geometry g;
  g.page_bytes = kPageBytes;
  g.pages_per_segment = kPages;
  g.segment_count = 4;
  return g;
}

struct Seen {
  RecordHeader header;
  uint32_t page_index;
  uint32_t pages;
  const char* key;  // identifies the record: where its key lies in the segment's bytes
  std::string value;
};

struct Run {
  SegmentScanResult result;
  std::vector<Seen> records;
};

Run Scan(const std::vector<uint8_t>& bytes, uint8_t unreadable, bool assemble) {
  const Geometry g = FuzzGeometry();
  auto page_at = [&](uint32_t i) -> const uint8_t* {
    FUZZ_REQUIRE(i < kPages);
    if ((unreadable >> i) & 1) return nullptr;
    return bytes.data() + size_t{i} * kPageBytes;
  };
  Run run;
  run.result = ScanSegment(g, fuzz::FuzzStoreSeed(), kSegment, page_at, assemble,
                           [&](const ScannedRecord& r) {
                             run.records.push_back(Seen{r.header, r.page_index, r.pages,
                                                        r.key.data(), std::string(r.value)});
                             // The views of a record point into the segment's bytes (key, and
                             // a value that is not assembled) or stay valid for the call.
                             const char* begin = reinterpret_cast<const char*>(bytes.data());
                             FUZZ_REQUIRE(r.key.data() >= begin &&
                                          r.key.data() + r.key.size() <= begin + bytes.size());
                             FUZZ_REQUIRE(r.key.size() == r.header.key_bytes);
                           });
  return run;
}

void CheckRun(const std::vector<uint8_t>& bytes, uint8_t unreadable, bool assemble,
              const Run& run) {
  const Geometry g = FuzzGeometry();
  const SegmentScanResult& res = run.result;
  const uint64_t seed = fuzz::FuzzStoreSeed();
  const uint64_t first_page = g.FirstPageOf(kSegment);
  FUZZ_REQUIRE(res.log_pages <= kPages);
  FUZZ_REQUIRE(res.in_use || (res.log_pages == 0 && res.holes.empty() && run.records.empty()));
  FUZZ_REQUIRE(res.records >= run.records.size());
  FUZZ_REQUIRE(res.generation <= res.max_generation);
  auto verified = [&](uint32_t i) -> absl::StatusOr<PageHeader> {
    if ((unreadable >> i) & 1) return absl::DataLossError("unreadable");
    return VerifyPage(bytes.data() + size_t{i} * kPageBytes, g, seed, first_page + i);
  };
  std::vector<bool> in_hole(kPages, false);
  uint32_t hole_pages = 0;
  uint32_t after_last = 0;
  for (const SegmentHole& hole : res.holes) {
    FUZZ_REQUIRE(hole.page_count > 0 && !hole.reason.empty());
    FUZZ_REQUIRE(hole.first_page >= after_last, "holes in page order, apart");
    FUZZ_REQUIRE(hole.first_page + hole.page_count <= res.log_pages, "a hole inside the log");
    for (uint32_t i = hole.first_page; i < hole.first_page + hole.page_count; ++i) {
      in_hole[i] = true;
    }
    hole_pages += hole.page_count;
    after_last = hole.first_page + hole.page_count;
  }
  FUZZ_REQUIRE(hole_pages == res.hole_pages);

  bool batch_open = false;
  for (const Seen& r : run.records) {
    FUZZ_REQUIRE(r.page_index < res.log_pages, "record on page %u past the log's %u pages",
                 r.page_index, res.log_pages);
    // A record may lie on a page in a hole only when the page is a sound page of the log whose
    // later part did not decode (a malformed record, a large value of the wrong length): the
    // hole is "the rest of the page", and the records before it count.
    if (in_hole[r.page_index]) {
      absl::StatusOr<PageHeader> h = verified(r.page_index);
      FUZZ_REQUIRE(h.ok() && GenerationOf(*h) == res.generation &&
                       h->page_in_segment == r.page_index,
                   "record on page %u, a hole", r.page_index);
    }
    absl::StatusOr<PageHeader> h = verified(r.page_index);
    FUZZ_REQUIRE(h.ok() && h->type == static_cast<uint8_t>(PageType::kData));
    FUZZ_REQUIRE(GenerationOf(*h) == res.generation);
    FUZZ_REQUIRE(res.max_sequence >= r.header.sequence);
    const char* page = reinterpret_cast<const char*>(bytes.data()) +
                       size_t{r.page_index} * kPageBytes;
    FUZZ_REQUIRE(r.key >= page + sizeof(PageHeader) + sizeof(RecordHeader) &&
                 r.key + r.header.key_bytes <= page + sizeof(PageHeader) + h->used_bytes);
    const bool large = (r.header.flags & kRecordLarge) != 0;
    if (!large) {
      FUZZ_REQUIRE(r.pages == 1);
      FUZZ_REQUIRE(r.value.size() == r.header.value_bytes);
    } else {
      FUZZ_REQUIRE(r.pages >= 1 && r.page_index + r.pages <= kPages);
      const char* part = r.key + r.header.key_bytes;
      const std::string first(part, page + sizeof(PageHeader) + h->used_bytes);
      if (!assemble) {
        FUZZ_REQUIRE(r.value == first);
      } else {
        FUZZ_REQUIRE(r.value.size() == r.header.value_bytes, "assembled %zu bytes of %u",
                     r.value.size(), r.header.value_bytes);
        std::string expected = first;
        for (uint32_t c = 1; c < r.pages; ++c) {
          absl::StatusOr<PageHeader> cont = verified(r.page_index + c);
          FUZZ_REQUIRE(cont.ok() && cont->type == static_cast<uint8_t>(PageType::kContinuation));
          FUZZ_REQUIRE(GenerationOf(*cont) == res.generation);
          FUZZ_REQUIRE(cont->page_in_segment == r.page_index + c);
          const char* cpage = reinterpret_cast<const char*>(bytes.data()) +
                              size_t{r.page_index + c} * kPageBytes;
          expected.append(cpage + sizeof(PageHeader), cont->used_bytes);
        }
        FUZZ_REQUIRE(r.value == expected, "assembled value differs from its pages");
      }
    }
    // A batch is handed out up to its last record: none is left open at a plain record or at
    // the end.
    const bool in_batch = (r.header.flags & kRecordInBatch) != 0;
    FUZZ_REQUIRE(in_batch || !batch_open, "a batch handed out without its last record");
    batch_open = in_batch && r.header.batch_remaining != 0;
  }
  FUZZ_REQUIRE(!batch_open, "a batch handed out without its last record");
}

// `sub` is `all` in order with some of its large or batch records left out.
void CheckSubsequence(const Run& sub, const Run& all) {
  size_t j = 0;
  for (const Seen& r : sub.records) {
    while (j < all.records.size() && all.records[j].key != r.key) {
      FUZZ_REQUIRE((all.records[j].header.flags & (kRecordLarge | kRecordInBatch)) != 0,
                   "only a large value that does not assemble, or its batch, is left out");
      ++j;
    }
    FUZZ_REQUIRE(j < all.records.size(), "a record handed out only when assembling");
    ++j;
  }
}

}  // namespace
}  // namespace nvkv::kv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nvkv::kv;
  constexpr size_t kSegmentBytes = size_t{kPageBytes} * kPages;
  if (size < 2 || size > 2 + kSegmentBytes) return 0;
  const uint8_t keep_checksum = data[0];
  const uint8_t unreadable = data[1];
  std::vector<uint8_t> bytes(kSegmentBytes, 0);
  std::memcpy(bytes.data(), data + 2, size - 2);
  const uint64_t first_page = FuzzGeometry().FirstPageOf(kSegment);
  for (uint32_t i = 0; i < kPages; ++i) {
    if (((keep_checksum >> i) & 1) == 0) {
      nvkv::fuzz::FixChecksum(bytes.data() + size_t{i} * kPageBytes, kPageBytes, first_page + i);
    }
  }
  const Run assembled = Scan(bytes, unreadable, /*assemble=*/true);
  CheckRun(bytes, unreadable, true, assembled);
  const Run parts = Scan(bytes, unreadable, /*assemble=*/false);
  CheckRun(bytes, unreadable, false, parts);
  CheckSubsequence(assembled, parts);
  FUZZ_REQUIRE(assembled.result.log_pages == parts.result.log_pages);
  return 0;
}
