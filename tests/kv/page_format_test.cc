// Page and record encoding: round trips and every corruption the format must detect.
#include "kv/page_format.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint8_t kStoreId[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

Geometry SmallGeometry() {
  Geometry g;
  g.page_bytes = 4096;
  g.pages_per_segment = 64;
  g.segment_count = 10;
  return g;
}

RecordHeader PutHeader(std::string_view key, std::string_view value, uint64_t sequence) {
  RecordHeader h{};
  h.type = static_cast<uint8_t>(RecordType::kPut);
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.value_bytes = static_cast<uint32_t>(value.size());
  h.sequence = sequence;
  return h;
}

class PageFormatTest : public ::testing::Test {
 protected:
  // Builds a data page with three records at page number `page_number`.
  void BuildPage(uint64_t page_number) {
    page_.assign(geometry_.page_bytes, 0);
    PageBuilder builder;
    builder.Start(page_.data(), geometry_, PageType::kData, /*generation=*/7,
                  geometry_.PageInSegment(page_number), /*head_sequence=*/3);
    for (int i = 0; i < 3; ++i) {
      const std::string key = "key" + std::to_string(i);
      const std::string value(100 + i, static_cast<char>('a' + i));
      ASSERT_NE(builder.AddRecord(PutHeader(key, value, 10 + i), key, value), 0u);
    }
    builder.Finish(seed_, page_number);
  }

  Geometry geometry_ = SmallGeometry();
  uint64_t seed_ = StoreSeed(kStoreId);
  std::vector<uint8_t> page_;
};

TEST_F(PageFormatTest, RecordsRoundTrip) {
  BuildPage(5);
  auto header = VerifyPage(page_.data(), geometry_, seed_, 5);
  ASSERT_THAT(header, IsOk());
  EXPECT_EQ(header->record_count, 3);
  EXPECT_EQ(GenerationOf(*header), 7u);
  RecordIterator it(page_.data(), *header);
  RecordView record;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(it.Next(&record));
    EXPECT_EQ(record.key, "key" + std::to_string(i));
    EXPECT_EQ(record.value, std::string(100 + i, static_cast<char>('a' + i)));
    EXPECT_EQ(record.header.sequence, 10u + i);
  }
  EXPECT_FALSE(it.Next(&record));
  EXPECT_THAT(it.status(), IsOk());
  auto found = FindRecord(page_.data(), *header, "key1");
  ASSERT_THAT(found, IsOk());
  EXPECT_EQ(found->value.size(), 101u);
  EXPECT_THAT(FindRecord(page_.data(), *header, "nope"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PageFormatTest, EveryFlippedBitIsDetected) {
  BuildPage(5);
  const std::vector<uint8_t> good = page_;
  // Flip one bit in each 61-byte stride across the whole page, header and padding included.
  for (size_t byte = 0; byte < good.size(); byte += 61) {
    page_ = good;
    page_[byte] ^= 0x10;
    EXPECT_THAT(VerifyPage(page_.data(), geometry_, seed_, 5),
                StatusIs(absl::StatusCode::kDataLoss))
        << "flip at byte " << byte;
  }
}

TEST_F(PageFormatTest, TornPageIsDetected) {
  BuildPage(5);
  // A torn write: the first 512-byte sector is new, the rest holds what was there before.
  std::vector<uint8_t> old(geometry_.page_bytes, 0x5a);
  std::memcpy(old.data(), page_.data(), 512);
  EXPECT_THAT(VerifyPage(old.data(), geometry_, seed_, 5), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(PageFormatTest, MisdirectedPageIsDetected) {
  BuildPage(5);
  EXPECT_THAT(VerifyPage(page_.data(), geometry_, seed_, 6),
              StatusIs(absl::StatusCode::kDataLoss, "checksum"));
}

TEST_F(PageFormatTest, PageFromAnotherStoreIsDetected) {
  BuildPage(5);
  uint8_t other_id[16] = {9};
  EXPECT_THAT(VerifyPage(page_.data(), geometry_, StoreSeed(other_id), 5),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(PageFormatTest, ZeroPageIsNeverWritten) {
  std::vector<uint8_t> zero(geometry_.page_bytes, 0);
  EXPECT_THAT(VerifyPage(zero.data(), geometry_, seed_, 5), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PageFormatTest, RecordOverrunningThePageIsDataLoss) {
  BuildPage(5);
  // Corrupt the second record's key length and re-seal the checksum, as a buggy writer would.
  auto header = VerifyPage(page_.data(), geometry_, seed_, 5);
  ASSERT_THAT(header, IsOk());
  const uint32_t second = sizeof(PageHeader) + RecordBytes(4, 100);
  uint16_t huge = 60000;
  std::memcpy(page_.data() + second + 2, &huge, 2);
  RecordIterator it(page_.data(), *header);
  RecordView record;
  EXPECT_TRUE(it.Next(&record));
  EXPECT_FALSE(it.Next(&record));
  EXPECT_THAT(it.status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(PageFormatTest, FullPageRefusesRecord) {
  page_.assign(geometry_.page_bytes, 0);
  PageBuilder builder;
  builder.Start(page_.data(), geometry_, PageType::kData, 1, 0, 0);
  const std::string value(geometry_.payload_bytes() - sizeof(RecordHeader) - 1, 'x');
  EXPECT_NE(builder.AddRecord(PutHeader("k", value, 1), "k", value), 0u);
  EXPECT_EQ(builder.free_bytes(), 0u);
  EXPECT_EQ(builder.AddRecord(PutHeader("k", "", 2), "k", ""), 0u);
}

TEST_F(PageFormatTest, LargeRecordSpansPages) {
  const std::string key = "big";
  std::string value(10000, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 31);
  ASSERT_TRUE(IsLargeRecord(geometry_, key.size(), value.size()));
  const uint32_t pages = LargeRecordPages(geometry_, key.size(), value.size());
  EXPECT_EQ(pages, 3u);  // 4056 payload: 4009 value bytes in page 1, 4056 in page 2, 1935 in 3
  std::vector<std::vector<uint8_t>> run(pages, std::vector<uint8_t>(geometry_.page_bytes));
  RecordHeader h = PutHeader(key, value, 9);
  h.flags = kRecordLarge;
  PageBuilder builder;
  builder.Start(run[0].data(), geometry_, PageType::kData, 1, 0, 0);
  size_t done = builder.StartLargeRecord(h, key, value);
  builder.Finish(seed_, 2);
  for (uint32_t p = 1; p < pages; ++p) {
    builder.Start(run[p].data(), geometry_, PageType::kContinuation, 1, p, p);
    done += builder.AddContinuation(std::string_view(value).substr(done));
    builder.Finish(seed_, 2 + p);
  }
  EXPECT_EQ(done, value.size());
  // Read it back.
  auto first = VerifyPage(run[0].data(), geometry_, seed_, 2);
  ASSERT_THAT(first, IsOk());
  auto record = FindRecord(run[0].data(), *first, key);
  ASSERT_THAT(record, IsOk());
  std::string rebuilt(record->value);
  for (uint32_t p = 1; p < pages; ++p) {
    auto next = VerifyPage(run[p].data(), geometry_, seed_, 2 + p);
    ASSERT_THAT(next, IsOk());
    EXPECT_EQ(next->type, static_cast<uint8_t>(PageType::kContinuation));
    rebuilt.append(reinterpret_cast<const char*>(run[p].data()) + sizeof(PageHeader),
                   next->used_bytes);
  }
  EXPECT_EQ(rebuilt, value);
}

// A conventional store's superblock (format version 1): 1 MiB segments of 4 KiB pages.
Superblock ConventionalSuperblock() {
  Superblock sb{};
  sb.format_version = kFormatVersion;
  sb.index_mode = kSuperblockIndexHash;
  sb.page_bytes = 4096;
  sb.pages_per_segment = 256;
  sb.lba_bytes = 512;
  sb.segment_count = 100;
  std::memcpy(sb.store_id, kStoreId, 16);
  return sb;
}

// `sb` encoded into a 4 KiB page.
std::vector<uint8_t> Encoded(const Superblock& sb) {
  std::vector<uint8_t> page(4096);
  EncodeSuperblock(sb, page.data(), 4096);
  return page;
}

TEST(SuperblockTest, RoundTrip) {
  std::vector<uint8_t> page = Encoded(ConventionalSuperblock());
  auto decoded = DecodeSuperblock(page.data(), 4096);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_EQ(decoded->segment_count, 100u);
  EXPECT_EQ(GeometryOf(*decoded).segment_bytes(), 1u << 20);
}

// A zoned store's superblock (format version 2): the zone fields after the first 72 bytes, under
// a checksum of their own, and the geometry of segments on zones (FORMAT.md "Zoned namespaces").
Superblock ZonedSuperblock() {
  Superblock sb = ConventionalSuperblock();
  sb.format_version = kZonedFormatVersion;
  sb.lba_bytes = 4096;
  sb.layout = kSuperblockLayoutZoned;
  sb.zone_blocks = 1024;     // 4 MiB zones
  sb.capacity_blocks = 768;  // 3 MiB of them writable
  sb.pages_per_segment = 768;
  sb.segment_count = 30;
  return sb;
}

TEST(SuperblockTest, AZonedStoresRoundTripsWithItsZones) {
  std::vector<uint8_t> page = Encoded(ZonedSuperblock());
  auto decoded = DecodeSuperblock(page.data(), 4096);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_EQ(decoded->zone_blocks, 1024u);
  EXPECT_EQ(decoded->capacity_blocks, 768u);
  const Geometry g = GeometryOf(*decoded);
  ASSERT_TRUE(g.zoned());
  EXPECT_EQ(g.zone_pages, 1024u);
  EXPECT_EQ(g.log_pages(), 768u) << "no page kept for a free marker: a reset frees a zone";
  EXPECT_EQ(g.FirstPageOf(0), 2048u) << "after the two metadata zones";
  EXPECT_EQ(g.FirstPageOf(29), 31u * 1024);
  EXPECT_EQ(g.SegmentOf(2048 + 767), 0u);
  EXPECT_EQ(g.SegmentOf(3 * 1024 + 5), 1u);
  EXPECT_EQ(g.PageInSegment(3 * 1024 + 5), 5u);
  EXPECT_EQ(g.total_pages(), 32u * 1024);
  EXPECT_EQ(g.MetadataZoneFirstPage(1), 1024u);
  EXPECT_EQ(g.SeedPageOf(3 * 1024 + 5), 3u * 1024);

  // The first checksum covers bytes 8..72 as in version 1 (a reader of version 1 verifies it,
  // then refuses the version); the zone fields are under a checksum of their own; a version-1
  // superblock leaves their bytes zero.
  uint64_t checksum = 0;
  std::memcpy(&checksum, page.data(), 8);
  EXPECT_EQ(checksum, XXH3_64bits(page.data() + 8, 64));
  page[offsetof(Superblock, zone_blocks)] ^= 1;
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
              StatusIs(absl::StatusCode::kDataLoss, "checksum"));
  Superblock conventional = ZonedSuperblock();
  conventional.format_version = kFormatVersion;
  conventional.pages_per_segment = 256;
  EncodeSuperblock(conventional, page.data(), 4096);
  EXPECT_TRUE(std::all_of(page.begin() + 72, page.end(), [](uint8_t b) { return b == 0; }));
  auto v1 = DecodeSuperblock(page.data(), 4096);
  ASSERT_THAT(v1, IsOk());
  EXPECT_EQ(v1->zone_blocks, 0u);
  EXPECT_FALSE(GeometryOf(*v1).zoned());
  EXPECT_EQ(GeometryOf(*v1).SeedPageOf(300), 300u);
}

TEST(SuperblockTest, ZoneFieldsNoFormatWritesAreDataLoss) {
  const std::vector<std::function<void(Superblock&)>> damage = {
      [](Superblock& sb) { sb.layout = 0; },
      [](Superblock& sb) { sb.reserved = 1; },
      [](Superblock& sb) { sb.zone_blocks = 0; },
      [](Superblock& sb) { sb.capacity_blocks = sb.zone_blocks + 1; },
      [](Superblock& sb) { sb.pages_per_segment = 767; },  // not the zones' capacity
      [](Superblock& sb) {  // zones that are not whole pages (their capacity is)
        sb.lba_bytes = 512;
        sb.capacity_blocks = 768 * 8;
        sb.zone_blocks = 1024 * 8 + 1;
      },
      [](Superblock& sb) {  // zones of 2^60 bytes: no room for the metadata zones
        sb.zone_blocks = uint64_t{1} << 48;
      },
  };
  for (size_t i = 0; i < damage.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "damage " << i);
    Superblock sb = ZonedSuperblock();
    damage[i](sb);
    const std::vector<uint8_t> page = Encoded(sb);
    EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
                StatusIs(absl::StatusCode::kDataLoss, "impossible"));
  }
}

// On zones a page's checksum names its zone, not its place: a page verifies wherever it landed
// in its zone, and nowhere else.
// On zones a page's checksum seed is its zone's (FORMAT.md "Page identity"): it verifies at any
// place of its zone, and only there; read as a page number, it must also hold that position, or a
// place table that sent a read to the wrong place would hand out another page's records.
TEST(PageTest, OnZonesAPageVerifiesAnywhereInItsZoneOnlyAsItsOwnPosition) {
  Superblock sb = ZonedSuperblock();
  const Geometry zoned = GeometryOf(sb);
  const uint64_t seed = StoreSeed(kStoreId);
  std::vector<uint8_t> page(4096);
  PageBuilder builder;
  builder.Start(page.data(), zoned, PageType::kData, 1, /*page_in_segment=*/3, 4);
  RecordHeader header{};
  header.type = static_cast<uint8_t>(RecordType::kPut);
  header.key_bytes = 1;
  header.value_bytes = 1;
  header.sequence = 1;
  ASSERT_NE(builder.AddRecord(header, "k", "v"), 0u);
  builder.Finish(seed, zoned.FirstPageOf(0) + 3);
  EXPECT_THAT(VerifyPage(page.data(), zoned, seed, zoned.FirstPageOf(0) + 3), IsOk());
  EXPECT_THAT(VerifyPage(page.data(), zoned, seed, zoned.FirstPageOf(0) + 700),
              StatusIs(absl::StatusCode::kDataLoss,
                       absl::StrCat("page ", zoned.FirstPageOf(0) + 700,
                                    ": holds position 3 of its zone")));
  EXPECT_THAT(VerifyPage(page.data(), zoned, seed, zoned.FirstPageOf(1) + 3),
              StatusIs(absl::StatusCode::kDataLoss, "checksum"));
  // Read from a place before the positions are known: any position of the zone.
  absl::StatusOr<PageHeader> found = VerifyZonePage(page.data(), zoned, seed, 0);
  ASSERT_THAT(found, IsOk());
  EXPECT_EQ(found->page_in_segment, 3u);
  EXPECT_THAT(VerifyZonePage(page.data(), zoned, seed, 1),
              StatusIs(absl::StatusCode::kDataLoss, "checksum"));
  // Without zones the place itself is in the seed.
  Geometry conventional = zoned;
  conventional.zone_pages = 0;
  builder.Start(page.data(), conventional, PageType::kData, 1, 3, 4);
  ASSERT_NE(builder.AddRecord(header, "k", "v"), 0u);
  builder.Finish(seed, 5);
  EXPECT_THAT(VerifyPage(page.data(), conventional, seed, 5), IsOk());
  EXPECT_THAT(VerifyPage(page.data(), conventional, seed, 6),
              StatusIs(absl::StatusCode::kDataLoss, "checksum"));
}

TEST(SuperblockTest, ForeignDataIsNotAStore) {
  std::vector<uint8_t> page(4096, 0xab);
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not an nvkv store"));
}

TEST(SuperblockTest, CorruptSuperblockIsDataLoss) {
  std::vector<uint8_t> page = Encoded(ConventionalSuperblock());
  page[40] ^= 1;
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096), StatusIs(absl::StatusCode::kDataLoss));
}

// A damaged copy is damage, whichever field the damage hit: a version bit flipped in copy 0
// must not make the store look like a newer format's (Open then repairs it from copy 1).
TEST(SuperblockTest, AVersionDamagedUnderTheChecksumIsDataLoss) {
  std::vector<uint8_t> page = Encoded(ConventionalSuperblock());
  page[offsetof(Superblock, format_version)] ^= 0x4;  // version 5
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
              StatusIs(absl::StatusCode::kDataLoss, "checksum mismatch"));
}

TEST(SuperblockTest, NewerFormatIsRefused) {
  Superblock sb = ConventionalSuperblock();
  sb.format_version = kNewestFormatVersion + 1;
  const std::vector<uint8_t> page = Encoded(sb);
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
              StatusIs(absl::StatusCode::kFailedPrecondition, "format version"));
}

// The stores of nvkv's development versions (before format version 1, superblock magic
// "NVKVSB01") are refused by name, whatever their checksum says.
TEST(SuperblockTest, ADevelopmentVersionsStoreIsRefusedByName) {
  Superblock sb = ConventionalSuperblock();
  sb.format_version = 5;
  std::vector<uint8_t> page = Encoded(sb);
  std::memcpy(page.data() + offsetof(Superblock, magic), &kDevelopmentSuperblockMagic, 8);
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "written by a development version of nvkv (its format 5, before format "
                       "version 1)"));
}

// Fields no format writes are damage, even under a right checksum.
TEST(SuperblockTest, AVersionOrIndexModeNoFormatWritesIsDataLoss) {
  for (const auto& [version, mode] : {std::pair<uint32_t, uint32_t>{0, kSuperblockIndexHash},
                                      std::pair<uint32_t, uint32_t>{kFormatVersion, 0},
                                      std::pair<uint32_t, uint32_t>{kFormatVersion, 3}}) {
    Superblock sb = ConventionalSuperblock();
    sb.format_version = version;
    sb.index_mode = mode;
    const std::vector<uint8_t> page = Encoded(sb);
    EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
                StatusIs(absl::StatusCode::kDataLoss, "which none is"));
  }
}

// A superblock whose checksum is right (crafted, or written by a bug) but whose geometry is out
// of every bound a format sets is refused before anything multiplies its fields: a segment
// count times a segment size that wraps around 64 bits would pass a "fits the device" check.
TEST(SuperblockTest, GeometryBeyondTheFormatsBoundsIsRefused) {
  struct Case {
    uint32_t pages_per_segment;
    uint64_t segment_count;
  };
  for (const Case& c : {Case{uint32_t{1} << 31, uint64_t{1} << 33},  // 2^64 pages: wraps to 2
                        Case{4096, 4},                               // 16 MiB segments
                        Case{256, ~uint64_t{0}},
                        Case{2048, (uint64_t{1} << 60) / (8 << 20) + 1}}) {
    SCOPED_TRACE(absl::StrCat(c.pages_per_segment, " pages per segment, ", c.segment_count,
                              " segments"));
    Superblock sb = ConventionalSuperblock();
    sb.pages_per_segment = c.pages_per_segment;
    sb.segment_count = c.segment_count;
    const std::vector<uint8_t> page = Encoded(sb);
    EXPECT_THAT(DecodeSuperblock(page.data(), 4096),
                StatusIs(absl::StatusCode::kDataLoss, "geometry is impossible"));
  }
  // The largest the bounds allow still decodes.
  Superblock sb = ConventionalSuperblock();
  sb.pages_per_segment = 2048;  // 8 MiB
  sb.segment_count = (uint64_t{1} << 60) / (8 << 20);
  const std::vector<uint8_t> page = Encoded(sb);
  EXPECT_THAT(DecodeSuperblock(page.data(), 4096), IsOk());
}

}  // namespace
}  // namespace nvkv::kv
