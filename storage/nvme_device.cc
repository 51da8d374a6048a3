#include "storage/nvme_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"
#include "storage/base/errno_status.h"
#include "storage/base/status_macros.h"
#include "storage/base/text_file.h"
#include "storage/device_lock.h"
#include "storage/file_open.h"
#include "storage/nvme_command.h"

namespace nvkv::storage {
namespace {

constexpr uint32_t kHostPageBytes = 4096;
// Linux 6.1 NVMe PCIe: NVME_MAX_SEGS, the most segments one request may use, and
// NVME_MAX_KB_SZ, its max_hw_sectors when the controller reports no MDTS.
constexpr uint32_t kDriverMaxSegments = 127;
constexpr uint64_t kDriverMaxTransferBytes = 4 << 20;
// RingDevice::Enqueue takes a request's SQEs into a fixed array of this many.
constexpr uint32_t kMaxCommandsPerRequest = RingDevice::kMaxSqesPerRequest;
// Linux's BIO_MAX_VECS: pages one bio of pinned user memory holds at worst (one bvec each).
constexpr uint32_t kBioMaxPages = 256;
// NVMe I/O needs dword-aligned data (PRP entries); the kernel bounces anything less.
constexpr uint32_t kNvmeMemoryAlignment = 4;

// Closes the fd on every early return.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// OK when `path` is a character device of the nvme-generic class; else why not.
absl::Status CheckNvmeGeneric(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  const std::string not_generic =
      absl::StrCat(path, ": not an NVMe generic character device (/dev/ngXnY)");
  if (!S_ISCHR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(not_generic, "; files and block devices take the direct backend (auto, the "
                                  "default, picks it)"));
  }
  const std::optional<std::string> devices = ReadTextFile("/proc/devices");
  const std::optional<uint32_t> generic_major =
      devices ? FindCharDeviceMajor(*devices, "nvme-generic") : std::nullopt;
  if (!generic_major) {
    return absl::InvalidArgumentError(
        absl::StrCat(not_generic, "; /proc/devices lists no nvme-generic driver"));
  }
  if (major(st.st_rdev) != *generic_major) {
    return absl::InvalidArgumentError(absl::StrCat(not_generic, "; its major is ",
                                                   major(st.st_rdev), ", nvme-generic's is ",
                                                   *generic_major));
  }
  return absl::OkStatus();
}

absl::Status OpenError(int err, const std::string& path) {
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          path, ": permission denied: NVMe passthrough needs read and write access to the node "
                "(read access to open it read-only; udev creates /dev/ngXnY root-only), and "
                "CAP_SYS_ADMIN on Linux 6.1 (6.2+ lets "
                "other users send Identify and the I/O commands the controller's Commands "
                "Supported and Effects log allows)"));
    default:
      return ErrnoStatus(err, absl::StrCat("open ", path));
  }
}

// The request-queue limits of the namespace behind /dev/ngXnY, from its block device's sysfs
// queue directory. The block device sits beside the generic device in sysfs (both are children
// of the controller, or of the subsystem with native multipath), so go through the class link
// rather than guess /sys/block names. Any piece missing stays 0 (unknown).
KernelQueueLimits ReadKernelQueueLimits(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path node = fs::canonical(path, error);
  if (error) return {};
  const std::string generic_name = node.filename().string();
  const std::string block_name = BlockDeviceNameForGeneric(generic_name);
  if (block_name.empty()) return {};
  const fs::path device = fs::canonical(fs::path("/sys/class/nvme-generic") / generic_name, error);
  if (error) return {};
  const fs::path queue = device.parent_path() / block_name / "queue";
  KernelQueueLimits limits;
  if (auto text = ReadTextFile(queue / "max_hw_sectors_kb")) {
    if (auto kib = ParseUnsigned(*text)) limits.max_hw_bytes = *kib * 1024;
  }
  if (auto text = ReadTextFile(queue / "max_segments")) {
    if (auto segments = ParseUnsigned(*text); segments && *segments <= UINT32_MAX) {
      limits.max_segments = static_cast<uint32_t>(*segments);
    }
  }
  return limits;
}

// One 4096-byte Identify page; page-aligned so the kernel maps it without bouncing.
struct alignas(kHostPageBytes) IdentifyPage {
  uint8_t bytes[kIdentifyPageBytes];
};

// Runs one Identify through the synchronous admin ioctl. Why not io_uring: this is the cold open
// path, it runs before the ring exists (the geometry sizes it), and Linux accepts
// NVME_URING_CMD_ADMIN only on the controller node /dev/nvmeX, which would need a second open.
// The ioctl returns the same two error spaces as a passthrough CQE (-1/errno, or the NVMe
// Status Field when positive), so it goes through the same mapping.
int32_t RunIdentify(int fd, IdentifyCns cns, uint32_t nsid, uint8_t csi, IdentifyPage* page) {
  nvme_passthru_cmd cmd =
      ToPassthruCmd(EncodeIdentify(cns, nsid, csi, reinterpret_cast<uintptr_t>(page->bytes)));
  const int ret = ioctl(fd, NVME_IOCTL_ADMIN_CMD, &cmd);
  return ret < 0 ? -errno : ret;
}

absl::Status Identify(int fd, IdentifyCns cns, uint32_t nsid, const std::string& path,
                      IdentifyPage* page, uint8_t csi = kCsiNvm) {
  CommandContext context;
  context.op = NvmeOp::kIdentify;
  context.path = path;
  return MapCompletion(RunIdentify(fd, cns, nsid, csi, page), context);
}

// Zoned? Asks for the ZNS-specific Identify Namespace page (CNS 0x05, CSI 0x02): a controller
// returns it only for a namespace of the Zoned command set and fails it with an NVMe status
// (Invalid Field, or Invalid I/O Command Set) for any other, including controllers that predate
// CNS 0x05. Chosen over sysfs queue/zoned because Linux hides the block device of a zoned
// namespace it cannot drive (no CONFIG_BLK_DEV_ZONED) while /dev/ngXnY stays, and because 6.2+
// lets unprivileged openers send this Identify.
absl::StatusOr<bool> IsZonedNamespace(int fd, uint32_t nsid, const std::string& path,
                                      IdentifyPage* page) {
  const int32_t res = RunIdentify(fd, IdentifyCns::kCsiNamespace, nsid, kCsiZoned, page);
  if (res > 0) return false;  // the controller refused: not a ZNS namespace
  CommandContext context;
  context.op = NvmeOp::kIdentify;
  context.path = path;
  NVKV_RETURN_IF_ERROR(MapCompletion(res, context));
  return true;
}

absl::StatusOr<uint32_t> NamespaceId(int fd, const std::string& path) {
  const int ret = ioctl(fd, NVME_IOCTL_ID);
  if (ret < 0) {
    if (errno == ENOTTY) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": NVME_IOCTL_ID refused (ENOTTY): not an NVMe namespace"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("NVME_IOCTL_ID ", path));
  }
  return static_cast<uint32_t>(ret);
}

// Limits for page-aligned buffers (returned) and the rest (*queue_limits).
uint32_t ChooseTransferLimits(uint64_t mdts_bytes, const std::string& path, uint32_t lba_bytes,
                              NvmeQueueLimits* queue_limits, std::vector<std::string>* notes) {
  const KernelQueueLimits limits = ReadKernelQueueLimits(path);
  queue_limits->max_segments = EffectiveMaxSegments(mdts_bytes, limits);
  if (limits.max_hw_bytes == 0 || limits.max_segments == 0) {
    notes->push_back(absl::StrCat("kernel queue limits not found in sysfs; assuming ",
                                  queue_limits->max_segments, " DMA segments per command"));
  }
  if (mdts_bytes == 0) notes->push_back("controller reports no MDTS limit (MDTS 0)");
  queue_limits->unaligned_max_transfer_bytes =
      ChooseMaxTransferBytes(mdts_bytes, limits, lba_bytes, false);
  return ChooseMaxTransferBytes(mdts_bytes, limits, lba_bytes, true);
}

// The zones of zoned namespace `info->nsid` (its geometry read already, LBA format
// `format_index`): their size and the open and active limits from the ZNS Identify pages, the
// largest append (ZASL, else MDTS's, within what one command of this queue carries), and their
// capacity from a report of the first zones (every zone of a namespace has one size; their
// capacity is taken to be alike too, and checked across the zones one report page holds).
absl::Status ReadZoneModel(int fd, uint8_t format_index, DeviceInfo* info, IdentifyPage* page) {
  const std::string& path = info->path;
  NVKV_RETURN_IF_ERROR(
      Identify(fd, IdentifyCns::kCsiNamespace, info->nsid, path, page, kCsiZoned));
  NVKV_ASSIGN_OR_RETURN(const ZonedNamespaceIdentity zoned,
                        ParseZonedIdentifyNamespace(page->bytes, format_index));
  NVKV_RETURN_IF_ERROR(Identify(fd, IdentifyCns::kCsiController, 0, path, page, kCsiZoned));
  NVKV_ASSIGN_OR_RETURN(const uint64_t append_bytes, ParseZonedIdentifyController(page->bytes));
  nvme_passthru_cmd report = ToPassthruCmd(EncodeZoneReport(
      info->nsid, 0, reinterpret_cast<uintptr_t>(page->bytes), kIdentifyPageBytes));
  CommandContext context;
  context.op = NvmeOp::kZoneReport;
  context.path = path;
  const int ret = ioctl(fd, NVME_IOCTL_IO_CMD, &report);
  NVKV_RETURN_IF_ERROR(MapCompletion(ret < 0 ? -errno : ret, context));
  NVKV_ASSIGN_OR_RETURN(const std::vector<ZoneDescriptor> first, ParseZoneReport(page->bytes));
  if (first.empty() || first[0].capacity == 0 || first[0].capacity > zoned.zone_blocks) {
    return absl::DataLossError(absl::StrCat(path, ": its first zone reports no usable capacity"));
  }
  for (const ZoneDescriptor& zone : first) {
    if (zone.capacity != first[0].capacity) {
      return absl::UnimplementedError(absl::StrCat(
          path, ": zones of different capacities (", first[0].capacity, " and ", zone.capacity,
          " blocks at LBA ", zone.start, "); nvkv needs one capacity for every zone"));
    }
  }
  if (zoned.zone_blocks > info->lba_count || info->lba_count % zoned.zone_blocks != 0) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": ", info->lba_count, " blocks are not a whole number of ", zoned.zone_blocks,
        "-block zones"));
  }
  ZoneModel& zones = info->zones;
  zones.zone_blocks = zoned.zone_blocks;
  zones.zone_count = info->lba_count / zoned.zone_blocks;
  zones.capacity_blocks = first[0].capacity;
  zones.max_open = zoned.max_open;
  zones.max_active = zoned.max_active;
  const uint64_t append_limit = append_bytes == 0 ? info->max_transfer_bytes
                                                  : std::min<uint64_t>(append_bytes,
                                                                       info->max_transfer_bytes);
  zones.max_append_blocks = static_cast<uint32_t>(
      std::min<uint64_t>(append_limit / info->lba_bytes, kNvmeMaxLbaPerCommand));
  return absl::OkStatus();
}

// Runs one Reclaim Unit Handle Status of `bytes` into `out` through the synchronous I/O ioctl
// (why not io_uring: see RunIdentify); the same two error spaces as a passthrough CQE.
int32_t RunPlacementHandleStatus(int fd, uint32_t nsid, std::vector<uint8_t>* out,
                                 uint32_t bytes) {
  out->assign(bytes, 0);
  nvme_passthru_cmd cmd = ToPassthruCmd(
      EncodePlacementHandleStatus(nsid, reinterpret_cast<uintptr_t>(out->data()), bytes));
  const int ret = ioctl(fd, NVME_IOCTL_IO_CMD, &cmd);
  return ret < 0 ? -errno : ret;
}

// The Reclaim Unit Handle Status of namespace `nsid` through `fd`, every descriptor (asked again
// with room for all when the first 4 KiB do not hold them). Errors as MapCompletion words them
// (a namespace without FDP enabled: an NVMe status), or kDataLoss for a malformed status.
absl::StatusOr<std::vector<PlacementHandleStatus>> QueryPlacementHandles(
    int fd, uint32_t nsid, const std::string& path) {
  constexpr uint32_t kFirstBytes = 4096;
  std::vector<uint8_t> status;
  int32_t res = RunPlacementHandleStatus(fd, nsid, &status, kFirstBytes);
  if (res == 0 && PlacementHandleStatusBytes(status) > kFirstBytes) {
    res = RunPlacementHandleStatus(fd, nsid, &status, PlacementHandleStatusBytes(status));
  }
  CommandContext context;
  context.op = NvmeOp::kPlacementStatus;
  context.path = path;
  NVKV_RETURN_IF_ERROR(MapCompletion(res, context));
  return ParsePlacementHandleStatus(status);
}

// The placement handles of namespace `info->nsid`, whose controller supports Flexible Data
// Placement (Identify Controller CTRATT). Without them the store writes as on any namespace and
// loses nothing, so a failure is a note, never an error: a namespace whose endurance group has
// FDP disabled fails the command with an NVMe status, and an opener without the rights to send
// it (Linux 6.2+ without CAP_SYS_ADMIN) gets EACCES.
void ReadPlacementHandles(int fd, DeviceInfo* info) {
  constexpr size_t kMaxHandles = 256;  // what IoRequest::placement indexes
  absl::StatusOr<std::vector<PlacementHandleStatus>> handles =
      QueryPlacementHandles(fd, info->nsid, info->path);
  if (!handles.ok()) {
    info->notes.push_back(absl::StrCat(
        "the controller supports flexible data placement, but namespace ", info->nsid,
        " gave no placement handles; writing without them: ", handles.status().message()));
    return;
  }
  if (handles->size() > kMaxHandles) {
    info->notes.push_back(absl::StrCat("namespace ", info->nsid, " has ", handles->size(),
                                       " placement handles; nvkv uses the first ", kMaxHandles));
    handles->resize(kMaxHandles);
  }
  for (const PlacementHandleStatus& handle : *handles) {
    info->placement_ids.push_back(handle.placement_id);
  }
}

// Fills the geometry in `info` from Identify, and the queue limits. A zoned namespace is refused
// here unless `accept_zoned`.
absl::Status ReadGeometry(int fd, bool accept_zoned, DeviceInfo* info,
                          NvmeQueueLimits* queue_limits) {
  NVKV_ASSIGN_OR_RETURN(info->nsid, NamespaceId(fd, info->path));
  auto page = std::make_unique<IdentifyPage>();
  NVKV_RETURN_IF_ERROR(Identify(fd, IdentifyCns::kController, 0, info->path, page.get()));
  NVKV_ASSIGN_OR_RETURN(const ControllerIdentity controller, ParseIdentifyController(page->bytes));
  NVKV_ASSIGN_OR_RETURN(info->zoned, IsZonedNamespace(fd, info->nsid, info->path, page.get()));
  if (info->zoned && !accept_zoned) {
    return absl::UnimplementedError(
        absl::StrCat(info->path, ": zoned namespace: not supported yet"));
  }
  // A zoned namespace has the NVM command set's Identify Namespace too (size, LBA formats).
  NVKV_RETURN_IF_ERROR(Identify(fd, IdentifyCns::kNamespace, info->nsid, info->path, page.get()));
  auto ns = ParseIdentifyNamespace(page->bytes);
  if (!ns.ok()) {
    return absl::Status(ns.status().code(), absl::StrCat(info->path, " namespace ", info->nsid,
                                                         ": ", ns.status().message()));
  }
  info->lba_bytes = ns->lba_bytes;
  info->lba_count = ns->lba_count;
  info->volatile_write_cache = controller.volatile_write_cache;
  info->memory_alignment = kNvmeMemoryAlignment;
  info->max_transfer_bytes = ChooseTransferLimits(controller.max_transfer_bytes, info->path,
                                                  info->lba_bytes, queue_limits, &info->notes);
  if (info->zoned) {
    NVKV_RETURN_IF_ERROR(ReadZoneModel(fd, ns->format_index, info, page.get()));
  } else if (controller.flexible_data_placement) {
    ReadPlacementHandles(fd, info);
  }
  return absl::OkStatus();
}

// Opens, locks and identifies `path`; returns the fd (owned by the caller) with `info` and
// `queue_limits` filled.
absl::StatusOr<int> OpenAndIdentify(const std::string& path, const DeviceOptions& options,
                                    DeviceInfo* info, NvmeQueueLimits* queue_limits,
                                    DeviceClaim* claim) {
  if (path.empty()) return absl::InvalidArgumentError("empty device path");
  NVKV_RETURN_IF_ERROR(CheckNvmeGeneric(path));
  // No O_DIRECT: a character device has no page cache to bypass.
  const int fd = open(path.c_str(), (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd < 0) return OpenError(errno, path);
  FdCloser closer{fd};
  if (options.lock_device) {
    NVKV_ASSIGN_OR_RETURN(*claim, ClaimDevice(fd, path, ClaimModeFor(options.read_only),
                                              options.lock_wait_ms, &info->notes));
  }
  info->kind = DeviceKind::kNvmePassthrough;
  info->path = path;
  info->read_only = options.read_only;
  NVKV_RETURN_IF_ERROR(ReadGeometry(fd, options.zoned_access != ZonedAccess::kRefuse, info,
                                   queue_limits));
  if (info->capacity_bytes() < options.min_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": too small: ",
                                                      info->capacity_bytes(), " bytes, need ",
                                                      options.min_bytes));
  }
  closer.fd = -1;
  return fd;
}

}  // namespace

bool IsNvmeGenericDevice(const std::string& path) { return CheckNvmeGeneric(path).ok(); }

absl::StatusOr<std::vector<PlacementHandleStatus>> ReadPlacementHandleStatus(
    const std::string& path) {
  NVKV_RETURN_IF_ERROR(CheckNvmeGeneric(path));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(errno, path);
  FdCloser closer{fd};
  NVKV_ASSIGN_OR_RETURN(const uint32_t nsid, NamespaceId(fd, path));
  return QueryPlacementHandles(fd, nsid, path);
}

absl::StatusOr<std::unique_ptr<Device>> OpenNvmeDevice(const std::string& path,
                                                       const DeviceOptions& options) {
  auto device = NvmeDevice::Open(path, options);
  if (!device.ok()) return device.status();
  return std::unique_ptr<Device>(std::move(*device));
}

absl::StatusOr<std::unique_ptr<NvmeDevice>> NvmeDevice::Open(const std::string& path,
                                                             const DeviceOptions& options) {
  DeviceInfo info;
  NvmeQueueLimits limits;
  DeviceClaim claim;
  NVKV_ASSIGN_OR_RETURN(const int fd, OpenAndIdentify(path, options, &info, &limits, &claim));
  auto device = Create(fd, std::move(info), limits, options);
  if (device.ok()) (*device)->HoldClaim(std::move(claim), options.lock_device);
  return device;
}

absl::StatusOr<std::unique_ptr<NvmeDevice>> NvmeDevice::Create(int fd, DeviceInfo info,
                                                               NvmeQueueLimits limits,
                                                               const DeviceOptions& options) {
  FdCloser closer{fd};
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<BufferPool> pool, BufferPool::Create(options.buffers));
  // Passthrough needs the big entries: a 128-byte SQE carries the 72-byte NVMe command and a
  // 32-byte CQE carries the command's result dword. Ring::Create fails with kUnimplemented when
  // the kernel refuses them.
  NVKV_ASSIGN_OR_RETURN(
      std::unique_ptr<Ring> ring,
      CreateRingFor(fd, IORING_SETUP_SQE128 | IORING_SETUP_CQE32, options.ring, *pool, &info));
  if (!ring->OpcodeSupported(IORING_OP_URING_CMD)) {
    return absl::UnimplementedError(absl::StrCat(
        info.path, ": io_uring lacks IORING_OP_URING_CMD (NVMe passthrough needs Linux 5.19+)"));
  }
  const uint32_t region_pages = pool->chunk_bytes() / kHostPageBytes;
  if (info.ring.fixed_buffers && region_pages > limits.max_segments) {
    info.notes.push_back(absl::StrCat(
        "registered regions are ", region_pages, " pages but the queue takes ",
        limits.max_segments, " segments: commands more than that many pages before their "
        "region's end pass plain addresses (Linux 6.1 counts pages to the region's end)"));
  }
  const uint32_t lba_bytes = info.lba_bytes;
  const uint32_t max_transfer_bytes = info.max_transfer_bytes;
  closer.fd = -1;
  auto device = std::unique_ptr<NvmeDevice>(
      new NvmeDevice(std::move(info), fd, std::move(ring), std::move(pool)));
  device->max_lba_per_command_ = MaxLbaPerCommand(max_transfer_bytes, lba_bytes);
  device->max_lba_per_command_unaligned_ =
      MaxLbaPerCommand(limits.unaligned_max_transfer_bytes, lba_bytes);
  device->limits_ = limits;
  device->options_ = options;
  return device;
}

absl::StatusOr<std::unique_ptr<Device>> NvmeDevice::OpenQueue(
    const QueueOptions& queue_options) {
  NVKV_ASSIGN_OR_RETURN(const int fd, DuplicateFd(this->fd()));
  DeviceInfo info = info_;
  info.notes.clear();
  DeviceOptions options = options_;
  options.ring.queue_depth = queue_options.queue_depth;
  options.buffers = queue_options.buffers;
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<NvmeDevice> queue,
                        Create(fd, std::move(info), limits_, options));
  return std::unique_ptr<Device>(std::move(queue));
}

absl::Status NvmeDevice::Enqueue(IoRequest* request) {
  // A zone append or report is one command, never split: within what one command carries.
  if ((request->op == IoOp::kZoneAppend || request->op == IoOp::kZoneReport) &&
      request->lba_count > LbaPerCommand(*request)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zone command of ", request->lba_count, " blocks: one command of ", info_.path,
        " carries at most ", LbaPerCommand(*request), " for this buffer"));
  }
  if (request->op == IoOp::kRead || request->op == IoOp::kWrite) {
    const uint32_t commands = SqeCount(*request);
    if (commands > kMaxCommandsPerRequest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request of ", request->lba_count, " blocks needs ", commands, " commands of at most ",
          LbaPerCommand(*request), " blocks; one request may carry ", kMaxCommandsPerRequest));
    }
  }
  return RingDevice::Enqueue(request);
}

uint32_t NvmeDevice::LbaPerCommand(const IoRequest& request) const {
  const bool page_aligned =
      reinterpret_cast<uintptr_t>(request.buffer.data) % kHostPageBytes == 0;
  return page_aligned ? max_lba_per_command_ : max_lba_per_command_unaligned_;
}

bool NvmeDevice::UsesFixedBuffer(const IoRequest& request) const {
  return info_.ring.fixed_buffers && request.buffer.buf_index >= 0;
}

int32_t NvmeDevice::FixedIndexFor(const IoRequest& request, uint64_t addr) {
  if (!UsesFixedBuffer(request)) return -1;
  const std::span<const iovec> regions = buffers().regions();
  const auto index = static_cast<size_t>(request.buffer.buf_index);
  if (index >= regions.size()) return -1;  // not one of ours: let the kernel pin it
  const uint64_t region_end =
      reinterpret_cast<uintptr_t>(regions[index].iov_base) + regions[index].iov_len;
  return FixedBufferImportFits(addr, region_end, limits_.max_segments) ? request.buffer.buf_index
                                                                       : -1;
}

std::optional<uint16_t> NvmeDevice::PlacementIdOf(const IoRequest& request) const {
  if (info_.placement_ids.empty()) return std::nullopt;
  return info_.placement_ids[request.placement];  // ValidateRequest held it in range
}

uint32_t NvmeDevice::SqeCount(const IoRequest& request) const {
  if (request.op != IoOp::kRead && request.op != IoOp::kWrite) return 1;
  return PieceCount(request.lba_count, LbaPerCommand(request));
}

void NvmeDevice::PrepareSqes(IoRequest* request, io_uring_sqe** sqes) {
  UringCmdTarget target;
  target.fd = sqe_fd();
  target.fixed_file = info_.ring.registered_file;
  target.cmd_op = NVME_URING_CMD_IO;
  target.user_data = reinterpret_cast<uintptr_t>(request);
  const uint64_t base = reinterpret_cast<uintptr_t>(request->buffer.data);
  switch (request->op) {
    case IoOp::kRead:
    case IoOp::kWrite:
      break;
    case IoOp::kFlush:
      PrepareNvmeUringCmd(sqes[0], EncodeFlush(info_.nsid), target);
      return;
    case IoOp::kZoneAppend: {
      BlockTransfer transfer;
      transfer.nsid = info_.nsid;
      transfer.lba = request->lba;
      transfer.lba_count = request->lba_count;
      transfer.lba_bytes = info_.lba_bytes;
      transfer.addr = base;
      transfer.placement_id = PlacementIdOf(*request);
      target.buf_index = FixedIndexFor(*request, base);
      PrepareNvmeUringCmd(sqes[0], EncodeZoneAppend(transfer, request->fua), target);
      return;
    }
    case IoOp::kZoneReset:
    case IoOp::kZoneFinish: {
      const ZoneSendAction action =
          request->op == IoOp::kZoneReset ? ZoneSendAction::kReset : ZoneSendAction::kFinish;
      PrepareNvmeUringCmd(sqes[0], EncodeZoneManagementSend(info_.nsid, request->lba, action),
                          target);
      return;
    }
    case IoOp::kZoneReport:
      target.buf_index = FixedIndexFor(*request, base);
      PrepareNvmeUringCmd(sqes[0],
                          EncodeZoneReport(info_.nsid, request->lba, base,
                                           request->lba_count * info_.lba_bytes),
                          target);
      return;
    case IoOp::kWaitEvent:
      NVKV_CHECK(false);  // RingDevice prepares these itself
  }
  const uint32_t per_command = LbaPerCommand(*request);
  const uint32_t pieces = PieceCount(request->lba_count, per_command);
  for (uint32_t i = 0; i < pieces; ++i) {
    const Piece piece =
        PieceAt(request->lba, request->lba_count, per_command, info_.lba_bytes, i);
    BlockTransfer transfer;
    transfer.nsid = info_.nsid;
    transfer.lba = piece.lba;
    transfer.lba_count = piece.lba_count;
    transfer.lba_bytes = info_.lba_bytes;
    transfer.addr = base + piece.offset_bytes;
    if (request->op == IoOp::kWrite) transfer.placement_id = PlacementIdOf(*request);
    const nvme_uring_cmd cmd = request->op == IoOp::kWrite
                                   ? EncodeWrite(transfer, request->fua)
                                   : EncodeRead(transfer);
    target.buf_index = FixedIndexFor(*request, transfer.addr);
    PrepareNvmeUringCmd(sqes[i], cmd, target);
  }
}

CommandContext CompletionContext(const IoRequest& request, const DeviceInfo& info) {
  CommandContext context;
  switch (request.op) {
    case IoOp::kRead:
      context.op = NvmeOp::kRead;
      break;
    case IoOp::kWrite:
      context.op = NvmeOp::kWrite;
      break;
    case IoOp::kFlush:
    case IoOp::kWaitEvent:
      context.op = NvmeOp::kFlush;
      break;
    case IoOp::kZoneAppend:
      context.op = NvmeOp::kZoneAppend;
      break;
    case IoOp::kZoneReset:
      context.op = NvmeOp::kZoneReset;
      break;
    case IoOp::kZoneFinish:
      context.op = NvmeOp::kZoneFinish;
      break;
    case IoOp::kZoneReport:
      context.op = NvmeOp::kZoneReport;
      break;
  }
  context.lba = request.lba;
  context.lba_count = request.lba_count;
  context.path = info.path;
  return context;
}

absl::Status NvmeDevice::CompletionStatus(IoRequest& request, const io_uring_cqe& cqe) {
  CommandContext context = CompletionContext(request, info_);
  context.fixed_buffer = UsesFixedBuffer(request);
  absl::Status status = MapCompletion(cqe.res, context);
  // The command's 64-bit result (CQE dwords 0-1) rides in the big CQE: for a zone append, the
  // first block written (ALBA), which must lie in the zone appended to, as device input.
  if (status.ok() && request.op == IoOp::kZoneAppend) {
    const uint64_t lba = cqe.big_cqe[0];
    if (lba < request.lba ||
        lba + request.lba_count > request.lba + info_.zones.capacity_blocks) {
      return absl::DataLossError(absl::StrCat(
          "NVMe zone append to the zone at LBA ", request.lba, " of ", info_.path,
          " completed at LBA ", lba, ", outside the zone's ", info_.zones.capacity_blocks,
          " writable blocks"));
    }
    request.appended_lba = lba;
  }
  return status;
}

std::optional<uint32_t> FindCharDeviceMajor(std::string_view proc_devices,
                                            std::string_view name) {
  bool in_char_section = false;
  while (!proc_devices.empty()) {
    const size_t end = std::min(proc_devices.find('\n'), proc_devices.size());
    std::string_view line = proc_devices.substr(0, end);
    proc_devices.remove_prefix(std::min(end + 1, proc_devices.size()));
    if (line == "Character devices:") {
      in_char_section = true;
      continue;
    }
    if (line.empty() || line.back() == ':') {  // blank line or the "Block devices:" header
      in_char_section = false;
      continue;
    }
    if (!in_char_section) continue;
    // "<major> <name>", the major right-aligned in a 3-wide field.
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.substr(space + 1) != name) continue;
    uint32_t major_number = 0;
    const auto [ptr, error] = std::from_chars(line.data(), line.data() + space, major_number);
    if (error == std::errc() && ptr == line.data() + space) return major_number;
  }
  return std::nullopt;
}

std::string BlockDeviceNameForGeneric(std::string_view generic_name) {
  if (generic_name.size() <= 2 || generic_name.substr(0, 2) != "ng") return "";
  return "nvme" + std::string(generic_name.substr(2));
}

uint32_t EffectiveMaxSegments(uint64_t mdts_bytes, const KernelQueueLimits& limits) {
  if (limits.max_segments != 0) return limits.max_segments;
  const uint64_t hw_bytes = mdts_bytes != 0 ? std::min(mdts_bytes, kDriverMaxTransferBytes)
                                            : kDriverMaxTransferBytes;
  return static_cast<uint32_t>(std::min<uint64_t>(hw_bytes / kHostPageBytes + 1,
                                                  kDriverMaxSegments));
}

bool FixedBufferImportFits(uint64_t addr, uint64_t region_end, uint32_t max_segments) {
  if (addr >= region_end) return false;
  const uint64_t first_page = addr / kHostPageBytes;
  const uint64_t end_page = (region_end + kHostPageBytes - 1) / kHostPageBytes;
  return end_page - first_page <= max_segments;
}

uint32_t ChooseMaxTransferBytes(uint64_t mdts_bytes, const KernelQueueLimits& limits,
                                uint32_t lba_bytes, bool page_aligned) {
  NVKV_CHECK(lba_bytes > 0);
  uint64_t bytes = UINT32_MAX;
  if (mdts_bytes != 0) bytes = std::min(bytes, mdts_bytes);
  if (limits.max_hw_bytes != 0) bytes = std::min(bytes, limits.max_hw_bytes);
  const uint32_t segments = EffectiveMaxSegments(mdts_bytes, limits);
  const uint32_t pages = page_aligned ? segments
                                      : std::min(std::max<uint32_t>(segments, 2), kBioMaxPages) - 1;
  bytes = std::min(bytes, uint64_t{pages} * kHostPageBytes);
  bytes -= bytes % lba_bytes;
  // A block larger than the limit cannot be split; let one block through and the kernel judge.
  return static_cast<uint32_t>(std::max<uint64_t>(bytes, lba_bytes));
}

}  // namespace nvkv::storage
