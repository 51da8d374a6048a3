#include "storage/nvme_command.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/base/check.h"

namespace nvkv::storage {
namespace {

// The passthrough command lives in the second half of a big SQE: sqe->cmd starts at byte 48, and
// 48 + 72 bytes of nvme_uring_cmd fit in 128.
constexpr size_t kSqeCmdOffset = 48;
constexpr size_t kBigSqeBytes = 128;
static_assert(offsetof(io_uring_sqe, cmd) == kSqeCmdOffset);
static_assert(kSqeCmdOffset + sizeof(nvme_uring_cmd) <= kBigSqeBytes);

uint32_t Low32(uint64_t value) { return static_cast<uint32_t>(value); }
uint32_t High32(uint64_t value) { return static_cast<uint32_t>(value >> 32); }

nvme_uring_cmd EncodeBlockTransfer(uint8_t opcode, const BlockTransfer& transfer) {
  NVKV_CHECK(transfer.lba_bytes > 0);
  const uint64_t data_bytes = uint64_t{transfer.lba_count} * transfer.lba_bytes;
  NVKV_CHECK(data_bytes <= UINT32_MAX);
  nvme_uring_cmd cmd;
  std::memset(&cmd, 0, sizeof(cmd));
  cmd.opcode = opcode;
  cmd.nsid = transfer.nsid;
  cmd.addr = transfer.addr;
  cmd.data_len = static_cast<uint32_t>(data_bytes);
  cmd.cdw10 = Low32(transfer.lba);   // SLBA bits 0-31
  cmd.cdw11 = High32(transfer.lba);  // SLBA bits 32-63
  cmd.cdw12 = ToNlb(transfer.lba_count);
  return cmd;
}

// A command of `opcode` to namespace `nsid` that returns `bytes` of data into `addr`; its
// command dwords are the caller's to set.
nvme_uring_cmd EncodeDataIn(uint8_t opcode, uint32_t nsid, uint64_t addr, uint32_t bytes) {
  nvme_uring_cmd cmd;
  std::memset(&cmd, 0, sizeof(cmd));
  cmd.opcode = opcode;
  cmd.nsid = nsid;
  cmd.addr = addr;
  cmd.data_len = bytes;
  return cmd;
}

// A zone management command of `opcode` on the zone starting at `zone_start` (CDW10-11).
nvme_uring_cmd EncodeZoneCommand(uint8_t opcode, uint32_t nsid, uint64_t zone_start) {
  nvme_uring_cmd cmd;
  std::memset(&cmd, 0, sizeof(cmd));
  cmd.opcode = opcode;
  cmd.nsid = nsid;
  cmd.cdw10 = Low32(zone_start);
  cmd.cdw11 = High32(zone_start);
  return cmd;
}

// Little-endian field readers for Identify pages.
uint16_t Le16(std::span<const uint8_t> page, size_t at) {
  return static_cast<uint16_t>(page[at] | (page[at + 1] << 8));
}
uint32_t Le32(std::span<const uint8_t> page, size_t at) {
  return uint32_t{Le16(page, at)} | (uint32_t{Le16(page, at + 2)} << 16);
}
uint64_t Le64(std::span<const uint8_t> page, size_t at) {
  return uint64_t{Le32(page, at)} | (uint64_t{Le32(page, at + 4)} << 32);
}

absl::Status CheckPageSize(std::span<const uint8_t> page, const char* what) {
  if (page.size() != kIdentifyPageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " page is ", page.size(),
                                                   " bytes, expected ", kIdentifyPageBytes));
  }
  return absl::OkStatus();
}

// Identify Controller offsets.
constexpr size_t kCtrlMdts = 77;
constexpr size_t kCtrlCtratt = 96;
constexpr uint32_t kCtrattFdps = 1u << 19;
constexpr size_t kCtrlVwc = 525;
// MDTS above this is treated as this: 2^20 x 4 KiB = 4 GiB, far past any kernel limit, and the
// shift stays defined for every byte value.
constexpr uint8_t kMdtsCap = 20;

// ZNS Identify Namespace and Controller offsets.
constexpr size_t kZnsNsMar = 4;
constexpr size_t kZnsNsMor = 8;
constexpr size_t kZnsNsLbafeTable = 2816;
constexpr size_t kZnsNsLbafeBytes = 16;
constexpr size_t kZnsCtrlZasl = 0;
// Write CDW12 DTYPE (bits 20-23) of the data placement directive; its DSPEC goes in CDW13 16-31.
constexpr uint32_t kCdw12DirectivePlacement = 2u << 20;
// I/O Management Receive: Reclaim Unit Handle Status, its header and descriptors.
constexpr uint32_t kIoManagementPlacementStatus = 1;
constexpr size_t kPlacementStatusHeaderBytes = 16;
constexpr size_t kPlacementStatusCount = 14;
constexpr size_t kPlacementStatusDescriptorBytes = 32;
// ZNS Zone Management Receive CDW13: Partial Report.
constexpr uint32_t kZoneReportPartial = 1u << 16;

// The data placement directive of a write or append that names a placement identifier.
void AddPlacement(const BlockTransfer& transfer, nvme_uring_cmd* cmd) {
  if (!transfer.placement_id.has_value()) return;
  cmd->cdw12 |= kCdw12DirectivePlacement;
  cmd->cdw13 = uint32_t{*transfer.placement_id} << 16;
}

// Identify Namespace offsets.
constexpr size_t kNsNsze = 0;
constexpr size_t kNsNlbaf = 25;
constexpr size_t kNsFlbas = 26;
constexpr size_t kNsLbafTable = 128;
constexpr uint32_t kMaxLbaFormats = 64;
constexpr uint8_t kMinLbads = 9;   // 512 bytes: the smallest the spec allows
constexpr uint8_t kMaxLbads = 16;  // 64 KiB: past the block layer's page-size limit anyway

// FLBAS: bits 0-3 are the low four bits of the format index, bits 5-6 the high two (used when
// there are more than 16 formats); bit 4 says where metadata goes.
uint8_t FormatIndex(uint8_t flbas) {
  return static_cast<uint8_t>((flbas & 0x0f) | (((flbas >> 5) & 0x03) << 4));
}

const char* GenericStatusName(uint8_t sc) {
  switch (sc) {
    case 0x00: return "Successful Completion";
    case 0x01: return "Invalid Command Opcode";
    case 0x02: return "Invalid Field in Command";
    case 0x03: return "Command ID Conflict";
    case 0x04: return "Data Transfer Error";
    case 0x05: return "Commands Aborted due to Power Loss Notification";
    case 0x06: return "Internal Error";
    case 0x07: return "Command Abort Requested";
    case 0x08: return "Command Aborted due to SQ Deletion";
    case 0x0b: return "Invalid Namespace or Format";
    case 0x0c: return "Command Sequence Error";
    case 0x15: return "Operation Denied";
    case 0x1d: return "Sanitize In Progress";
    case 0x20: return "Namespace is Write Protected";
    case 0x21: return "Command Interrupted";
    case 0x22: return "Transient Transport Error";
    case 0x80: return "LBA Out of Range";
    case 0x81: return "Capacity Exceeded";
    case 0x82: return "Namespace Not Ready";
    case 0x83: return "Reservation Conflict";
    case 0x84: return "Format In Progress";
    default: return nullptr;
  }
}

const char* CommandSpecificStatusName(uint8_t sc) {
  switch (sc) {
    case 0x0a: return "Invalid Format";
    case 0x80: return "Conflicting Attributes";
    case 0x81: return "Invalid Protection Information";
    case 0x82: return "Attempted Write to Read Only Range";
    case 0xb8: return "Zone Boundary Error";
    case 0xb9: return "Zone Is Full";
    case 0xba: return "Zone Is Read Only";
    case 0xbb: return "Zone Is Offline";
    case 0xbc: return "Zone Invalid Write";
    case 0xbd: return "Too Many Active Zones";
    case 0xbe: return "Too Many Open Zones";
    case 0xbf: return "Invalid Zone State Transition";
    default: return nullptr;
  }
}

const char* MediaStatusName(uint8_t sc) {
  switch (sc) {
    case 0x80: return "Write Fault";
    case 0x81: return "Unrecovered Read Error";
    case 0x82: return "End-to-end Guard Check Error";
    case 0x83: return "End-to-end Application Tag Check Error";
    case 0x84: return "End-to-end Reference Tag Check Error";
    case 0x85: return "Compare Failure";
    case 0x86: return "Access Denied";
    case 0x87: return "Deallocated or Unwritten Logical Block";
    default: return nullptr;
  }
}

const char* PathStatusName(uint8_t sc) {
  switch (sc) {
    case 0x00: return "Internal Path Error";
    case 0x01: return "Asymmetric Access Persistent Loss";
    case 0x02: return "Asymmetric Access Inaccessible";
    case 0x03: return "Asymmetric Access Transition";
    case 0x60: return "Controller Pathing Error";
    case 0x70: return "Host Pathing Error";
    case 0x71: return "Command Aborted By Host";
    default: return nullptr;
  }
}

// Text for codes we do not name, so every message has a name in parentheses.
const char* UnnamedStatusText(uint8_t sct) {
  switch (sct) {
    case kSctGeneric: return "unnamed generic status";
    case kSctCommandSpecific: return "unnamed command specific status";
    case kSctMedia: return "unnamed media or data integrity error";
    case kSctPath: return "unnamed path related status";
    case kSctVendor: return "vendor specific status";
    default: return "reserved status code type";
  }
}

absl::StatusCode GenericStatusCode(uint8_t sc) {
  switch (sc) {
    case 0x01:  // Invalid Command Opcode
    case 0x02:  // Invalid Field in Command
    case 0x0b:  // Invalid Namespace or Format
      return absl::StatusCode::kInvalidArgument;
    case 0x04:  // Data Transfer Error: the bytes moved cannot be trusted
      return absl::StatusCode::kDataLoss;
    case 0x80:  // LBA Out of Range
      return absl::StatusCode::kOutOfRange;
    case 0x81:  // Capacity Exceeded
      return absl::StatusCode::kResourceExhausted;
    case 0x15:  // Operation Denied
    case 0x20:  // Namespace is Write Protected
    case 0x83:  // Reservation Conflict
      return absl::StatusCode::kFailedPrecondition;
    case 0x05:  // aborted: power loss notification
    case 0x07:  // aborted on request
    case 0x08:  // aborted: SQ deleted
    case 0x1d:  // Sanitize In Progress
    case 0x21:  // Command Interrupted
    case 0x22:  // Transient Transport Error
    case 0x82:  // Namespace Not Ready
    case 0x84:  // Format In Progress
      return absl::StatusCode::kUnavailable;
    default:  // includes 0x06 Internal Error
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode CommandSpecificStatusCode(uint8_t sc) {
  switch (sc) {
    case 0x0a:  // Invalid Format
      return absl::StatusCode::kInvalidArgument;
    case 0xb9:  // Zone Is Full
    case 0xbd:  // Too Many Active Zones
    case 0xbe:  // Too Many Open Zones
      return absl::StatusCode::kResourceExhausted;
    case 0xb8:  // Zone Boundary Error
    case 0xba:  // Zone Is Read Only
    case 0xbc:  // Zone Invalid Write
    case 0xbf:  // Invalid Zone State Transition
      return absl::StatusCode::kFailedPrecondition;
    case 0xbb:  // Zone Is Offline: its data is gone
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode NvmeStatusCode(const NvmeStatus& status) {
  switch (status.sct) {
    case kSctGeneric:
      return GenericStatusCode(status.sc);
    case kSctCommandSpecific:
      return CommandSpecificStatusCode(status.sc);
    case kSctMedia:
      return absl::StatusCode::kDataLoss;
    case kSctPath:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Whether a command of `op` names blocks (a zone command: its zone's first), and whether it
// moves data of lba_count blocks.
bool NamesBlocks(NvmeOp op) {
  return op != NvmeOp::kFlush && op != NvmeOp::kIdentify && op != NvmeOp::kPlacementStatus;
}
bool MovesBlocks(NvmeOp op) {
  return op == NvmeOp::kRead || op == NvmeOp::kWrite || op == NvmeOp::kZoneAppend;
}

// "NVMe read at LBA 0x1a00", "NVMe flush".
std::string Where(const CommandContext& context) {
  std::string where = absl::StrCat("NVMe ", NvmeOpName(context.op));
  if (NamesBlocks(context.op)) {
    absl::StrAppendFormat(&where, " at LBA 0x%x", context.lba);
  }
  return where;
}

// " [8 blocks, /dev/ng0n1]" when known.
std::string Detail(const CommandContext& context) {
  const bool has_count = context.lba_count > 0 && MovesBlocks(context.op);
  if (!has_count && context.path.empty()) return "";
  std::string detail = " [";
  if (has_count) absl::StrAppend(&detail, context.lba_count, " blocks");
  if (has_count && !context.path.empty()) detail += ", ";
  absl::StrAppend(&detail, context.path, "]");
  return detail;
}

absl::Status MapNvmeStatus(int32_t res, const CommandContext& context) {
  const NvmeStatus status = DecodeNvmeStatus(res);
  const char* name = NvmeStatusName(status.sct, status.sc);
  std::string message = absl::StrFormat("%s: status SCT 0x%x SC 0x%x (%s)", Where(context),
                                        status.sct, status.sc,
                                        name != nullptr ? name : UnnamedStatusText(status.sct));
  if (status.dnr) message += ", DNR: retrying will not help";
  if (status.more) message += ", More: details in the Error Information log page";
  if (status.crd != 0) absl::StrAppend(&message, ", retry delay CRD ", status.crd);
  message += Detail(context);
  return absl::Status(NvmeStatusCode(status), message);
}

std::string ErrnoHint(int err, const CommandContext& context) {
  const bool data_op = MovesBlocks(context.op) || context.op == NvmeOp::kZoneReport;
  switch (err) {
    case EINVAL:
      if (data_op && context.fixed_buffer) {
        return "; with a registered buffer this usually means more pages lie between the "
               "I/O's start and the end of its registered region than the queue's max_segments "
               "(Linux 6.1 counts them all: 127 pages at most on NVMe PCIe, MDTS/4 KiB + 1 when "
               "MDTS is smaller); keep regions within that, e.g. 508 KiB for 127";
      }
      return "; the kernel refused the command (flags, nsid, or a transfer past "
             "max_hw_sectors_kb / max_segments)";
    case EACCES:
    case EPERM:
      return "; NVMe passthrough needs CAP_SYS_ADMIN on Linux before 6.2; later kernels let "
             "other users send only Identify and I/O commands the controller lists as "
             "supported in its Commands Supported and Effects log";
    case EOPNOTSUPP:
      return "; the driver refused the passthrough (it needs SQE128|CQE32 rings; IOPOLL needs "
             "poll queues)";
    case EINTR:
      return "; the driver cancelled the command (timeout or controller reset)";
    default:
      return "";
  }
}

}  // namespace

uint16_t ToNlb(uint32_t lba_count) {
  NVKV_CHECK(lba_count >= 1);
  NVKV_CHECK(lba_count <= kNvmeMaxLbaPerCommand);
  return static_cast<uint16_t>(lba_count - 1);
}

nvme_uring_cmd EncodeRead(const BlockTransfer& transfer) {
  return EncodeBlockTransfer(kNvmeOpcodeRead, transfer);
}

nvme_uring_cmd EncodeWrite(const BlockTransfer& transfer, bool fua) {
  nvme_uring_cmd cmd = EncodeBlockTransfer(kNvmeOpcodeWrite, transfer);
  if (fua) cmd.cdw12 |= kNvmeCdw12Fua;
  AddPlacement(transfer, &cmd);
  return cmd;
}

nvme_uring_cmd EncodeFlush(uint32_t nsid) {
  nvme_uring_cmd cmd;
  std::memset(&cmd, 0, sizeof(cmd));
  cmd.opcode = kNvmeOpcodeFlush;
  cmd.nsid = nsid;
  return cmd;
}

nvme_uring_cmd EncodeZoneAppend(const BlockTransfer& transfer, bool fua) {
  nvme_uring_cmd cmd = EncodeBlockTransfer(kNvmeOpcodeZoneAppend, transfer);
  if (fua) cmd.cdw12 |= kNvmeCdw12Fua;
  AddPlacement(transfer, &cmd);
  return cmd;
}

nvme_uring_cmd EncodeZoneManagementSend(uint32_t nsid, uint64_t zone_start,
                                        ZoneSendAction action) {
  nvme_uring_cmd cmd = EncodeZoneCommand(kNvmeOpcodeZoneManagementSend, nsid, zone_start);
  cmd.cdw13 = static_cast<uint8_t>(action);
  return cmd;
}

nvme_uring_cmd EncodeZoneReport(uint32_t nsid, uint64_t zone_start, uint64_t addr,
                                uint32_t bytes) {
  NVKV_CHECK(bytes >= 4 && bytes % 4 == 0);
  nvme_uring_cmd cmd = EncodeZoneCommand(kNvmeOpcodeZoneManagementReceive, nsid, zone_start);
  cmd.addr = addr;
  cmd.data_len = bytes;
  cmd.cdw12 = bytes / 4 - 1;        // NUMD, zero-based
  cmd.cdw13 = kZoneReportPartial;   // ZRA 0 (Report Zones), ZRASF 0 (every state)
  return cmd;
}

nvme_uring_cmd EncodePlacementHandleStatus(uint32_t nsid, uint64_t addr, uint32_t bytes) {
  NVKV_CHECK(bytes >= 4 && bytes % 4 == 0);
  nvme_uring_cmd cmd = EncodeDataIn(kNvmeOpcodeIoManagementReceive, nsid, addr, bytes);
  cmd.cdw10 = kIoManagementPlacementStatus;  // MO; MOS (bits 16-31) 0
  cmd.cdw11 = bytes / 4 - 1;                  // NUMD, zero-based
  return cmd;
}

nvme_uring_cmd EncodeIdentify(IdentifyCns cns, uint32_t nsid, uint8_t csi, uint64_t addr) {
  nvme_uring_cmd cmd = EncodeDataIn(kNvmeOpcodeIdentify, nsid, addr, kIdentifyPageBytes);
  cmd.cdw10 = static_cast<uint8_t>(cns);  // CNS in bits 0-7; CNTID (bits 16-31) stays 0
  cmd.cdw11 = uint32_t{csi} << 24;        // CSI in bits 24-31
  return cmd;
}

nvme_passthru_cmd ToPassthruCmd(const nvme_uring_cmd& cmd) {
  nvme_passthru_cmd out;
  std::memset(&out, 0, sizeof(out));
  out.opcode = cmd.opcode;
  out.flags = cmd.flags;
  out.nsid = cmd.nsid;
  out.cdw2 = cmd.cdw2;
  out.cdw3 = cmd.cdw3;
  out.metadata = cmd.metadata;
  out.addr = cmd.addr;
  out.metadata_len = cmd.metadata_len;
  out.data_len = cmd.data_len;
  out.cdw10 = cmd.cdw10;
  out.cdw11 = cmd.cdw11;
  out.cdw12 = cmd.cdw12;
  out.cdw13 = cmd.cdw13;
  out.cdw14 = cmd.cdw14;
  out.cdw15 = cmd.cdw15;
  out.timeout_ms = cmd.timeout_ms;
  return out;
}

void PrepareNvmeUringCmd(io_uring_sqe* sqe, const nvme_uring_cmd& cmd,
                         const UringCmdTarget& target) {
  auto* bytes = reinterpret_cast<unsigned char*>(sqe);
  std::memset(bytes, 0, kBigSqeBytes);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->flags = target.fixed_file ? IOSQE_FIXED_FILE : 0;
  sqe->fd = target.fd;
  sqe->cmd_op = target.cmd_op;
  if (target.buf_index >= 0) {
    // The kernel imports [addr, addr + data_len) from registered buffer buf_index instead of
    // pinning the pages on every command.
    NVKV_CHECK(target.buf_index <= UINT16_MAX);
    sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
    sqe->buf_index = static_cast<uint16_t>(target.buf_index);
  }
  sqe->user_data = target.user_data;
  // Written through a byte pointer: sqe->cmd is declared as a zero-length array.
  std::memcpy(bytes + kSqeCmdOffset, &cmd, sizeof(cmd));
}

uint32_t MaxLbaPerCommand(uint32_t max_transfer_bytes, uint32_t lba_bytes) {
  NVKV_CHECK(lba_bytes > 0);
  NVKV_CHECK(max_transfer_bytes >= lba_bytes);
  const uint32_t blocks = max_transfer_bytes / lba_bytes;
  return blocks < kNvmeMaxLbaPerCommand ? blocks : kNvmeMaxLbaPerCommand;
}

uint32_t PieceCount(uint32_t lba_count, uint32_t max_lba_per_command) {
  NVKV_CHECK(max_lba_per_command > 0);
  if (lba_count == 0) return 1;
  return (lba_count - 1) / max_lba_per_command + 1;
}

Piece PieceAt(uint64_t lba, uint32_t lba_count, uint32_t max_lba_per_command, uint32_t lba_bytes,
              uint32_t index) {
  NVKV_CHECK(index < PieceCount(lba_count, max_lba_per_command));
  const uint32_t first = index * max_lba_per_command;  // blocks before this piece
  const uint32_t left = lba_count - first;
  Piece piece;
  piece.lba = lba + first;
  piece.lba_count = left < max_lba_per_command ? left : max_lba_per_command;
  piece.offset_bytes = uint64_t{first} * lba_bytes;
  return piece;
}

absl::StatusOr<ControllerIdentity> ParseIdentifyController(std::span<const uint8_t> page) {
  absl::Status size = CheckPageSize(page, "Identify Controller");
  if (!size.ok()) return size;
  ControllerIdentity identity;
  identity.mdts = page[kCtrlMdts];
  if (identity.mdts != 0) {
    const uint8_t shift = identity.mdts < kMdtsCap ? identity.mdts : kMdtsCap;
    identity.max_transfer_bytes = uint64_t{kNvmeMdtsUnitBytes} << shift;
  }
  identity.volatile_write_cache = (page[kCtrlVwc] & 0x01) != 0;
  identity.flexible_data_placement = (Le32(page, kCtrlCtratt) & kCtrattFdps) != 0;
  return identity;
}

uint32_t PlacementHandleStatusBytes(std::span<const uint8_t> status) {
  NVKV_CHECK(status.size() >= kPlacementStatusHeaderBytes);
  return kPlacementStatusHeaderBytes +
         kPlacementStatusDescriptorBytes * uint32_t{Le16(status, kPlacementStatusCount)};
}

absl::StatusOr<std::vector<PlacementHandleStatus>> ParsePlacementHandleStatus(
    std::span<const uint8_t> status) {
  if (status.size() < kPlacementStatusHeaderBytes) {
    return absl::DataLossError(absl::StrCat("reclaim unit handle status of ", status.size(),
                                            " bytes has no header"));
  }
  const uint16_t count = Le16(status, kPlacementStatusCount);
  const size_t fit =
      (status.size() - kPlacementStatusHeaderBytes) / kPlacementStatusDescriptorBytes;
  if (count > fit) {
    return absl::DataLossError(absl::StrCat("reclaim unit handle status counts ", count,
                                            " handles; ", status.size(), " bytes hold ", fit));
  }
  std::vector<PlacementHandleStatus> handles(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = kPlacementStatusHeaderBytes + i * kPlacementStatusDescriptorBytes;
    handles[i].placement_id = Le16(status, at);
    handles[i].handle_id = Le16(status, at + 2);
    handles[i].available_writes = Le64(status, at + 8);
  }
  return handles;
}

absl::StatusOr<ZonedNamespaceIdentity> ParseZonedIdentifyNamespace(std::span<const uint8_t> page,
                                                                   uint8_t format_index) {
  absl::Status size = CheckPageSize(page, "ZNS Identify Namespace");
  if (!size.ok()) return size;
  NVKV_CHECK(format_index < kMaxLbaFormats);
  // MAR and MOR are zero-based; all ones means no limit.
  const auto limit = [](uint32_t zero_based) {
    return zero_based == UINT32_MAX ? 0 : zero_based + 1;
  };
  ZonedNamespaceIdentity identity;
  identity.max_active = limit(Le32(page, kZnsNsMar));
  identity.max_open = limit(Le32(page, kZnsNsMor));
  identity.zone_blocks = Le64(page, kZnsNsLbafeTable + kZnsNsLbafeBytes * size_t{format_index});
  if (identity.zone_blocks == 0) {
    return absl::DataLossError(absl::StrCat("LBA format ", format_index, " has zone size 0"));
  }
  return identity;
}

absl::StatusOr<uint64_t> ParseZonedIdentifyController(std::span<const uint8_t> page) {
  absl::Status size = CheckPageSize(page, "ZNS Identify Controller");
  if (!size.ok()) return size;
  const uint8_t zasl = page[kZnsCtrlZasl];
  if (zasl == 0) return uint64_t{0};
  return uint64_t{kNvmeMdtsUnitBytes} << std::min<uint8_t>(zasl, kMdtsCap);
}

absl::StatusOr<NamespaceIdentity> ParseIdentifyNamespace(std::span<const uint8_t> page) {
  absl::Status size = CheckPageSize(page, "Identify Namespace");
  if (!size.ok()) return size;
  NamespaceIdentity identity;
  identity.lba_count = Le64(page, kNsNsze);
  if (identity.lba_count == 0) {
    return absl::FailedPreconditionError(
        "namespace size (NSZE) is 0: inactive namespace, or not an NVM command set namespace");
  }
  const uint32_t format_count = uint32_t{page[kNsNlbaf]} + 1;  // NLBAF is zero-based
  identity.format_index = FormatIndex(page[kNsFlbas]);
  if (identity.format_index >= format_count || identity.format_index >= kMaxLbaFormats) {
    return absl::DataLossError(absl::StrCat("FLBAS selects LBA format ", identity.format_index,
                                            " but the namespace has ", format_count));
  }
  const uint32_t format = Le32(page, kNsLbafTable + 4 * size_t{identity.format_index});
  const uint32_t metadata_bytes = format & 0xffff;   // MS, bits 0-15
  const uint8_t lbads = (format >> 16) & 0xff;       // LBADS, bits 16-23: log2(block size)
  if (lbads < kMinLbads) {
    return absl::DataLossError(absl::StrCat("LBA format ", identity.format_index,
                                            " has LBADS ", lbads, " (below 512-byte blocks)"));
  }
  if (lbads > kMaxLbads) {
    return absl::UnimplementedError(absl::StrCat("LBA format ", identity.format_index,
                                                 " has 2^", lbads,
                                                 "-byte blocks; at most 64 KiB is supported"));
  }
  if (metadata_bytes != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "LBA format ", identity.format_index, " carries ", metadata_bytes,
        " metadata bytes per block; nvkv needs a format without metadata (reformat the "
        "namespace with one whose MS is 0, e.g. nvme format --lbaf=<index>)"));
  }
  identity.lba_bytes = 1u << lbads;
  return identity;
}

NvmeStatus DecodeNvmeStatus(int32_t res) {
  const uint32_t field = static_cast<uint32_t>(res);
  NvmeStatus status;
  status.sc = static_cast<uint8_t>(field & 0xff);
  status.sct = static_cast<uint8_t>((field >> 8) & 0x7);
  status.crd = static_cast<uint8_t>((field >> 11) & 0x3);
  status.more = ((field >> 13) & 1) != 0;
  status.dnr = ((field >> 14) & 1) != 0;
  return status;
}

const char* NvmeStatusName(uint8_t sct, uint8_t sc) {
  switch (sct) {
    case kSctGeneric: return GenericStatusName(sc);
    case kSctCommandSpecific: return CommandSpecificStatusName(sc);
    case kSctMedia: return MediaStatusName(sc);
    case kSctPath: return PathStatusName(sc);
    default: return nullptr;
  }
}

const char* NvmeOpName(NvmeOp op) {
  switch (op) {
    case NvmeOp::kRead: return "read";
    case NvmeOp::kWrite: return "write";
    case NvmeOp::kFlush: return "flush";
    case NvmeOp::kIdentify: return "identify";
    case NvmeOp::kZoneAppend: return "zone append";
    case NvmeOp::kZoneReset: return "zone reset";
    case NvmeOp::kZoneFinish: return "zone finish";
    case NvmeOp::kZoneReport: return "zone report";
    case NvmeOp::kPlacementStatus: return "placement handle status";
  }
  return "command";
}

absl::Status MapCompletion(int32_t res, const CommandContext& context) {
  if (res == 0) return absl::OkStatus();
  if (res > 0) return MapNvmeStatus(res, context);
  const int err = -res;
  absl::Status status = absl::ErrnoToStatus(err, absl::StrCat(Where(context), Detail(context)));
  const std::string hint = ErrnoHint(err, context);
  if (hint.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), hint));
}

}  // namespace nvkv::storage
