// Segment summaries (segment_summary.h).
#include "kv/segment_summary.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

constexpr uint64_t kSequenceMask = (uint64_t{1} << 56) - 1;
constexpr int kTypeShift = 56;
constexpr uint32_t kValueBitsMask = (uint32_t{1} << 21) - 1;
constexpr int kKeyShift = 21;
static_assert(kMaxValueBytesCap <= kValueBitsMask && kMaxKeyBytes < (uint32_t{1} << 11),
              "every record's sizes fit an entry");

// Whether page `index` of the summary verified as such, with the log identity of the first.
absl::Status CheckSummaryPage(const absl::StatusOr<PageHeader>& header, uint32_t index,
                              uint32_t first, SummaryFound* found, uint64_t page_number) {
  if (!header.ok()) return header.status();
  if (header->type != static_cast<uint8_t>(PageType::kSummary)) {
    return absl::DataLossError(
        absl::StrCat("page ", page_number, ": not a summary page (type ", header->type, ")"));
  }
  if (header->page_in_segment != first + index) {
    return absl::DataLossError(absl::StrCat("page ", page_number, ": says it is page ",
                                            header->page_in_segment, " of its segment"));
  }
  if (index == 0) {
    found->generation = GenerationOf(*header);
    found->base = header->head_sequence - (first + index);
  } else if (GenerationOf(*header) != found->generation ||
             header->head_sequence != found->base + first + index) {
    return absl::DataLossError(
        absl::StrCat("page ", page_number, ": belongs to another log than the summary's start"));
  }
  return absl::OkStatus();
}


// Decodes `count` entries from `entries` (all of its bytes, keys following their entries when
// `has_keys`) of a log whose data pages are [0, data_pages): appends each record to `records`
// (keys view `entries`). An error saying what is wrong when an entry describes no record nvkv
// writes or the bytes do not hold exactly `count` entries. The count may come from the device:
// nothing is sized by it before the bytes are known to hold it.
absl::Status DecodeEntries(std::string_view entries, uint32_t count, bool has_keys,
                           uint32_t data_pages, const Geometry& geometry,
                           std::vector<SummaryRecord>* records) {
  if (count > entries.size() / sizeof(SummaryEntry)) {
    return absl::DataLossError(absl::StrCat("it claims ", count, " entries, more than its ",
                                            entries.size(), " bytes hold"));
  }
  records->reserve(records->size() + count);
  size_t offset = 0;
  for (uint32_t e = 0; e < count; ++e) {
    if (entries.size() - offset < sizeof(SummaryEntry)) {
      return absl::DataLossError("entries run past its end");
    }
    SummaryEntry entry;
    std::memcpy(&entry, entries.data() + offset, sizeof(entry));
    offset += sizeof(entry);
    SummaryRecord record;
    record.hash = KeyHash{entry.hash_lo, entry.hash_hi};
    record.sequence = entry.sequence_and_type & kSequenceMask;
    const uint8_t type = static_cast<uint8_t>(entry.sequence_and_type >> kTypeShift);
    record.is_delete = type == static_cast<uint8_t>(RecordType::kDelete);
    record.page_in_segment = entry.page_in_segment;
    const uint32_t key_bytes = entry.sizes >> kKeyShift;
    const uint32_t value_bytes = entry.sizes & kValueBitsMask;
    record.record_bytes = RecordBytes(key_bytes, value_bytes);
    if ((type != static_cast<uint8_t>(RecordType::kPut) && !record.is_delete) ||
        record.sequence == 0 || entry.page_in_segment >= data_pages || key_bytes == 0 ||
        key_bytes > kMaxKeyBytes || value_bytes > geometry.max_value_bytes()) {
      return absl::DataLossError(absl::StrCat("entry ", e, " describes no record nvkv writes"));
    }
    if (has_keys) {
      if (entries.size() - offset < key_bytes) {
        return absl::DataLossError("a key runs past its end");
      }
      record.key = entries.substr(offset, key_bytes);
      offset += key_bytes;
    }
    records->push_back(record);
  }
  if (offset != entries.size()) return absl::DataLossError("bytes after its last entry");
  return absl::OkStatus();
}
}  // namespace

uint32_t MaxSummaryPages(const Geometry& geometry) {
  return std::clamp<uint32_t>(geometry.log_pages() / 16, 1, kMaxSummaryPagesCap);
}

uint32_t SummaryPagesFor(uint64_t summary_bytes, const Geometry& geometry) {
  const uint64_t payload = geometry.payload_bytes();
  return static_cast<uint32_t>((summary_bytes + payload - 1) / payload);
}

void SummaryBuilder::Reset(bool with_keys, const Geometry& geometry) {
  // The most a summary may hold, kept from segment to segment: appends never allocate.
  limit_bytes_ = uint64_t{MaxSummaryPages(geometry)} * geometry.payload_bytes();
  entries_.reserve(limit_bytes_);
  entries_.clear();
  entry_count_ = 0;
  with_keys_ = with_keys;
  abandoned_ = false;
  page_ = UINT32_MAX;
  page_start_ = max_page_bytes_ = 0;
}

void SummaryBuilder::Abandon() {
  entries_.clear();
  entry_count_ = 0;
  abandoned_ = true;
}

void SummaryBuilder::Add(const KeyHash& hash, std::string_view key, const RecordHeader& header,
                         uint32_t page_in_segment) {
  if (abandoned_) return;
  if (page_in_segment != page_) {
    max_page_bytes_ = std::max(max_page_bytes_, entries_.size() - page_start_);
    page_ = page_in_segment;
    page_start_ = entries_.size();
  }
  SummaryEntry entry{};
  entry.hash_lo = hash.lo;
  entry.hash_hi = hash.hi;
  entry.sequence_and_type = (header.sequence & kSequenceMask) |
                            (uint64_t{header.type} << kTypeShift);
  entry.page_in_segment = page_in_segment;
  entry.sizes = header.value_bytes | (uint32_t{header.key_bytes} << kKeyShift);
  if (summary_bytes() + EntryBytes(key.size()) > limit_bytes_) {
    Abandon();  // too large to be worth it (MaxSummaryPages)
    return;
  }
  entries_.append(reinterpret_cast<const char*>(&entry), sizeof(entry));
  if (with_keys_) entries_.append(key);
  ++entry_count_;
}

absl::Status SummaryBuilder::Resume(
    bool with_keys, const Geometry& geometry, std::string_view entries, uint32_t entry_count,
    uint64_t page_bytes, uint32_t data_pages, uint64_t next_sequence,
    const std::function<void(absl::Span<const SummaryRecord>)>& visit) {
  Reset(with_keys, geometry);
  Abandon();  // until the entries are known to be good
  if (sizeof(SummaryHeader) + entries.size() > limit_bytes_ || page_bytes > limit_bytes_) {
    return absl::DataLossError(
        absl::StrCat("a summary of ", entries.size(), " bytes, beyond what a segment's holds"));
  }
  std::vector<SummaryRecord> records;
  NVKV_RETURN_IF_ERROR(
      DecodeEntries(entries, entry_count, with_keys, data_pages, geometry, &records));
  for (const SummaryRecord& record : records) {
    if (record.sequence >= next_sequence) {
      return absl::DataLossError(absl::StrCat("a record of sequence ", record.sequence,
                                              ", not below the next one, ", next_sequence));
    }
  }
  visit(records);
  entries_.assign(entries);
  entry_count_ = entry_count;
  abandoned_ = false;
  // The next record goes on a page of its own: the estimate of a page's entries stays.
  page_ = UINT32_MAX;
  page_start_ = entries_.size();
  max_page_bytes_ = page_bytes;
  return absl::OkStatus();
}

absl::Status SummaryBuilder::Visit(
    const Geometry& geometry,
    const std::function<void(absl::Span<const SummaryRecord>)>& visit) const {
  std::vector<SummaryRecord> records;
  NVKV_RETURN_IF_ERROR(DecodeEntries(entries_, entry_count_, with_keys_, geometry.log_pages(),
                                     geometry, &records));
  visit(records);
  return absl::OkStatus();
}

uint64_t SummaryBuilder::bytes_per_page() const {
  return std::max(max_page_bytes_, entries_.size() - page_start_);
}

std::optional<uint32_t> SummaryBuilder::PagesWith(uint64_t more_bytes,
                                                  const Geometry& geometry) const {
  if (abandoned_ || (entry_count_ == 0 && more_bytes == 0)) return 0;
  const uint32_t pages = SummaryPagesFor(summary_bytes() + more_bytes, geometry);
  if (pages > MaxSummaryPages(geometry)) return std::nullopt;
  return pages;
}

std::string SummaryBuilder::Take(uint32_t data_pages, uint32_t summary_pages,
                                 uint64_t sequence_floor, uint64_t generation_floor) {
  SummaryHeader header{};
  header.entry_count = entry_count_;
  header.flags = with_keys_ ? kSummaryHasKeys : 0;
  header.data_pages = data_pages;
  header.summary_pages = summary_pages;
  header.summary_bytes = summary_bytes();
  header.sequence_floor = sequence_floor;
  header.generation_floor = generation_floor;
  std::string summary(reinterpret_cast<const char*>(&header), sizeof(header));
  summary.append(entries_);
  Abandon();  // until the next segment's Reset
  return summary;
}

absl::StatusOr<SummaryFound> ReadSummary(
    const Geometry& geometry, uint64_t store_seed, uint64_t segment, uint32_t first,
    uint32_t count, bool with_keys, const std::function<const uint8_t*(uint32_t)>& page_at,
    const std::function<void(absl::Span<const SummaryRecord>)>& visit, uint64_t newer_than) {
  const uint64_t first_page = geometry.FirstPageOf(segment) + first;
  if (count == 0 || first == 0 || uint64_t{first} + count > geometry.log_pages()) {
    return absl::DataLossError(absl::StrCat("segment ", segment, ": no summary fits pages ",
                                            first, "..", uint64_t{first} + count));
  }
  SummaryFound found;
  std::string bytes;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* page = page_at(i);
    if (page == nullptr) {
      return absl::DataLossError(
          absl::StrCat("page ", first_page + i, ": unreadable (the device failed to read it)"));
    }
    absl::Status checked = CheckSummaryPage(VerifyPage(page, geometry, store_seed, first_page + i),
                                            i, first, &found, first_page + i);
    if (!checked.ok()) return checked;
    PageHeader header;
    std::memcpy(&header, page, sizeof(header));
    bytes.append(reinterpret_cast<const char*>(page) + sizeof(PageHeader), header.used_bytes);
  }
  const auto damaged = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("segment ", segment, ": summary at pages ",
                                            first_page, "..", first_page + count - 1, ": ", what));
  };
  if (found.generation <= newer_than) {
    return damaged(absl::StrCat("its log (generation ", found.generation,
                                ") was freed since (free marker of generation ", newer_than, ")"));
  }
  if (bytes.size() < sizeof(SummaryHeader)) return damaged("too short");
  std::memcpy(&found.header, bytes.data(), sizeof(SummaryHeader));
  const SummaryHeader& header = found.header;
  if (header.summary_bytes != bytes.size() || header.summary_pages != count ||
      header.data_pages != first) {
    return damaged("its header does not match its pages");
  }
  const bool has_keys = (header.flags & kSummaryHasKeys) != 0;
  if (with_keys && !has_keys) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", segment, ": its summary holds no keys"));
  }
  // Every entry is checked before any is visited: a summary is used whole or not at all.
  std::vector<SummaryRecord> records;
  absl::Status decoded =
      DecodeEntries(std::string_view(bytes).substr(sizeof(SummaryHeader)), header.entry_count,
                    has_keys, first, geometry, &records);
  if (!decoded.ok()) return damaged(std::string(decoded.message()));
  if (!with_keys) {
    for (SummaryRecord& record : records) record.key = {};
  }
  visit(records);
  return found;
}

void EncodeSummaryPage(uint8_t* page, const Geometry& geometry, uint64_t store_seed,
                       std::string_view summary, uint32_t index, uint64_t generation,
                       uint32_t first_in_segment, uint64_t first_counter, uint64_t page_number) {
  const size_t payload = geometry.payload_bytes();
  NVKV_CHECK(size_t{index} * payload < summary.size());
  PageBuilder builder;
  builder.Start(page, geometry, PageType::kSummary, generation, first_in_segment + index,
                first_counter + index);
  builder.AddContinuation(summary.substr(size_t{index} * payload, payload));
  builder.Finish(store_seed, page_number);
}

}  // namespace nvkv::kv
