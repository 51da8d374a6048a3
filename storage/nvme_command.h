// NVMe command encoding for io_uring passthrough (IORING_OP_URING_CMD on /dev/ngXnY), the
// Identify pages the device geometry comes from, and the mapping of a passthrough completion to
// absl::Status. Pure: no I/O, no ring, no global state; every function here is unit-tested
// without a device (tests/storage/nvme_command_test.cc).
//
// Byte order: NVMe structures are little-endian. Identify pages are decoded byte by byte, so the
// parsers are right on any host; struct nvme_uring_cmd is filled in host order, as the kernel
// converts it with cpu_to_le32 when it builds the real 64-byte submission entry.
//
// Thread contract: all functions are reentrant.
#ifndef NVKV_STORAGE_NVME_COMMAND_H_
#define NVKV_STORAGE_NVME_COMMAND_H_

#include <liburing.h>
#include <linux/nvme_ioctl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nvkv::storage {

// --- Opcodes and constants (NVMe Base 2.0 / NVM Command Set 1.0) ---

inline constexpr uint8_t kNvmeOpcodeFlush = 0x00;     // NVM I/O
inline constexpr uint8_t kNvmeOpcodeWrite = 0x01;     // NVM I/O
inline constexpr uint8_t kNvmeOpcodeRead = 0x02;      // NVM I/O
inline constexpr uint8_t kNvmeOpcodeIdentify = 0x06;  // admin
inline constexpr uint8_t kNvmeOpcodeIoManagementReceive = 0x12;  // NVM I/O (FDP)
inline constexpr uint8_t kNvmeOpcodeZoneManagementSend = 0x79;     // ZNS I/O
inline constexpr uint8_t kNvmeOpcodeZoneManagementReceive = 0x7a;  // ZNS I/O
inline constexpr uint8_t kNvmeOpcodeZoneAppend = 0x7d;             // ZNS I/O

// Controls or Namespace Structure (Identify CDW10 bits 0-7): which page Identify returns.
enum class IdentifyCns : uint8_t {
  kNamespace = 0x00,         // Identify Namespace (NVM command set)
  kController = 0x01,        // Identify Controller
  kCsiNamespace = 0x05,      // I/O command set specific Identify Namespace (needs CSI)
  kCsiController = 0x06,     // I/O command set specific Identify Controller (needs CSI)
};

// Command Set Identifier (Identify CDW11 bits 24-31).
inline constexpr uint8_t kCsiNvm = 0x00;
inline constexpr uint8_t kCsiZoned = 0x02;  // Zoned Namespace command set (ZNS)

inline constexpr uint32_t kIdentifyPageBytes = 4096;
// FUA: Write CDW12 bit 30 ("Force Unit Access": durable before completion).
inline constexpr uint32_t kNvmeCdw12Fua = 1u << 30;
// NLB is a 16-bit zero-based count: one command moves at most 65536 blocks.
inline constexpr uint32_t kNvmeMaxLbaPerCommand = 1u << 16;
// MDTS is in units of the controller's minimum memory page size (CAP.MPSMIN). CAP is a register
// that passthrough cannot read; Linux only runs controllers whose MPSMIN fits its 4 KiB page,
// and every controller we know of has MPSMIN = 0, i.e. 4 KiB.
inline constexpr uint32_t kNvmeMdtsUnitBytes = 4096;

static_assert(sizeof(nvme_uring_cmd) == 72, "nvme_uring_cmd layout changed");
static_assert(sizeof(io_uring_sqe) == 64, "a big SQE is two io_uring_sqe slots");

// --- Encoding ---

// Converts a block count (1..65536) to NVMe's zero-based NLB field (CDW12 bits 0-15).
// Example: ToNlb(1) == 0, ToNlb(8) == 7, ToNlb(65536) == 0xffff. The only place the -1 happens.
uint16_t ToNlb(uint32_t lba_count);

// A contiguous block transfer, as one NVMe Read or Write moves it.
struct BlockTransfer {
  uint32_t nsid = 0;
  uint64_t lba = 0;        // first block (SLBA)
  uint32_t lba_count = 0;  // 1..kNvmeMaxLbaPerCommand (not zero-based)
  uint32_t lba_bytes = 0;  // block size; data_len = lba_count * lba_bytes
  uint64_t addr = 0;       // user address of the data (inside a registered buffer for fixed I/O)
  // Write and Zone Append only: the Flexible Data Placement placement identifier (PID, as the
  // Reclaim Unit Handle Status lists it) the data goes to; none: the namespace's default.
  std::optional<uint16_t> placement_id;
};

// NVM Read (0x02): SLBA in CDW10 (low 32 bits) / CDW11 (high), NLB in CDW12 bits 0-15.
nvme_uring_cmd EncodeRead(const BlockTransfer& transfer);
// NVM Write (0x01), same layout as Read; `fua` sets CDW12 bit 30. With a placement_id, the data
// placement directive: DTYPE 2 in CDW12 bits 20-23, the PID as DSPEC in CDW13 bits 16-31.
nvme_uring_cmd EncodeWrite(const BlockTransfer& transfer, bool fua);
// NVM Flush (0x00): no data; makes completed writes to `nsid` durable.
nvme_uring_cmd EncodeFlush(uint32_t nsid);
// ZNS Zone Append (0x7d), laid out as Write, with `transfer.lba` the zone's first block (ZSLBA);
// the completion's result (dwords 0-1) is the first block written (ALBA). A placement_id is
// encoded as for Write.
nvme_uring_cmd EncodeZoneAppend(const BlockTransfer& transfer, bool fua);
// Zone Send Action (Zone Management Send CDW13 bits 0-7).
enum class ZoneSendAction : uint8_t { kClose = 0x1, kFinish = 0x2, kOpen = 0x3, kReset = 0x4 };
// ZNS Zone Management Send (0x79) of `action` on the zone starting at `zone_start` (CDW10-11);
// no data, one zone (Select All, CDW13 bit 8, clear).
nvme_uring_cmd EncodeZoneManagementSend(uint32_t nsid, uint64_t zone_start,
                                        ZoneSendAction action);
// ZNS Zone Management Receive (0x7a), Report Zones of every state (ZRA 0, ZRASF 0) from the zone
// starting at `zone_start`, into `bytes` (a multiple of 4) at `addr`: NUMD (CDW12) is the
// zero-based dword count, and Partial Report (CDW13 bit 16) is set, so the header counts the
// descriptors sent, not every zone from there on (zones.h's parser holds it to that).
nvme_uring_cmd EncodeZoneReport(uint32_t nsid, uint64_t zone_start, uint64_t addr,
                                uint32_t bytes);
// I/O Management Receive (0x12), Reclaim Unit Handle Status (MO 1 in CDW10 bits 0-7), into
// `bytes` (a multiple of 4) at `addr`: NUMD (CDW11) is the zero-based dword count. What the
// namespace may name in a write's placement directive (ParsePlacementHandleStatus).
nvme_uring_cmd EncodePlacementHandleStatus(uint32_t nsid, uint64_t addr, uint32_t bytes);
// Admin Identify (0x06) returning one 4096-byte page into `addr`. `csi` matters only for the
// command-set specific pages (kCsiNamespace).
nvme_uring_cmd EncodeIdentify(IdentifyCns cns, uint32_t nsid, uint8_t csi, uint64_t addr);

// The same command in the layout of the synchronous NVME_IOCTL_ADMIN_CMD / NVME_IOCTL_IO_CMD
// ioctls (struct nvme_passthru_cmd has `result` where nvme_uring_cmd has `rsvd2`).
nvme_passthru_cmd ToPassthruCmd(const nvme_uring_cmd& cmd);

// Where one IORING_OP_URING_CMD goes and what comes back with it.
struct UringCmdTarget {
  int fd = -1;              // raw fd, or index in the fixed file table when fixed_file
  bool fixed_file = false;  // IOSQE_FIXED_FILE
  // NVME_URING_CMD_IO for I/O commands on /dev/ngXnY; NVME_URING_CMD_ADMIN for admin commands,
  // which Linux accepts only on the controller node /dev/nvmeX.
  uint32_t cmd_op = NVME_URING_CMD_IO;
  // Registered buffer the command's addr lies in (IORING_URING_CMD_FIXED), or -1 to let the
  // kernel pin the pages of a plain address.
  int32_t buf_index = -1;
  uint64_t user_data = 0;
};

// Fills the whole 128-byte SQE at `sqe` (taken from an IORING_SETUP_SQE128 ring) with a
// passthrough of `cmd`. liburing 2.3 has no io_uring_prep_uring_cmd; this is the one place that
// does its job. All 128 bytes are zeroed first: cmd_op and uring_cmd_flags share unions with
// off/rw_flags, and the kernel rejects a nonzero __pad1 or unknown uring_cmd_flags with EINVAL.
void PrepareNvmeUringCmd(io_uring_sqe* sqe, const nvme_uring_cmd& cmd,
                         const UringCmdTarget& target);

// --- Splitting at the device's transfer limit ---

// The most blocks one command may move: max_transfer_bytes / lba_bytes, at most 65536 (NLB).
// Example: 128 KiB limit, 4096-byte blocks -> 32; 4 MiB, 512-byte blocks -> 8192.
uint32_t MaxLbaPerCommand(uint32_t max_transfer_bytes, uint32_t lba_bytes);

// How many commands a request of `lba_count` blocks needs (at least 1).
// Example: 256 blocks at 32 per command -> 8.
uint32_t PieceCount(uint32_t lba_count, uint32_t max_lba_per_command);

struct Piece {
  uint64_t lba = 0;
  uint32_t lba_count = 0;
  uint64_t offset_bytes = 0;  // from the start of the request's buffer
};

// Piece `index` (0-based, < PieceCount) of a request starting at `lba`. Pieces are full-sized
// except the last. Example: lba 1000, 70 blocks, 32 per command, 4096-byte blocks ->
// {1000, 32, 0}, {1032, 32, 131072}, {1064, 6, 262144}.
Piece PieceAt(uint64_t lba, uint32_t lba_count, uint32_t max_lba_per_command, uint32_t lba_bytes,
              uint32_t index);

// --- Identify ---

struct ControllerIdentity {
  uint8_t mdts = 0;
  // 2^MDTS x 4 KiB; 0 when MDTS is 0 ("no limit": the kernel's own limits still apply).
  uint64_t max_transfer_bytes = 0;
  bool volatile_write_cache = false;  // VWC bit 0: a volatile write cache is present
  bool flexible_data_placement = false;  // CTRATT bit 19 (FDPS): FDP supported
};

// Parses an Identify Controller page (CNS 0x01): CTRATT at bytes 96-99, MDTS at byte 77, VWC at
// byte 525.
// kInvalidArgument when `page` is not 4096 bytes.
absl::StatusOr<ControllerIdentity> ParseIdentifyController(std::span<const uint8_t> page);

struct NamespaceIdentity {
  uint64_t lba_count = 0;     // NSZE
  uint32_t lba_bytes = 0;     // 2^LBADS of the format in use
  uint8_t format_index = 0;   // FLBAS format in use
};

// Parses an Identify Namespace page (CNS 0x00): NSZE (bytes 0-7), NLBAF (25), FLBAS (26) and the
// LBA format table at byte 128. Errors:
//   kInvalidArgument  page not 4096 bytes
//   kFailedPrecondition NSZE is 0 (inactive namespace or not an NVM command set namespace)
//   kDataLoss         FLBAS names a format past NLBAF, or the format has no usable LBADS
//   kUnimplemented    the format carries metadata (MS > 0) or blocks over 64 KiB
absl::StatusOr<NamespaceIdentity> ParseIdentifyNamespace(std::span<const uint8_t> page);

// What the Zoned Namespace command set's Identify pages say of the zones (CNS 0x05 and 0x06
// with CSI 0x02).
struct ZonedNamespaceIdentity {
  uint64_t zone_blocks = 0;  // ZSZE of the LBA format in use
  uint32_t max_open = 0;     // MOR + 1 (it is zero-based); 0: no limit (MOR 0xffffffff)
  uint32_t max_active = 0;   // MAR + 1 likewise
};
// Parses the ZNS Identify Namespace page: MAR (bytes 4-7), MOR (8-11), and ZSZE (8 bytes) of
// the LBA Format Extension of `format_index` (16 bytes each from byte 2816). kInvalidArgument
// when `page` is not 4096 bytes; kDataLoss when that format's zone size is 0.
absl::StatusOr<ZonedNamespaceIdentity> ParseZonedIdentifyNamespace(std::span<const uint8_t> page,
                                                                   uint8_t format_index);
// Parses the ZNS Identify Controller page: ZASL (byte 0), the largest Zone Append as a power of
// two of 4 KiB units (kNvmeMdtsUnitBytes), 0 meaning MDTS's limit. Returns the bytes, 0 for
// "MDTS's". kInvalidArgument when `page` is not 4096 bytes.
absl::StatusOr<uint64_t> ParseZonedIdentifyController(std::span<const uint8_t> page);

// One Reclaim Unit Handle Status descriptor (32 bytes each, from byte 16 of the status; bytes 14-15
// count them): a placement handle the namespace may write through.
struct PlacementHandleStatus {
  uint16_t placement_id = 0;     // PID: what a write's DSPEC names (reclaim group and handle)
  uint16_t handle_id = 0;        // RUHID: the endurance group's reclaim unit handle
  uint64_t available_writes = 0;  // RUAMW: blocks the current reclaim unit may still take
};
// The bytes a Reclaim Unit Handle Status must have to carry every descriptor its header counts
// (the header counts them all, however few the bytes asked for carry). REQUIRES: status holds the
// 16-byte header.
uint32_t PlacementHandleStatusBytes(std::span<const uint8_t> status);
// Parses a Reclaim Unit Handle Status of `status.size()` bytes. kDataLoss when the header counts
// more descriptors than those bytes hold, or status is shorter than its 16-byte header.
absl::StatusOr<std::vector<PlacementHandleStatus>> ParsePlacementHandleStatus(
    std::span<const uint8_t> status);

// --- Completion status ---

// What a completion's `res` says when it is positive: the 15-bit NVMe Status Field.
//
// Where it comes from (Linux drivers/nvme/host): the controller's CQE dword 3 holds the phase tag
// in bit 16 and the Status Field in bits 17-31. The driver reads the upper 16 bits as
// cqe->status and stores nvme_req(req)->status = le16_to_cpu(cqe->status) >> 1 (in
// nvme_try_complete_req), dropping the phase tag; nvme_uring_cmd_end_io hands that value to
// io_uring_cmd_done, which posts it as cqe->res (or -EINTR when the driver cancelled the command,
// or, with the late-2023 fix also in stable kernels, -errno of the block-layer error when the
// NVMe status is 0). So in `res`:
//   bits 0-7 SC, bits 8-10 SCT, bits 11-12 CRD, bit 13 More, bit 14 DNR.
// Worked example: a read past the namespace end. QEMU completes it with SCT 0, SC 0x80 (LBA Out
// of Range) and DNR. CQE dword 3 bits 31:16 = (0x4080 << 1) | phase = 0x8101; the driver keeps
// 0x8101 >> 1 = 0x4080; res = 0x4080 = 16512: SC = 0x80, SCT = (0x4080 >> 8) & 7 = 0, DNR =
// (0x4080 >> 14) & 1 = 1.
struct NvmeStatus {
  uint8_t sc = 0;   // Status Code
  uint8_t sct = 0;  // Status Code Type: 0 generic, 1 command specific, 2 media, 3 path, 7 vendor
  uint8_t crd = 0;  // Command Retry Delay (index into the controller's CRDT times)
  bool more = false;  // More: details in the Error Information log page
  bool dnr = false;   // Do Not Retry: the same command will fail again
};

inline constexpr uint8_t kSctGeneric = 0;
inline constexpr uint8_t kSctCommandSpecific = 1;
inline constexpr uint8_t kSctMedia = 2;
inline constexpr uint8_t kSctPath = 3;
inline constexpr uint8_t kSctVendor = 7;

NvmeStatus DecodeNvmeStatus(int32_t res);

// The spec's name for (sct, sc), or nullptr when we do not name it.
const char* NvmeStatusName(uint8_t sct, uint8_t sc);

enum class NvmeOp : uint8_t {
  kRead,
  kWrite,
  kFlush,
  kIdentify,
  kZoneAppend,
  kZoneReset,
  kZoneFinish,
  kZoneReport,
  kPlacementStatus,
};
const char* NvmeOpName(NvmeOp op);

// What a command was, for the error message and the errno hints.
struct CommandContext {
  NvmeOp op = NvmeOp::kRead;
  uint64_t lba = 0;           // read/write: first block of the request
  uint32_t lba_count = 0;     // read/write: blocks in the request (0: not shown)
  bool fixed_buffer = false;  // IORING_URING_CMD_FIXED was used
  absl::string_view path;     // borrowed for the call; empty: not shown
};

// The one mapping from a passthrough completion (cqe->res, or an NVMe ioctl's return value with
// -1 turned into -errno) to a Status. Two error spaces, never mixed:
//   res == 0  OK
//   res <  0  -errno from the kernel: absl::ErrnoToStatus, with hints for EINVAL on a fixed buffer
//             (the 127-page limit), EACCES (CAP_SYS_ADMIN), EOPNOTSUPP and EINTR
//   res >  0  NVMe Status Field: kOutOfRange for LBA Out of Range, kResourceExhausted for
//             Capacity Exceeded, kDataLoss for media errors, kInvalidArgument for invalid
//             opcode/field/format, kUnavailable for transient and path errors; the zone
//             statuses as zones' rules have them (MemDevice words them the same):
//             kResourceExhausted for Zone Is Full, Too Many Active Zones and Too Many Open
//             Zones, kFailedPrecondition for a write off the write pointer or past the capacity,
//             a read-only zone and an invalid state transition, kDataLoss for an offline zone;
//             else kInternal.
// Message example: "NVMe read at LBA 0x1a00: status SCT 0x2 SC 0x81 (Unrecovered Read Error)".
absl::Status MapCompletion(int32_t res, const CommandContext& context);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_NVME_COMMAND_H_
