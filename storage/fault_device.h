// FaultDevice: wraps any Device and injects deterministic, seeded faults: a failing Nth
// operation (EIO or an NVMe media error), torn writes at 512-byte granularity, and power cuts
// that keep, drop or tear every write a volatile write cache still held.
//
// A crash test (the engine's tests are built this way):
//
//   for (uint64_t seed = 1; seed <= 200; ++seed) {
//     SCOPED_TRACE(::testing::Message() << "seed " << seed);   // replay a failure by its seed
//     MemDeviceOptions mem;                                     // 64 MiB of 4 KiB blocks
//     auto first = MemDevice::Create(mem);
//     std::shared_ptr<MemStorage> storage = (*first)->storage();  // outlives every device
//     {
//       auto device = FaultDevice::Create(std::move(*first), {.seed = seed});
//       (*device)->SetCutAfterOperations(1 + seed % 500);     // power fails during the run
//       RunWorkload(**device);            // engine I/O; everything fails once power is off
//     }                                   // engine and devices destroyed ("the host died")
//     auto rebooted = MemDevice::Open(storage, mem);            // clean view, same bytes
//     CheckRecovery(**rebooted);          // reopen the engine; assert the durable prefix
//   }
//
// The model, exactly (N.B. "the family" is a FaultDevice and every queue OpenQueue made from it;
// they share one fault state):
//
//   1. Time. A request is *submitted* when Enqueue accepts it: the fault device carries it out
//      at once on the inner device, synchronously (as if an SQPOLL kernel thread had taken the
//      SQE straight away; nothing is left for Submit, which only counts), except a Zone Append,
//      which is carried out with its batch (rule 7). A read returns the data
//      as of its submission. A request is *completed* when a Reap on its queue harvests it; its
//      callback runs later in that same Reap.
//   2. Write-through with an undo log. A write reaches the inner device when submitted, so every
//      read (any queue, or a new device on the same storage) sees it. Just before, the fault
//      device reads the range's prior contents through the inner device and logs them: the write
//      is *unflushed* until it becomes durable. (Its new contents are not copied: the device
//      holds them, and a newer write to the same sectors is rolled back before them.)
//   3. Durability. A write becomes durable when
//        a) it completes successfully with `fua`, or on an inner device whose info() says
//           volatile_write_cache = false; or
//        b) a flush completes successfully that was submitted after the write completed.
//      NVMe orders nothing between commands in flight, so a write still in flight when the flush
//      is submitted (enqueued before the flush, or in the same batch) is not covered by it, even
//      though here it reached the inner device first. (A flush enqueued from a callback covers
//      every write that Reap harvested, including those whose callbacks have not run yet.) A
//      flush that fails makes nothing durable. Destroying the devices without a cut is an
//      orderly shutdown: everything stays.
//   4. CutPower. Every unflushed write, completed or still in flight, gets a fate from the PRNG
//      (weights in FaultDeviceOptions), drawn in submission order:
//        kept     all its sectors stay;
//        dropped  all its sectors revert;
//        torn     a non-empty proper subset of its sectors stays (writes of 2+ sectors only).
//      A sector is `sector_bytes` (512 by default), smaller than a block when lba_bytes is
//      4096: a block can come back part old, part new, as on a drive whose atomic write unit is
//      one 512-byte sector. Reverting goes newest write first and skips sectors that a newer
//      kept or durable write covers, so each sector ends up holding what the newest write that
//      kept it wrote, or else what it held before the oldest unflushed write to it. The
//      rollback is written (and flushed) through this queue's inner device.
//   5. After a cut, power is off for the whole family: Enqueue and Submit fail with
//      kFailedPrecondition "power cut"; Reap still runs the callback of every request that was
//      in flight, with kUnavailable "power cut" (their effect on the data was settled by the
//      cut). To reboot, destroy the devices and open a new one over the same storage: a
//      MemDevice (MemDevice::Open) or a new FaultDevice around it; for a file, reopen the path
//      after the old device is gone (it holds the file's lock).
//   6. Operation faults. FailOperation arms a fault on the Nth operation, counted among those
//      carried out after arming (optionally only reads, writes and zone appends, or flushes),
//      as a cut's count is (SetCutAfterOperations): at Enqueue, or for a Zone Append when its
//      batch is carried out. The request is accepted and not carried out; its callback gets EIO
//      (absl::ErrnoToStatus(EIO, ...), as the io_uring backends report -EIO), an NVMe media
//      error (kDataLoss, "Unrecovered Read Error" for reads, "Write Fault" otherwise) or any
//      NVMe status (kNvmeStatus), each worded and coded as the passthrough backend reports it
//      (nvme_command.h MapCompletion). A failing write may be torn: a prefix, a suffix or a
//      seeded subset of its sectors reaches the device (an unflushed write like any other). With
//      FaultError::kSilent the write reports success instead: a lost or torn write the drive
//      does not notice (a lost Zone Append says it landed at the write pointer, which stays).
//      FailReadsOf makes blocks unreadable instead: every later read touching them fails the same
//      way (a bad sector), whichever operation it is, until HealReads (a transient failure:
//      the blocks read again, holding what they held).
//   7. Zones. On a zoned memory device (MemDevice over a MemStorage with a ZoneModel; any other
//      zoned device is refused) writes and Zone Appends are logged like writes, and resets and
//      finishes too: they become durable like a write without FUA (on completion without a
//      volatile cache, else by a flush submitted after they completed), and a durable write to
//      a zone makes every earlier reset or finish of it durable. A Zone Append is carried out
//      when the batch it is in is submitted (Submit, or the Reap that submits it), the batch's
//      appends in a seeded order, and a zoned family's completions are harvested in a seeded
//      order: appends in flight together land and complete in any order. At a cut a reset or
//      finish is kept or dropped (never torn); every write to a zone after a dropped reset of it
//      is dropped; what each zone then holds, where its write pointer ends (past torn data, or,
//      by a seeded coin per zone, where it stood at the cut although data below it was lost)
//      and its state follow fault_zones.h, and the zone is put back so through
//      MemStorage::RestoreZone. A zone may come back closed, so a store can find more zones
//      active after the cut than its own writes left.
//   8. Determinism. Every random choice comes from one SplitMix64 (base/split_mix64.h) seeded
//      with options.seed and drawn in operation order, so the same seed and the same sequence of
//      operations give the same faults, fates and bytes. With queues on several threads the
//      interleaving, and so the outcome, is up to the scheduler.
//
// Works over any Device without zones (memory, file, NVMe): it needs only reads and writes of the
// inner device. Over zones it needs a zoned MemDevice, whose storage it puts back at a cut.
// Costs, acceptable in tests: every write first reads its range; every request is carried out
// synchronously under a mutex the family shares; the prior contents of unflushed writes stay in
// RAM until a flush covers them. buffers() is the inner device's pool; back-pressure matches
// the inner queue's depth (kUnavailable beyond info().ring.queue_depth requests in flight).
//
// Thread contract: each queue as Device says (one issuing thread). The fault controls
// (FailOperation, SetCutAfterOperations, the counters) may be called from any thread; CutPower
// runs on the issuing thread of the queue it is called on, as it does I/O on that queue.
// The fault state is shared by std::shared_ptr between the family's queues: a test device, off
// the I/O path that STYLE.md 7 keeps free of shared_ptr.
#ifndef NVKV_STORAGE_FAULT_DEVICE_H_
#define NVKV_STORAGE_FAULT_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/base/split_mix64.h"
#include "storage/device.h"

namespace nvkv::storage {

enum class OpFilter : uint8_t {
  kAny,
  kRead,
  kWrite,  // writes and zone appends
  kFlush,
};

// What a failing operation reports.
enum class FaultError : uint8_t {
  kIoError,     // absl::ErrnoToStatus(EIO, ...) (code kUnknown), as a backend's -EIO
  kMediaError,  // kDataLoss: NVMe "Unrecovered Read Error" (reads) / "Write Fault" (others)
  kNvmeStatus,  // the NVMe status OperationFault::nvme_status, as the passthrough backend
                // reports it (storage/nvme_command.h MapCompletion)
  kSilent,      // writes only: reported as success (a lost or torn write)
};

// What part of a failing write reaches the device.
enum class PartialWrite : uint8_t {
  kNothing,        // no sector
  kPrefix,         // the first `sectors` sectors (all of them if the write is shorter)
  kSuffix,         // the last `sectors` sectors (all of them if the write is shorter): the
                   // write's start lost, as a cut may leave it (a device orders no sectors)
  kRandomSectors,  // a seeded non-empty proper subset (a coin flip for a one-sector write)
};

struct OperationFault {
  uint64_t nth = 1;  // 1: the next matching operation Enqueue accepts after arming
  OpFilter filter = OpFilter::kAny;
  FaultError error = FaultError::kIoError;
  // Writes only (the filter must be kWrite unless this is kNothing).
  PartialWrite partial = PartialWrite::kNothing;
  uint32_t sectors = 0;  // for kPrefix and kSuffix, of FaultDeviceOptions::sector_bytes
  // For kNvmeStatus: the completion's Status Field, Status Code Type in bits 8-10 and Status
  // Code in bits 0-7 (kNvmeWriteFault and the others below, or any other).
  uint16_t nvme_status = 0;
};

// NVMe statuses a write or flush may end with (NVMe Base Specification, Status Field).
inline constexpr uint16_t kNvmeWriteFault = 0x280;             // media: Write Fault
inline constexpr uint16_t kNvmeUnrecoveredReadError = 0x281;   // media
inline constexpr uint16_t kNvmeNamespaceWriteProtected = 0x020;  // generic
inline constexpr uint16_t kNvmeCapacityExceeded = 0x081;       // generic (NVM command set)
inline constexpr uint16_t kNvmeInternalError = 0x006;          // generic

// An operation fault that fired.
struct InjectedFault {
  uint64_t operation = 0;  // its number in FaultStats::operations (1-based)
  IoOp op = IoOp::kRead;
  uint64_t lba = 0;
  uint32_t lba_count = 0;
  absl::StatusCode code = absl::StatusCode::kOk;  // what its callback got
  std::vector<bool> sectors_written;              // writes: one flag per sector
};

enum class WriteFate : uint8_t {
  kKept,
  kDropped,
  kTorn,
};

// One unflushed write (or, on a zoned device, zone append, reset or finish) at a power cut.
struct CutWrite {
  IoOp op = IoOp::kWrite;
  uint64_t lba = 0;        // reset, finish: the zone's first block
  uint32_t lba_count = 0;  // reset: the blocks it emptied; finish: 0
  bool completed = false;  // false: still in flight at the cut
  WriteFate fate = WriteFate::kKept;
  // One flag per sector: this write's data for the sector reached the media. A kept sector can
  // still read back another write's data when a newer write to it was kept too (or, on a zone,
  // zeros when a newer reset of it was kept). Empty for a reset or finish.
  std::vector<bool> sectors_kept;
};

struct CutReport {
  absl::Status status;     // the rollback's own I/O on the inner device (always OK in memory)
  uint64_t operation = 0;  // FaultStats::operations when power was cut
  uint64_t writes_kept = 0;
  uint64_t writes_dropped = 0;
  uint64_t writes_torn = 0;
  std::vector<CutWrite> writes;  // every unflushed write, in submission order
};

// Counters of the whole family, since creation.
struct FaultStats {
  uint64_t operations = 0;  // requests Enqueue accepted (the count faults and cuts refer to)
  uint64_t reads = 0;
  uint64_t writes = 0;  // writes and zone appends
  uint64_t flushes = 0;
  uint64_t zone_resets = 0;
  uint64_t zone_finishes = 0;
  uint64_t faults_injected = 0;
  uint64_t unflushed_writes = 0;  // on the device, not yet durable (in flight or completed)
  uint64_t durable_writes = 0;    // made durable by FUA, a flush or a cache-less device
  uint64_t cuts = 0;              // 0 or 1: a family has one power supply
  bool powered = true;
};

struct FaultDeviceOptions {
  uint64_t seed = 0;  // the PRNG seed; print it on failure and replay with it
  // Granularity of tears: a power of two from 512 up to the inner device's lba_bytes.
  uint32_t sector_bytes = 512;
  // Relative weights of a write's fate at CutPower; not all zero. Set two to zero to force the
  // third (e.g. drop_weight only: every unflushed write is lost). Torn needs 2+ sectors; a
  // one-sector write drawn torn is redrawn among kept and dropped.
  uint32_t keep_weight = 1;
  uint32_t drop_weight = 1;
  uint32_t tear_weight = 1;
};

class FaultState;  // the family's shared state (fault_device.cc)

class FaultDevice final : public Device {
 public:
  // Wraps `inner` (owned from now on). kInvalidArgument for a bad sector size or weights;
  // kUnimplemented for a zoned device that is not a MemDevice.
  static absl::StatusOr<std::unique_ptr<FaultDevice>> Create(std::unique_ptr<Device> inner,
                                                             const FaultDeviceOptions& options);
  ~FaultDevice() override;

  // --- Device. info() and buffers() are the inner device's. ---
  const DeviceInfo& info() const override { return inner_->info(); }
  BufferPool& buffers() override { return inner_->buffers(); }
  absl::Status Enqueue(IoRequest* request) override;
  absl::StatusOr<uint32_t> Submit() override;
  absl::StatusOr<uint32_t> Reap(uint32_t min_complete) override;
  uint32_t in_flight() const override {
    return static_cast<uint32_t>(pending_.size()) + callbacks_left_;
  }
  const IoStats& stats() const override { return stats_; }
  // A queue on inner->OpenQueue() in the same family (same faults, counters and power).
  absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) override;

  // --- Fault controls; they act on the whole family. ---
  // Arms `fault`; several may be armed at once, each fires once. kInvalidArgument when nth is 0
  // or a write-only setting (kSilent, a partial write) has a filter other than kWrite.
  absl::Status FailOperation(const OperationFault& fault);
  // Makes blocks [lba, lba + lba_count) unreadable, as a bad sector is: every read that touches
  // them fails with `error` (kIoError or kMediaError), from now on, on every queue of the
  // family; writes to them still succeed. kInvalidArgument for kSilent or a count of 0.
  absl::Status FailReadsOf(uint64_t lba, uint32_t lba_count,
                           FaultError error = FaultError::kIoError);
  // Every block FailReadsOf made unreadable reads again from now on: the failure was transient
  // (a controller reset, a path that came back), and the blocks hold what they held.
  void HealReads();
  // Cuts power right after the `count`-th matching operation Enqueue accepts from now on is
  // carried out: that request is in flight at the cut (a write may be kept, torn or dropped)
  // and its Enqueue still returns OK. Replaces an earlier setting. kInvalidArgument for 0.
  absl::Status SetCutAfterOperations(uint64_t count, OpFilter filter = OpFilter::kAny);
  // Cuts power now (see the model above). kFailedPrecondition when power is already off.
  absl::StatusOr<CutReport> CutPower();
  // Has `observer` see every write Enqueue is given, before it is carried out, on the thread
  // that enqueues it and with no lock of the family held: a test may hold a write back there,
  // as a slow device would, to see what goes on meanwhile. Replaces an earlier one; an empty
  // one removes it.
  using WriteObserver = std::function<void(const IoRequest&)>;
  void SetWriteObserver(WriteObserver observer);

  FaultStats fault_stats() const;
  std::optional<CutReport> last_cut() const;          // none before the cut
  std::vector<InjectedFault> injected_faults() const;  // in firing order

 private:
  friend class FaultState;  // reads and settles Pending records

  // One request between Enqueue and its harvest.
  struct Pending {
    IoRequest* request = nullptr;
    bool awaiting_submit = false;  // a zone append, carried out when its batch is submitted
    uint64_t write_id = 0;       // its undo-log entry; 0 when it changed nothing
    uint64_t flush_horizon = 0;  // flush: covers writes completed up to this sequence number
  };

  FaultDevice(std::unique_ptr<Device> inner, std::shared_ptr<FaultState> state);
  // Carries out the zone appends awaiting submission (in a seeded order) and counts the requests
  // enqueued since the last push as submitted; returns how many.
  uint32_t Push();
  // Moves every pending request into running_ with its final status; returns how many.
  uint32_t Harvest();

  std::unique_ptr<Device> inner_;
  std::shared_ptr<FaultState> state_;
  std::vector<Pending> pending_;  // enqueued, not yet harvested (submission order)
  std::vector<Pending> running_;  // harvested; Reap is running their callbacks
  uint32_t callbacks_left_ = 0;   // requests of running_ whose callbacks have not run yet
  uint32_t unsubmitted_ = 0;      // enqueued since the last Submit
  uint32_t awaiting_submit_ = 0;  // zone appends of pending_ not carried out yet
  IoStats stats_;
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_FAULT_DEVICE_H_
