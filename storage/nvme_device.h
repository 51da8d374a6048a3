// NvmeDevice: NVMe I/O through io_uring passthrough (IORING_OP_URING_CMD) on a generic character
// device /dev/ngXnY. Reads, writes and flushes become NVMe commands built by nvme_command.h and
// bypass the block layer's request merging and scheduler; the geometry comes from Identify.
//
// Requirements (checked at open, each failure a clear Status):
//   - read and write access to /dev/ngXnY (udev makes it root-only by default); read access
//     for a read-only open (DeviceOptions::read_only), which opens the node O_RDONLY;
//   - CAP_SYS_ADMIN on Linux 6.1 for every passthrough command, Identify included. From 6.2 the
//     driver's nvme_cmd_allowed() lets other users send Identify Controller/Namespace (CNS 0x00,
//     0x01, 0x05, 0x06, 0x08) and I/O commands that the controller's Commands Supported and
//     Effects log marks supported without intrusive effects; writes only on an fd opened for
//     writing (O_RDWR unless read-only);
//   - io_uring with SQE128|CQE32 and IORING_OP_URING_CMD (5.19; fixed buffers 6.1);
//   - a namespace of the NVM command set in a format without metadata; zoned namespaces are
//     refused ("zoned namespace: not supported yet") unless DeviceOptions::zoned_access, which
//     opens them with info().zoned set.
//
// Thread contract: see Device. Invariants:
//   - every request becomes PieceCount() commands of at most max_transfer_bytes each; all of
//     them carry the request's address as user_data;
//   - a command uses IORING_URING_CMD_FIXED exactly when the pool is registered, the buffer has a
//     buf_index, and FixedBufferImportFits() for the command's address; otherwise it passes the
//     plain address and the kernel pins the pages.
#ifndef NVKV_STORAGE_NVME_DEVICE_H_
#define NVKV_STORAGE_NVME_DEVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/device.h"
#include "storage/nvme_command.h"
#include "storage/ring_device.h"

namespace nvkv::storage {

// True when `path` is a character device whose major number is the one /proc/devices lists for
// "nvme-generic" (the class of /dev/ngXnY). False for anything else, including missing paths.
bool IsNvmeGenericDevice(const std::string& path);

// Opens `path` as an NVMe passthrough device. Errors:
//   kNotFound          no such path
//   kInvalidArgument   not an NVMe generic character device; bad ring or pool options
//   kPermissionDenied  no read+write access to the node, or no CAP_SYS_ADMIN (see above)
//   kFailedPrecondition in use (exclusive lock held), too small, inactive namespace
//   kUnimplemented     zoned namespace (ZonedAccess::kRefuse), metadata format, io_uring without
//                      URING_CMD/SQE128
absl::StatusOr<std::unique_ptr<Device>> OpenNvmeDevice(const std::string& path,
                                                       const DeviceOptions& options);

// The reclaim unit handle status of the namespace behind generic node `path` as the device
// reports it now: each placement handle with the writes its reclaim unit may still take. Opens the
// node read-only and claims nothing, so it may run beside the namespace's opener. Errors: those of
// an open (kNotFound, kInvalidArgument, kPermissionDenied), and the command's (a namespace without
// FDP enabled fails it with an NVMe status).
absl::StatusOr<std::vector<PlacementHandleStatus>> ReadPlacementHandleStatus(
    const std::string& path);

// Transfer limits chosen at open besides DeviceInfo::max_transfer_bytes.
struct NvmeQueueLimits {
  uint32_t unaligned_max_transfer_bytes = 0;  // for buffers not starting on a page boundary
  uint32_t max_segments = 0;                  // EffectiveMaxSegments
};

class NvmeDevice final : public RingDevice {
 public:
  static absl::StatusOr<std::unique_ptr<NvmeDevice>> Open(const std::string& path,
                                                          const DeviceOptions& options);

  // Refuses (kInvalidArgument) a request that would need more commands than one request may
  // carry, then enqueues as RingDevice does.
  absl::Status Enqueue(IoRequest* request) override;
  absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) override;

 private:
  using RingDevice::RingDevice;
  // Wraps an open, locked fd (owned from then on) in a new ring and pool. `info` holds the
  // geometry, `limits` what was chosen at open beyond it.
  static absl::StatusOr<std::unique_ptr<NvmeDevice>> Create(int fd, DeviceInfo info,
                                                            NvmeQueueLimits limits,
                                                            const DeviceOptions& options);

  uint32_t SqeCount(const IoRequest& request) const override;
  void PrepareSqes(IoRequest* request, io_uring_sqe** sqes) override;
  absl::Status CompletionStatus(IoRequest& request, const io_uring_cqe& cqe) override;

  // Blocks one command may carry for `request` (depends on its buffer's page alignment).
  uint32_t LbaPerCommand(const IoRequest& request) const;
  // The request's buffer lies in a registered region of this queue's pool.
  bool UsesFixedBuffer(const IoRequest& request) const;
  // The placement identifier a write or append of `request` names (IoRequest::placement), none
  // without FDP.
  std::optional<uint16_t> PlacementIdOf(const IoRequest& request) const;
  // buf_index for the command of `request` at `addr`, or -1 to pass a plain address.
  int32_t FixedIndexFor(const IoRequest& request, uint64_t addr);

  uint32_t max_lba_per_command_ = 0;            // page-aligned buffers (info_.max_transfer_bytes)
  uint32_t max_lba_per_command_unaligned_ = 0;  // other buffers
  NvmeQueueLimits limits_;                      // kept for OpenQueue
  DeviceOptions options_;
};

// --- Pure helpers behind the functions above (exposed for tests) ---

// The major number /proc/devices lists for `name` under "Character devices:", if any.
// Example: "Character devices:\n  1 mem\n240 nvme-generic\n" -> 240 for "nvme-generic".
std::optional<uint32_t> FindCharDeviceMajor(std::string_view proc_devices, std::string_view name);

// The block device that shares a namespace with generic device `generic_name`: "ng0n1" ->
// "nvme0n1". Empty when the name does not start with "ng".
std::string BlockDeviceNameForGeneric(std::string_view generic_name);

// The context MapCompletion words a completion of `request` on `info.path` with (op, LBA,
// blocks, path); fixed_buffer is the caller's to set.
CommandContext CompletionContext(const IoRequest& request, const DeviceInfo& info);

// What the kernel's request queue of the namespace allows one passthrough request to carry
// (sysfs queue/max_hw_sectors_kb and queue/max_segments); 0 when unknown.
struct KernelQueueLimits {
  uint64_t max_hw_bytes = 0;
  uint32_t max_segments = 0;
};

// The DMA segments one request may use: the queue's max_segments when sysfs gave it, else what
// Linux 6.1's NVMe driver derives (nvme_set_queue_limits): max_hw_sectors in 4 KiB pages + 1, at
// most 127 (NVME_MAX_SEGS), with max_hw_sectors = MDTS, or the driver's 4 MiB without MDTS.
// Example: MDTS 128 KiB -> 33; MDTS 512 KiB or more -> 127.
uint32_t EffectiveMaxSegments(uint64_t mdts_bytes, const KernelQueueLimits& limits);

// Whether Linux 6.1 accepts a registered-buffer command whose data starts at `addr` in a
// registered region ending at `region_end`: io_uring imports the region's pages from addr's page
// to the region's end, and the block layer refuses (EINVAL) more of them than max_segments,
// however short the transfer. Example: 4 KiB pages, a 64-page region, 33 segments: an I/O in its
// last 33 pages fits; one at its start does not.
bool FixedBufferImportFits(uint64_t addr, uint64_t region_end, uint32_t max_segments);

// The largest transfer one command may carry: the least of MDTS (0: no limit), the queue's
// max_hw_sectors, and what EffectiveMaxSegments DMA segments cover, rounded down to whole
// blocks. Pinned user memory is one segment per
// 4 KiB page at worst, so a page-aligned buffer gets max_segments pages and any other buffer,
// which touches one page more than it spans, one page less.
// A buffer that does not start on a page boundary must also fit one bio: Linux 6.1 maps user
// memory into bios of at most 256 pages (BIO_MAX_VECS) and refuses (EINVAL) to chain a second
// bio behind a first that starts inside a page, since the NVMe queues' virt_boundary (4 KiB)
// forbids the gap (bio_will_gap). So at most 255 pages, 1020 KiB, when not aligned.
// Example: MDTS 512 KiB, max_hw 512 KiB, 127 segments, 4 KiB blocks -> 508 KiB when aligned,
// 504 KiB when not. nvme-tcp (no MDTS, 65535 segments): 65535 pages aligned, 255 when not.
uint32_t ChooseMaxTransferBytes(uint64_t mdts_bytes, const KernelQueueLimits& limits,
                                uint32_t lba_bytes, bool page_aligned);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_NVME_DEVICE_H_
