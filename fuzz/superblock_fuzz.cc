// The superblock decoder (kv/page_format.h DecodeSuperblock) on arbitrary page bytes.
//
// The input is the page. It is decoded twice: as it is, and with its checksum recomputed (the
// fuzzer cannot forge XXH3, so without that only the magic and checksum tests would be reached).
// Properties: a refusal has one of the documented codes and a message; an accepted superblock
// has every field within the bounds DecodeSuperblock promises (so no product of them wraps), its
// geometry's derived sizes are sane, and encoding it again gives back the input's bytes (72, or
// 104 for a zoned store's), which decode to the same superblock.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "kv/page_format.h"

namespace nvkv::kv {
namespace {

void CheckDecode(const uint8_t* page, uint32_t page_bytes) {
  absl::StatusOr<Superblock> decoded = DecodeSuperblock(page, page_bytes);
  if (!decoded.ok()) {
    const absl::StatusCode code = decoded.status().code();
    FUZZ_REQUIRE(code == absl::StatusCode::kDataLoss ||
                     code == absl::StatusCode::kFailedPrecondition ||
                     code == absl::StatusCode::kInvalidArgument,
                 "undocumented code: %s", decoded.status().ToString().c_str());
    FUZZ_REQUIRE(!decoded.status().message().empty());
    return;
  }
  FUZZ_REQUIRE(page_bytes >= sizeof(Superblock));
  const Superblock& sb = *decoded;
  FUZZ_REQUIRE(sb.magic == kSuperblockMagic);
  FUZZ_REQUIRE(sb.format_version == kFormatVersion || sb.format_version == kZonedFormatVersion);
  const bool zoned = sb.format_version == kZonedFormatVersion;
  FUZZ_REQUIRE(sb.index_mode == kSuperblockIndexHash || sb.index_mode == kSuperblockIndexOrdered);
  FUZZ_REQUIRE(sb.page_bytes >= kMinPageBytes && sb.page_bytes <= kMaxPageBytes);
  FUZZ_REQUIRE((sb.page_bytes & (sb.page_bytes - 1)) == 0);
  FUZZ_REQUIRE(sb.pages_per_segment >= 8);
  FUZZ_REQUIRE(uint64_t{sb.page_bytes} * sb.pages_per_segment <=
               (zoned ? kMaxZonedSegmentBytes : kMaxSegmentBytes));
  FUZZ_REQUIRE(sb.segment_count > 0);
  const unsigned __int128 store_bytes =
      static_cast<unsigned __int128>(uint64_t{sb.page_bytes} * sb.pages_per_segment) *
      sb.segment_count;
  FUZZ_REQUIRE(store_bytes <= kMaxStoreBytes);
  if (zoned) {
    // The zones, the metadata zones among them, fit the bound too; a zone holds its capacity.
    const unsigned __int128 zoned_bytes =
        static_cast<unsigned __int128>(sb.zone_blocks) * sb.lba_bytes *
        (sb.segment_count + kMetadataZones);
    FUZZ_REQUIRE(zoned_bytes <= kMaxStoreBytes);
    FUZZ_REQUIRE(sb.capacity_blocks > 0 && sb.capacity_blocks <= sb.zone_blocks);
  }

  const Geometry g = GeometryOf(sb);
  FUZZ_REQUIRE(g.page_bytes == sb.page_bytes && g.pages_per_segment == sb.pages_per_segment &&
               g.segment_count == sb.segment_count && g.zoned() == zoned);
  FUZZ_REQUIRE(!zoned || g.zone_pages >= g.pages_per_segment);
  FUZZ_REQUIRE(g.payload_bytes() > sizeof(RecordHeader) + kMaxKeyBytes);
  // total_pages() must not wrap: it is at least one page per segment plus the superblocks.
  FUZZ_REQUIRE(g.total_pages() > g.segment_count);
  FUZZ_REQUIRE(g.SegmentOf(g.FirstPageOf(g.segment_count - 1)) == g.segment_count - 1);
  FUZZ_REQUIRE(g.max_value_bytes() > 0 && g.max_value_bytes() <= kMaxValueBytesCap);
  FUZZ_REQUIRE(g.max_batch_bytes() > 0 && g.max_batch_bytes() <= g.segment_bytes());
  // A value of max_value_bytes() with the longest key fits its segment.
  FUZZ_REQUIRE(LargeRecordPages(g, kMaxKeyBytes, g.max_value_bytes()) <= g.log_pages());

  // Round trip: the encoder writes the same bytes (72, or 104 with the zoned fields), which
  // decode to the same superblock.
  std::vector<uint8_t> again(kMinPageBytes);
  EncodeSuperblock(sb, again.data(), kMinPageBytes);
  FUZZ_REQUIRE(std::memcmp(again.data(), page, SuperblockBytes(sb.format_version)) == 0,
               "re-encoding differs");
  absl::StatusOr<Superblock> redecoded = DecodeSuperblock(again.data(), kMinPageBytes);
  FUZZ_REQUIRE(redecoded.ok(), "%s", redecoded.status().ToString().c_str());
  FUZZ_REQUIRE(std::memcmp(&*redecoded, &sb, sizeof(sb)) == 0);
}

}  // namespace
}  // namespace nvkv::kv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > nvkv::kv::kMaxPageBytes) return 0;
  // A heap copy of exactly `size` bytes: ASan catches a read past the page.
  std::vector<uint8_t> page(data, data + size);
  nvkv::kv::CheckDecode(page.data(), static_cast<uint32_t>(size));
  if (size >= sizeof(nvkv::kv::Superblock)) {
    // Both checksums recomputed (the zoned fields' first: the first one does not cover it), so
    // that a zoned superblock's checks are reached too.
    using nvkv::kv::Superblock;
    constexpr size_t kZonedFields = offsetof(Superblock, layout);
    const uint64_t zoned = XXH3_64bits_withSeed(page.data() + kZonedFields,
                                                sizeof(Superblock) - kZonedFields, 0);
    std::memcpy(page.data() + offsetof(Superblock, zoned_checksum), &zoned, 8);
    const uint64_t checksum =
        XXH3_64bits_withSeed(page.data() + 8, nvkv::kv::kSuperblockChecksumEnd - 8, 0);
    std::memcpy(page.data(), &checksum, 8);
    nvkv::kv::CheckDecode(page.data(), static_cast<uint32_t>(size));
  }
  return 0;
}
