#include "kv/metadata_zones.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

namespace {

// The newest copy of one map page found so far: its bytes, and where and when it was written.
struct NewestCopy {
  std::vector<uint8_t> page;  // empty: none found
  uint64_t page_number = 0;
  uint64_t write_count = 0;
};

// Whether superblock copy `copy` is of `store`'s store.
bool SameStore(const Superblock& copy, const Superblock& store) {
  return std::memcmp(copy.store_id, store.store_id, sizeof(store.store_id)) == 0;
}

// The blocks written in the zone `report` describes: its capacity when full (a full zone's write
// pointer means nothing on NVMe, nor an out-of-service one's), else up to its write pointer.
uint64_t WrittenBlocks(const storage::ZoneDescriptor& report) {
  const bool pointer_valid = report.state != storage::ZoneState::kFull &&
                             report.state != storage::ZoneState::kReadOnly &&
                             report.state != storage::ZoneState::kOffline;
  if (!pointer_valid || report.write_pointer < report.start) return report.capacity;
  return std::min(report.capacity, report.write_pointer - report.start);
}

// The closing superblock copy of the metadata zone `report` describes: the last copy that
// decodes (and is of `store`'s store, when given) among its last kMaxClosingCopyPages whole
// pages written (never its first page), for each page size that `chunk` holds (kNotFound when
// none does). A copy a cut tore, and map pages, do not decode as one.
absl::StatusOr<Superblock> ReadClosingCopy(storage::Device& device,
                                           const storage::ZoneDescriptor& report,
                                           const storage::Buffer& chunk,
                                           const Superblock* store = nullptr) {
  const uint64_t start = report.start;
  const uint64_t written = WrittenBlocks(report);
  const uint32_t lba_bytes = device.info().lba_bytes;
  for (uint32_t page_bytes = kMinPageBytes; page_bytes <= kMaxPageBytes; page_bytes *= 2) {
    const uint32_t blocks = page_bytes / lba_bytes;
    if (page_bytes > chunk.bytes || blocks == 0) continue;
    const uint64_t pages = written / blocks;
    for (uint64_t page = pages; page > 1 && page + kMaxClosingCopyPages > pages;) {
      --page;
      if (!storage::ReadBlocks(device, start + page * blocks, blocks, chunk).ok()) continue;
      absl::StatusOr<Superblock> copy = DecodeSuperblock(chunk.data, page_bytes);
      if (copy.ok() && copy->page_bytes == page_bytes &&
          (store == nullptr || SameStore(*copy, *store))) {
        return copy;
      }
    }
  }
  return absl::NotFoundError("no closing superblock copy");
}

// What the first `bytes` of the metadata zone at `start` hold, read through `chunk`.
struct OpeningCopy {
  // The copy; the read's failure; kNotFound for zeros (nothing written there).
  absl::StatusOr<Superblock> copy;
  bool other_format = false;  // a superblock of another nvkv format
};

OpeningCopy ReadOpeningCopy(storage::Device& device, uint64_t start, uint32_t bytes,
                            const storage::Buffer& chunk) {
  OpeningCopy found;
  // A copy that cannot be read is that copy's failure: the other may serve.
  if (absl::Status read = storage::ReadBlocks(device, start, bytes / device.info().lba_bytes,
                                              chunk);
      !read.ok()) {
    found.copy = read;
    return found;
  }
  if (std::all_of(chunk.data, chunk.data + bytes, [](uint8_t b) { return b == 0; })) {
    found.copy = absl::NotFoundError("the metadata zone holds zeros where its superblock goes");
    return found;
  }
  found.copy = DecodeSuperblock(chunk.data, bytes);
  found.other_format = IsOtherNvkvFormat(found.copy, chunk.data);
  return found;
}

}  // namespace

bool ZoneSuperblocks::blank() const {
  return std::all_of(copies.begin(), copies.end(), [](const absl::StatusOr<Superblock>& copy) {
    return absl::IsNotFound(copy.status());
  });
}

absl::StatusOr<ZoneSuperblocks> ReadZoneSuperblocks(storage::Device& device,
                                                    const storage::Buffer& chunk) {
  const storage::DeviceInfo& info = device.info();
  if (info.zones.zone_count <= kMetadataZones) {
    return absl::FailedPreconditionError(absl::StrCat(
        info.path, ": ", info.zones.zone_count, " zones; a store needs ", kMetadataZones,
        " for its metadata and more for its log"));
  }
  NVKV_ASSIGN_OR_RETURN(const std::vector<storage::ZoneDescriptor> report,
                        storage::ReportZones(device, 0, kMetadataZones));
  ZoneSuperblocks found;
  // A superblock is 96 bytes at most: the first block (or 4 KiB) of the zone holds it.
  const uint32_t bytes = std::max<uint32_t>(1, kMinPageBytes / info.lba_bytes) * info.lba_bytes;
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    found.zones[z] = report[z];
    // By its state: a full zone's write pointer means nothing on NVMe.
    if (report[z].state == storage::ZoneState::kEmpty) {
      found.copies[z] = absl::NotFoundError(absl::StrCat("metadata zone ", z, " is empty"));
      continue;
    }
    OpeningCopy opening = ReadOpeningCopy(device, report[z].start, bytes, chunk);
    found.copies[z] = std::move(opening.copy);
    found.other_format[z] = opening.other_format;
  }
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    if (found.copies[z].ok() || found.other_format[z] ||
        report[z].state == storage::ZoneState::kEmpty) {
      continue;
    }
    if (absl::StatusOr<Superblock> closing = ReadClosingCopy(device, report[z], chunk);
        closing.ok()) {
      found.copies[z] = closing;
      found.closing[z] = true;
    }
  }
  return found;
}

absl::Status StartMetadataZone(storage::Device& device, const Geometry& geometry,
                               const Superblock& superblock, uint32_t zone,
                               const storage::Buffer& page) {
  const storage::DeviceInfo& info = device.info();
  NVKV_RETURN_IF_ERROR(storage::ResetZone(device, zone));
  Superblock copy = superblock;
  copy.copy = zone;
  EncodeSuperblock(copy, page.data, geometry.page_bytes);
  storage::IoRequest append;
  append.op = storage::IoOp::kZoneAppend;
  append.fua = true;  // durable, and with it the reset before it
  append.lba = info.zones.StartOf(zone);
  append.lba_count = geometry.page_bytes / info.lba_bytes;
  append.buffer = page;
  NVKV_RETURN_IF_ERROR(storage::RunOne(device, append));
  if (append.appended_lba != append.lba) {
    return absl::DataLossError(absl::StrCat(
        info.path, ": superblock copy ", zone, " landed at LBA ", append.appended_lba,
        ", not at the start of its freshly reset zone (LBA ", append.lba, ")"));
  }
  return absl::OkStatus();
}

absl::Status CloseMetadataZone(storage::Device& device, const Geometry& geometry,
                               const Superblock& superblock, uint32_t zone,
                               const storage::Buffer& page) {
  const storage::DeviceInfo& info = device.info();
  Superblock copy = superblock;
  copy.copy = zone;
  EncodeSuperblock(copy, page.data, geometry.page_bytes);
  storage::IoRequest append;
  append.op = storage::IoOp::kZoneAppend;
  append.fua = true;
  append.lba = info.zones.StartOf(zone);
  append.lba_count = geometry.page_bytes / info.lba_bytes;
  append.buffer = page;
  NVKV_RETURN_IF_ERROR(storage::RunOne(device, append));
  const uint64_t first = append.lba + geometry.closing_copy_start() * append.lba_count;
  const uint64_t last = append.lba + info.zones.capacity_blocks - append.lba_count;
  if (append.appended_lba < first || append.appended_lba > last ||
      (append.appended_lba - first) % append.lba_count != 0) {
    return absl::DataLossError(absl::StrCat(
        info.path, ": the closing superblock copy of metadata zone ", zone, " landed at LBA ",
        append.appended_lba, ", not on a page kept for it (LBAs ", first, " to ", last, ")"));
  }
  return absl::OkStatus();
}

absl::Status ExpectSuperblockCopy(storage::Device& device, const Geometry& geometry,
                                  const Superblock& superblock, uint32_t zone,
                                  const storage::Buffer& page) {
  // Through `page`: the writer's buffers may all be in use.
  NVKV_ASSIGN_OR_RETURN(const storage::ZoneDescriptor report,
                        storage::ReportZone(device, zone, page));
  const absl::StatusOr<Superblock> first =
      ReadOpeningCopy(device, report.start, geometry.page_bytes, page).copy;
  if (first.ok() && SameStore(*first, superblock)) return absl::OkStatus();
  if (ReadClosingCopy(device, report, page, &superblock).ok()) return absl::OkStatus();
  const std::string why =
      first.ok() ? std::string("its first copy is another store's") : first.status().ToString();
  return absl::DataLossError(absl::StrCat(
      "metadata zone ", zone, " holds no superblock copy that decodes (", why,
      "), and the segment map's move would reset the zone of the other copy: the store takes no "
      "more writes; copy its data out and format it again"));
}

namespace {

// Appends zeros to the zone `report` describes, from its write pointer up to LBA `end`, through
// `zeros` (zeroed here), at most the device's Zone Append limit at a time, and makes them
// durable. Errors say `what` the zeros were for.
absl::Status AppendZerosUpTo(storage::Device& device, const storage::ZoneDescriptor& report,
                             uint64_t end, const storage::Buffer& zeros, const std::string& what) {
  const storage::DeviceInfo& info = device.info();
  std::memset(zeros.data, 0, zeros.bytes);
  uint64_t most = zeros.bytes / info.lba_bytes;
  if (info.zones.max_append_blocks != 0) {
    most = std::min<uint64_t>(most, info.zones.max_append_blocks);
  }
  absl::Status status;
  for (uint64_t at = report.write_pointer; status.ok() && at < end;) {
    storage::IoRequest append;
    append.op = storage::IoOp::kZoneAppend;
    append.lba = report.start;
    append.lba_count = static_cast<uint32_t>(std::min(most, end - at));
    append.buffer = zeros;
    status = storage::RunOne(device, append);
    if (status.ok() && append.appended_lba != at) {
      status = absl::DataLossError(absl::StrCat("landed at LBA ", append.appended_lba,
                                                ", not at the write pointer (LBA ", at, ")"));
    }
    at += append.lba_count;
  }
  if (status.ok() && info.volatile_write_cache) status = storage::FlushDevice(device);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(info.path, ": ", what, ": ",
                                                    status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AlignMetadataZone(storage::Device& device, const Geometry& geometry, uint32_t zone,
                               const storage::Buffer& page) {
  NVKV_ASSIGN_OR_RETURN(const storage::ZoneDescriptor report, storage::ReportZone(device, zone));
  const uint32_t blocks_per_page = geometry.page_bytes / device.info().lba_bytes;
  const uint64_t torn = (report.write_pointer - report.start) % blocks_per_page;
  if (report.state == storage::ZoneState::kFull || torn == 0) return absl::OkStatus();
  return AppendZerosUpTo(device, report, report.write_pointer + blocks_per_page - torn, page,
                         absl::StrCat("filling the page a cut tore in metadata zone ", zone));
}

bool HoldsFirstCopy(storage::Device& device, const Geometry& geometry,
                    const Superblock& superblock, uint32_t zone, const storage::Buffer& page) {
  const absl::StatusOr<Superblock> first =
      ReadOpeningCopy(device, device.info().zones.StartOf(zone), geometry.page_bytes, page).copy;
  return first.ok() && first->copy == zone && SameStore(*first, superblock);
}

absl::StatusOr<bool> FillMetadataZone(storage::Device& device, const Geometry& geometry,
                                      uint32_t zone, const storage::Buffer& chunk) {
  NVKV_ASSIGN_OR_RETURN(const storage::ZoneDescriptor report, storage::ReportZone(device, zone));
  const uint32_t blocks_per_page = geometry.page_bytes / device.info().lba_bytes;
  const uint64_t last_page = report.start + report.capacity - blocks_per_page;
  if (report.state == storage::ZoneState::kFull || report.write_pointer > last_page) return false;
  const uint64_t closing_start = report.start + geometry.closing_copy_start() * blocks_per_page;
  if (report.write_pointer < closing_start) {
    NVKV_RETURN_IF_ERROR(AppendZerosUpTo(
        device, report, closing_start, chunk,
        absl::StrCat("filling metadata zone ", zone, " for its closing copy")));
  }
  return true;
}

absl::Status RewriteIdleSuperblockCopy(storage::Device& device, const Geometry& geometry,
                                       const Superblock& superblock, uint32_t idle,
                                       const storage::Buffer& page) {
  if (HoldsFirstCopy(device, geometry, superblock, idle, page)) return absl::OkStatus();
  if (!ExpectSuperblockCopy(device, geometry, superblock, 1 - idle, page).ok()) {
    return absl::OkStatus();
  }
  absl::Status status = StartMetadataZone(device, geometry, superblock, idle, page);
  if (status.ok()) status = storage::FinishZone(device, idle);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("writing superblock copy ", idle,
                                                    " again: ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status FormatMetadataZones(storage::Device& device, const Geometry& geometry,
                                 const Superblock& superblock, const storage::Buffer& page) {
  // Zone 1 emptied before copy 0 lands: a cut between them leaves no copy of an older store there.
  NVKV_RETURN_IF_ERROR(storage::ResetZone(device, 1));
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    NVKV_RETURN_IF_ERROR(StartMetadataZone(device, geometry, superblock, z, page));
  }
  // Zone 1 holds its copy alone until the map first moves there: full, so that it does not count
  // among the device's active zones (the map's current zone, zone 0, does).
  return storage::FinishZone(device, 1);
}

absl::StatusOr<MetadataZonesRead> ReadMetadataZones(
    storage::Device& device, const Geometry& geometry, uint64_t store_seed,
    uint32_t blocks_per_page, const std::array<storage::ZoneDescriptor, kMetadataZones>& zones,
    const storage::Buffer& chunk, MapPageVisitor visit) {
  const uint64_t map_pages = geometry.map_pages();
  const uint64_t pages_per_chunk = chunk.bytes / geometry.page_bytes;
  NVKV_CHECK(pages_per_chunk > 0);
  std::vector<NewestCopy> newest(map_pages);
  // Per zone: which map pages it holds a copy of, and its newest write.
  std::array<std::vector<bool>, kMetadataZones> holds;
  std::array<uint64_t, kMetadataZones> zone_newest = {0, 0};
  // Per zone: the last place of a page that failed to read or verify (0: none), and per map
  // page the last place of a verifying copy (to tell whether the damage is superseded).
  std::array<uint64_t, kMetadataZones> last_damaged = {0, 0};
  std::array<std::vector<uint64_t>, kMetadataZones> last_copy;
  MetadataZonesRead read;
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    holds[z].assign(map_pages, false);
    last_copy[z].assign(map_pages, 0);
    // Whole pages below the write pointer, after the superblock's. A full zone's write pointer
    // means nothing on NVMe: its capacity is written.
    const bool full = zones[z].state == storage::ZoneState::kFull;
    const uint64_t end_lba = full ? zones[z].start + zones[z].capacity : zones[z].write_pointer;
    const uint64_t first = geometry.MetadataZoneFirstPage(z) + 1;
    const uint64_t end = end_lba / blocks_per_page;
    for (uint64_t run = first; run < end; run += pages_per_chunk) {
      const uint64_t count = std::min(pages_per_chunk, end - run);
      const absl::Status status =
          storage::ReadBlocks(device, run * blocks_per_page,
                              static_cast<uint32_t>(count * blocks_per_page), chunk);
      if (!status.ok()) {
        read.unusable_pages += count;
        read.damaged_pages += count;
        last_damaged[z] = run + count - 1;
        continue;
      }
      for (uint64_t i = 0; i < count; ++i) {
        const uint8_t* page = chunk.data + i * geometry.page_bytes;
        const SegmentMapEntry* entries = nullptr;
        const absl::Status decoded =
            DecodeMapPage(page, geometry, store_seed, run + i, &entries).status();
        // The zone's last pages are kept for its closing superblock copy: a copy there, or
        // zeros (one a cut tore loses its first sector, which holds all of it), says nothing of
        // the map. Anything else there that does not verify is damage, as anywhere (in a zone a
        // build before the pages were kept wrote, a map page may be there).
        const bool closing_place =
            run + i >= geometry.MetadataZoneFirstPage(z) + geometry.closing_copy_start();
        if (!decoded.ok() && closing_place &&
            (absl::IsNotFound(decoded) ||
             DecodeSuperblock(page, geometry.page_bytes).ok())) {
          continue;
        }
        if (!decoded.ok()) {
          // Zeros in a finished zone were never written: the finish left them. Below the
          // pointer of any other zone they are an append a cut lost.
          if (!(full && absl::IsNotFound(decoded))) ++read.unusable_pages;
          if (!absl::IsNotFound(decoded)) {
            ++read.damaged_pages;
            last_damaged[z] = run + i;
          }
          continue;
        }
        PageHeader header;
        std::memcpy(&header, page, sizeof(header));
        if (header.page_in_segment >= map_pages) {
          ++read.unusable_pages;  // a map page of another shape: not this map's
          ++read.damaged_pages;
          last_damaged[z] = run + i;
          continue;
        }
        ++read.pages_found;
        holds[z][header.page_in_segment] = true;
        last_copy[z][header.page_in_segment] = run + i;
        zone_newest[z] = std::max(zone_newest[z], header.head_sequence);
        NewestCopy& copy = newest[header.page_in_segment];
        if (header.head_sequence >= copy.write_count) {
          copy.page.assign(page, page + geometry.page_bytes);
          copy.page_number = run + i;
          copy.write_count = header.head_sequence;
        }
      }
    }
  }
  read.current = zone_newest[1] > zone_newest[0] ? 1 : 0;
  read.next_write_count = std::max(zone_newest[0], zone_newest[1]) + 1;
  // Damage is superseded when every map page found has a copy written after it: in the current
  // zone, a later place; for the other zone, the current one holding every page (a zone is
  // started after the other filled, so each of its copies is newer). A page torn by a cut (the
  // last ones appended) is so once the next session wrote the map again.
  const uint32_t other = 1 - read.current;
  bool superseded = true;
  for (uint64_t index = 0; index < map_pages; ++index) {
    if (newest[index].page.empty()) continue;
    if (last_damaged[read.current] != 0 && last_copy[read.current][index] <= last_damaged[read.current]) {
      superseded = false;
    }
    if (last_damaged[other] != 0 && !holds[read.current][index]) superseded = false;
  }
  if (superseded) read.damaged_pages = 0;
  const uint32_t per_page = MapEntriesPerPage(geometry.page_bytes);
  if (read.damaged_pages > 0) return read;  // the map says nothing (MetadataZonesRead)
  for (uint64_t index = 0; index < map_pages; ++index) {
    const NewestCopy& copy = newest[index];
    if (copy.page.empty()) continue;
    read.holds_every_page &= holds[read.current][index];
    const SegmentMapEntry* entries = nullptr;
    const absl::StatusOr<SegmentMapPageHeader> floors =
        DecodeMapPage(copy.page.data(), geometry, store_seed, copy.page_number, &entries);
    if (!floors.ok()) return floors.status();  // verified above: a bug if it fails now
    visit(index, *floors, entries,
          std::min<uint64_t>(per_page, geometry.segment_count - index * per_page));
  }
  return read;
}

}  // namespace nvkv::kv
