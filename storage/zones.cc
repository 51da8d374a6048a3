#include "storage/zones.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace nvkv::storage {
namespace {

void PutLe64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLe64(const uint8_t* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{in[i]} << (8 * i);
  return value;
}

bool KnownState(uint8_t state) {
  switch (static_cast<ZoneState>(state)) {
    case ZoneState::kEmpty:
    case ZoneState::kImplicitlyOpen:
    case ZoneState::kExplicitlyOpen:
    case ZoneState::kClosed:
    case ZoneState::kReadOnly:
    case ZoneState::kFull:
    case ZoneState::kOffline:
      return true;
  }
  return false;
}

}  // namespace

const char* ZoneStateName(ZoneState state) {
  switch (state) {
    case ZoneState::kEmpty:
      return "empty";
    case ZoneState::kImplicitlyOpen:
      return "implicitly open";
    case ZoneState::kExplicitlyOpen:
      return "explicitly open";
    case ZoneState::kClosed:
      return "closed";
    case ZoneState::kReadOnly:
      return "read only";
    case ZoneState::kFull:
      return "full";
    case ZoneState::kOffline:
      return "offline";
  }
  return "unknown";
}

void EncodeZoneReport(std::span<const ZoneDescriptor> zones, std::span<uint8_t> out) {
  std::memset(out.data(), 0, out.size());
  const uint64_t count = std::min<uint64_t>(zones.size(), ZoneDescriptorsIn(out.size()));
  if (out.size() < kZoneReportHeaderBytes) return;
  PutLe64(out.data(), count);
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t* d = out.data() + kZoneReportHeaderBytes + i * kZoneDescriptorBytes;
    d[0] = kZoneTypeSequentialWrite;
    d[1] = static_cast<uint8_t>(static_cast<uint8_t>(zones[i].state) << 4);
    PutLe64(d + 8, zones[i].capacity);
    PutLe64(d + 16, zones[i].start);
    PutLe64(d + 24, zones[i].write_pointer);
  }
}

absl::StatusOr<std::vector<ZoneDescriptor>> ParseZoneReport(std::span<const uint8_t> report) {
  if (report.size() < kZoneReportHeaderBytes) {
    return absl::DataLossError(absl::StrCat("zone report of ", report.size(),
                                            " bytes: shorter than its header"));
  }
  const uint64_t count = GetLe64(report.data());
  if (count > ZoneDescriptorsIn(report.size())) {
    return absl::DataLossError(absl::StrCat("zone report counts ", count, " zones; its ",
                                            report.size(), " bytes hold ",
                                            ZoneDescriptorsIn(report.size())));
  }
  std::vector<ZoneDescriptor> zones;
  zones.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* d = report.data() + kZoneReportHeaderBytes + i * kZoneDescriptorBytes;
    const uint8_t state = d[1] >> 4;
    if (d[0] != kZoneTypeSequentialWrite || !KnownState(state)) {
      return absl::DataLossError(absl::StrCat("zone report: zone ", i, " has type ", d[0],
                                              " and state ", state, ", which no zoned "
                                              "namespace reports"));
    }
    ZoneDescriptor& zone = zones.emplace_back();
    zone.state = static_cast<ZoneState>(state);
    zone.capacity = GetLe64(d + 8);
    zone.start = GetLe64(d + 16);
    zone.write_pointer = GetLe64(d + 24);
  }
  return zones;
}

}  // namespace nvkv::storage
