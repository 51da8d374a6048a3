// Stores on a MemDevice for the engine's tests: a device sized for a given geometry, and a copy
// of a device's bytes (what a crash at that moment would leave, to open while the original goes
// on).
#ifndef NVKV_TESTS_KV_MEM_STORE_H_
#define NVKV_TESTS_KV_MEM_STORE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kv/page_format.h"
#include "storage/base/check.h"
#include "storage/device.h"
#include "storage/mem_device.h"
#include "storage/zones.h"

namespace nvkv::kv {

// A device of `page_bytes` blocks that holds exactly a store of `segments` segments of
// `pages_per_segment` pages: the superblocks, the segments and the segment map. With a volatile
// write cache, as drives have.
inline storage::MemDeviceOptions MemStoreOptions(uint64_t segments, uint32_t pages_per_segment,
                                                 uint32_t page_bytes = 4096) {
  storage::MemDeviceOptions options;
  options.lba_bytes = page_bytes;
  options.lba_count =
      kSuperblockPages + segments * pages_per_segment + MapPagesFor(segments, page_bytes);
  options.volatile_write_cache = true;
  return options;
}

// The zoned counterpart: the two metadata zones and a zone per segment, each of twice
// `pages_per_segment` blocks of `page_bytes`, a segment's worth of them writable (a zone capacity
// below the zone size, as on real drives). With a volatile write cache.
inline storage::MemDeviceOptions ZonedMemStoreOptions(uint64_t segments, uint32_t pages_per_segment,
                                                      uint32_t page_bytes = 4096) {
  storage::MemDeviceOptions options;
  options.lba_bytes = page_bytes;
  options.zones = {.zone_count = kMetadataZones + segments,
                   .zone_blocks = 2 * uint64_t{pages_per_segment},
                   .capacity_blocks = pages_per_segment};
  options.lba_count = options.zones.zone_count * options.zones.zone_blocks;
  options.volatile_write_cache = true;
  return options;
}

// Makes the device of `options` zoned: its blocks in zones of `zone_blocks`, each writable whole
// (zone capacity at zone size). REQUIRES: options->lba_count a multiple of zone_blocks.
inline void SplitIntoWholeZones(storage::MemDeviceOptions* options, uint64_t zone_blocks) {
  NVKV_CHECK(options->lba_count % zone_blocks == 0);
  options->zones = {.zone_count = options->lba_count / zone_blocks,
                    .zone_blocks = zone_blocks,
                    .capacity_blocks = zone_blocks};
}

// A copy of the bytes of `storage`; of a zoned storage, with each zone's state and write
// pointer.
inline std::shared_ptr<storage::MemStorage> CopyOf(const storage::MemStorage& storage) {
  const storage::ZoneModel& zones = storage.zones();
  auto copy = storage::MemStorage::Create(storage.lba_bytes(), storage.lba_count(), zones);
  NVKV_CHECK(copy.ok());
  if (!zones.zoned()) {
    const std::vector<uint8_t> bytes = storage.CopyOut(0, storage.lba_count());
    (*copy)->Write(0, storage.lba_count(), bytes.data());
    return *copy;
  }
  const std::vector<storage::ZoneDescriptor> report = storage.Report(0, zones.zone_count);
  for (uint64_t z = 0; z < zones.zone_count; ++z) {
    const std::vector<uint8_t> image =
        storage.CopyOut(zones.StartOf(z), static_cast<uint32_t>(zones.zone_blocks));
    (*copy)->RestoreZone(z, report[z].write_pointer - report[z].start, report[z].state, image);
  }
  return *copy;
}

// Whether `request` (a write, as FaultDevice::SetWriteObserver sees it) begins with a page of a
// checkpoint.
inline bool WritesCheckpointPages(const storage::IoRequest& request) {
  PageHeader header;
  std::memcpy(&header, request.buffer.data, sizeof(header));
  return header.type == static_cast<uint8_t>(PageType::kCheckpoint);
}

}  // namespace nvkv::kv

#endif  // NVKV_TESTS_KV_MEM_STORE_H_
