#include "storage/device.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "storage/base/status_macros.h"
#include "storage/direct_file_device.h"
#include "storage/nvme_device.h"
#include "storage/ring.h"
#include "storage/sync_file_device.h"

namespace nvkv::storage {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kNvmePassthrough:
      return "nvme-passthrough";
    case DeviceKind::kDirectFile:
      return "direct-file";
    case DeviceKind::kSyncFile:
      return "sync-file";
    case DeviceKind::kMemory:
      return "memory";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& path,
                                                   const DeviceOptions& options) {
  Backend backend = options.backend;
  if (backend == Backend::kAuto) {
    backend = IsNvmeGenericDevice(path) ? Backend::kNvmePassthrough : Backend::kDirectFile;
  }
  switch (backend) {
    case Backend::kNvmePassthrough:
      return OpenNvmeDevice(path, options);
    case Backend::kSyncFile: {
      auto device = SyncFileDevice::Open(path, options);
      if (!device.ok()) return device.status();
      return std::unique_ptr<Device>(std::move(*device));
    }
    case Backend::kDirectFile:
    case Backend::kAuto:
      break;
  }
  auto device = DirectFileDevice::Open(path, options);
  if (device.ok()) return std::unique_ptr<Device>(std::move(*device));
  // A permission problem on the path is reported before any ring exists.
  if (!IsRingRefused(device.status()) || !options.allow_sync_fallback) return device.status();
  auto fallback = SyncFileDevice::Open(path, options);
  if (!fallback.ok()) return fallback.status();
  const std::string note = absl::StrCat("io_uring unavailable (", device.status().message(),
                                        "); using synchronous pread/pwrite");
  std::fprintf(stderr, "nvkv: warning: %s: %s\n", path.c_str(), note.c_str());
  (*fallback)->AddNote(note);
  return std::unique_ptr<Device>(std::move(*fallback));
}

namespace {

struct BlockingWait {
  bool done = false;
};

void OnBlockingRequestDone(IoRequest* request) {
  static_cast<BlockingWait*>(request->context)->done = true;
}


void OnRunAllRequestDone(IoRequest* request) { --*static_cast<size_t*>(request->context); }

}  // namespace

absl::Status RunOne(Device& device, IoRequest& request) {
  BlockingWait wait;
  request.on_done = OnBlockingRequestDone;
  request.context = &wait;
  absl::Status status = device.Enqueue(&request);
  while (absl::IsUnavailable(status)) {  // queue full: make room, then retry
    auto reaped = device.Reap(1);
    if (!reaped.ok()) return reaped.status();
    status = device.Enqueue(&request);
  }
  if (!status.ok()) return status;
  while (!wait.done) {
    auto reaped = device.Reap(1);
    if (!reaped.ok()) return reaped.status();
  }
  return request.status;
}

absl::Status RunAll(Device& device, std::span<IoRequest> requests) {
  size_t pending = 0;
  for (IoRequest& request : requests) {
    request.on_done = OnRunAllRequestDone;
    request.context = &pending;
    ++pending;
    absl::Status status = device.Enqueue(&request);
    while (absl::IsUnavailable(status)) {  // queue full: let one finish, then retry
      auto reaped = device.Reap(1);
      if (!reaped.ok()) return reaped.status();
      status = device.Enqueue(&request);
    }
    if (!status.ok()) {
      request.status = status;
      --pending;
    }
  }
  while (pending > 0) {
    auto reaped = device.Reap(1);
    if (!reaped.ok()) return reaped.status();
  }
  return absl::OkStatus();
}

absl::Status ReadBlocks(Device& device, uint64_t lba, uint32_t lba_count, const Buffer& buffer) {
  IoRequest request;
  request.op = IoOp::kRead;
  request.lba = lba;
  request.lba_count = lba_count;
  request.buffer = buffer;
  return RunOne(device, request);
}

absl::Status WriteBlocks(Device& device, uint64_t lba, uint32_t lba_count, const Buffer& buffer,
                         bool fua, uint8_t placement) {
  IoRequest request;
  request.op = IoOp::kWrite;
  request.fua = fua;
  request.placement = placement;
  request.lba = lba;
  request.lba_count = lba_count;
  request.buffer = buffer;
  return RunOne(device, request);
}

namespace {

// ReportZones through `page`, a page buffer.
absl::StatusOr<std::vector<ZoneDescriptor>> ReportZonesThrough(Device& device, uint64_t first,
                                                               uint64_t count,
                                                               const Buffer& page) {
  const ZoneModel& model = device.info().zones;
  if (!model.zoned()) {
    return absl::FailedPreconditionError(
        absl::StrCat(device.info().path, ": no zone model to report (not a zoned namespace)"));
  }
  const uint64_t available = model.zone_count - std::min(first, model.zone_count);
  const uint64_t end = first + std::min(count, available);
  std::vector<ZoneDescriptor> zones;
  while (first + zones.size() < end) {
    IoRequest request;
    request.op = IoOp::kZoneReport;
    request.lba = model.StartOf(first + zones.size());
    request.lba_count = page.bytes / device.info().lba_bytes;
    request.buffer = page;
    NVKV_RETURN_IF_ERROR(RunOne(device, request));
    NVKV_ASSIGN_OR_RETURN(std::vector<ZoneDescriptor> part,
                          ParseZoneReport(std::span<const uint8_t>(page.data, page.bytes)));
    if (part.empty() || part.front().start != request.lba) {
      return absl::DataLossError(absl::StrCat(device.info().path, ": the zone report from LBA ",
                                              request.lba, " does not start at that zone"));
    }
    const size_t take = std::min<size_t>(part.size(), end - first - zones.size());
    zones.insert(zones.end(), part.begin(), part.begin() + static_cast<ptrdiff_t>(take));
  }
  return zones;
}

}  // namespace

absl::StatusOr<std::vector<ZoneDescriptor>> ReportZones(Device& device, uint64_t first,
                                                        uint64_t count) {
  if (!device.info().zones.zoned()) return ReportZonesThrough(device, first, count, Buffer{});
  const Buffer page = device.buffers().GetPage();
  if (!page.valid()) {
    return absl::ResourceExhaustedError("zone report: no page buffer free in the queue's pool");
  }
  absl::StatusOr<std::vector<ZoneDescriptor>> zones =
      ReportZonesThrough(device, first, count, page);
  device.buffers().PutPage(page);
  return zones;
}

absl::StatusOr<std::vector<ZoneDescriptor>> ReportAllZones(Device& device) {
  return ReportZones(device, 0, device.info().zones.zone_count);
}

namespace {

// The one zone of a report of `zone` alone.
absl::StatusOr<ZoneDescriptor> OneZone(Device& device, uint64_t zone,
                                       absl::StatusOr<std::vector<ZoneDescriptor>> report) {
  if (!report.ok()) return report.status();
  if (report->empty()) {
    return absl::OutOfRangeError(absl::StrCat(device.info().path, ": no zone ", zone,
                                              " to report (the namespace has ",
                                              device.info().zones.zone_count, ")"));
  }
  return report->front();
}

}  // namespace

absl::StatusOr<ZoneDescriptor> ReportZone(Device& device, uint64_t zone) {
  return OneZone(device, zone, ReportZones(device, zone, 1));
}

absl::StatusOr<ZoneDescriptor> ReportZone(Device& device, uint64_t zone, const Buffer& page) {
  return OneZone(device, zone, ReportZonesThrough(device, zone, 1, page));
}

absl::Status FlushDevice(Device& device) {
  IoRequest request;
  request.op = IoOp::kFlush;
  return RunOne(device, request);
}

namespace {

absl::Status RunZoneManagement(Device& device, IoOp op, uint64_t zone) {
  IoRequest request;
  request.op = op;
  request.lba = device.info().zones.StartOf(zone);
  return RunOne(device, request);
}

}  // namespace

absl::Status ResetZone(Device& device, uint64_t zone) {
  return RunZoneManagement(device, IoOp::kZoneReset, zone);
}

absl::Status FinishZone(Device& device, uint64_t zone) {
  return RunZoneManagement(device, IoOp::kZoneFinish, zone);
}

}  // namespace nvkv::storage
