// MemDevice: a Device backed by RAM, for tests. The bytes live in a MemStorage that outlives any
// one device, so a test can drop every queue ("power off") and open a new one over the same
// bytes ("reboot"), or inspect and damage the bytes directly.
//
//   auto device = MemDevice::Create({.lba_bytes = 4096, .lba_count = 1024});
//   std::shared_ptr<MemStorage> storage = (*device)->storage();
//   ... write through *device, destroy it ...
//   auto rebooted = MemDevice::Open(storage, same_options);   // sees the same bytes
//
// MemDevice itself never loses a write: whatever Submit carries out is in the storage at once.
// A volatile write cache and power cuts are modelled by FaultDevice (fault_device.h) wrapped
// around it; `volatile_write_cache` is only reported in info() (and read by FaultDevice).
//
// Zoned: a storage made with a ZoneModel keeps each zone's state and write pointer beside its
// bytes (surviving the queues like them) and holds every write to the zone rules (zones.h):
// writes only at the write pointer, Zone Append, reset, finish, report, the open and active
// limits, a capacity below the zone size. Zone errors, as the NVMe backend words them:
// "Zone Invalid Write" (not at the write pointer) and "Zone Boundary Error" (past the zone's
// capacity) are kFailedPrecondition; "Zone Is Full" and "Too Many Active Zones" are
// kResourceExhausted; a zone the device took out of service (RetireZone) fails every write,
// append, reset and finish with "Zone Is Read Only" (kFailedPrecondition) or "Zone Is Offline"
// (kDataLoss, and its reads too). With `completion_seed`, each batch a queue submits is carried out and
// completed in a seeded random order, as NVMe allows (appends in flight land anywhere).
//
// Ownership: the storage is shared by std::shared_ptr between its queues and the test. That is
// against the no-shared_ptr rule of the I/O path (STYLE.md 7) on purpose: this is a test device
// whose storage must survive the devices built on it, and its cost does not matter.
#ifndef NVKV_STORAGE_MEM_DEVICE_H_
#define NVKV_STORAGE_MEM_DEVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/base/split_mix64.h"
#include "storage/device.h"
#include "storage/zones.h"

namespace nvkv::storage {

// The bytes of a memory device: lba_count blocks of lba_bytes each, zero-filled at creation.
//
// Thread contract: thread-safe; every access takes the mutex, so queues on different threads may
// read and write concurrently. Each Read or Write is atomic with respect to the others (a real
// drive promises less; FaultDevice models the weaker promise).
class MemStorage {
 public:
  // Fails with kInvalidArgument for a block size that is not a power of two in 512..1 MiB or a
  // zero block count, and kResourceExhausted when the memory cannot be mapped.
  // With `zones` (zone_count 0: none), a zoned storage whose zones cover it from LBA 0; then
  // also kInvalidArgument for a model that does not fit: a capacity of 0 or larger than the
  // zone, or zones that do not make exactly lba_count blocks.
  static absl::StatusOr<std::shared_ptr<MemStorage>> Create(uint32_t lba_bytes,
                                                            uint64_t lba_count,
                                                            const ZoneModel& zones = {});
  ~MemStorage();
  MemStorage(const MemStorage&) = delete;
  MemStorage& operator=(const MemStorage&) = delete;

  uint32_t lba_bytes() const { return lba_bytes_; }
  uint64_t lba_count() const { return lba_count_; }
  uint64_t capacity_bytes() const { return uint64_t{lba_bytes_} * lba_count_; }

  // Copies `lba_count` blocks starting at `lba` out to `out` / in from `data`.
  // REQUIRES: the blocks lie inside the storage (checked); Write: not zoned.
  void Read(uint64_t lba, uint32_t lba_count, uint8_t* out) const;
  // With `placement_id`, what a device with flexible data placement sees of the write: the
  // placement identifier its directive named (kept for PlacementOf and BlocksPlacedWith).
  void Write(uint64_t lba, uint32_t lba_count, const uint8_t* data,
             std::optional<uint16_t> placement_id = std::nullopt);
  // The placement identifier the last write of block `lba` named; none when it named none (or
  // the block was never written).
  std::optional<uint16_t> PlacementOf(uint64_t lba) const;
  // Blocks written naming `placement_id`, all writes counted (the device's use of the handle).
  uint64_t BlocksPlacedWith(uint16_t placement_id) const;

  // Zoned storage. The zone model (zone_count 0: not zoned).
  const ZoneModel& zones() const { return zones_; }
  // A write at `lba`, which must be its zone's write pointer.
  absl::Status WriteZoned(uint64_t lba, uint32_t lba_count, const uint8_t* data);
  // Zone Append to the zone starting at `zone_start`: the first block written.
  absl::StatusOr<uint64_t> Append(uint64_t zone_start, uint32_t lba_count, const uint8_t* data);
  // Reset (the zone empty, its bytes zeros) and Finish (full where it stands, its write pointer
  // at the end of its capacity; an empty zone needs room among the active ones on its way).
  absl::Status ResetZone(uint64_t zone_start);
  absl::Status FinishZone(uint64_t zone_start);
  // What a drive does as its media wears: zone `zone` turns read-only (its data stays readable)
  // or offline (its data is gone). `state` is kReadOnly or kOffline; nothing changes it again.
  // With `only_from`, only a zone in that state changes; returns whether it did.
  bool RetireZone(uint64_t zone, ZoneState state,
                  std::optional<ZoneState> only_from = std::nullopt);
  // kDataLoss when the blocks from `lba` lie in an offline zone (a read of them fails).
  absl::Status CheckReadable(uint64_t lba, uint32_t lba_count) const;
  // The zones from `first_zone` on, at most `max`.
  std::vector<ZoneDescriptor> Report(uint64_t first_zone, uint64_t max) const;
  // What a power cut left (FaultDevice's rollback; it ignores the zone rules): zone `zone` holds
  // the first `written` blocks of `image` (the zone's size), zeros after them, its write pointer
  // there, in `state`.
  void RestoreZone(uint64_t zone, uint64_t written, ZoneState state,
                   std::span<const uint8_t> image);
  // What a power cycle does to the zones: every open zone is closed.
  void CloseOpenZones();

  // Test helpers. CopyOut returns a copy of the blocks; Corrupt XORs `xor_mask` into
  // `length_bytes` bytes starting at byte `offset_bytes` (e.g. to fake a bit flip on the media).
  // REQUIRES: the range lies inside the storage (checked).
  std::vector<uint8_t> CopyOut(uint64_t lba, uint32_t lba_count) const;
  void Corrupt(uint64_t offset_bytes, uint64_t length_bytes, uint8_t xor_mask = 0xff);
  // Corrupt, but only while the blocks from `lba` still hold `expected` (a CopyOut the caller
  // inspected), checked and changed in one step: a write that landed since the copy is never
  // damaged in its place. Returns whether it corrupted. REQUIRES: the corrupted range lies
  // inside those blocks.
  bool CorruptIfUnchanged(uint64_t lba, const std::vector<uint8_t>& expected,
                          uint64_t offset_bytes, uint64_t length_bytes, uint8_t xor_mask = 0xff);

 private:
  struct Zone {
    uint64_t written = 0;  // blocks from its start to its write pointer
    ZoneState state = ZoneState::kEmpty;
    uint64_t opened = 0;  // when it was last opened (open_clock_), to close the oldest first
  };

  MemStorage(uint32_t lba_bytes, uint64_t lba_count, uint8_t* bytes, const ZoneModel& zones);
  // Byte offset of `lba`, after checking that `lba_count` blocks from there fit.
  uint64_t CheckedOffset(uint64_t lba, uint32_t lba_count) const;
  // The error a write, append, reset or finish of zone `z` meets when the device took it out
  // of service (read-only or offline); OK otherwise.
  absl::Status InServiceLocked(uint64_t z) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `lba_count` blocks at zone `z`'s write pointer, by the zone rules.
  absl::Status WriteAtPointerLocked(uint64_t z, uint32_t lba_count, const uint8_t* data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Zone `z` is about to be written: opened (implicitly) if it is not, within the limits.
  absl::Status OpenForWriteLocked(uint64_t z) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ZoneDescriptor DescribeLocked(uint64_t z) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t lba_bytes_;
  const uint64_t lba_count_;
  const ZoneModel zones_;
  mutable absl::Mutex mu_;
  uint8_t* const bytes_ ABSL_PT_GUARDED_BY(mu_);  // one anonymous mapping, capacity_bytes() long
  std::vector<Zone> zone_ ABSL_GUARDED_BY(mu_);   // one per zone of zones_
  uint64_t open_clock_ ABSL_GUARDED_BY(mu_) = 0;
  // Per block, the placement identifier its last write named, or kNoPlacement; empty until a
  // write names one.
  static constexpr int32_t kNoPlacement = -1;
  std::vector<int32_t> placement_of_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> blocks_placed_ ABSL_GUARDED_BY(mu_);  // by placement identifier
};

struct MemDeviceOptions {
  // Geometry. Create makes a storage of this size; Open requires the storage to match it.
  uint32_t lba_bytes = 4096;   // bytes per block: a power of two, 512..1 MiB. Default 4096.
  uint64_t lba_count = 16384;  // blocks; default 16384 (64 MiB at 4 KiB blocks)
  uint32_t queue_depth = 64;   // requests in flight per queue, 1..4096; default 64
  // Buffers must be aligned to this many bytes (reported as info().memory_alignment and checked
  // by Enqueue, like O_DIRECT's rule). Power of two; default 512.
  uint32_t memory_alignment = 512;
  BufferPoolOptions buffers;          // each queue's own pool (not registered: buf_index -1)
  bool volatile_write_cache = true;   // reported in info(); FaultDevice honours it
  std::string name = "mem";           // reported as info().path, quoted in error messages
  ZoneModel zones;                    // Create: a zoned storage (MemStorage::Create)
  // Not 0: each submitted batch is carried out and completed in an order drawn from this seed.
  uint64_t completion_seed = 0;
  // Flexible data placement (not on zones): the placement identifiers reported in
  // info().placement_ids; each write names the one its IoRequest::placement indexes, which the
  // storage keeps (MemStorage::PlacementOf). Empty: none.
  std::vector<uint16_t> placement_ids;
};

// A queue on a MemStorage. Like SyncFileDevice: Enqueue validates and queues, Submit carries out
// the whole batch in order (a copy under the storage mutex), Reap runs the callbacks.
//
// Thread contract: see Device (one issuing thread per queue). Queues from OpenQueue share the
// storage and may run on different threads.
// Invariants:
//   - in_flight() == queued_.size() + done_.size() + callbacks_left_ <= info().ring.queue_depth
//     (a request counts until its callback has run, even while Reap is running the batch);
//   - a request's callback runs only inside Reap, after the batch it belongs to was detached.
class MemDevice final : public Device {
 public:
  // A new zero-filled storage and a first queue on it.
  static absl::StatusOr<std::unique_ptr<MemDevice>> Create(const MemDeviceOptions& options);
  // A queue on an existing storage (a reboot, or a second independent device on the same bytes).
  // kInvalidArgument when options.lba_bytes or options.lba_count differ from the storage's.
  static absl::StatusOr<std::unique_ptr<MemDevice>> Open(std::shared_ptr<MemStorage> storage,
                                                         const MemDeviceOptions& options);

  const DeviceInfo& info() const override { return info_; }
  BufferPool& buffers() override { return *pool_; }
  absl::Status Enqueue(IoRequest* request) override;
  absl::StatusOr<uint32_t> Submit() override;
  absl::StatusOr<uint32_t> Reap(uint32_t min_complete) override;
  uint32_t in_flight() const override {
    return static_cast<uint32_t>(queued_.size() + done_.size()) + callbacks_left_;
  }
  const IoStats& stats() const override { return stats_; }
  absl::StatusOr<std::unique_ptr<Device>> OpenQueue(const QueueOptions& options) override;

  // The shared bytes; lives as long as any holder (devices, tests).
  const std::shared_ptr<MemStorage>& storage() const { return storage_; }

 private:
  MemDevice(DeviceInfo info, std::shared_ptr<MemStorage> storage,
            std::unique_ptr<BufferPool> pool, const MemDeviceOptions& options);
  // Carries out `request`; its outcome in its status.
  void Execute(IoRequest& request);
  // The queued batch in a seeded random order (completion_seed).
  void Shuffle();

  DeviceInfo info_;
  std::shared_ptr<MemStorage> storage_;
  std::unique_ptr<BufferPool> pool_;
  MemDeviceOptions options_;
  std::vector<IoRequest*> queued_;   // enqueued, not yet carried out
  std::vector<IoRequest*> done_;     // carried out, callbacks pending
  std::vector<IoRequest*> running_;  // the batch whose callbacks Reap is running
  uint32_t callbacks_left_ = 0;      // requests of running_ whose callbacks have not run yet
  IoStats stats_;
  SplitMix64 order_;                 // completion_seed's
};

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_MEM_DEVICE_H_
