// Zoned devices (NVMe Zoned Namespaces): the zone model a device reports, the state of one zone,
// and the zone report's wire format.
//
// A zoned namespace is cut into zones of `zone_blocks` logical blocks each. A zone is written
// only at its write pointer, from its start up to `capacity_blocks` (which may be less than the
// zone's size: the blocks between are never written), and is emptied whole by a reset. Writes
// go either by Write at the write pointer (one in flight per zone) or by Zone Append, which
// names only the zone: the device writes at the write pointer as it finds it and returns the
// address, so many appends to one zone may be in flight at once and land in any order. A zone
// being written is *open*, one written and then closed (by the device, to open another) is
// *closed*; open and closed zones are *active*. A device limits how many may be open
// (`max_open`) and active (`max_active`) at once: a write that would open one more zone than
// allowed fails (NVMe "Too Many Active Zones"); a device at its open limit first closes a zone it
// opened itself. Finish makes a zone full (no longer active) where it stands.
//
// The report (NVMe Zone Management Receive, Report Zones) is a 64-byte header (the number of
// zones described, little-endian 64 bits) and a 64-byte descriptor per zone: zone type (byte 0;
// 2 is sequential write required), zone state (byte 1, high four bits), attributes (byte 2),
// zone capacity (bytes 8-15), zone start LBA (16-23) and write pointer (24-31). Devices that do
// not speak NVMe (MemDevice) produce the same bytes, so one parser serves all.
#ifndef NVKV_STORAGE_ZONES_H_
#define NVKV_STORAGE_ZONES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace nvkv::storage {

// What a zoned device reports of its zones. A device without zones has zone_count 0.
struct ZoneModel {
  uint64_t zone_count = 0;
  uint64_t zone_blocks = 0;      // zone size: from one zone's start to the next's, in blocks
  uint64_t capacity_blocks = 0;  // blocks of each zone that may be written (<= zone_blocks)
  uint32_t max_open = 0;         // zones open at once at most; 0: no limit
  uint32_t max_active = 0;       // zones open or closed at once at most; 0: no limit
  uint32_t max_append_blocks = 0;  // the largest Zone Append; 0: no limit of its own

  bool zoned() const { return zone_count != 0; }
  uint64_t ZoneOf(uint64_t lba) const { return lba / zone_blocks; }
  uint64_t StartOf(uint64_t zone) const { return zone * zone_blocks; }
};

// A zone's state, numbered as NVMe's Zone State field.
enum class ZoneState : uint8_t {
  kEmpty = 0x1,
  kImplicitlyOpen = 0x2,
  kExplicitlyOpen = 0x3,
  kClosed = 0x4,
  kReadOnly = 0xd,
  kFull = 0xe,
  kOffline = 0xf,
};

const char* ZoneStateName(ZoneState state);
// Read-only or offline: the device took the zone out of service, and nothing writes, resets or
// finishes it again.
inline bool OutOfService(ZoneState state) {
  return state == ZoneState::kReadOnly || state == ZoneState::kOffline;
}

// One zone as the report describes it.
struct ZoneDescriptor {
  uint64_t start = 0;          // first LBA
  uint64_t capacity = 0;       // blocks that may be written
  uint64_t write_pointer = 0;  // next LBA a write lands at (start + blocks written)
  ZoneState state = ZoneState::kEmpty;

  bool operator==(const ZoneDescriptor&) const = default;
};

inline constexpr uint32_t kZoneReportHeaderBytes = 64;
inline constexpr uint32_t kZoneDescriptorBytes = 64;
inline constexpr uint8_t kZoneTypeSequentialWrite = 0x2;

// How many descriptors a report of `bytes` holds at most.
inline uint64_t ZoneDescriptorsIn(uint64_t bytes) {
  return bytes < kZoneReportHeaderBytes
             ? 0
             : (bytes - kZoneReportHeaderBytes) / kZoneDescriptorBytes;
}

// Writes the report of `zones` into `out` (header and as many descriptors as fit; the rest of
// `out` zeroed). The header counts the descriptors written.
void EncodeZoneReport(std::span<const ZoneDescriptor> zones, std::span<uint8_t> out);

// The descriptors of a report. kDataLoss when the header counts more than `report` holds, or a
// descriptor has a zone type or state no zoned namespace reports.
absl::StatusOr<std::vector<ZoneDescriptor>> ParseZoneReport(std::span<const uint8_t> report);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_ZONES_H_
