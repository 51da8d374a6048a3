// The two metadata zones of a zoned store (kv/FORMAT.md "Zoned namespaces": "Superblock" and
// "The segment map's log"): how a format lays them down, and what Open reads of them.
//
// Zone 0 starts with superblock copy 0 and zone 1 with copy 1; after it, each holds map pages,
// and, once full, ends with a closing copy of its superblock on one of the last pages kept for
// it (written before the map moves out and the other zone is reset, so that a damaged first copy
// never leaves the device without one; more than one page, so that a cut that tore it leaves room
// for another: Geometry::closing_copy_pages); the map pages are appended (a map page's
// head_sequence counts map writes and only grows, across sessions). The newest copy of map page
// i is the verifying one with the highest count in either zone. The *current* zone, where map
// writes go, is the one holding the newest map page (zone 0 when neither holds one). A zone is
// reset only while the other holds a copy of every map page, so a cut never leaves a page of the
// map without a copy; a move cut short leaves the new zone current but incomplete, and Open
// completes it before it writes anything else (MetadataZonesRead::holds_every_page says whether
// it must).
//
// Thread contract: functions of the opening thread, on its queue.
#ifndef NVKV_KV_METADATA_ZONES_H_
#define NVKV_KV_METADATA_ZONES_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/page_format.h"
#include "kv/segment_map.h"
#include "storage/device.h"
#include "storage/zones.h"

namespace nvkv::kv {

// The superblock copies of a zoned device: what page 0 of each metadata zone holds.
struct ZoneSuperblocks {
  std::array<storage::ZoneDescriptor, kMetadataZones> zones;  // as the device reports them
  // Copy z from zone z: kNotFound when the zone is empty or holds zeros where the copy goes (a
  // cut lost the append that wrote it), else as DecodeSuperblock says (kFailedPrecondition for
  // data that is not an nvkv superblock).
  std::array<absl::StatusOr<Superblock>, kMetadataZones> copies = {absl::NotFoundError(""),
                                                                   absl::NotFoundError("")};
  // Copy z is an nvkv superblock of a format this nvkv does not read (a newer version's, or a
  // development version's; IsOtherNvkvFormat): never formatted over.
  std::array<bool, kMetadataZones> other_format = {false, false};
  // Copy z is zone z's closing copy, its first one damaged or missing (among its last pages).
  std::array<bool, kMetadataZones> closing = {false, false};
  // Neither zone holds anything where a superblock goes: a fresh namespace, or a format cut
  // short before either copy landed. Open may format it (create_if_missing).
  bool blank() const;
};

// Reads the zone report and page 0 of both metadata zones, through `chunk` (at least 4 KiB); of
// a zone whose page 0 holds no copy that decodes, its closing copy, the last that decodes among
// its last kMaxClosingCopyPages pages written (pages of sizes up to `chunk`'s). A copy that
// cannot be read has the read's error. Errors: the report's, and kFailedPrecondition for a
// device with fewer than three zones.
absl::StatusOr<ZoneSuperblocks> ReadZoneSuperblocks(storage::Device& device,
                                                    const storage::Buffer& chunk);

// Starts metadata zone `zone` (0 or 1) afresh: resets it, then writes superblock copy `zone`
// of `superblock` at its start by a Zone Append with FUA that must land there (durable, and the
// reset with it). Through `page`, a page buffer. A format starts both; a move of the map, the
// one it moves to.
absl::Status StartMetadataZone(storage::Device& device, const Geometry& geometry,
                               const Superblock& superblock, uint32_t zone,
                               const storage::Buffer& page);
// Ends metadata zone `zone`: appends its closing copy of `superblock` with FUA at its write
// pointer, which must be on a page kept for it (Geometry::closing_copy_pages: it lands on one,
// or kDataLoss). Through `page`.
absl::Status CloseMetadataZone(storage::Device& device, const Geometry& geometry,
                               const Superblock& superblock, uint32_t zone,
                               const storage::Buffer& page);
// Whether metadata zone `zone` holds a superblock copy of `superblock`'s store that decodes, its
// first or a closing one below its write pointer, as the device reads them now (its report and
// the copies through `page`, a page buffer): kDataLoss saying so when it holds none. A move of
// the map checks the zone it leaves so before it resets the other.
absl::Status ExpectSuperblockCopy(storage::Device& device, const Geometry& geometry,
                                  const Superblock& superblock, uint32_t zone,
                                  const storage::Buffer& page);
// Fills the rest of the page that an append a cut tore part way in metadata zone `zone` (the
// map's) with zeros, appended up to the next page boundary and made durable, so that the map's
// next pages land on whole pages and the zone keeps its last pages for its closing copy. Nothing
// when the zone's write pointer is on a page boundary, or it is full. Through `page`, a page
// buffer (zeroed).
absl::Status AlignMetadataZone(storage::Device& device, const Geometry& geometry, uint32_t zone,
                               const storage::Buffer& page);
// Whether the first page of metadata zone `zone` holds its superblock copy of `superblock`'s
// store, as the device reads it now (through `page`, a page buffer).
bool HoldsFirstCopy(storage::Device& device, const Geometry& geometry,
                    const Superblock& superblock, uint32_t zone, const storage::Buffer& page);
// Fills metadata zone `zone` (the map's) with zeros up to the pages kept for its closing copy
// (Geometry::closing_copy_pages), by Zone Appends through `chunk` (zeroed), made durable: a move
// then appends the zone's closing copy there. For a first copy the media damaged, so that the
// map need not wait until it has filled the zone to leave it with a copy that decodes. True
// also when the write pointer is among those pages already (a copy a cut tore took one); false,
// writing nothing, when it is past the start of the last page (no room for the copy).
absl::StatusOr<bool> FillMetadataZone(storage::Device& device, const Geometry& geometry,
                                      uint32_t zone, const storage::Buffer& chunk);
// Writes the first superblock copy of `idle`, the metadata zone the segment map is not in, again
// when it does not hold one of `superblock`'s store that decodes (the media damaged it, or a cut
// lost it): starts the zone afresh and finishes it, as a format leaves zone 1, so that each zone
// holds a copy again. Only while the map's zone holds a copy that decodes, read back now (the
// reset may take the only other one: a closing copy); else it leaves the zone as it is. Through
// `page`. REQUIRES: the map's zone holds a copy of every map page, each completed (the reset
// takes the older map pages of `idle`).
absl::Status RewriteIdleSuperblockCopy(storage::Device& device, const Geometry& geometry,
                                       const Superblock& superblock, uint32_t idle,
                                       const storage::Buffer& page);
// Lays down a new store's metadata zones: empties zone 1, then starts zone 0, then zone 1,
// which it finishes (only the map's current zone counts among the device's active zones).
absl::Status FormatMetadataZones(storage::Device& device, const Geometry& geometry,
                                 const Superblock& superblock, const storage::Buffer& page);

// What the map pages of the metadata zones say.
struct MetadataZonesRead {
  uint32_t current = 0;             // the zone map writes go to
  uint64_t next_write_count = 1;    // above every map write found: the next one's count
  // The current zone holds a copy of every map page found in either zone (a page found in
  // neither says nothing, as on a conventional device).
  bool holds_every_page = true;
  uint64_t pages_found = 0;         // map pages that verify, in either zone
  // Pages below a write pointer that failed to read or verify (a finished zone's unwritten pages
  // past its last append are not counted).
  uint64_t unusable_pages = 0;
  // Of those, the ones that are not zeros (zeros are an append a cut lost: never relied on) and
  // that no later copy of every map page supersedes. When some are, no map page is visited: a
  // damaged copy may have been some page's newest, and an older one would then say less than
  // the device held (a segment free that a head took since). The map then says nothing, and
  // recovery reads every segment, as for a conventional store's damaged map page.
  uint64_t damaged_pages = 0;
};

// Reads every page after the superblock up to each zone's write pointer (`zones`, from
// ReadZoneSuperblocks), through `chunk` a run of pages at a time, and calls `visit` once for
// the newest copy of each map page index found (in index order, after reading both zones),
// unless a copy is damaged (MetadataZonesRead::damaged_pages).
absl::StatusOr<MetadataZonesRead> ReadMetadataZones(
    storage::Device& device, const Geometry& geometry, uint64_t store_seed,
    uint32_t blocks_per_page, const std::array<storage::ZoneDescriptor, kMetadataZones>& zones,
    const storage::Buffer& chunk, MapPageVisitor visit);

}  // namespace nvkv::kv

#endif  // NVKV_KV_METADATA_ZONES_H_
