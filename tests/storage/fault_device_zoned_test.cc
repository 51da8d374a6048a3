// FaultDevice, part 3: power cuts on zones (fault_device.h rule 7, fault_zones.h). Appends in
// flight together land and complete in any order; a cut loses unflushed appends, tears them or
// leaves a write pointer past lost data; a lost reset brings the zone back; every zone comes
// back in a state its write pointer explains; and a seeded campaign checks that what was made
// durable stays.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "storage/base/check.h"
#include "storage/base/split_mix64.h"
#include "storage/base/status_macros.h"
#include "storage/fault_device.h"
#include "storage/fault_zones.h"
#include "storage/mem_device.h"
#include "storage/zones.h"
#include "tests/testutil/block_pattern.h"
#include "tests/testutil/device_io.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::AsyncIo;
using ::nvkv::testing::IsOk;
using ::nvkv::testing::MakeRequest;
using ::nvkv::testing::Pattern;
using ::nvkv::testing::ReadBack;
using ::nvkv::testing::StatusIs;

constexpr uint32_t kLbaBytes = 4096;
constexpr uint64_t kZoneBlocks = 16;
constexpr uint64_t kCapacity = 12;
constexpr uint64_t kZones = 4;

MemDeviceOptions ZonedOptions() {
  MemDeviceOptions options;
  options.lba_bytes = kLbaBytes;
  options.lba_count = kZones * kZoneBlocks;
  options.queue_depth = 16;
  options.buffers.buffer_count = 32;
  options.buffers.chunk_count = 4;
  options.zones = {.zone_count = kZones, .zone_blocks = kZoneBlocks,
                   .capacity_blocks = kCapacity};
  return options;
}

FaultDeviceOptions Weights(uint32_t keep, uint32_t drop, uint32_t tear, uint64_t seed = 1) {
  return FaultDeviceOptions{.seed = seed, .keep_weight = keep, .drop_weight = drop,
                            .tear_weight = tear};
}

struct Rig {
  std::shared_ptr<MemStorage> storage;
  std::unique_ptr<FaultDevice> device;

  // A new queue on the same bytes after the cut ("the reboot").
  std::unique_ptr<MemDevice> Reboot() const {
    auto device = MemDevice::Open(storage, ZonedOptions());
    NVKV_CHECK(device.ok());
    return std::move(*device);
  }
};

Rig MakeRig(const FaultDeviceOptions& options) {
  auto inner = MemDevice::Create(ZonedOptions());
  NVKV_CHECK(inner.ok());
  Rig rig;
  rig.storage = (*inner)->storage();
  auto device = FaultDevice::Create(std::move(*inner), options);
  NVKV_CHECK(device.ok());
  rig.device = std::move(*device);
  return rig;
}

uint64_t ZoneStart(uint64_t zone) { return zone * kZoneBlocks; }

// Appends pattern `seed` to `zone` and waits; the first block it landed at.
absl::StatusOr<uint64_t> Append(Device& device, uint64_t zone, uint32_t blocks, uint64_t seed,
                                bool fua = false) {
  AsyncIo append(device, IoOp::kZoneAppend, ZoneStart(zone), blocks, seed, fua);
  NVKV_RETURN_IF_ERROR(append.Enqueue());
  while (!append.done()) NVKV_RETURN_IF_ERROR(device.Reap(1).status());
  NVKV_RETURN_IF_ERROR(append.status());
  return append.appended_lba();
}

absl::Status ZoneCommand(Device& device, IoOp op, uint64_t zone) {
  IoRequest request = MakeRequest(op, ZoneStart(zone));
  return RunOne(device, request);
}

ZoneDescriptor Zone(Device& device, uint64_t zone) {
  absl::StatusOr<std::vector<ZoneDescriptor>> zones = ReportAllZones(device);
  NVKV_CHECK(zones.ok() && zones->size() == kZones);
  return (*zones)[zone];
}

std::vector<uint8_t> Blocks(Device& device, uint64_t lba, uint32_t count) {
  absl::StatusOr<std::vector<uint8_t>> data = ReadBack(device, lba, count);
  NVKV_CHECK(data.ok());
  return *data;
}

bool AllZero(const std::vector<uint8_t>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

// What every zone must look like after a cut: its state explained by its write pointer, zeros
// from the pointer to the zone's end, and a first append landing at the pointer.
void ExpectZonesConsistent(Device& device) {
  for (uint64_t z = 0; z < kZones; ++z) {
    SCOPED_TRACE(::testing::Message() << "zone " << z);
    const ZoneDescriptor zone = Zone(device, z);
    const uint64_t written = zone.write_pointer - zone.start;
    ASSERT_LE(written, kCapacity);
    const ZoneState expected = written == 0           ? ZoneState::kEmpty
                               : written == kCapacity ? ZoneState::kFull
                                                      : ZoneState::kClosed;
    EXPECT_EQ(zone.state, expected);
    EXPECT_TRUE(AllZero(Blocks(device, zone.write_pointer, kZoneBlocks - written)));
    if (written < kCapacity) {
      absl::StatusOr<uint64_t> landed = Append(device, z, 1, 999);
      ASSERT_THAT(landed, IsOk());
      EXPECT_EQ(*landed, zone.write_pointer);
    }
  }
}

TEST(FaultDeviceZonedTest, OnlyAZonedMemoryDeviceIsModelled) {
  Rig rig = MakeRig(Weights(1, 1, 1));
  EXPECT_THAT(FaultDevice::Create(std::move(rig.device), {.seed = 1}),
              StatusIs(absl::StatusCode::kUnimplemented, "zoned memory device only"));
}

// Appends the order their callbacks run in.
struct CompletionLog {
  std::vector<size_t> order;
  std::vector<IoRequest>* requests = nullptr;
};

void LogCompletion(IoRequest* request) {
  auto* log = static_cast<CompletionLog*>(request->context);
  log->order.push_back(static_cast<size_t>(request - log->requests->data()));
}

TEST(FaultDeviceZonedTest, AppendsInFlightTogetherLandAndCompleteInAnyOrder) {
  constexpr size_t kAppends = 8;
  bool landed_out_of_order = false;
  bool completed_out_of_order = false;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rig rig = MakeRig(Weights(1, 1, 1, seed));
    std::vector<IoRequest> appends(kAppends);
    CompletionLog log{.order = {}, .requests = &appends};
    for (size_t i = 0; i < kAppends; ++i) {
      Buffer page = rig.device->buffers().GetPage();
      ASSERT_TRUE(page.valid());
      const std::vector<uint8_t> data = Pattern(kLbaBytes, 100 + i);
      std::copy(data.begin(), data.end(), page.data);
      appends[i] = MakeRequest(IoOp::kZoneAppend, ZoneStart(1), 1, page);
      appends[i].on_done = LogCompletion;
      appends[i].context = &log;
      ASSERT_THAT(rig.device->Enqueue(&appends[i]), IsOk());
    }
    while (log.order.size() < kAppends) ASSERT_THAT(rig.device->Reap(1), IsOk());
    std::set<uint64_t> addresses;
    for (size_t i = 0; i < kAppends; ++i) {
      ASSERT_THAT(appends[i].status, IsOk());
      const uint64_t lba = appends[i].appended_lba;
      addresses.insert(lba);
      landed_out_of_order |= lba != ZoneStart(1) + i;
      EXPECT_EQ(Blocks(*rig.device, lba, 1), Pattern(kLbaBytes, 100 + i)) << "append " << i;
      rig.device->buffers().PutPage(appends[i].buffer);
    }
    EXPECT_EQ(addresses.size(), kAppends);
    EXPECT_EQ(*addresses.begin(), ZoneStart(1));
    EXPECT_EQ(*addresses.rbegin(), ZoneStart(1) + kAppends - 1);
    EXPECT_EQ(Zone(*rig.device, 1).write_pointer, ZoneStart(1) + kAppends);
    completed_out_of_order |= !std::is_sorted(log.order.begin(), log.order.end());
  }
  EXPECT_TRUE(landed_out_of_order);
  EXPECT_TRUE(completed_out_of_order);
}

TEST(FaultDeviceZonedTest, UnflushedAppendsAreLostAndThePointerGoesBackOrStaysPastZeros) {
  std::set<uint64_t> pointers_seen;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Rig rig = MakeRig(Weights(0, 1, 0, seed));
    for (uint64_t i = 0; i < 3; ++i) ASSERT_THAT(Append(*rig.device, 1, 2, 10 + i), IsOk());
    absl::StatusOr<CutReport> cut = rig.device->CutPower();
    ASSERT_THAT(cut, IsOk());
    ASSERT_EQ(cut->writes.size(), 3u);
    for (const CutWrite& write : cut->writes) {
      EXPECT_EQ(write.op, IoOp::kZoneAppend);
      EXPECT_EQ(write.fate, WriteFate::kDropped);
    }
    std::unique_ptr<MemDevice> rebooted = rig.Reboot();
    const ZoneDescriptor zone = Zone(*rebooted, 1);
    pointers_seen.insert(zone.write_pointer - zone.start);
    EXPECT_TRUE(AllZero(Blocks(*rebooted, ZoneStart(1), kZoneBlocks)));
    ExpectZonesConsistent(*rebooted);
  }
  // The pointer went back to the zone's start, or stayed where the cut found it past lost data.
  EXPECT_EQ(pointers_seen, (std::set<uint64_t>{0, 6}));
}

TEST(FaultDeviceZonedTest, FlushedAndFuaAppendsSurviveEveryCut) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Rig rig = MakeRig(Weights(1, 1, 1, seed));
    absl::StatusOr<uint64_t> a = Append(*rig.device, 2, 3, 1);
    absl::StatusOr<uint64_t> b = Append(*rig.device, 2, 2, 2);
    ASSERT_THAT(FlushDevice(*rig.device), IsOk());
    absl::StatusOr<uint64_t> c = Append(*rig.device, 2, 2, 3, /*fua=*/true);
    ASSERT_THAT(Append(*rig.device, 2, 3, 4), IsOk());  // unflushed
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    ASSERT_THAT(rig.device->CutPower(), IsOk());
    std::unique_ptr<MemDevice> rebooted = rig.Reboot();
    EXPECT_EQ(Blocks(*rebooted, *a, 3), Pattern(3 * kLbaBytes, 1));
    EXPECT_EQ(Blocks(*rebooted, *b, 2), Pattern(2 * kLbaBytes, 2));
    EXPECT_EQ(Blocks(*rebooted, *c, 2), Pattern(2 * kLbaBytes, 3));
    EXPECT_GE(Zone(*rebooted, 2).write_pointer, *c + 2);
    ExpectZonesConsistent(*rebooted);
  }
}

TEST(FaultDeviceZonedTest, ATornAppendLeavesThePointerPastItsTornData) {
  Rig rig = MakeRig(Weights(0, 0, 1));
  ASSERT_THAT(Append(*rig.device, 0, 4, 7), IsOk());
  absl::StatusOr<CutReport> cut = rig.device->CutPower();
  ASSERT_THAT(cut, IsOk());
  ASSERT_EQ(cut->writes.size(), 1u);
  ASSERT_EQ(cut->writes[0].fate, WriteFate::kTorn);
  std::unique_ptr<MemDevice> rebooted = rig.Reboot();
  EXPECT_EQ(Zone(*rebooted, 0).write_pointer, 4u);
  const std::vector<uint8_t> data = Blocks(*rebooted, 0, 4);
  const std::vector<uint8_t> written = Pattern(4 * kLbaBytes, 7);
  constexpr uint32_t kSector = 512;
  for (uint32_t s = 0; s < cut->writes[0].sectors_kept.size(); ++s) {
    const std::vector<uint8_t> sector(data.begin() + s * kSector,
                                      data.begin() + (s + 1) * kSector);
    if (cut->writes[0].sectors_kept[s]) {
      EXPECT_TRUE(std::equal(sector.begin(), sector.end(), written.begin() + s * kSector))
          << "sector " << s;
    } else {
      EXPECT_TRUE(AllZero(sector)) << "sector " << s;
    }
  }
  ExpectZonesConsistent(*rebooted);
}

TEST(FaultDeviceZonedTest, ALostResetBringsTheZoneBackAndDropsWhatFollowedIt) {
  Rig rig = MakeRig(Weights(0, 1, 0));
  ASSERT_THAT(Append(*rig.device, 3, 4, 1, /*fua=*/true), IsOk());
  ASSERT_THAT(ZoneCommand(*rig.device, IoOp::kZoneReset, 3), IsOk());
  ASSERT_THAT(Append(*rig.device, 3, 2, 2), IsOk());
  absl::StatusOr<CutReport> cut = rig.device->CutPower();
  ASSERT_THAT(cut, IsOk());
  ASSERT_EQ(cut->writes.size(), 2u);
  EXPECT_EQ(cut->writes[0].op, IoOp::kZoneReset);
  EXPECT_EQ(cut->writes[0].lba_count, 4u) << "the blocks it emptied";
  EXPECT_EQ(cut->writes[0].fate, WriteFate::kDropped);
  EXPECT_EQ(cut->writes[1].fate, WriteFate::kDropped);
  std::unique_ptr<MemDevice> rebooted = rig.Reboot();
  const ZoneDescriptor zone = Zone(*rebooted, 3);
  EXPECT_EQ(zone.write_pointer, ZoneStart(3) + 4);
  EXPECT_EQ(zone.state, ZoneState::kClosed);
  EXPECT_EQ(Blocks(*rebooted, ZoneStart(3), 4), Pattern(4 * kLbaBytes, 1));
  ExpectZonesConsistent(*rebooted);
}

TEST(FaultDeviceZonedTest, AKeptResetEmptiesTheZone) {
  Rig rig = MakeRig(Weights(1, 0, 0));
  ASSERT_THAT(Append(*rig.device, 3, 4, 1, /*fua=*/true), IsOk());
  ASSERT_THAT(ZoneCommand(*rig.device, IoOp::kZoneReset, 3), IsOk());
  ASSERT_THAT(rig.device->CutPower(), IsOk());
  std::unique_ptr<MemDevice> rebooted = rig.Reboot();
  EXPECT_EQ(Zone(*rebooted, 3).state, ZoneState::kEmpty);
  EXPECT_TRUE(AllZero(Blocks(*rebooted, ZoneStart(3), kZoneBlocks)));
}

TEST(FaultDeviceZonedTest, ADurableAppendKeepsTheResetBeforeIt) {
  Rig rig = MakeRig(Weights(0, 1, 0));
  ASSERT_THAT(Append(*rig.device, 1, 5, 1, /*fua=*/true), IsOk());
  ASSERT_THAT(ZoneCommand(*rig.device, IoOp::kZoneReset, 1), IsOk());
  absl::StatusOr<uint64_t> after = Append(*rig.device, 1, 2, 2, /*fua=*/true);
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(*after, ZoneStart(1));
  ASSERT_THAT(rig.device->CutPower(), IsOk());
  std::unique_ptr<MemDevice> rebooted = rig.Reboot();
  EXPECT_EQ(Zone(*rebooted, 1).write_pointer, ZoneStart(1) + 2);
  EXPECT_EQ(Blocks(*rebooted, ZoneStart(1), 2), Pattern(2 * kLbaBytes, 2));
  EXPECT_TRUE(AllZero(Blocks(*rebooted, ZoneStart(1) + 2, kZoneBlocks - 2)));
}

TEST(FaultDeviceZonedTest, AnUnflushedFinishIsKeptOrLost) {
  for (const bool keep : {true, false}) {
    SCOPED_TRACE(keep ? "kept" : "lost");
    Rig rig = MakeRig(keep ? Weights(1, 0, 0) : Weights(0, 1, 0));
    ASSERT_THAT(Append(*rig.device, 0, 3, 1, /*fua=*/true), IsOk());
    ASSERT_THAT(ZoneCommand(*rig.device, IoOp::kZoneFinish, 0), IsOk());
    ASSERT_EQ(Zone(*rig.device, 0).state, ZoneState::kFull);
    ASSERT_THAT(rig.device->CutPower(), IsOk());
    std::unique_ptr<MemDevice> rebooted = rig.Reboot();
    const ZoneDescriptor zone = Zone(*rebooted, 0);
    EXPECT_EQ(zone.state, keep ? ZoneState::kFull : ZoneState::kClosed);
    EXPECT_EQ(zone.write_pointer, keep ? kCapacity : 3u);
    EXPECT_EQ(Blocks(*rebooted, 0, 3), Pattern(3 * kLbaBytes, 1));
  }
}

TEST(FaultDeviceZonedTest, AFailedAppendWritesNothing) {
  Rig rig = MakeRig(Weights(1, 1, 1));
  ASSERT_THAT(rig.device->FailOperation({.filter = OpFilter::kWrite,
                                         .error = FaultError::kMediaError}),
              IsOk());
  EXPECT_THAT(Append(*rig.device, 2, 2, 1), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(Zone(*rig.device, 2).state, ZoneState::kEmpty);
  absl::StatusOr<uint64_t> next = Append(*rig.device, 2, 2, 2);
  ASSERT_THAT(next, IsOk());
  EXPECT_EQ(*next, ZoneStart(2));
}

// A Zone Append the drive loses without noticing reports success at the write pointer, which
// stays there: the next append lands on the same blocks.
TEST(FaultDeviceZonedTest, ASilentlyLostAppendSaysItLandedAtThePointer) {
  Rig rig = MakeRig(Weights(1, 1, 1));
  ASSERT_THAT(Append(*rig.device, 2, 1, 1), IsOk());
  ASSERT_THAT(rig.device->FailOperation({.filter = OpFilter::kWrite,
                                         .error = FaultError::kSilent}),
              IsOk());
  absl::StatusOr<uint64_t> lost = Append(*rig.device, 2, 2, 2);
  ASSERT_THAT(lost, IsOk());
  EXPECT_EQ(*lost, ZoneStart(2) + 1);
  EXPECT_EQ(Zone(*rig.device, 2).write_pointer, ZoneStart(2) + 1);
  absl::StatusOr<uint64_t> next = Append(*rig.device, 2, 1, 3);
  ASSERT_THAT(next, IsOk());
  EXPECT_EQ(*next, *lost);
}

// A seeded campaign: appends (some with FUA) to three zones, flushes, an occasional reset, and a
// cut after a drawn number of operations. Every append made durable before the cut (FUA, or a
// flush submitted after it completed) whose zone was not reset after it reads back whole at the
// address its completion gave; every zone is consistent.
TEST(FaultDeviceZonedTest, WhatWasMadeDurableSurvivesASeededCut) {
  struct Landed {
    uint64_t zone = 0;
    uint64_t lba = 0;
    uint32_t blocks = 0;
    uint64_t seed = 0;
    bool durable = false;
    bool reset_after = false;
  };
  uint64_t durable_checked = 0, writes_lost = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Rig rig = MakeRig(Weights(1, 1, 1, seed));
    SplitMix64 rng(seed * 7919);
    ASSERT_THAT(rig.device->SetCutAfterOperations(1 + rng.Below(60)), IsOk());
    std::vector<Landed> landed;
    for (uint64_t step = 0; step < 80 && rig.device->fault_stats().powered; ++step) {
      const uint64_t draw = rng.Below(20);
      const uint64_t zone = rng.Below(3);
      if (draw < 14) {
        const auto blocks = static_cast<uint32_t>(1 + rng.Below(3));
        const bool fua = rng.Below(4) == 0;
        absl::StatusOr<uint64_t> lba = Append(*rig.device, zone, blocks, 1000 + step, fua);
        if (lba.ok()) landed.push_back(Landed{zone, *lba, blocks, 1000 + step, fua, false});
      } else if (draw < 18) {
        const size_t completed = landed.size();  // every one of these completed before
        if (FlushDevice(*rig.device).ok()) {
          for (size_t i = 0; i < completed; ++i) landed[i].durable = true;
        }
      } else {
        for (Landed& l : landed) l.reset_after |= l.zone == zone;  // whether or not it lands
        (void)ZoneCommand(*rig.device, IoOp::kZoneReset, zone);
      }
    }
    if (rig.device->fault_stats().powered) {
      ASSERT_THAT(rig.device->CutPower(), IsOk());
    }
    writes_lost += rig.device->last_cut()->writes_dropped + rig.device->last_cut()->writes_torn;
    std::unique_ptr<MemDevice> rebooted = rig.Reboot();
    for (const Landed& l : landed) {
      if (!l.durable || l.reset_after) continue;
      ++durable_checked;
      EXPECT_EQ(Blocks(*rebooted, l.lba, l.blocks), Pattern(l.blocks * kLbaBytes, l.seed))
          << "durable append of " << l.blocks << " blocks at LBA " << l.lba;
      EXPECT_GE(Zone(*rebooted, l.zone).write_pointer, l.lba + l.blocks);
    }
    ExpectZonesConsistent(*rebooted);
  }
  // The campaign did what it claims: cuts lost writes, and durable appends were there to check.
  EXPECT_GT(writes_lost, 100u);
  EXPECT_GT(durable_checked, 300u);
}

}  // namespace
}  // namespace nvkv::storage
