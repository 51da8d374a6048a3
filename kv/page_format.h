// The on-disk format of an nvkv store, shared by the writer and every reader (recovery, reads,
// compaction, `nvkv-cli check`). kv/FORMAT.md describes it in prose with a worked example.
//
// Everything here is persisted: never renumber an enum or move a field. All integers are
// little-endian (the only byte order nvkv builds on; static_assert below).
//
// Layout of a device, in pages of Geometry::page_bytes:
//   page 0, page 1          two identical superblocks
//   page 2 ...              segment 0, segment 1, ... each pages_per_segment pages
//   after the last segment  the segment map: what each segment holds, for recovery
// Every page starts with a PageHeader whose checksum covers the rest of the page and is seeded
// with the store's id and the page's own number, so a torn page, a page from an earlier store on
// the same device and a page written to the wrong place all fail verification.
// On a zoned namespace (format version 2, Geometry::zoned()) zones 0 and 1 hold the metadata and
// segment s is zone 2 + s; a page's checksum is seeded with its zone's first page instead, since
// Zone Append chooses the place (kv/FORMAT.md "Zoned namespaces").
#ifndef NVKV_KV_PAGE_FORMAT_H_
#define NVKV_KV_PAGE_FORMAT_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvkv::kv {

static_assert(std::endian::native == std::endian::little, "nvkv's format is little-endian");

inline constexpr uint64_t kSuperblockMagic = 0x524f5453564b564eULL;  // "NVKVSTOR"
// The superblock magic of the development versions before format version 1 (their formats 1
// to 5): such a store is refused by name, never read or formatted over (kv/FORMAT.md "Format
// versions").
inline constexpr uint64_t kDevelopmentSuperblockMagic = 0x31304253564b564eULL;  // "NVKVSB01"
inline constexpr uint32_t kPageMagic = 0x504b564eU;                  // "NVKP"
// The format of a store on a device without zones, and of one on a zoned namespace; this nvkv
// reads both (kv/FORMAT.md "Format versions").
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kZonedFormatVersion = 2;
inline constexpr uint32_t kNewestFormatVersion = kZonedFormatVersion;
inline constexpr uint64_t kSuperblockPages = 2;
// Zones 0 and 1 of a zoned store: a superblock copy each, and the segment map's log.
inline constexpr uint64_t kMetadataZones = 2;

inline constexpr uint32_t kMinPageBytes = 4096;
inline constexpr uint32_t kMaxPageBytes = 65536;  // used_bytes and offsets fit 32 bits anyway
// The most pages at the end of a zoned store's metadata zone kept for its closing superblock
// copy (Geometry::closing_copy_pages): Open looks for the copy among them.
inline constexpr uint64_t kMaxClosingCopyPages = 4;
inline constexpr uint32_t kMaxSegmentBytes = 8u << 20;
// On zones a segment is a zone's capacity, which drives make large (1 GiB and more).
inline constexpr uint64_t kMaxZonedSegmentBytes = uint64_t{4} << 30;
// The log's segments together, at most: no product of page size, pages per segment and segment
// count of a valid superblock wraps around 64 bits.
inline constexpr uint64_t kMaxStoreBytes = uint64_t{1} << 60;
inline constexpr uint32_t kMaxKeyBytes = 1024;
inline constexpr uint32_t kMaxValueBytesCap = 1u << 20;  // 1 MiB, further limited by geometry

// Persisted: page types.
enum class PageType : uint8_t {
  kFree = 1,          // first page of a segment that compaction freed; nothing follows
  kData = 2,          // records packed back to back
  kContinuation = 3,  // the rest of a large record's value
  kSegmentMap = 4,    // a page of the segment map (never inside a segment)
  kSummary = 5,       // part of a sealed log's summary: what recovery needs of its records
  kCheckpoint = 6,    // part of the clean-close checkpoint, in a segment holding no log
};

// Persisted: what the segment map says of a segment (SegmentMapEntry::state). Recovery skips a
// segment only when its entry says kFree; any other value, including ones a later version may
// add, means "read the segment".
enum class MapState : uint8_t {
  kUnknown = 0,  // never written
  kFree = 1,     // holds no log (free marker, or never written since format): not read
  kInUse = 2,    // a log head took it, or may take it soon: read at recovery
  // Holds a sealed log whose summary (segment_summary.h) is on the device at the pages the
  // entry names: recovery reads the summary instead of the segment.
  kSummarized = 3,
  // Holds no log but part of the checkpoint a clean Close wrote (kv/checkpoint.h): the entry's
  // summary_first is the segment's place among the checkpoint's segments, summary_pages the
  // pages of it written there. No log is written anywhere until the map says otherwise.
  kCheckpoint = 4,
  // Holds part of a checkpoint that stands for the log as it was when the checkpoint was
  // written (kv/checkpoint.h), as kCheckpoint; the log may have been written since: recovery
  // reads the checkpoint and then the log written after it. The Open that reads a kCheckpoint
  // checkpoint marks it so before anything is written. (A version 5 nvkv reads such a segment
  // as one holding no log, and the log whole: the same state.)
  kBaseCheckpoint = 5,
};

// Persisted: record types.
enum class RecordType : uint8_t {
  kPut = 1,
  kDelete = 2,
};

// Persisted: page flags (PageHeader::flags).
// The page's first record belongs to an atomic batch that began on an earlier page of the same
// segment. Recovery uses it to drop a batch's tail when the batch's earlier pages are lost (a
// damaged page it skipped): records after a hole whose batch did not start after it.
inline constexpr uint8_t kPageContinuesBatch = 1 << 0;

// Persisted: record flags.
inline constexpr uint8_t kRecordInBatch = 1 << 0;  // part of an atomic WriteBatch
inline constexpr uint8_t kRecordLarge = 1 << 1;    // value continues on the following pages

#pragma pack(push, 1)
struct PageHeader {
  uint64_t checksum;       // XXH3-64 of bytes [8, page_bytes), seed = PageSeed(store, page)
  uint32_t magic;          // kPageMagic
  uint8_t type;            // PageType
  uint8_t flags;           // kPageContinuesBatch
  uint16_t record_count;   // records starting in this page
  uint32_t used_bytes;     // bytes after the header in use (records, or continuation payload)
  // The generation of the segment this page was written in, 64 bits in two halves (GenerationOf):
  // stores written before the high half existed have 0 there.
  uint32_t generation_low;
  uint32_t page_in_segment;
  uint32_t generation_high;
  uint64_t head_sequence;  // the log head's page counter, for diagnostics
};

inline uint64_t GenerationOf(const PageHeader& header) {
  return (uint64_t{header.generation_high} << 32) | header.generation_low;
}
inline void SetGeneration(PageHeader& header, uint64_t generation) {
  header.generation_low = static_cast<uint32_t>(generation);
  header.generation_high = static_cast<uint32_t>(generation >> 32);
}

struct RecordHeader {
  uint8_t type;             // RecordType
  uint8_t flags;            // kRecordInBatch | kRecordLarge
  uint16_t key_bytes;
  uint32_t value_bytes;     // the whole value, also when it continues on later pages
  uint64_t sequence;        // write order; the newest sequence of a key wins at recovery
  uint32_t batch_remaining; // in a batch: how many of its records follow this one
  uint32_t reserved;
};

// One segment's entry in the segment map. Reserved fields are zero, and so are the summary's
// place unless the state is kSummarized or kCheckpoint.
struct SegmentMapEntry {
  uint8_t state;  // MapState
  uint8_t reserved[3];
  uint32_t summary_first;  // kSummarized: the summary's first page within the segment;
                           // kCheckpoint: the segment's place in the checkpoint (0, 1, ...)
  uint32_t summary_pages;  // kSummarized: how many pages it takes; kCheckpoint: pages written
  uint32_t reserved2;
};

// What follows the PageHeader of a segment map page, before its entries.
struct SegmentMapPageHeader {
  // When the page was written: above every record sequence and every generation on the pages of
  // the segments it says are free (recovery does not read them, and new ones must be higher).
  uint64_t sequence_floor;
  uint64_t generation_floor;
};

// The start of a segment summary's bytes (kv/FORMAT.md "Segment summaries"), which run across the
// payloads of its kSummary pages; SummaryEntry records follow.
struct SummaryHeader {
  uint32_t entry_count;
  uint32_t flags;          // kSummaryHasKeys
  uint32_t data_pages;     // the log's pages before the summary: its first page's index
  uint32_t summary_pages;  // pages the summary takes
  uint64_t summary_bytes;  // this header and the entries, over all its pages
  // When it was written: above every record sequence and every generation on the segment's
  // pages (the log's, and stale ones of earlier logs), like a map page's floors.
  uint64_t sequence_floor;
  uint64_t generation_floor;
  uint64_t reserved;
};

// One record of the log, in log order; with kSummaryHasKeys, key_bytes of key follow it.
struct SummaryEntry {
  uint64_t hash_lo;  // the key's KeyHash
  uint64_t hash_hi;
  uint64_t sequence_and_type;  // sequence in bits 0..55, RecordType in bits 56..63
  uint32_t page_in_segment;    // the record's (first) page
  uint32_t sizes;              // value_bytes in bits 0..20, key_bytes in bits 21..31
};

// Persisted: summary flags. The entries carry the keys' bytes (written by an ordered-mode store,
// whose index holds keys; a hash-mode summary leaves them out, and an ordered Open reads the
// segment instead).
inline constexpr uint32_t kSummaryHasKeys = 1 << 0;

// The clean-close checkpoint (kv/FORMAT.md "Checkpoint"): a stream of bytes across the payloads
// of kCheckpoint pages, which starts with this header. Then, in order: `dropped_ranges`
// CheckpointRange; `saved_segments` CheckpointSegment, each followed by its tombstone samples
// (CheckpointTombstone) and its key filter's words (uint64_t); then for each shard a
// CheckpointShard and its index entries: a uint64_t word each in hash mode, a
// CheckpointOrderedEntry and the key's bytes each in ordered mode.
struct CheckpointHeader {
  uint64_t stream_bytes;     // the whole stream, this header included
  uint32_t segment_count;    // segments the checkpoint takes (map state kCheckpoint)
  uint32_t shard_count;
  uint32_t flags;            // kCheckpointOrdered
  uint32_t filter_probes;    // bits set per key in the segments' key filters
  uint64_t next_sequence;    // the engine's at Close: above every record's
  uint64_t next_generation;  // above every generation on the device, the checkpoint's own too
  uint64_t store_segments;   // the store's segment count
  uint64_t dropped_ranges;
  uint64_t saved_segments;   // the segments holding a log
  uint64_t reserved;
};
inline constexpr uint32_t kCheckpointOrdered = 1 << 0;
struct CheckpointRange {  // sequences [first, last] of records of batches recovery dropped
  uint64_t first;
  uint64_t last;
};
struct CheckpointSegment {  // what the engine knows of one segment holding a log
  uint64_t segment;
  uint64_t generation;  // its log's
  uint64_t min_sequence, max_sequence;  // of its records
  int64_t live_bytes;            // of the records the index points at
  int64_t likely_stale_bytes;    // the blind-overwrite estimate (segment_table.h)
  int64_t record_bytes;          // of every record it holds, dead or alive
  int64_t tombstone_bytes;       // of the deletes among them
  uint64_t puts;                 // records of puts (the keys of its filter)
  uint32_t summary_first;        // its summary's place, pages 0 when it has none
  uint32_t summary_pages;
  uint32_t tombstone_samples;    // CheckpointTombstone that follow (at most 8)
  uint32_t reserved;
  uint64_t filter_words;         // uint64_t words of its key filter that follow (0: no filter)
};
struct CheckpointTombstone {
  uint64_t hash_lo, hash_hi, sequence;
};
struct CheckpointShard {
  uint64_t entries;        // index entries that follow
  uint64_t stale_entries;  // hash mode: how many are probably stale (shard.h)
};
struct CheckpointHead {  // where a shard's log head goes on at the next Open
  uint64_t segment;             // kCheckpointNoHead: it has none (takes a free one when it writes)
  uint64_t generation;          // of the segment's log
  uint64_t next_counter;        // head counter of its next page (page i has base + i)
  uint32_t next_page;           // its next page within the segment
  uint32_t summary_entries;     // SummaryEntry records of the segment's summary so far
  uint64_t summary_bytes;       // bytes of those entries (and keys) that follow
  uint64_t summary_page_bytes;  // the most entry bytes one page gave (the builder's estimate)
  uint32_t flags;               // kHeadSummaryKept
  uint32_t reserved;
};
inline constexpr uint64_t kCheckpointNoHead = UINT64_MAX;
// The segment gets a summary when the head leaves it (else it has none, and recovery reads it).
inline constexpr uint32_t kHeadSummaryKept = 1 << 0;
struct CheckpointOrderedEntry {
  uint64_t value;      // the entry's index value (location.h)
  uint32_t key_bytes;  // bytes of key that follow
  uint32_t reserved;
};

struct Superblock {
  uint64_t checksum;        // XXH3-64 of bytes 8..72 (kSuperblockChecksumEnd), seed 0
  uint64_t magic;           // kSuperblockMagic
  uint32_t format_version;  // kFormatVersion
  uint32_t page_bytes;
  uint32_t pages_per_segment;
  uint32_t lba_bytes;       // the device's logical block size when formatted
  uint64_t segment_count;
  uint8_t store_id[16];     // random at format time
  uint64_t format_time_unix_s;
  uint32_t copy;            // 0 or 1: which of the two pages this is
  uint32_t index_mode;      // kSuperblockIndex*: the mode it was formatted with
  // Format version 2 only (version 1 ends above; these read as zero). Under a checksum of their
  // own, so that the one above stays what every version's is: a reader of version 1 verifies it
  // and refuses the store by its version, rather than take it for damage.
  uint64_t zoned_checksum;   // XXH3-64 of bytes 80..104, seed 0
  uint32_t layout;           // kSuperblockLayoutZoned
  uint32_t reserved;         // zero
  uint64_t zone_blocks;      // the zone size it was formatted for, in blocks
  uint64_t capacity_blocks;  // the zones' writable blocks
};
// Superblock::index_mode.
inline constexpr uint32_t kSuperblockIndexHash = 1;
inline constexpr uint32_t kSuperblockIndexOrdered = 2;
// Superblock::layout.
inline constexpr uint32_t kSuperblockLayoutZoned = 1;
// The bytes Superblock::checksum covers end here, in every format version (from byte 8).
inline constexpr uint32_t kSuperblockChecksumEnd = 72;
// Bytes of a superblock of `format_version`: 72, or 104 with the zoned fields.
inline constexpr uint32_t SuperblockBytes(uint32_t format_version) {
  return format_version >= kZonedFormatVersion ? 104 : kSuperblockChecksumEnd;
}
#pragma pack(pop)

static_assert(sizeof(PageHeader) == 40);
static_assert(sizeof(RecordHeader) == 24);
static_assert(sizeof(Superblock) == 104);
static_assert(sizeof(SegmentMapEntry) == 16);
static_assert(sizeof(SegmentMapPageHeader) == 16);
static_assert(sizeof(SummaryHeader) == 48);
static_assert(sizeof(SummaryEntry) == 32);
static_assert(sizeof(CheckpointHeader) == 72);
static_assert(sizeof(CheckpointSegment) == 96);
static_assert(sizeof(CheckpointHead) == 56);
static_assert(sizeof(CheckpointOrderedEntry) == 16);

// Entries one page of the segment map holds, and the pages a map of `segments` entries takes.
inline constexpr uint32_t MapEntriesPerPage(uint32_t page_bytes) {
  return static_cast<uint32_t>((page_bytes - sizeof(PageHeader) - sizeof(SegmentMapPageHeader)) /
                               sizeof(SegmentMapEntry));
}
inline constexpr uint64_t MapPagesFor(uint64_t segments, uint32_t page_bytes) {
  const uint32_t per_page = MapEntriesPerPage(page_bytes);
  return (segments + per_page - 1) / per_page;
}

// Where a segment's summary is (SegmentMapEntry): pages [first, first + pages) of the segment;
// pages 0 when it has none.
struct SummaryPlace {
  uint32_t first = 0;
  uint32_t pages = 0;
};

// The shape of a store, from its superblock.
struct Geometry {
  uint32_t page_bytes = 4096;
  uint32_t pages_per_segment = 256;
  uint64_t segment_count = 0;
  // A zoned store's zone size in pages (FORMAT.md "Zoned namespaces"): segment s is zone
  // kMetadataZones + s, its first pages_per_segment pages (the zone's capacity). 0 without zones.
  uint64_t zone_pages = 0;

  bool zoned() const { return zone_pages != 0; }
  uint32_t payload_bytes() const { return page_bytes - sizeof(PageHeader); }
  // Pages a segment's log may use: all but the last, which is kept for the free marker
  // (FORMAT.md "Free marker": overwriting it can then never cut a log short). On zones every
  // one: a reset frees a zone.
  uint32_t log_pages() const { return zoned() ? pages_per_segment : pages_per_segment - 1; }
  uint64_t segment_bytes() const { return uint64_t{page_bytes} * pages_per_segment; }
  uint64_t FirstPageOf(uint64_t segment) const {
    return zoned() ? (kMetadataZones + segment) * zone_pages
                   : kSuperblockPages + segment * pages_per_segment;
  }
  // REQUIRES: `page` lies in a segment.
  uint64_t SegmentOf(uint64_t page) const {
    return zoned() ? page / zone_pages - kMetadataZones
                   : (page - kSuperblockPages) / pages_per_segment;
  }
  uint32_t PageInSegment(uint64_t page) const {
    return static_cast<uint32_t>(zoned() ? page % zone_pages
                                         : (page - kSuperblockPages) % pages_per_segment);
  }
  // The page whose number seeds `page`'s checksum: the page itself, or on zones its zone's first
  // page, since Zone Append chooses the place (FORMAT.md "Page identity").
  uint64_t SeedPageOf(uint64_t page) const { return zoned() ? page - page % zone_pages : page; }
  // First page of metadata zone `zone` (0 or 1). REQUIRES: zoned().
  uint64_t MetadataZoneFirstPage(uint64_t zone) const { return zone * zone_pages; }
  // The segment map: map_pages() pages right after the last segment (on zones it is a log in the
  // metadata zones instead, and map_first_page() names no place).
  uint64_t map_first_page() const { return kSuperblockPages + segment_count * pages_per_segment; }
  uint64_t map_pages() const { return MapPagesFor(segment_count, page_bytes); }
  // Zoned: a metadata zone holds at least its superblock copy, two copies of the map, so that a
  // move of the map is not due again at once, and its closing superblock copy (FORMAT.md "The
  // segment map's log").
  uint64_t metadata_zone_pages() const { return 2 + 2 * map_pages(); }
  bool map_fits_zone() const { return zoned() && pages_per_segment >= metadata_zone_pages(); }
  // Zoned: the pages at the end of a metadata zone kept for its closing superblock copy, so that
  // a cut that tore one leaves room for another: kMaxClosingCopyPages, or fewer (at least one)
  // where the zone has no more room beyond its superblock and two copies of the map. The map's
  // pages go below them. REQUIRES: map_fits_zone().
  uint64_t closing_copy_pages() const {
    return std::min<uint64_t>(kMaxClosingCopyPages, pages_per_segment - 1 - 2 * map_pages());
  }
  // Zoned: the first of them, counted from the zone's first page.
  uint64_t closing_copy_start() const { return pages_per_segment - closing_copy_pages(); }
  uint64_t total_pages() const {
    return zoned() ? (kMetadataZones + segment_count) * zone_pages
                   : map_first_page() + map_pages();
  }
  // Largest value a record may carry: 1 MiB, or a quarter of a segment's payload if smaller.
  uint32_t max_value_bytes() const;
  // Largest total of record bytes whose records, packed whole and in order, never need more
  // than `pages` fresh pages, however their sizes fall: ceil(pages / 2) pages' payload. A page
  // is closed only when the next record does not fit it, so any two consecutive pages of a
  // batch hold more than one payload: F pages hold more than floor(F / 2) payloads, and a batch
  // of at most k payloads takes at most 2k - 1 pages. (Records of just over half a payload take
  // a page each: 16 payloads' worth are 31 such records, on 31 pages.)
  uint64_t BatchBytesWithinPages(uint32_t pages) const;
  // Largest total of record bytes one WriteBatch may append as far as a segment goes: what is
  // sure to fit one segment's log (BatchBytesWithinPages(log_pages()), half a segment).
  uint64_t max_batch_bytes() const;
};

// Bytes a small record takes in a page.
inline uint32_t RecordBytes(size_t key_bytes, size_t value_bytes) {
  return static_cast<uint32_t>(sizeof(RecordHeader) + key_bytes + value_bytes);
}
// True when a record does not fit one page's payload and needs a run of pages.
inline bool IsLargeRecord(const Geometry& g, size_t key_bytes, size_t value_bytes) {
  return sizeof(RecordHeader) + key_bytes + value_bytes > g.payload_bytes();
}
// Pages a large record occupies: its first page (header, key, start of value) and
// continuation pages for the rest.
uint32_t LargeRecordPages(const Geometry& g, size_t key_bytes, size_t value_bytes);

// The checksum seed of a page: mixes the store's id with the page number.
uint64_t StoreSeed(const uint8_t store_id[16]);
uint64_t PageSeed(uint64_t store_seed, uint64_t page_number);

// --- Superblock ---
void EncodeSuperblock(const Superblock& superblock, uint8_t* page, uint32_t page_bytes);
// kDataLoss: checksum mismatch, or a field no format writes; kFailedPrecondition: not an nvkv
// superblock (bad magic), a development version's, or a newer format version's;
// kInvalidArgument: impossible geometry.
absl::StatusOr<Superblock> DecodeSuperblock(const uint8_t* page, uint32_t page_bytes);
// Whether DecodeSuperblock refused `page` (giving `decoded`) because it is an nvkv superblock of
// a format this nvkv does not read (a newer version's, or a development version's): such a
// store is refused as such, never formatted over nor called foreign.
bool IsOtherNvkvFormat(const absl::StatusOr<Superblock>& decoded, const uint8_t* page);
Geometry GeometryOf(const Superblock& superblock);

// --- Pages ---
// Builds one page in a caller-owned buffer of page_bytes. Not thread-safe.
class PageBuilder {
 public:
  // Starts an empty page of `type` (kData or kContinuation) in `page` (zeroed here).
  void Start(uint8_t* page, const Geometry& geometry, PageType type, uint64_t generation,
             uint32_t page_in_segment, uint64_t head_sequence);
  // Bytes still free for records (kData) or payload (kContinuation).
  uint32_t free_bytes() const { return payload_bytes_ - used_bytes_; }
  uint32_t used_bytes() const { return used_bytes_; }
  uint16_t record_count() const { return record_count_; }
  bool empty() const { return used_bytes_ == 0; }
  // Sets kPageContinuesBatch: the first record added will continue a batch begun earlier.
  void MarkContinuesBatch() { flags_ |= kPageContinuesBatch; }
  // Appends a small record; returns its offset in the page, or 0 when it does not fit.
  uint32_t AddRecord(const RecordHeader& header, std::string_view key, std::string_view value);
  // Starts a large record on an empty kData page: header, key and as much of the value as fits.
  // Returns how many value bytes went in.
  uint32_t StartLargeRecord(const RecordHeader& header, std::string_view key,
                            std::string_view value);
  // Fills an empty kContinuation page with the next part of a value (or a kSummary page with
  // the next part of a summary); returns bytes taken.
  uint32_t AddContinuation(std::string_view value_part);
  // Writes the header and checksum. The page is then ready to write at `page_number` (on zones,
  // anywhere in that page's zone).
  void Finish(uint64_t store_seed, uint64_t page_number);

 private:
  uint8_t* page_ = nullptr;
  Geometry geometry_;  // the store's, for the checksum's seed
  uint32_t page_bytes_ = 0;
  uint32_t payload_bytes_ = 0;
  uint32_t used_bytes_ = 0;
  uint16_t record_count_ = 0;
  uint8_t flags_ = 0;
};

// Writes a free-marker page for page `page_in_segment` of a segment (its first or its last): a
// segment whose first page is this holds nothing; the copy on the last page tells logs older
// than the marker (stale, from before the segment was freed) from the segment's next log when
// page 0 is lost (segment_scan.h).
void EncodeFreePage(uint8_t* page, const Geometry& geometry, uint64_t generation,
                    uint64_t store_seed, uint64_t page_number, uint32_t page_in_segment = 0);

// --- Segment map pages ---
// Writes map page `index` (at page `page_number`) from `entries` (MapEntriesPerPage of them; the
// last page's tail beyond the segment count is zero).
void EncodeMapPage(uint8_t* page, const Geometry& geometry, uint64_t store_seed,
                   uint64_t page_number, uint32_t index, const SegmentMapPageHeader& floors,
                   const SegmentMapEntry* entries, uint32_t count, uint64_t write_count);
// Checks a map page read from `page_number` and returns its floors; `entries` then points at
// its entries. kDataLoss (or kNotFound, never written) as VerifyPage.
absl::StatusOr<SegmentMapPageHeader> DecodeMapPage(const uint8_t* page, const Geometry& geometry,
                                                   uint64_t store_seed, uint64_t page_number,
                                                   const SegmentMapEntry** entries);

// Checks a page read from `page_number`: magic, checksum (with the store and page seed), type,
// and that used_bytes fits; on zones also that it holds the position `page_number` names (a
// page verifies anywhere in its zone: FORMAT.md "Page identity"). kDataLoss with the page number
// and what failed. A page of all zero bytes (never written) gives kNotFound.
absl::StatusOr<PageHeader> VerifyPage(const uint8_t* page, const Geometry& geometry,
                                      uint64_t store_seed, uint64_t page_number);
// Zoned: checks a page read from a place of `segment`'s zone before its position is known, as
// VerifyPage does but for the position, which the header gives.
absl::StatusOr<PageHeader> VerifyZonePage(const uint8_t* page, const Geometry& geometry,
                                          uint64_t store_seed, uint64_t segment);

// One record as found in a verified kData page. The views point into the page buffer.
struct RecordView {
  RecordHeader header;
  uint32_t offset;             // of the record header within the page
  std::string_view key;
  std::string_view value;      // the part of the value in this page (all of it unless large)
};

// Walks the records of a verified kData page. Bounds are checked; a record that runs past
// used_bytes, or a large record that is not the page's last (FORMAT.md: it is alone on its
// page), is reported as kDataLoss (the checksum passed, so this means a writer bug or a
// collision, never a silent skip).
class RecordIterator {
 public:
  RecordIterator(const uint8_t* page, const PageHeader& header);
  // Advances to the next record. Returns false at the end; check status() after.
  bool Next(RecordView* record);
  const absl::Status& status() const { return status_; }

 private:
  const uint8_t* records_;
  uint32_t used_bytes_;
  uint32_t remaining_records_;
  uint32_t offset_ = 0;
  absl::Status status_;
};

// Finds `key`'s record in a verified kData page. kNotFound when it is not there.
absl::StatusOr<RecordView> FindRecord(const uint8_t* page, const PageHeader& header,
                                      std::string_view key);

}  // namespace nvkv::kv

#endif  // NVKV_KV_PAGE_FORMAT_H_
