// StoreOpener (store_open.h): reading and repairing a store's superblocks, formatting a device
// that holds none, growing a store, and taking the store's shape.
#include "kv/store_open.h"

#include <sys/random.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "kv/metadata_zones.h"
#include "kv/page_runs.h"
#include "kv/segment_map.h"
#include "kv/segment_read.h"
#include "kv/segment_table.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// The segment size a format picks for segment_bytes 0: 1 MiB, halved while the store would hold
// fewer than kAutoMinSegments, down to 16 pages. The segments kept free for compaction (one per
// shard and two, SegmentTable::UserReserveFor) are then a small part of a small store too.
constexpr uint64_t kAutoMinSegments = 64;
constexpr uint32_t kAutoMaxSegmentBytes = 1u << 20;
uint32_t AutoSegmentBytes(uint64_t capacity_bytes, uint32_t page_bytes) {
  uint32_t segment_bytes = kAutoMaxSegmentBytes;
  while (segment_bytes / 2 >= 16 * page_bytes &&
         capacity_bytes / segment_bytes < kAutoMinSegments) {
    segment_bytes /= 2;
  }
  return std::max(segment_bytes, 16 * page_bytes);
}

// The most segments of `pages_per_segment` pages that `capacity_bytes` holds, with the superblocks
// before them and their map after them.
uint64_t SegmentsFitting(uint64_t capacity_bytes, uint32_t page_bytes,
                         uint32_t pages_per_segment) {
  const uint64_t pages = capacity_bytes / page_bytes;
  uint64_t segment_count =
      pages > kSuperblockPages ? (pages - kSuperblockPages) / pages_per_segment : 0;
  while (segment_count > 0 &&
         kSuperblockPages + segment_count * pages_per_segment +
                 MapPagesFor(segment_count, page_bytes) >
             pages) {
    --segment_count;
  }
  return segment_count;
}

// Whether two superblock copies say the same of the store (all but which copy each is).
bool SameStore(const Superblock& a, const Superblock& b) {
  return a.format_version == b.format_version && a.page_bytes == b.page_bytes &&
         a.pages_per_segment == b.pages_per_segment && a.lba_bytes == b.lba_bytes &&
         a.segment_count == b.segment_count &&
         std::memcmp(a.store_id, b.store_id, sizeof(a.store_id)) == 0 &&
         a.format_time_unix_s == b.format_time_unix_s && a.index_mode == b.index_mode;
}

bool AllZero(const uint8_t* data, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != 0) return false;
  }
  return true;
}

}  // namespace

// The largest segment nvkv reads whole (AdoptGeometry): a conventional store's are at most
// kMaxSegmentBytes; QEMU's default zones (128 MiB) fit.
constexpr uint64_t kMaxSegmentBytesReadWhole = uint64_t{128} << 20;

storage::QueueOptions LargeIoQueueOptions(uint32_t chunk_count) {
  storage::QueueOptions options;
  options.queue_depth = std::max<uint32_t>(64, chunk_count);
  options.buffers.buffer_bytes = kMaxPageBytes;
  options.buffers.buffer_count = 2;
  // Recovery keeps up to 4 MiB of reads in flight (measured on this machine's virtio disk, 16
  // MiB read a 3.4 GiB store no faster), or a segment's when that is more; the queue is closed
  // once the store is open.
  options.buffers.chunk_count = chunk_count;
  return options;
}

StoreOpener::StoreOpener(const Options& options, bool read_only, const std::string& path,
                         storage::Device& device, QueueOpener open_queue)
    : options_(options),
      read_only_(read_only),
      path_(path),
      device_(device),
      open_queue_(std::move(open_queue)),
      device_info_(device.info()) {
  shape_.placement = ChooseWritePlacement(device_info_.placement_ids.size());
}

absl::StatusOr<OpenedStore> StoreOpener::Open() {
  NVKV_ASSIGN_OR_RETURN(queue_, open_queue_(kLargeIoChunks));
  if (options_.page_bytes % device_info_.lba_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_bytes ", options_.page_bytes,
                                                   " is not a multiple of the device's ",
                                                   device_info_.lba_bytes, "-byte blocks"));
  }
  Superblock superblock{};
  OpenedStore opened;
  if (device_info_.zoned) {
    NVKV_ASSIGN_OR_RETURN(superblock, ReadOrFormatZoned(&opened.formatted_now));
    return Opened(superblock, std::move(opened));
  }
  NVKV_ASSIGN_OR_RETURN(const SuperblockProbe probe, ProbeSuperblocks());
  if (!probe.unreadable_format.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": ", probe.unreadable_format.message()));
  }
  opened.formatted_now = !probe.copies[0].ok() && !probe.copies[1].ok();
  if (!opened.formatted_now) {
    if (options_.error_if_exists) {
      return absl::AlreadyExistsError(absl::StrCat(path_, ": a store already exists"));
    }
    // When both verify but differ, a grow was cut short between its two writes: it writes copy
    // 0 first, so that is the newer one.
    const uint32_t good = probe.copies[0].ok() ? 0 : 1;
    superblock = *probe.copies[good];
    // The other copy is made the same: a damaged one, or one that a grow did not
    // reach (left as it is, a later Open that found the good copy damaged would take the store
    // for what it was before). A reader leaves it (Check reports it; the next writer repairs it).
    if (!read_only_ && (!probe.copies[1 - good].ok() ||
                        !SameStore(*probe.copies[1 - good], superblock))) {
      NVKV_RETURN_IF_ERROR(RepairSuperblock(superblock, 1 - good));
    }
  } else {
    NVKV_ASSIGN_OR_RETURN(superblock, FormatStore(probe));
  }
  if (options_.grow_store && !opened.formatted_now) {
    NVKV_RETURN_IF_ERROR(AdoptGeometry(superblock));
    NVKV_RETURN_IF_ERROR(GrowStore(&superblock));
  }
  return Opened(superblock, std::move(opened));
}

absl::StatusOr<OpenedStore> StoreOpener::Opened(const Superblock& superblock,
                                                OpenedStore opened) {
  // The index mode: the one asked for, else the one the store was formatted with.
  shape_.ordered = options_.index_mode == IndexMode::kAsFormatted
                 ? superblock.index_mode == kSuperblockIndexOrdered
                 : options_.index_mode == IndexMode::kOrdered;
  NVKV_RETURN_IF_ERROR(AdoptGeometry(superblock));
  // Recovery reads a segment whole (SegmentBuffer): a queue with room for one at least.
  const uint32_t chunks = SegmentBuffer::ChunksFor(shape_.geometry, queue_->buffers());
  if (chunks > queue_->buffers().chunk_count()) {
    queue_.reset();
    NVKV_ASSIGN_OR_RETURN(queue_, open_queue_(chunks));
  }
  opened.shape = shape_;
  opened.superblock = superblock;
  opened.superblock.copy = 0;
  opened.device_info = device_info_;
  opened.queue = std::move(queue_);
  return opened;
}

absl::StatusOr<Superblock> StoreOpener::ReadOrFormatZoned(bool* formatted_now) {
  const storage::BufferLease chunk = storage::BufferLease::Chunk(queue_->buffers());
  NVKV_CHECK(chunk.valid());
  absl::StatusOr<ZoneSuperblocks> found = ReadZoneSuperblocks(*queue_, *chunk);
  if (!found.ok()) {
    return absl::Status(found.status().code(),
                        absl::StrCat(path_, ": ", found.status().message()));
  }
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    if (found->other_format[z]) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": ", found->copies[z].status().message()));
    }
  }
  *formatted_now = !found->copies[0].ok() && !found->copies[1].ok();
  if (*formatted_now) return FormatZonedStore(*found);
  if (options_.error_if_exists) {
    return absl::AlreadyExistsError(absl::StrCat(path_, ": a store already exists"));
  }
  // Copy 0 when both verify (a format writes it first). Nothing is written in place on zones: a
  // damaged or missing copy is written again by a writer's Open once it has put every map page
  // in the map's zone, moving the map out first when the copy lies in the map's zone
  // (Engine::Impl::WriteMapOnZones); until then the other serves.
  return *found->copies[found->copies[0].ok() ? 0 : 1];
}

absl::StatusOr<Superblock> StoreOpener::FormatZonedStore(const ZoneSuperblocks& found) {
  const uint32_t damaged_copy = absl::IsDataLoss(found.copies[0].status()) ? 0 : 1;
  const absl::Status& damage = found.copies[damaged_copy].status();
  NVKV_RETURN_IF_ERROR(MayFormat(absl::IsDataLoss(damage), /*empty=*/found.blank(), damage));
  const storage::ZoneModel& zones = device_info_.zones;
  const uint32_t lba_bytes = device_info_.lba_bytes;
  const uint32_t blocks_per_page = options_.page_bytes / lba_bytes;
  if (zones.zone_blocks % blocks_per_page != 0 || zones.capacity_blocks % blocks_per_page != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": zones of ", zones.zone_blocks, " blocks (", zones.capacity_blocks,
        " writable) of ", lba_bytes, " bytes are not whole pages of ", options_.page_bytes,
        " bytes: choose a page_bytes that divides them"));
  }
  const uint64_t capacity_bytes = zones.capacity_blocks * lba_bytes;
  if (options_.segment_bytes != kAutoSegmentBytes && options_.segment_bytes != capacity_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": segment_bytes ", options_.segment_bytes, ": on a zoned namespace a segment is ",
        "a zone's writable part (", capacity_bytes, " bytes here); leave segment_bytes at 0"));
  }
  Superblock superblock{};
  superblock.format_version = kZonedFormatVersion;
  superblock.page_bytes = options_.page_bytes;
  superblock.pages_per_segment = static_cast<uint32_t>(
      std::min<uint64_t>(zones.capacity_blocks / blocks_per_page, UINT32_MAX));
  superblock.lba_bytes = lba_bytes;
  superblock.segment_count = zones.zone_count - kMetadataZones;
  superblock.layout = kSuperblockLayoutZoned;
  superblock.zone_blocks = zones.zone_blocks;
  superblock.capacity_blocks = zones.capacity_blocks;
  const Geometry g = GeometryOf(superblock);
  if (capacity_bytes > kMaxZonedSegmentBytes || g.pages_per_segment < 8) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": zones of ", capacity_bytes, " writable bytes; nvkv takes zones of 8 pages to ",
        kMaxZonedSegmentBytes >> 30, " GiB"));
  }
  if (!g.map_fits_zone()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": zones of ", g.pages_per_segment, " writable pages cannot hold two superblock ",
        "copies and two copies of the segment map of ", g.segment_count, " segments (",
        g.metadata_zone_pages(), " pages): use a smaller page_bytes or a namespace of larger "
        "zones"));
  }
  NVKV_RETURN_IF_ERROR(CheckRoomForShards(g.segment_count, capacity_bytes));
  NVKV_RETURN_IF_ERROR(FillStoreIdentity(&superblock));
  NVKV_RETURN_IF_ERROR(AdoptGeometry(superblock));  // what Open checks of a store, before writing
  // Every zone emptied, durably (a cut must not bring an earlier store's zones back under this
  // store's map), then the metadata zones laid down.
  storage::Device& device = *queue_;
  std::vector<storage::IoRequest> resets(zones.zone_count);
  for (uint64_t z = 0; z < zones.zone_count; ++z) {
    resets[z].op = storage::IoOp::kZoneReset;
    resets[z].lba = zones.StartOf(z);
  }
  NVKV_RETURN_IF_ERROR(storage::RunAll(device, resets));
  for (const storage::IoRequest& reset : resets) NVKV_RETURN_IF_ERROR(reset.status);
  if (device_info_.volatile_write_cache) NVKV_RETURN_IF_ERROR(storage::FlushDevice(device));
  const storage::BufferLease page = storage::BufferLease::Page(device.buffers());
  NVKV_CHECK(page.valid());
  NVKV_RETURN_IF_ERROR(FormatMetadataZones(device, g, superblock, *page));
  return superblock;
}

absl::StatusOr<StoreOpener::SuperblockProbe> StoreOpener::ProbeSuperblocks() {
  storage::Device& device = *queue_;
  const uint32_t lba_bytes = device_info_.lba_bytes;
  const storage::BufferLease lease = storage::BufferLease::Chunk(device.buffers());
  NVKV_CHECK(lease.valid());
  const storage::Buffer& chunk = *lease;
  // Superblocks are written in the page size they were formatted with; read the first 128 KiB,
  // which holds both copies for any page size up to 64 KiB.
  const uint64_t probe_bytes = std::min<uint64_t>(128 * 1024, device_info_.capacity_bytes());
  absl::Status read = storage::ReadBlocks(device, 0, probe_bytes / lba_bytes, chunk);
  if (!read.ok()) {
    // Which 4 KiB can the device not read (segment_read.h)? Those hold 0xff: a superblock copy
    // there is damaged (the other one serves), and the start never looks empty (formattable).
    const uint32_t unit_blocks = std::max<uint32_t>(1, kMinPageBytes / lba_bytes);
    const uint32_t unit_bytes = unit_blocks * lba_bytes;
    const uint32_t units = static_cast<uint32_t>(probe_bytes / unit_bytes);
    std::vector<bool> unreadable(units, false);
    const uint32_t failed = RereadPageByPage(device, 0, units, unit_blocks, unit_bytes, chunk, 0,
                                             &unreadable);
    if (failed == units) return read;
    for (uint32_t u = 0; u < units; ++u) {
      if (unreadable[u]) std::memset(chunk.data + size_t{u} * unit_bytes, 0xff, unit_bytes);
    }
  }
  SuperblockProbe probe;
  // A store of a format this nvkv does not read (newer, or a development version's) is refused as
  // such, whatever the options: never formatted over (force_format is for data that is not an
  // nvkv store), never called foreign.
  probe.copies[0] = DecodeSuperblock(chunk.data, kMaxPageBytes);
  if (IsOtherNvkvFormat(probe.copies[0], chunk.data)) {
    probe.unreadable_format = probe.copies[0].status();
  }
  if (probe.copies[0].ok() && probe.copies[0]->page_bytes * 2 <= probe_bytes) {
    probe.copies[1] = DecodeSuperblock(chunk.data + probe.copies[0]->page_bytes, kMaxPageBytes);
  } else {
    // Copy 0 is damaged: look for copy 1 at every possible page size.
    for (uint32_t page = kMinPageBytes; page <= kMaxPageBytes && page * 2 <= probe_bytes;
         page *= 2) {
      auto candidate = DecodeSuperblock(chunk.data + page, kMaxPageBytes);
      if (probe.unreadable_format.ok() && IsOtherNvkvFormat(candidate, chunk.data + page)) {
        probe.unreadable_format = candidate.status();
      }
      if (candidate.ok() && candidate->page_bytes == page) {
        probe.copies[1] = candidate;
        break;
      }
    }
  }
  probe.empty = AllZero(chunk.data, probe_bytes);
  return probe;
}

absl::Status StoreOpener::RepairSuperblock(const Superblock& good, uint32_t which) {
  storage::Device& device = *queue_;
  const uint32_t lba_bytes = device_info_.lba_bytes;
  storage::Buffer page = device.buffers().GetPage();
  if (!page.valid() || page.bytes < good.page_bytes) {
    if (page.valid()) device.buffers().PutPage(page);
    return absl::InternalError("no page buffer to write a superblock from");
  }
  Superblock copy = good;
  copy.copy = which;
  EncodeSuperblock(copy, page.data, good.page_bytes);
  absl::Status repaired =
      storage::WriteBlocks(device, uint64_t{which} * good.page_bytes / lba_bytes,
                           good.page_bytes / lba_bytes, page, /*fua=*/true,
                           shape_.placement.metadata);
  device.buffers().PutPage(page);
  return repaired;
}

absl::Status StoreOpener::MayFormat(bool damaged, bool empty, const absl::Status& damage) {
  if (damaged && !options_.force_format) {
    absl::Status refused = absl::DataLossError(
        absl::StrCat(path_, ": both nvkv superblocks are damaged (", damage.message(),
                     "); refusing to open or format it"));
    refused.SetPayload(kFormatRefusedPayload, absl::Cord());
    return refused;
  }
  if (!empty && !options_.force_format) {
    absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
        path_, ": holds data that is not an nvkv store; refusing to format it without "
               "force_format"));
    refused.SetPayload(kFormatRefusedPayload, absl::Cord());
    return refused;
  }
  if (read_only_) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": no nvkv store (a read-only open formats nothing)"));
  }
  if (!options_.create_if_missing) {
    return absl::NotFoundError(absl::StrCat(path_, ": no nvkv store (create_if_missing is off)"));
  }
  return absl::OkStatus();
}

absl::Status StoreOpener::CheckRoomForShards(uint64_t segment_count, uint64_t segment_bytes) {
  // The reserve, an open segment per shard, and four segments of data.
  const uint64_t need =
      uint64_t{SegmentTable::UserReserveFor(options_.shard_count)} + options_.shard_count + 4;
  if (segment_count < need) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": too small: ", device_info_.capacity_bytes(), " bytes hold ", segment_count,
        " segments of ", segment_bytes, " bytes; need at least ", need,
        " (fewer shards or smaller segments need less)"));
  }
  return absl::OkStatus();
}

absl::Status StoreOpener::FillStoreIdentity(Superblock* superblock) {
  superblock->format_time_unix_s = static_cast<uint64_t>(std::time(nullptr));
  superblock->index_mode = options_.index_mode == IndexMode::kOrdered ? kSuperblockIndexOrdered
                                                                      : kSuperblockIndexHash;
  if (getrandom(superblock->store_id, sizeof(superblock->store_id), 0) !=
      static_cast<ssize_t>(sizeof(superblock->store_id))) {
    return absl::InternalError("getrandom failed for the store id");
  }
  return absl::OkStatus();
}

absl::StatusOr<Superblock> StoreOpener::FormatStore(const SuperblockProbe& probe) {
  const bool damaged = absl::IsDataLoss(probe.copies[0].status()) ||
                       absl::IsDataLoss(probe.copies[1].status());
  NVKV_RETURN_IF_ERROR(MayFormat(damaged, probe.empty, probe.copies[0].status()));
  const uint32_t lba_bytes = device_info_.lba_bytes;
  const uint32_t segment_bytes =
      options_.segment_bytes != kAutoSegmentBytes
          ? options_.segment_bytes
          : AutoSegmentBytes(device_info_.capacity_bytes(), options_.page_bytes);
  const uint32_t pages_per_segment = segment_bytes / options_.page_bytes;
  // Segments and their map after them (FORMAT.md "Device layout").
  const uint64_t segment_count =
      SegmentsFitting(device_info_.capacity_bytes(), options_.page_bytes, pages_per_segment);
  NVKV_RETURN_IF_ERROR(CheckRoomForShards(segment_count, segment_bytes));
  Superblock superblock{};
  superblock.format_version = kFormatVersion;
  superblock.page_bytes = options_.page_bytes;
  superblock.pages_per_segment = pages_per_segment;
  superblock.lba_bytes = lba_bytes;
  superblock.segment_count = segment_count;
  NVKV_RETURN_IF_ERROR(FillStoreIdentity(&superblock));
  storage::Device& device = *queue_;
  const storage::BufferLease page = storage::BufferLease::Chunk(device.buffers());
  NVKV_CHECK(page.valid() && page->bytes >= 2 * superblock.page_bytes);
  for (uint32_t copy = 0; copy < 2; ++copy) {
    superblock.copy = copy;
    EncodeSuperblock(superblock, page->data + size_t{copy} * superblock.page_bytes,
                     superblock.page_bytes);
  }
  // The first page of every segment must not look like data of this store: a fresh store id
  // makes leftovers from an earlier store fail their checksums, so nothing else is written here
  // (the segment map follows once the engine starts: until then it says nothing, and recovery
  // would read every segment).
  absl::Status written =
      storage::WriteBlocks(device, 0, 2 * superblock.page_bytes / lba_bytes, *page, /*fua=*/true,
                           shape_.placement.metadata);
  if (!written.ok()) return written;
  return superblock;
}

absl::Status StoreOpener::GrowStore(Superblock* superblock) {
  // 1. A store file is extended to capacity_bytes (a file system that fills up leaves it partly
  //    extended, the store as it was). Queues opened before keep the old size: the open queue is
  //    made again.
  const bool regular_file = !device_info_.block_device &&
                            (device_info_.kind == storage::DeviceKind::kDirectFile ||
                             device_info_.kind == storage::DeviceKind::kSyncFile);
  if (regular_file && options_.capacity_bytes > device_info_.capacity_bytes()) {
    queue_.reset();
    NVKV_RETURN_IF_ERROR(device_.GrowFile(options_.capacity_bytes));
    device_info_ = device_.info();
    NVKV_ASSIGN_OR_RETURN(queue_, open_queue_(kLargeIoChunks));
  }
  // 2. The segments the device holds now (at most 2^31 pages in all, AdoptGeometry's limit).
  const Geometry old = shape_.geometry;
  const uint64_t usable_bytes = std::min<uint64_t>(device_info_.capacity_bytes(),
                                                   ((uint64_t{1} << 31) - 1) * old.page_bytes);
  const uint64_t segment_count =
      SegmentsFitting(usable_bytes, old.page_bytes, old.pages_per_segment);
  if (segment_count <= old.segment_count) return absl::OkStatus();
  Superblock grown = *superblock;
  grown.segment_count = segment_count;
  const Geometry g = GeometryOf(grown);

  // 3. The map at its new place, after the new segments (where nothing of the store is): the old
  //    entries, and the new segments free. An old page that does not verify leaves its entries
  //    unknown (0), which makes recovery read those segments, as it would have. Every page gets
  //    the highest floors of the old pages: recovery takes the highest anyway, and the new
  //    segments never held anything.
  std::vector<SegmentMapEntry> entries(g.map_pages() * MapEntriesPerPage(g.page_bytes));
  for (uint64_t s = old.segment_count; s < segment_count; ++s) {
    entries[s].state = static_cast<uint8_t>(MapState::kFree);
  }
  SegmentMapPageHeader floors{};
  storage::Device& device = *queue_;
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device.buffers());
  NVKV_CHECK(chunk.valid());
  const uint32_t per_page = MapEntriesPerPage(old.page_bytes);
  ReadMapPages(device, old, shape_.seed, shape_.blocks_per_page, *chunk,
               [&](uint64_t index, const SegmentMapPageHeader& page_floors,
                   const SegmentMapEntry* read, uint64_t count) {
                 floors.sequence_floor =
                     std::max(floors.sequence_floor, page_floors.sequence_floor);
                 floors.generation_floor =
                     std::max(floors.generation_floor, page_floors.generation_floor);
                 std::memcpy(&entries[index * per_page], read, count * sizeof(SegmentMapEntry));
               });
  // The page size stays: shape_ writes the new map's pages and the old one's alike.
  PageRunWriter map_out(device, shape_, *chunk, /*fua=*/false, shape_.placement.metadata);
  for (uint64_t index = 0; index < g.map_pages() && map_out.ok(); ++index) {
    const uint32_t described =
        static_cast<uint32_t>(std::min<uint64_t>(per_page, segment_count - index * per_page));
    EncodeMapPage(map_out.Room(g.map_first_page() + index), g, shape_.seed,
                  g.map_first_page() + index, static_cast<uint32_t>(index), floors,
                  &entries[index * per_page], described, /*write_count=*/0);
  }
  absl::Status status = map_out.Finish();
  if (status.ok() && device_info_.volatile_write_cache) status = storage::FlushDevice(device);
  // 4. The superblocks, one after the other (each with FUA). Until copy 0 is on the device the
  //    store is as it was; once it is, Open takes it (copy 0 wins when both verify) and writes
  //    copy 1 from it if this stops before.
  for (uint32_t which : {0u, 1u}) {
    if (status.ok()) status = RepairSuperblock(grown, which);
  }
  // 5. The old map's pages lie in new, free segments now: zeros there, so that no page of the
  //    old map stays behind (one that did would be a stale page of a free segment; harmless).
  if (status.ok()) {
    // In segments now: the log's to write over.
    PageRunWriter zeros_out(device, shape_, *chunk, /*fua=*/false, shape_.placement.log);
    for (uint64_t index = 0; index < old.map_pages() && zeros_out.ok(); ++index) {
      std::memset(zeros_out.Room(old.map_first_page() + index), 0, old.page_bytes);
    }
    status = zeros_out.Finish();
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path_, ": growing the store from ",
                                                     old.segment_count, " to ", segment_count,
                                                     " segments failed: ", status.message()));
  }
  *superblock = grown;
  return AdoptGeometry(grown);
}

absl::Status StoreOpener::AdoptGeometry(const Superblock& superblock) {
  const uint32_t lba_bytes = device_info_.lba_bytes;
  const Geometry& g = shape_.geometry = GeometryOf(superblock);
  // A zoned store's pages are not where a conventional one's are: never read one as the other
  // (a copy of a zoned namespace in a file, say).
  if (g.zoned() != device_info_.zoned) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, g.zoned() ? ": holds a store formatted for a zoned namespace (format version 2), "
                           "and this device has no zones"
                         : ": holds a store formatted for a device without zones, and this "
                           "device is zoned"));
  }
  if (g.page_bytes % lba_bytes != 0 ||
      g.total_pages() * g.page_bytes > device_info_.capacity_bytes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, ": the store (", g.total_pages() * g.page_bytes, " bytes in ", g.page_bytes,
        "-byte pages) does not fit this device (", device_info_.capacity_bytes(), " bytes, ",
        lba_bytes, "-byte blocks)"));
  }
  if (g.total_pages() >= (uint64_t{1} << 31)) {
    return absl::UnimplementedError("stores of more than 2^31 pages are not supported yet");
  }
  if (g.zoned()) {
    const storage::ZoneModel& zones = device_info_.zones;
    if (superblock.zone_blocks != zones.zone_blocks ||
        superblock.capacity_blocks != zones.capacity_blocks || superblock.lba_bytes != lba_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          path_, ": the store was formatted for zones of ", superblock.zone_blocks, " blocks (",
          superblock.capacity_blocks, " writable) of ", superblock.lba_bytes,
          " bytes; the namespace has zones of ", zones.zone_blocks, " blocks (",
          zones.capacity_blocks, " writable) of ", lba_bytes, " bytes"));
    }
    // Open, compaction and check read a segment whole into memory (segment_read.h), and on
    // zones a segment is a zone's whole writable part: bounded until they read in windows.
    if (g.segment_bytes() > kMaxSegmentBytesReadWhole) {
      return absl::FailedPreconditionError(absl::StrCat(
          path_, ": zones of ", g.segment_bytes() >> 20, " MiB writable: nvkv reads a zone whole "
          "into memory while it opens and compacts, and takes zones of up to ",
          kMaxSegmentBytesReadWhole >> 20, " MiB writable until it reads them in windows"));
    }
  }
  shape_.blocks_per_page = shape_.geometry.page_bytes / lba_bytes;
  shape_.seed = StoreSeed(superblock.store_id);
  return absl::OkStatus();
}

}  // namespace nvkv::kv
