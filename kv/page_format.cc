#include "kv/page_format.h"

#include <xxhash.h>
// Every page's checksum is XXH3-64 over the whole page, on each write and each read. Debian
// builds libxxhash for baseline x86-64 (SSE2); its *_dispatch entry points pick AVX2 or AVX-512
// code at run time where the CPU has it, about 3x faster over a 4 KiB page, with the same hash.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>  // makes XXH3_64bits* the dispatching functions
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

uint64_t ChecksumOf(const uint8_t* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

// Compares the buffer with itself shifted by a byte (all bytes equal, and the first is zero):
// memcmp runs at memory speed also where a byte loop is not vectorized (instrumented builds such
// as the fuzz targets', in which recovery spends most of its time here on unwritten pages).
bool AllZero(const uint8_t* data, size_t bytes) {
  return bytes == 0 || (data[0] == 0 && std::memcmp(data, data + 1, bytes - 1) == 0);
}

// Sets the checksum of a page whose header and payload are in place, for page `page_number`.
void SealPage(uint8_t* page, const Geometry& geometry, uint64_t store_seed, uint64_t page_number) {
  const uint64_t checksum = ChecksumOf(page + 8, geometry.page_bytes - 8,
                                       PageSeed(store_seed, geometry.SeedPageOf(page_number)));
  std::memcpy(page, &checksum, 8);
}

// The checks every page shares, whatever its type: magic, and the checksum seeded with the
// store and the page's place. `what` starts the error ("page ", "map page ").
absl::StatusOr<PageHeader> VerifySealed(const uint8_t* page, const Geometry& geometry,
                                        uint64_t store_seed, uint64_t page_number,
                                        const char* what) {
  PageHeader header;
  std::memcpy(&header, page, sizeof(header));
  if (header.magic != kPageMagic) {
    if (AllZero(page, geometry.page_bytes)) {
      return absl::NotFoundError(absl::StrCat(what, page_number, ": never written"));
    }
    return absl::DataLossError(absl::StrCat(what, page_number, ": bad magic"));
  }
  const uint64_t want = ChecksumOf(page + 8, geometry.page_bytes - 8,
                                   PageSeed(store_seed, geometry.SeedPageOf(page_number)));
  if (header.checksum != want) {
    return absl::DataLossError(absl::StrCat(what, page_number, ": checksum mismatch"));
  }
  return header;
}

}  // namespace

uint32_t Geometry::max_value_bytes() const {
  const uint64_t quarter = uint64_t{payload_bytes()} * (pages_per_segment / 4);
  return static_cast<uint32_t>(std::min<uint64_t>(kMaxValueBytesCap, quarter));
}

uint64_t Geometry::BatchBytesWithinPages(uint32_t pages) const {
  return uint64_t{payload_bytes()} * ((uint64_t{pages} + 1) / 2);
}

uint64_t Geometry::max_batch_bytes() const { return BatchBytesWithinPages(log_pages()); }

uint32_t LargeRecordPages(const Geometry& g, size_t key_bytes, size_t value_bytes) {
  const size_t first = g.payload_bytes() - sizeof(RecordHeader) - key_bytes;
  if (value_bytes <= first) return 1;
  const size_t rest = value_bytes - first;
  return static_cast<uint32_t>(1 + (rest + g.payload_bytes() - 1) / g.payload_bytes());
}

uint64_t StoreSeed(const uint8_t store_id[16]) { return XXH3_64bits(store_id, 16); }

uint64_t PageSeed(uint64_t store_seed, uint64_t page_number) {
  // Multiply by an odd constant so neighbouring pages get unrelated seeds.
  return store_seed ^ (page_number * 0x9E3779B97F4A7C15ULL);
}

void EncodeSuperblock(const Superblock& superblock, uint8_t* page, uint32_t page_bytes) {
  NVKV_CHECK(page_bytes >= sizeof(Superblock));
  std::memset(page, 0, page_bytes);
  Superblock copy = superblock;
  copy.magic = kSuperblockMagic;
  copy.checksum = 0;
  copy.zoned_checksum = 0;
  // A version-1 superblock ends at byte 72: the rest of its page stays zero.
  const uint32_t bytes = SuperblockBytes(copy.format_version);
  std::memcpy(page, &copy, bytes);
  if (bytes > kSuperblockChecksumEnd) {
    constexpr size_t kZonedFields = offsetof(Superblock, layout);
    copy.zoned_checksum = ChecksumOf(page + kZonedFields, bytes - kZonedFields, 0);
    std::memcpy(page + offsetof(Superblock, zoned_checksum), &copy.zoned_checksum, 8);
  }
  copy.checksum = ChecksumOf(page + 8, kSuperblockChecksumEnd - 8, 0);
  std::memcpy(page, &copy.checksum, 8);
}

namespace {

// The checks of a zoned store's fields (format version 2), before anything multiplies them.
absl::Status CheckZonedFields(const Superblock& superblock) {
  const uint32_t lba_bytes = superblock.lba_bytes;
  const bool lba_ok = lba_bytes >= 512 && lba_bytes <= superblock.page_bytes &&
                      (lba_bytes & (lba_bytes - 1)) == 0;
  const uint64_t blocks_per_page = lba_ok ? superblock.page_bytes / lba_bytes : 1;
  const bool zone_ok = lba_ok && superblock.layout == kSuperblockLayoutZoned &&
                       superblock.reserved == 0 && superblock.zone_blocks > 0 &&
                       superblock.zone_blocks <= kMaxStoreBytes / superblock.page_bytes &&
                       superblock.capacity_blocks > 0 &&
                       superblock.capacity_blocks <= superblock.zone_blocks &&
                       superblock.zone_blocks % blocks_per_page == 0 &&
                       superblock.capacity_blocks % blocks_per_page == 0 &&
                       superblock.pages_per_segment ==
                           superblock.capacity_blocks / blocks_per_page;
  if (!zone_ok) {
    return absl::DataLossError(absl::StrCat(
        "zoned superblock is impossible: layout ", superblock.layout, ", ", lba_bytes,
        "-byte blocks, zones of ", superblock.zone_blocks, " blocks (", superblock.capacity_blocks,
        " writable), ", superblock.pages_per_segment, " pages/segment of ",
        superblock.page_bytes, " bytes"));
  }
  const uint64_t zone_bytes = superblock.zone_blocks * lba_bytes;
  const Geometry g = GeometryOf(superblock);
  if (superblock.segment_count + kMetadataZones > kMaxStoreBytes / zone_bytes ||
      !g.map_fits_zone()) {
    return absl::DataLossError(absl::StrCat(
        "zoned superblock geometry is impossible: ", superblock.segment_count, " zones of ",
        zone_bytes, " bytes, ", g.pages_per_segment, " pages of each writable (a metadata zone ",
        "needs ", g.metadata_zone_pages(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Superblock> DecodeSuperblock(const uint8_t* page, uint32_t page_bytes) {
  if (page_bytes < sizeof(Superblock)) return absl::InvalidArgumentError("page too small");
  Superblock superblock{};
  std::memcpy(&superblock, page, kSuperblockChecksumEnd);
  if (superblock.magic == kDevelopmentSuperblockMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store was written by a development version of nvkv (its format ",
        superblock.format_version, ", before format version ", kFormatVersion,
        "), which this nvkv does not read; copy its data out with the nvkv that wrote it"));
  }
  if (superblock.magic != kSuperblockMagic) {
    return absl::FailedPreconditionError("not an nvkv store (no nvkv superblock)");
  }
  if (superblock.checksum != ChecksumOf(page + 8, kSuperblockChecksumEnd - 8, 0)) {
    return absl::DataLossError("superblock checksum mismatch");
  }
  if (superblock.format_version > kNewestFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("store has format version ", superblock.format_version,
                     "; this nvkv reads up to version ", kNewestFormatVersion));
  }
  const uint32_t bytes = SuperblockBytes(superblock.format_version);
  if (bytes > kSuperblockChecksumEnd) {
    std::memcpy(&superblock, page, bytes);
    constexpr size_t kZonedFields = offsetof(Superblock, layout);
    if (superblock.zoned_checksum != ChecksumOf(page + kZonedFields, bytes - kZonedFields, 0)) {
      return absl::DataLossError("superblock checksum mismatch (its zoned fields)");
    }
  }
  if (superblock.format_version == 0) {
    return absl::DataLossError("superblock names format version 0, which none is");
  }
  if (superblock.index_mode != kSuperblockIndexHash &&
      superblock.index_mode != kSuperblockIndexOrdered) {
    return absl::DataLossError(
        absl::StrCat("superblock names index mode ", superblock.index_mode, ", which none is"));
  }
  // Every field within the bounds a format sets, before any of them is multiplied: 8 MiB
  // segments at most, and at most 2^60 bytes of segments, so that no product of page size, pages
  // per segment and segment count wraps around 64 bits.
  const bool zoned = superblock.format_version == kZonedFormatVersion;
  const uint64_t max_segment_bytes = zoned ? kMaxZonedSegmentBytes : kMaxSegmentBytes;
  const bool page_ok = superblock.page_bytes >= kMinPageBytes &&
                       superblock.page_bytes <= kMaxPageBytes &&
                       (superblock.page_bytes & (superblock.page_bytes - 1)) == 0;
  const bool segment_ok = page_ok && superblock.pages_per_segment >= 8 &&
                          superblock.pages_per_segment <= max_segment_bytes / superblock.page_bytes;
  const bool count_ok =
      segment_ok && superblock.segment_count > 0 &&
      superblock.segment_count <=
          kMaxStoreBytes / (uint64_t{superblock.page_bytes} * superblock.pages_per_segment);
  if (!count_ok) {
    return absl::DataLossError(absl::StrCat("superblock geometry is impossible: page ",
                                            superblock.page_bytes, " bytes, ",
                                            superblock.pages_per_segment, " pages/segment, ",
                                            superblock.segment_count, " segments"));
  }
  if (zoned) NVKV_RETURN_IF_ERROR(CheckZonedFields(superblock));
  return superblock;
}

bool IsOtherNvkvFormat(const absl::StatusOr<Superblock>& decoded, const uint8_t* page) {
  // DecodeSuperblock's other kFailedPrecondition is a wrong magic; a bad checksum is kDataLoss.
  if (!absl::IsFailedPrecondition(decoded.status())) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, page + offsetof(Superblock, magic), sizeof(magic));
  return magic == kSuperblockMagic || magic == kDevelopmentSuperblockMagic;
}

Geometry GeometryOf(const Superblock& superblock) {
  Geometry g;
  g.page_bytes = superblock.page_bytes;
  g.pages_per_segment = superblock.pages_per_segment;
  g.segment_count = superblock.segment_count;
  if (superblock.format_version == kZonedFormatVersion) {
    g.zone_pages = superblock.zone_blocks / (superblock.page_bytes / superblock.lba_bytes);
  }
  return g;
}

void PageBuilder::Start(uint8_t* page, const Geometry& geometry, PageType type,
                        uint64_t generation, uint32_t page_in_segment, uint64_t head_sequence) {
  page_ = page;
  geometry_ = geometry;
  page_bytes_ = geometry.page_bytes;
  payload_bytes_ = geometry.payload_bytes();
  used_bytes_ = 0;
  record_count_ = 0;
  flags_ = 0;
  std::memset(page, 0, page_bytes_);
  PageHeader header{};
  header.magic = kPageMagic;
  header.type = static_cast<uint8_t>(type);
  SetGeneration(header, generation);
  header.page_in_segment = page_in_segment;
  header.head_sequence = head_sequence;
  std::memcpy(page_, &header, sizeof(header));
}

uint32_t PageBuilder::AddRecord(const RecordHeader& header, std::string_view key,
                                std::string_view value) {
  const uint32_t bytes = RecordBytes(key.size(), value.size());
  if (bytes > free_bytes()) return 0;
  NVKV_CHECK(header.key_bytes == key.size());
  NVKV_CHECK(header.value_bytes == value.size());
  const uint32_t offset = sizeof(PageHeader) + used_bytes_;
  uint8_t* out = page_ + offset;
  std::memcpy(out, &header, sizeof(header));
  std::memcpy(out + sizeof(header), key.data(), key.size());
  // A delete has no value, and an empty string_view may hold a null pointer: memcpy must not
  // see it even for zero bytes.
  if (!value.empty()) std::memcpy(out + sizeof(header) + key.size(), value.data(), value.size());
  used_bytes_ += bytes;
  ++record_count_;
  return offset;
}

uint32_t PageBuilder::StartLargeRecord(const RecordHeader& header, std::string_view key,
                                       std::string_view value) {
  NVKV_CHECK(empty());
  NVKV_CHECK((header.flags & kRecordLarge) != 0);
  const uint32_t room = payload_bytes_ - sizeof(RecordHeader) - static_cast<uint32_t>(key.size());
  const uint32_t part = static_cast<uint32_t>(std::min<size_t>(room, value.size()));
  uint8_t* out = page_ + sizeof(PageHeader);
  std::memcpy(out, &header, sizeof(header));
  std::memcpy(out + sizeof(header), key.data(), key.size());
  std::memcpy(out + sizeof(header) + key.size(), value.data(), part);
  used_bytes_ = sizeof(header) + static_cast<uint32_t>(key.size()) + part;
  record_count_ = 1;
  return part;
}

uint32_t PageBuilder::AddContinuation(std::string_view value_part) {
  NVKV_CHECK(empty());
  const uint32_t part = static_cast<uint32_t>(std::min<size_t>(payload_bytes_, value_part.size()));
  std::memcpy(page_ + sizeof(PageHeader), value_part.data(), part);
  used_bytes_ = part;
  return part;
}

void PageBuilder::Finish(uint64_t store_seed, uint64_t page_number) {
  PageHeader header;
  std::memcpy(&header, page_, sizeof(header));
  header.record_count = record_count_;
  header.used_bytes = used_bytes_;
  header.flags = flags_;
  header.checksum = 0;
  std::memcpy(page_, &header, sizeof(header));
  SealPage(page_, geometry_, store_seed, page_number);
}

void EncodeFreePage(uint8_t* page, const Geometry& geometry, uint64_t generation,
                    uint64_t store_seed, uint64_t page_number, uint32_t page_in_segment) {
  PageBuilder builder;
  builder.Start(page, geometry, PageType::kFree, generation, page_in_segment, 0);
  builder.Finish(store_seed, page_number);
}

void EncodeMapPage(uint8_t* page, const Geometry& geometry, uint64_t store_seed,
                   uint64_t page_number, uint32_t index, const SegmentMapPageHeader& floors,
                   const SegmentMapEntry* entries, uint32_t count, uint64_t write_count) {
  NVKV_CHECK(count <= MapEntriesPerPage(geometry.page_bytes));
  std::memset(page, 0, geometry.page_bytes);
  PageHeader header{};
  header.magic = kPageMagic;
  header.type = static_cast<uint8_t>(PageType::kSegmentMap);
  header.used_bytes = static_cast<uint32_t>(sizeof(floors) + count * sizeof(SegmentMapEntry));
  header.page_in_segment = index;
  header.head_sequence = write_count;
  std::memcpy(page + sizeof(header), &floors, sizeof(floors));
  std::memcpy(page + sizeof(header) + sizeof(floors), entries, count * sizeof(SegmentMapEntry));
  std::memcpy(page, &header, sizeof(header));
  SealPage(page, geometry, store_seed, page_number);
}

absl::StatusOr<SegmentMapPageHeader> DecodeMapPage(const uint8_t* page, const Geometry& geometry,
                                                   uint64_t store_seed, uint64_t page_number,
                                                   const SegmentMapEntry** entries) {
  NVKV_ASSIGN_OR_RETURN(const PageHeader header,
                        VerifySealed(page, geometry, store_seed, page_number, "map page "));
  const uint64_t entry_bytes =
      uint64_t{MapEntriesPerPage(geometry.page_bytes)} * sizeof(SegmentMapEntry);
  if (header.type != static_cast<uint8_t>(PageType::kSegmentMap) ||
      header.used_bytes > sizeof(SegmentMapPageHeader) + entry_bytes) {
    return absl::DataLossError(
        absl::StrCat("map page ", page_number, ": not a segment map page"));
  }
  SegmentMapPageHeader floors;
  std::memcpy(&floors, page + sizeof(header), sizeof(floors));
  *entries =
      reinterpret_cast<const SegmentMapEntry*>(page + sizeof(header) + sizeof(floors));
  return floors;
}

namespace {

// VerifyPage but for the position on zones: magic, checksum, type and used_bytes.
absl::StatusOr<PageHeader> VerifyLogPage(const uint8_t* page, const Geometry& geometry,
                                         uint64_t store_seed, uint64_t page_number) {
  NVKV_ASSIGN_OR_RETURN(const PageHeader header,
                        VerifySealed(page, geometry, store_seed, page_number, "page "));
  if (header.type < static_cast<uint8_t>(PageType::kFree) ||
      header.type > static_cast<uint8_t>(PageType::kCheckpoint) ||
      header.type == static_cast<uint8_t>(PageType::kSegmentMap)) {
    return absl::DataLossError(
        absl::StrCat("page ", page_number, ": unknown page type ", header.type));
  }
  if (header.used_bytes > geometry.payload_bytes()) {
    return absl::DataLossError(absl::StrCat("page ", page_number, ": used_bytes ",
                                            header.used_bytes, " exceeds the payload"));
  }
  return header;
}

}  // namespace

absl::StatusOr<PageHeader> VerifyPage(const uint8_t* page, const Geometry& geometry,
                                      uint64_t store_seed, uint64_t page_number) {
  NVKV_ASSIGN_OR_RETURN(const PageHeader header,
                        VerifyLogPage(page, geometry, store_seed, page_number));
  if (geometry.zoned() && header.page_in_segment != geometry.PageInSegment(page_number)) {
    return absl::DataLossError(absl::StrCat("page ", page_number, ": holds position ",
                                            header.page_in_segment, " of its zone"));
  }
  return header;
}

absl::StatusOr<PageHeader> VerifyZonePage(const uint8_t* page, const Geometry& geometry,
                                          uint64_t store_seed, uint64_t segment) {
  return VerifyLogPage(page, geometry, store_seed, geometry.FirstPageOf(segment));
}

RecordIterator::RecordIterator(const uint8_t* page, const PageHeader& header)
    : records_(page + sizeof(PageHeader)),
      used_bytes_(header.used_bytes),
      remaining_records_(header.record_count) {}

bool RecordIterator::Next(RecordView* record) {
  if (remaining_records_ == 0 || !status_.ok()) return false;
  if (used_bytes_ - offset_ < sizeof(RecordHeader)) {
    status_ = absl::DataLossError(absl::StrCat("record at offset ", offset_, " is cut off"));
    return false;
  }
  std::memcpy(&record->header, records_ + offset_, sizeof(RecordHeader));
  const RecordHeader& h = record->header;
  const uint32_t after_header = offset_ + sizeof(RecordHeader);
  const bool large = (h.flags & kRecordLarge) != 0;
  const uint32_t room = used_bytes_ - after_header;
  // A large record's value runs to the end of the page, so it is the page's last record (the
  // writer puts it alone on a fresh page): a count that says more follow is malformed.
  if (h.key_bytes > room || (!large && h.value_bytes > room - h.key_bytes) ||
      (large && remaining_records_ != 1) ||
      (h.type != static_cast<uint8_t>(RecordType::kPut) &&
       h.type != static_cast<uint8_t>(RecordType::kDelete))) {
    status_ = absl::DataLossError(absl::StrCat("record at offset ", offset_, " is malformed"));
    return false;
  }
  const uint32_t value_here = large ? room - h.key_bytes : h.value_bytes;
  record->offset = static_cast<uint32_t>(sizeof(PageHeader)) + offset_;
  record->key = std::string_view(reinterpret_cast<const char*>(records_ + after_header),
                                 h.key_bytes);
  record->value = std::string_view(
      reinterpret_cast<const char*>(records_ + after_header + h.key_bytes), value_here);
  offset_ = after_header + h.key_bytes + value_here;
  --remaining_records_;
  return true;
}

absl::StatusOr<RecordView> FindRecord(const uint8_t* page, const PageHeader& header,
                                      std::string_view key) {
  RecordIterator it(page, header);
  RecordView record;
  while (it.Next(&record)) {
    if (record.key == key) return record;
  }
  if (!it.status().ok()) return it.status();
  return absl::NotFoundError("key not in page");
}

}  // namespace nvkv::kv
