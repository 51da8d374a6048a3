// NVMe passthrough encoding, Identify parsing and completion mapping, field by field. Needs no
// device: every input is built by hand here.
#include "storage/nvme_command.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "tests/testutil/status_matchers.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

// --- ToNlb and command encoding ---

TEST(NvmeCommandTest, NlbIsZeroBased) {
  EXPECT_EQ(ToNlb(1), 0);
  EXPECT_EQ(ToNlb(8), 7);
  EXPECT_EQ(ToNlb(65536), 0xffff);
}

TEST(NvmeCommandDeathTest, NlbOfZeroOrTooManyBlocksIsAProgrammerError) {
  EXPECT_DEATH(ToNlb(0), "lba_count >= 1");
  EXPECT_DEATH(ToNlb(65537), "lba_count <= kNvmeMaxLbaPerCommand");
}

BlockTransfer Transfer() {
  BlockTransfer transfer;
  transfer.nsid = 1;
  transfer.lba = 0x0000'0012'3456'789aULL;
  transfer.lba_count = 8;
  transfer.lba_bytes = 4096;
  transfer.addr = 0x7f00'dead'0000ULL;
  return transfer;
}

TEST(NvmeCommandTest, ReadEncodesEveryField) {
  const nvme_uring_cmd cmd = EncodeRead(Transfer());
  EXPECT_EQ(cmd.opcode, 0x02);
  EXPECT_EQ(cmd.flags, 0);
  EXPECT_EQ(cmd.nsid, 1u);
  EXPECT_EQ(cmd.cdw10, 0x3456'789au);  // SLBA low
  EXPECT_EQ(cmd.cdw11, 0x12u);         // SLBA high
  EXPECT_EQ(cmd.cdw12, 7u);            // NLB, zero-based; no FUA
  EXPECT_EQ(cmd.cdw13, 0u);
  EXPECT_EQ(cmd.addr, 0x7f00'dead'0000ULL);
  EXPECT_EQ(cmd.data_len, 8u * 4096);
  EXPECT_EQ(cmd.metadata, 0u);
  EXPECT_EQ(cmd.metadata_len, 0u);
  EXPECT_EQ(cmd.timeout_ms, 0u);
}

TEST(NvmeCommandTest, WriteEncodesOpcodeAndFuaBit) {
  const nvme_uring_cmd plain = EncodeWrite(Transfer(), /*fua=*/false);
  EXPECT_EQ(plain.opcode, 0x01);
  EXPECT_EQ(plain.cdw12, 7u);
  const nvme_uring_cmd fua = EncodeWrite(Transfer(), /*fua=*/true);
  EXPECT_EQ(fua.opcode, 0x01);
  EXPECT_EQ(fua.cdw12, (1u << 30) | 7u);
  EXPECT_EQ(fua.cdw10, plain.cdw10);
  EXPECT_EQ(fua.cdw11, plain.cdw11);
  EXPECT_EQ(fua.data_len, 8u * 4096);
}

// Zone Append is laid out as Write, with the zone's first block where Write has its own.
TEST(NvmeCommandTest, ZoneAppendIsAWriteToTheZoneWithItsOwnOpcode) {
  const nvme_uring_cmd append = EncodeZoneAppend(Transfer(), /*fua=*/true);
  const nvme_uring_cmd write = EncodeWrite(Transfer(), /*fua=*/true);
  EXPECT_EQ(append.opcode, 0x7d);
  EXPECT_EQ(append.cdw10, write.cdw10);  // ZSLBA
  EXPECT_EQ(append.cdw11, write.cdw11);
  EXPECT_EQ(append.cdw12, (1u << 30) | 7u);
  EXPECT_EQ(append.data_len, write.data_len);
  EXPECT_EQ(append.addr, write.addr);
  EXPECT_EQ(EncodeZoneAppend(Transfer(), false).cdw12, 7u);
}

// FDP: the data placement directive names DTYPE 2 in CDW12 bits 20-23 and the placement
// identifier in CDW13 bits 16-31, beside NLB and FUA; without an identifier neither is set.
TEST(NvmeCommandTest, WriteAndAppendCarryThePlacementDirective) {
  BlockTransfer transfer = Transfer();
  transfer.placement_id = 0x1203;
  const nvme_uring_cmd write = EncodeWrite(transfer, /*fua=*/true);
  EXPECT_EQ(write.cdw12, (1u << 30) | (2u << 20) | 7u);
  EXPECT_EQ(write.cdw13, 0x1203u << 16);
  const nvme_uring_cmd append = EncodeZoneAppend(transfer, /*fua=*/false);
  EXPECT_EQ(append.cdw12, (2u << 20) | 7u);
  EXPECT_EQ(append.cdw13, 0x1203u << 16);
  transfer.placement_id = 0;
  EXPECT_EQ(EncodeWrite(transfer, false).cdw12, (2u << 20) | 7u) << "PID 0 is a placement too";
  EXPECT_EQ(EncodeWrite(transfer, false).cdw13, 0u);
  EXPECT_EQ(EncodeWrite(Transfer(), false).cdw12, 7u);
  EXPECT_EQ(EncodeWrite(Transfer(), false).cdw13, 0u);
  EXPECT_EQ(EncodeRead(transfer).cdw12, 7u) << "a read names no placement";
}

TEST(NvmeCommandTest, PlacementHandleStatusIsIoManagementReceiveOperationOne) {
  const nvme_uring_cmd cmd = EncodePlacementHandleStatus(2, 0x7f00'0000'2000ULL, 4096);
  EXPECT_EQ(cmd.opcode, 0x12);
  EXPECT_EQ(cmd.nsid, 2u);
  EXPECT_EQ(cmd.cdw10, 1u) << "MO 1 (reclaim unit handle status), MOS 0";
  EXPECT_EQ(cmd.cdw11, 1023u) << "NUMD: zero-based dwords";
  EXPECT_EQ(cmd.cdw12, 0u);
  EXPECT_EQ(cmd.data_len, 4096u);
  EXPECT_EQ(cmd.addr, 0x7f00'0000'2000ULL);
}

TEST(NvmeCommandTest, ZoneManagementSendNamesTheZoneAndTheAction) {
  const nvme_uring_cmd reset =
      EncodeZoneManagementSend(3, 0x0000'0001'0000'4000ULL, ZoneSendAction::kReset);
  EXPECT_EQ(reset.opcode, 0x79);
  EXPECT_EQ(reset.nsid, 3u);
  EXPECT_EQ(reset.cdw10, 0x4000u);
  EXPECT_EQ(reset.cdw11, 0x1u);
  EXPECT_EQ(reset.cdw13, 0x4u) << "ZSA 4, Select All clear";
  EXPECT_EQ(reset.data_len, 0u);
  EXPECT_EQ(reset.addr, 0u);
  EXPECT_EQ(EncodeZoneManagementSend(3, 0, ZoneSendAction::kFinish).cdw13, 0x2u);
}

TEST(NvmeCommandTest, ZoneReportAsksForAPartialReportOfEveryZone) {
  const nvme_uring_cmd report = EncodeZoneReport(1, 0x8000, 0x7f00'0000'1000ULL, 4096);
  EXPECT_EQ(report.opcode, 0x7a);
  EXPECT_EQ(report.cdw10, 0x8000u);
  EXPECT_EQ(report.cdw11, 0u);
  EXPECT_EQ(report.cdw12, 1023u) << "NUMD: zero-based dwords";
  EXPECT_EQ(report.cdw13, 1u << 16) << "Partial Report; ZRA 0 and ZRASF 0";
  EXPECT_EQ(report.data_len, 4096u);
  EXPECT_EQ(report.addr, 0x7f00'0000'1000ULL);
}

TEST(NvmeCommandTest, FullSizeNlbAndSmallBlocks) {
  BlockTransfer transfer = Transfer();
  transfer.lba = 0;
  transfer.lba_count = 65536;
  transfer.lba_bytes = 512;
  const nvme_uring_cmd cmd = EncodeRead(transfer);
  EXPECT_EQ(cmd.cdw10, 0u);
  EXPECT_EQ(cmd.cdw11, 0u);
  EXPECT_EQ(cmd.cdw12, 0xffffu);
  EXPECT_EQ(cmd.data_len, 65536u * 512);
}

TEST(NvmeCommandTest, FlushHasNoData) {
  const nvme_uring_cmd cmd = EncodeFlush(3);
  EXPECT_EQ(cmd.opcode, 0x00);
  EXPECT_EQ(cmd.nsid, 3u);
  EXPECT_EQ(cmd.addr, 0u);
  EXPECT_EQ(cmd.data_len, 0u);
  EXPECT_EQ(cmd.cdw10, 0u);
  EXPECT_EQ(cmd.cdw12, 0u);
}

TEST(NvmeCommandTest, IdentifyEncodesCnsAndCsi) {
  const nvme_uring_cmd ctrl = EncodeIdentify(IdentifyCns::kController, 0, kCsiNvm, 0x1000);
  EXPECT_EQ(ctrl.opcode, 0x06);
  EXPECT_EQ(ctrl.nsid, 0u);
  EXPECT_EQ(ctrl.cdw10, 0x01u);
  EXPECT_EQ(ctrl.cdw11, 0u);
  EXPECT_EQ(ctrl.addr, 0x1000u);
  EXPECT_EQ(ctrl.data_len, 4096u);

  const nvme_uring_cmd ns = EncodeIdentify(IdentifyCns::kNamespace, 2, kCsiNvm, 0x2000);
  EXPECT_EQ(ns.cdw10, 0x00u);
  EXPECT_EQ(ns.nsid, 2u);
  EXPECT_EQ(ns.data_len, 4096u);

  const nvme_uring_cmd zoned = EncodeIdentify(IdentifyCns::kCsiNamespace, 2, kCsiZoned, 0x3000);
  EXPECT_EQ(zoned.cdw10, 0x05u);
  EXPECT_EQ(zoned.cdw11, 0x02u << 24);
}

TEST(NvmeCommandTest, PassthruCmdCarriesEveryField) {
  nvme_uring_cmd cmd = EncodeWrite(Transfer(), true);
  cmd.cdw13 = 13;
  cmd.cdw14 = 14;
  cmd.cdw15 = 15;
  cmd.timeout_ms = 500;
  const nvme_passthru_cmd out = ToPassthruCmd(cmd);
  EXPECT_EQ(out.opcode, cmd.opcode);
  EXPECT_EQ(out.nsid, cmd.nsid);
  EXPECT_EQ(out.addr, cmd.addr);
  EXPECT_EQ(out.data_len, cmd.data_len);
  EXPECT_EQ(out.cdw10, cmd.cdw10);
  EXPECT_EQ(out.cdw11, cmd.cdw11);
  EXPECT_EQ(out.cdw12, cmd.cdw12);
  EXPECT_EQ(out.cdw13, 13u);
  EXPECT_EQ(out.cdw14, 14u);
  EXPECT_EQ(out.cdw15, 15u);
  EXPECT_EQ(out.timeout_ms, 500u);
  EXPECT_EQ(out.result, 0u);
}

// --- The 128-byte SQE ---

// Two io_uring_sqe slots make one big SQE; poison both so stale bytes would show.
struct BigSqe {
  std::array<io_uring_sqe, 2> slots;
  BigSqe() { std::memset(slots.data(), 0xa5, sizeof(slots)); }
  io_uring_sqe* sqe() { return &slots[0]; }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(slots.data()); }
};

TEST(NvmeCommandTest, SqeForPlainAddressOnRawFd) {
  BigSqe big;
  const nvme_uring_cmd cmd = EncodeRead(Transfer());
  UringCmdTarget target;
  target.fd = 17;
  target.user_data = 0x1234'5678'9abcULL;
  PrepareNvmeUringCmd(big.sqe(), cmd, target);
  const io_uring_sqe& sqe = *big.sqe();
  EXPECT_EQ(sqe.opcode, IORING_OP_URING_CMD);
  EXPECT_EQ(sqe.flags, 0);
  EXPECT_EQ(sqe.fd, 17);
  EXPECT_EQ(sqe.cmd_op, static_cast<uint32_t>(NVME_URING_CMD_IO));
  EXPECT_EQ(sqe.__pad1, 0u);
  EXPECT_EQ(sqe.uring_cmd_flags, 0u);
  EXPECT_EQ(sqe.buf_index, 0);
  EXPECT_EQ(sqe.user_data, 0x1234'5678'9abcULL);
  EXPECT_EQ(sqe.ioprio, 0);
  EXPECT_EQ(sqe.addr, 0u);
  EXPECT_EQ(sqe.len, 0u);
  EXPECT_EQ(sqe.personality, 0);
  EXPECT_EQ(sqe.file_index, 0u);
  EXPECT_EQ(std::memcmp(big.bytes() + 48, &cmd, sizeof(cmd)), 0);
  // The 8 bytes after the 72-byte command are zero too.
  for (size_t i = 48 + sizeof(cmd); i < 128; ++i) EXPECT_EQ(big.bytes()[i], 0) << "byte " << i;
}

TEST(NvmeCommandTest, SqeForRegisteredBufferAndFixedFile) {
  BigSqe big;
  const nvme_uring_cmd cmd = EncodeWrite(Transfer(), true);
  UringCmdTarget target;
  target.fd = 0;
  target.fixed_file = true;
  target.buf_index = 5;
  target.user_data = 42;
  PrepareNvmeUringCmd(big.sqe(), cmd, target);
  const io_uring_sqe& sqe = *big.sqe();
  EXPECT_EQ(sqe.opcode, IORING_OP_URING_CMD);
  EXPECT_EQ(sqe.flags, IOSQE_FIXED_FILE);
  EXPECT_EQ(sqe.fd, 0);
  EXPECT_EQ(sqe.uring_cmd_flags, IORING_URING_CMD_FIXED);
  EXPECT_EQ(sqe.buf_index, 5);
  EXPECT_EQ(sqe.user_data, 42u);
  EXPECT_EQ(std::memcmp(big.bytes() + 48, &cmd, sizeof(cmd)), 0);
}

TEST(NvmeCommandTest, SqeForAdminCommand) {
  BigSqe big;
  UringCmdTarget target;
  target.fd = 3;
  target.cmd_op = NVME_URING_CMD_ADMIN;
  PrepareNvmeUringCmd(big.sqe(), EncodeIdentify(IdentifyCns::kController, 0, kCsiNvm, 0), target);
  EXPECT_EQ(big.sqe()->cmd_op, static_cast<uint32_t>(NVME_URING_CMD_ADMIN));
  EXPECT_EQ(big.bytes()[48], 0x06);  // the command's opcode byte
}

// --- Splitting at the transfer limit ---

TEST(NvmeCommandTest, MaxLbaPerCommandIsLimitedByNlb) {
  EXPECT_EQ(MaxLbaPerCommand(128 << 10, 4096), 32u);
  EXPECT_EQ(MaxLbaPerCommand(128 << 10, 512), 256u);
  EXPECT_EQ(MaxLbaPerCommand(4 << 20, 512), 8192u);
  EXPECT_EQ(MaxLbaPerCommand(1u << 31, 512), 65536u);  // NLB is 16 bits
}

TEST(NvmeCommandTest, OneMebibyteAtMdts128KibIsEightCommands) {
  const uint32_t lba_bytes = 4096;
  const uint32_t lba_count = (1 << 20) / lba_bytes;  // 256
  const uint32_t per_command = MaxLbaPerCommand(128 << 10, lba_bytes);
  ASSERT_EQ(PieceCount(lba_count, per_command), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    const Piece piece = PieceAt(5000, lba_count, per_command, lba_bytes, i);
    EXPECT_EQ(piece.lba, 5000u + 32 * i) << "piece " << i;
    EXPECT_EQ(piece.lba_count, 32u) << "piece " << i;
    EXPECT_EQ(piece.offset_bytes, uint64_t{i} * (128 << 10)) << "piece " << i;
  }
}

TEST(NvmeCommandTest, LastPieceIsShort) {
  ASSERT_EQ(PieceCount(70, 32), 3u);
  const Piece last = PieceAt(1000, 70, 32, 4096, 2);
  EXPECT_EQ(last.lba, 1064u);
  EXPECT_EQ(last.lba_count, 6u);
  EXPECT_EQ(last.offset_bytes, 64u * 4096);
}

TEST(NvmeCommandTest, RequestWithinLimitIsOneCommand) {
  EXPECT_EQ(PieceCount(1, 32), 1u);
  EXPECT_EQ(PieceCount(32, 32), 1u);
  EXPECT_EQ(PieceCount(33, 32), 2u);
  const Piece only = PieceAt(7, 32, 32, 512, 0);
  EXPECT_EQ(only.lba, 7u);
  EXPECT_EQ(only.lba_count, 32u);
  EXPECT_EQ(only.offset_bytes, 0u);
}

// --- Identify Controller ---

std::vector<uint8_t> Page() { return std::vector<uint8_t>(4096, 0); }

TEST(NvmeIdentifyTest, MdtsGivesMaxTransferIn4KibUnits) {
  std::vector<uint8_t> page = Page();
  page[77] = 5;  // 2^5 x 4 KiB = 128 KiB
  auto identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->mdts, 5);
  EXPECT_EQ(identity->max_transfer_bytes, 128u << 10);
  EXPECT_FALSE(identity->volatile_write_cache);
}

TEST(NvmeIdentifyTest, MdtsZeroMeansNoLimit) {
  auto identity = ParseIdentifyController(Page());
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->max_transfer_bytes, 0u);
}

TEST(NvmeIdentifyTest, HugeMdtsIsCappedNotOverflowed) {
  std::vector<uint8_t> page = Page();
  page[77] = 0xff;
  auto identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->max_transfer_bytes, uint64_t{4096} << 20);
}

TEST(NvmeIdentifyTest, VwcBitZeroIsVolatileWriteCache) {
  std::vector<uint8_t> page = Page();
  page[525] = 0x07;  // bit 0 present; bits 1-2 describe flush broadcast, ignored
  auto identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_TRUE(identity->volatile_write_cache);
  page[525] = 0x06;
  identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_FALSE(identity->volatile_write_cache);
}

TEST(NvmeIdentifyTest, CtrattBit19IsFlexibleDataPlacement) {
  std::vector<uint8_t> page = Page();
  page[98] = 0x08;  // CTRATT bytes 96-99, bit 19
  auto identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_TRUE(identity->flexible_data_placement);
  page[98] = 0x04;  // bit 18 (RHII) is something else
  page[96] = 0xff;
  identity = ParseIdentifyController(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_FALSE(identity->flexible_data_placement);
}

// A status as QEMU's FDP namespace returns it: the header counts the descriptors, 32 bytes each
// from byte 16 (PID, RUHID, EARUTR, RUAMW).
TEST(NvmeIdentifyTest, PlacementHandleStatusListsEveryDescriptor) {
  std::vector<uint8_t> status(16 + 3 * 32, 0);
  status[14] = 3;
  for (uint8_t i = 0; i < 3; ++i) {
    uint8_t* d = status.data() + 16 + 32 * i;
    d[0] = static_cast<uint8_t>(0x10 + i);  // PID low byte
    d[1] = 0x01;                            // PID high byte: reclaim group bits
    d[2] = i;                               // RUHID
    d[8] = 0x00;                            // RUAMW, little-endian 64 bits
    d[9] = static_cast<uint8_t>(i + 1);
    d[15] = 0x80;
  }
  EXPECT_EQ(PlacementHandleStatusBytes(status), 16u + 3 * 32);
  auto handles = ParsePlacementHandleStatus(status);
  ASSERT_THAT(handles, IsOk());
  ASSERT_EQ(handles->size(), 3u);
  for (uint16_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*handles)[i].placement_id, 0x0110 + i);
    EXPECT_EQ((*handles)[i].handle_id, i);
    EXPECT_EQ((*handles)[i].available_writes, 0x8000'0000'0000'0000ULL | ((i + 1u) << 8));
  }
  status[14] = 0;
  handles = ParsePlacementHandleStatus(status);
  ASSERT_THAT(handles, IsOk());
  EXPECT_TRUE(handles->empty());
}

TEST(NvmeIdentifyTest, PlacementHandleStatusCountingPastItsBytesIsDataLoss) {
  std::vector<uint8_t> status(16 + 2 * 32, 0);
  status[14] = 3;
  status[15] = 1;  // 259 handles
  EXPECT_EQ(PlacementHandleStatusBytes(status), 16u + 259 * 32) << "what asking again needs";
  EXPECT_THAT(ParsePlacementHandleStatus(status), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ParsePlacementHandleStatus(std::vector<uint8_t>(15, 0)),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(NvmeIdentifyTest, WrongPageSizeIsInvalidArgument) {
  std::vector<uint8_t> page(512, 0);
  EXPECT_THAT(ParseIdentifyController(page), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIdentifyNamespace(page), StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- Identify Namespace ---

void PutLe64(std::vector<uint8_t>& page, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i) page[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

void PutFormat(std::vector<uint8_t>& page, uint32_t index, uint8_t lbads, uint16_t ms) {
  const size_t at = 128 + 4 * size_t{index};
  page[at] = static_cast<uint8_t>(ms);
  page[at + 1] = static_cast<uint8_t>(ms >> 8);
  page[at + 2] = lbads;
  page[at + 3] = 0;  // relative performance
}

// A namespace of `nsze` blocks with formats: 0 = 512 B, 1 = 512 B + 8 B metadata, 2 = 4 KiB,
// 3 = 4 KiB + 64 B metadata; FLBAS selects `flbas`.
std::vector<uint8_t> NamespacePage(uint64_t nsze, uint8_t flbas) {
  std::vector<uint8_t> page = Page();
  PutLe64(page, 0, nsze);
  PutLe64(page, 8, nsze);  // NCAP
  page[25] = 3;            // NLBAF: four formats (zero-based)
  page[26] = flbas;
  PutFormat(page, 0, 9, 0);
  PutFormat(page, 1, 9, 8);
  PutFormat(page, 2, 12, 0);
  PutFormat(page, 3, 12, 64);
  return page;
}

// The ZNS Identify Namespace page: zone size per LBA format, and the zero-based limits.
TEST(NvmeIdentifyTest, ZonedNamespaceGivesZoneSizeAndLimits) {
  std::vector<uint8_t> page = Page();
  page[4] = 13;  // MAR: 14 active zones
  page[8] = 7;   // MOR: 8 open zones
  PutLe64(page, 2816 + 16 * 2, 0x4000);  // format 2's zone size
  absl::StatusOr<ZonedNamespaceIdentity> zoned = ParseZonedIdentifyNamespace(page, 2);
  ASSERT_THAT(zoned, IsOk());
  EXPECT_EQ(zoned->zone_blocks, 0x4000u);
  EXPECT_EQ(zoned->max_active, 14u);
  EXPECT_EQ(zoned->max_open, 8u);
  for (size_t i = 4; i < 12; ++i) page[i] = 0xff;  // no limits
  zoned = ParseZonedIdentifyNamespace(page, 2);
  ASSERT_THAT(zoned, IsOk());
  EXPECT_EQ(zoned->max_active, 0u);
  EXPECT_EQ(zoned->max_open, 0u);
  EXPECT_THAT(ParseZonedIdentifyNamespace(page, 1),
              StatusIs(absl::StatusCode::kDataLoss, "zone size 0"));
  EXPECT_THAT(ParseZonedIdentifyNamespace(std::vector<uint8_t>(100), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NvmeIdentifyTest, ZonedControllerGivesTheAppendLimit) {
  std::vector<uint8_t> page = Page();
  absl::StatusOr<uint64_t> bytes = ParseZonedIdentifyController(page);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, 0u) << "ZASL 0: MDTS's";
  page[0] = 5;
  bytes = ParseZonedIdentifyController(page);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(*bytes, uint64_t{4096} << 5);
}

TEST(NvmeIdentifyTest, Picks512ByteFormat) {
  auto identity = ParseIdentifyNamespace(NamespacePage(2'097'152, 0));
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->lba_count, 2'097'152u);
  EXPECT_EQ(identity->lba_bytes, 512u);
  EXPECT_EQ(identity->format_index, 0);
}

TEST(NvmeIdentifyTest, Picks4KibFormat) {
  auto identity = ParseIdentifyNamespace(NamespacePage(262'144, 2));
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->lba_count, 262'144u);
  EXPECT_EQ(identity->lba_bytes, 4096u);
  EXPECT_EQ(identity->format_index, 2);
}

TEST(NvmeIdentifyTest, NszeUsesAllEightBytes) {
  auto identity = ParseIdentifyNamespace(NamespacePage(0x0000'0123'4567'89abULL, 2));
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->lba_count, 0x0000'0123'4567'89abULL);
}

TEST(NvmeIdentifyTest, FlbasBit4MetadataPlacementIsNotPartOfTheIndex) {
  auto identity = ParseIdentifyNamespace(NamespacePage(1000, 0x10 | 2));
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->format_index, 2);
  EXPECT_EQ(identity->lba_bytes, 4096u);
}

TEST(NvmeIdentifyTest, FlbasBits5And6AreTheHighIndexBits) {
  std::vector<uint8_t> page = NamespacePage(1000, 0);
  page[25] = 63;  // 64 formats
  PutFormat(page, 0x12, 12, 0);
  page[26] = (0x1 << 5) | 0x2;  // index 0x12
  auto identity = ParseIdentifyNamespace(page);
  ASSERT_THAT(identity, IsOk());
  EXPECT_EQ(identity->format_index, 0x12);
  EXPECT_EQ(identity->lba_bytes, 4096u);
}

TEST(NvmeIdentifyTest, FormatWithMetadataIsUnimplemented) {
  EXPECT_THAT(ParseIdentifyNamespace(NamespacePage(1000, 1)),
              StatusIs(absl::StatusCode::kUnimplemented, "8 metadata bytes per block"));
  EXPECT_THAT(ParseIdentifyNamespace(NamespacePage(1000, 3)),
              StatusIs(absl::StatusCode::kUnimplemented, "64 metadata bytes per block"));
}

TEST(NvmeIdentifyTest, FormatPastNlbafIsDataLoss) {
  EXPECT_THAT(ParseIdentifyNamespace(NamespacePage(1000, 4)),
              StatusIs(absl::StatusCode::kDataLoss, "LBA format 4"));
}

TEST(NvmeIdentifyTest, UnusableBlockSizesAreRefused) {
  std::vector<uint8_t> page = NamespacePage(1000, 0);
  PutFormat(page, 0, 0, 0);  // LBADS 0: format not available
  EXPECT_THAT(ParseIdentifyNamespace(page), StatusIs(absl::StatusCode::kDataLoss));
  PutFormat(page, 0, 17, 0);  // 128 KiB blocks
  EXPECT_THAT(ParseIdentifyNamespace(page), StatusIs(absl::StatusCode::kUnimplemented));
}

TEST(NvmeIdentifyTest, ZeroSizeNamespaceIsFailedPrecondition) {
  EXPECT_THAT(ParseIdentifyNamespace(NamespacePage(0, 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "NSZE"));
}

// --- Completion status ---

TEST(NvmeStatusTest, DecodesTheWorkedExample) {
  // CQE dword 3 bits 31:16 = 0x8101 (phase 1); the driver stores 0x8101 >> 1.
  const NvmeStatus status = DecodeNvmeStatus(0x8101 >> 1);
  EXPECT_EQ(status.sc, 0x80);
  EXPECT_EQ(status.sct, 0);
  EXPECT_TRUE(status.dnr);
  EXPECT_FALSE(status.more);
  EXPECT_EQ(status.crd, 0);
}

TEST(NvmeStatusTest, DecodesMoreAndCrd) {
  const NvmeStatus status = DecodeNvmeStatus((1 << 13) | (2 << 11) | (2 << 8) | 0x81);
  EXPECT_EQ(status.sct, 2);
  EXPECT_EQ(status.sc, 0x81);
  EXPECT_EQ(status.crd, 2);
  EXPECT_TRUE(status.more);
  EXPECT_FALSE(status.dnr);
}

CommandContext ReadAt(uint64_t lba) {
  CommandContext context;
  context.op = NvmeOp::kRead;
  context.lba = lba;
  return context;
}

int32_t Res(uint8_t sct, uint8_t sc) { return (int32_t{sct} << 8) | sc; }

TEST(NvmeStatusTest, SuccessIsOk) { EXPECT_THAT(MapCompletion(0, ReadAt(0)), IsOk()); }

TEST(NvmeStatusTest, MessageNamesOpLbaSctScAndName) {
  const absl::Status status = MapCompletion(Res(2, 0x81), ReadAt(0x1a00));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            "NVMe read at LBA 0x1a00: status SCT 0x2 SC 0x81 (Unrecovered Read Error)");
}

TEST(NvmeStatusTest, MessageNotesDnrMoreCountAndPath) {
  CommandContext context;
  context.op = NvmeOp::kWrite;
  context.lba = 0x10;
  context.lba_count = 8;
  context.path = "/dev/ng0n1";
  const absl::Status status = MapCompletion((1 << 14) | (1 << 13) | Res(0, 0x80), context);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(status.message(),
            "NVMe write at LBA 0x10: status SCT 0x0 SC 0x80 (LBA Out of Range), DNR: retrying "
            "will not help, More: details in the Error Information log page [8 blocks, "
            "/dev/ng0n1]");
}

TEST(NvmeStatusTest, FlushMessageHasNoLba) {
  CommandContext context;
  context.op = NvmeOp::kFlush;
  context.lba = 99;
  EXPECT_EQ(MapCompletion(Res(0, 0x06), context).message(),
            "NVMe flush: status SCT 0x0 SC 0x6 (Internal Error)");
}

struct NamedCase {
  uint8_t sct;
  uint8_t sc;
  absl::StatusCode code;
  const char* name;
};

TEST(NvmeStatusTest, EveryNamedCodeMapsToItsStatusCodeAndName) {
  const NamedCase cases[] = {
      {0, 0x01, absl::StatusCode::kInvalidArgument, "Invalid Command Opcode"},
      {0, 0x02, absl::StatusCode::kInvalidArgument, "Invalid Field in Command"},
      {0, 0x04, absl::StatusCode::kDataLoss, "Data Transfer Error"},
      {0, 0x06, absl::StatusCode::kInternal, "Internal Error"},
      {0, 0x07, absl::StatusCode::kUnavailable, "Command Abort Requested"},
      {0, 0x0b, absl::StatusCode::kInvalidArgument, "Invalid Namespace or Format"},
      {0, 0x20, absl::StatusCode::kFailedPrecondition, "Namespace is Write Protected"},
      {0, 0x21, absl::StatusCode::kUnavailable, "Command Interrupted"},
      {0, 0x80, absl::StatusCode::kOutOfRange, "LBA Out of Range"},
      {0, 0x81, absl::StatusCode::kResourceExhausted, "Capacity Exceeded"},
      {0, 0x82, absl::StatusCode::kUnavailable, "Namespace Not Ready"},
      {0, 0x83, absl::StatusCode::kFailedPrecondition, "Reservation Conflict"},
      {0, 0x84, absl::StatusCode::kUnavailable, "Format In Progress"},
      {1, 0x0a, absl::StatusCode::kInvalidArgument, "Invalid Format"},
      {1, 0x82, absl::StatusCode::kInternal, "Attempted Write to Read Only Range"},
      {1, 0xb8, absl::StatusCode::kFailedPrecondition, "Zone Boundary Error"},
      {1, 0xb9, absl::StatusCode::kResourceExhausted, "Zone Is Full"},
      {1, 0xba, absl::StatusCode::kFailedPrecondition, "Zone Is Read Only"},
      {1, 0xbb, absl::StatusCode::kDataLoss, "Zone Is Offline"},
      {1, 0xbc, absl::StatusCode::kFailedPrecondition, "Zone Invalid Write"},
      {1, 0xbd, absl::StatusCode::kResourceExhausted, "Too Many Active Zones"},
      {1, 0xbe, absl::StatusCode::kResourceExhausted, "Too Many Open Zones"},
      {1, 0xbf, absl::StatusCode::kFailedPrecondition, "Invalid Zone State Transition"},
      {2, 0x80, absl::StatusCode::kDataLoss, "Write Fault"},
      {2, 0x81, absl::StatusCode::kDataLoss, "Unrecovered Read Error"},
      {2, 0x82, absl::StatusCode::kDataLoss, "End-to-end Guard Check Error"},
      {2, 0x83, absl::StatusCode::kDataLoss, "End-to-end Application Tag Check Error"},
      {2, 0x84, absl::StatusCode::kDataLoss, "End-to-end Reference Tag Check Error"},
      {2, 0x85, absl::StatusCode::kDataLoss, "Compare Failure"},
      {2, 0x86, absl::StatusCode::kDataLoss, "Access Denied"},
      {2, 0x87, absl::StatusCode::kDataLoss, "Deallocated or Unwritten Logical Block"},
      {3, 0x02, absl::StatusCode::kUnavailable, "Asymmetric Access Inaccessible"},
      {3, 0x70, absl::StatusCode::kUnavailable, "Host Pathing Error"},
      {3, 0x71, absl::StatusCode::kUnavailable, "Command Aborted By Host"},
  };
  for (const NamedCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_STREQ(NvmeStatusName(c.sct, c.sc), c.name);
    EXPECT_THAT(MapCompletion(Res(c.sct, c.sc), ReadAt(0)),
                StatusIs(c.code, std::string("(") + c.name + ")"));
  }
}

TEST(NvmeStatusTest, UnknownCodesGetGenericTextAndAFittingCode) {
  EXPECT_EQ(NvmeStatusName(0, 0x7f), nullptr);
  EXPECT_THAT(MapCompletion(Res(0, 0x7f), ReadAt(0)),
              StatusIs(absl::StatusCode::kInternal, "SC 0x7f (unnamed generic status)"));
  EXPECT_THAT(MapCompletion(Res(1, 0x33), ReadAt(0)),
              StatusIs(absl::StatusCode::kInternal, "(unnamed command specific status)"));
  EXPECT_THAT(MapCompletion(Res(2, 0xc0), ReadAt(0)),
              StatusIs(absl::StatusCode::kDataLoss, "(unnamed media or data integrity error)"));
  EXPECT_THAT(MapCompletion(Res(3, 0x44), ReadAt(0)),
              StatusIs(absl::StatusCode::kUnavailable, "(unnamed path related status)"));
  EXPECT_THAT(MapCompletion(Res(7, 0x01), ReadAt(0)),
              StatusIs(absl::StatusCode::kInternal, "SCT 0x7 SC 0x1 (vendor specific status)"));
  EXPECT_THAT(MapCompletion(Res(5, 0x01), ReadAt(0)),
              StatusIs(absl::StatusCode::kInternal, "(reserved status code type)"));
}

TEST(NvmeStatusTest, NegativeResIsErrno) {
  // The code is exactly absl's for the errno (EIO is kUnknown there); the message says where.
  const absl::Status status = MapCompletion(-EIO, ReadAt(0x20));
  EXPECT_EQ(status.code(), absl::ErrnoToStatus(EIO, "").code());
  EXPECT_EQ(status.message(), "NVMe read at LBA 0x20: Input/output error");
  EXPECT_THAT(MapCompletion(-ENOMEM, ReadAt(0)),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(NvmeStatusTest, EinvalOnFixedBufferExplainsThe127PageLimit) {
  CommandContext context = ReadAt(0);
  context.fixed_buffer = true;
  EXPECT_THAT(MapCompletion(-EINVAL, context),
              StatusIs(absl::StatusCode::kInvalidArgument, "127 pages"));
  context.fixed_buffer = false;
  const absl::Status plain = MapCompletion(-EINVAL, context);
  EXPECT_EQ(plain.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plain.message().find("127 pages"), absl::string_view::npos);
}

TEST(NvmeStatusTest, EaccesNamesTheCapability) {
  EXPECT_THAT(MapCompletion(-EACCES, ReadAt(0)),
              StatusIs(absl::StatusCode::kPermissionDenied, "CAP_SYS_ADMIN"));
}

TEST(NvmeStatusTest, EintrSaysTheDriverCancelled) {
  EXPECT_THAT(MapCompletion(-EINTR, ReadAt(0)),
              StatusIs(absl::StatusCode::kUnavailable, "cancelled"));
}

}  // namespace
}  // namespace nvkv::storage
