#include "storage/fault_device.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "storage/base/align.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"
#include "storage/fault_zones.h"
#include "storage/mem_device.h"
#include "storage/nvme_command.h"
#include "storage/nvme_device.h"

namespace nvkv::storage {

namespace {

// Scratch memory for the fault device's own inner I/O (prior contents, merged torn writes,
// rollback). Not from the inner pool, which belongs to the caller; buf_index -1 tells backends
// to use plain, non-fixed I/O, which the Device contract allows.
constexpr uint32_t kScratchAlignment = 4096;

const char* OpName(IoOp op) {
  switch (op) {
    case IoOp::kRead:
      return "read";
    case IoOp::kWrite:
      return "write";
    case IoOp::kFlush:
      return "flush";
    case IoOp::kWaitEvent:
      return "event wait";  // refused by ValidateRequest before it gets here
    case IoOp::kZoneAppend:
      return "zone append";
    case IoOp::kZoneReset:
      return "zone reset";
    case IoOp::kZoneFinish:
      return "zone finish";
    case IoOp::kZoneReport:
      return "zone report";
  }
  return "unknown op";
}

bool Matches(OpFilter filter, IoOp op) {
  switch (filter) {
    case OpFilter::kAny:
      return true;
    case OpFilter::kRead:
      return op == IoOp::kRead;
    case OpFilter::kWrite:
      return op == IoOp::kWrite || op == IoOp::kZoneAppend;
    case OpFilter::kFlush:
      return op == IoOp::kFlush;
  }
  return false;
}

// "write 8 blocks at LBA 16 of mem", the way the file backends word their errors.
std::string Where(const IoRequest& request, const DeviceInfo& info) {
  if (request.op == IoOp::kFlush) return absl::StrCat("flush of ", info.path);
  return absl::StrCat(OpName(request.op), " ", request.lba_count, " blocks at LBA ", request.lba,
                      " of ", info.path);
}

// What the NVMe backend reports for a completion with Status Field `nvme_status`.
absl::Status NvmeCompletionStatus(uint16_t nvme_status, const IoRequest& request,
                                  const DeviceInfo& info) {
  const absl::Status status = MapCompletion(nvme_status, CompletionContext(request, info));
  return absl::Status(status.code(), absl::StrCat(status.message(), " (injected fault)"));
}

absl::Status InjectedStatus(const OperationFault& fault, const IoRequest& request,
                            const DeviceInfo& info) {
  switch (fault.error) {
    case FaultError::kIoError:
      return absl::ErrnoToStatus(EIO, absl::StrCat(Where(request, info), " (injected fault)"));
    case FaultError::kMediaError:
      return NvmeCompletionStatus(
          request.op == IoOp::kRead ? kNvmeUnrecoveredReadError : kNvmeWriteFault, request, info);
    case FaultError::kNvmeStatus:
      return NvmeCompletionStatus(fault.nvme_status, request, info);
    case FaultError::kSilent:
      break;
  }
  return absl::OkStatus();
}

absl::Status PowerOffError(const DeviceInfo& info) {
  return absl::FailedPreconditionError(
      absl::StrCat(info.path, ": power cut: the device is off; open a new device on the storage"));
}

// A non-empty proper subset of `count` sectors (a coin flip when there is only one).
std::vector<bool> RandomSectors(SplitMix64& rng, uint32_t count) {
  std::vector<bool> kept(count);
  if (count == 1) {
    kept[0] = rng.Below(2) == 1;
    return kept;
  }
  uint32_t kept_count = 0;
  for (uint32_t i = 0; i < count; ++i) {
    kept[i] = (rng.Next() >> 63) != 0;
    kept_count += kept[i] ? 1 : 0;
  }
  if (kept_count == 0) kept[rng.Below(count)] = true;
  if (kept_count == count) kept[rng.Below(count)] = false;
  return kept;
}

bool AllOf(const std::vector<bool>& flags, bool value) {
  return std::all_of(flags.begin(), flags.end(), [value](bool f) { return f == value; });
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

// One write that reached the inner device and is not known durable at the front of the log; on a
// zoned device also a zone append, reset or finish.
struct LoggedWrite {
  uint64_t id = 0;  // submission order, from 1; consecutive along the log
  IoOp op = IoOp::kWrite;
  uint64_t lba = 0;        // where it wrote (an append: where it landed); a reset, finish: the zone
  uint32_t lba_count = 0;  // reset: the blocks it emptied; finish: 0
  std::vector<uint8_t> before;  // the range's contents just before the write
  uint64_t zone_written = 0;    // zoned: the zone's blocks written just before it
  uint64_t completion = 0;      // completion sequence number; 0 while in flight
  bool durable = false;
};

// The state a FaultDevice family shares. Every member is guarded by mu_, which is held across
// the inner I/O of a request so that reading prior contents and writing is one atomic step with
// respect to the other queues. Lock order: mu_, then whatever the inner device takes (e.g.
// MemStorage's mutex).
// Invariants:
//   - log_ ids are consecutive; its front is never durable (durable fronts are dropped), but a
//     durable entry may sit behind an unflushed one: it still shields its sectors from rollback;
//   - once powered_ is false it stays false, and log_ is empty.
class FaultState {
 public:
  // `zoned_storage`: the storage of a zoned inner device (null without zones).
  FaultState(const FaultDeviceOptions& options, const DeviceInfo& info,
             std::shared_ptr<MemStorage> zoned_storage)
      : options_(options),
        info_(info),
        zoned_storage_(std::move(zoned_storage)),
        sectors_per_lba_(info.lba_bytes / options.sector_bytes),
        rng_(options.seed) {}

  bool powered() const {
    absl::MutexLock lock(&mu_);
    return powered_;
  }
  void SetWriteObserver(FaultDevice::WriteObserver observer) {
    absl::MutexLock lock(&mu_);
    write_observer_ = observer ? std::make_shared<const FaultDevice::WriteObserver>(
                                     std::move(observer))
                               : nullptr;
  }
  std::shared_ptr<const FaultDevice::WriteObserver> write_observer() const {
    absl::MutexLock lock(&mu_);
    return write_observer_;
  }
  absl::Status Arm(const OperationFault& fault);
  absl::Status AddBadBlocks(uint64_t lba, uint32_t lba_count, FaultError error);
  void ClearBadBlocks();
  void SetCut(uint64_t count, OpFilter filter);
  // Carries `pending->request` out on `inner` (sets its status; fills write_id and
  // flush_horizon). Not OK only when power is off (then nothing was accepted).
  absl::Status CarryOut(Device& inner, FaultDevice::Pending* pending);
  // Gives every request of `batch` its final status and records completions (durability).
  void Complete(std::span<FaultDevice::Pending> batch);
  // Puts `items` in a seeded random order.
  template <typename T>
  void Shuffle(std::span<T> items) {
    absl::MutexLock lock(&mu_);
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng_.Below(i)]);
  }
  absl::StatusOr<CutReport> Cut(Device& inner);

  FaultStats stats() const;
  std::optional<CutReport> last_cut() const {
    absl::MutexLock lock(&mu_);
    return last_cut_;
  }
  std::vector<InjectedFault> injected() const {
    absl::MutexLock lock(&mu_);
    return injected_;
  }

 private:
  struct ArmedFault {
    OperationFault fault;
    uint64_t seen = 0;  // matching operations since arming
  };
  struct BadBlocks {
    uint64_t lba = 0;
    uint32_t lba_count = 0;
    FaultError error = FaultError::kIoError;
  };
  struct CutPlan {
    uint64_t count = 0;
    OpFilter filter = OpFilter::kAny;
    uint64_t seen = 0;
  };

  uint32_t SectorCount(uint32_t lba_count) const { return lba_count * sectors_per_lba_; }
  uint32_t sector_bytes() const { return options_.sector_bytes; }
  std::optional<OperationFault> FiringFault(IoOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CutDue(IoOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<bool> WrittenSectors(const std::optional<OperationFault>& fault,
                                   uint32_t sector_count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Write(Device& inner, const IoRequest& request, const std::vector<bool>& sectors,
                     uint64_t* write_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A write or zone append on a zoned device (logged only when the zone took it).
  absl::Status WriteZone(Device& inner, IoRequest& request, const std::vector<bool>& sectors,
                         uint64_t* write_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A zone reset or finish (logged only when carried out).
  absl::Status ManageZone(Device& inner, const IoRequest& request, uint64_t* write_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ZoneWritten(uint64_t zone) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LoggedWrite& Find(uint64_t write_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDurable(LoggedWrite& write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteOne(FaultDevice::Pending& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  CutWrite DrawFate(const LoggedWrite& write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The fate of every entry of the log, in its order (a durable one kept).
  std::vector<CutWrite> DrawFates() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts every zone the log touched back as fault_zones.h says.
  void RewindZones(const std::vector<CutWrite>& fates) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Revert(Device& inner, const LoggedWrite& write, const std::vector<bool>& kept,
                      std::unordered_set<uint64_t>* settled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<CutReport> CutLocked(Device& inner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Buffer Scratch(uint32_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FaultDeviceOptions options_;
  const DeviceInfo info_;
  const std::shared_ptr<MemStorage> zoned_storage_;
  const uint32_t sectors_per_lba_;
  mutable absl::Mutex mu_;
  bool powered_ ABSL_GUARDED_BY(mu_) = true;
  std::shared_ptr<const FaultDevice::WriteObserver> write_observer_ ABSL_GUARDED_BY(mu_);
  SplitMix64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<ArmedFault> armed_ ABSL_GUARDED_BY(mu_);
  std::vector<BadBlocks> bad_blocks_ ABSL_GUARDED_BY(mu_);
  std::optional<CutPlan> cut_plan_ ABSL_GUARDED_BY(mu_);
  std::deque<LoggedWrite> log_ ABSL_GUARDED_BY(mu_);
  uint64_t next_write_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t completions_ ABSL_GUARDED_BY(mu_) = 0;  // completion sequence numbers given out
  FaultStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<InjectedFault> injected_ ABSL_GUARDED_BY(mu_);
  std::optional<CutReport> last_cut_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<uint8_t, FreeDeleter> scratch_ ABSL_GUARDED_BY(mu_);
  uint32_t scratch_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status FaultState::AddBadBlocks(uint64_t lba, uint32_t lba_count, FaultError error) {
  if (lba_count == 0) return absl::InvalidArgumentError("bad blocks: count from 1");
  if (error != FaultError::kIoError && error != FaultError::kMediaError) {
    return absl::InvalidArgumentError("bad blocks: reads fail with an I/O or a media error");
  }
  absl::MutexLock lock(&mu_);
  bad_blocks_.push_back(BadBlocks{lba, lba_count, error});
  return absl::OkStatus();
}

void FaultState::ClearBadBlocks() {
  absl::MutexLock lock(&mu_);
  bad_blocks_.clear();
}

absl::Status FaultState::Arm(const OperationFault& fault) {
  if (fault.nth == 0) return absl::InvalidArgumentError("operation fault: nth counts from 1");
  const bool write_only = fault.error == FaultError::kSilent ||
                          fault.partial != PartialWrite::kNothing;
  if (write_only && fault.filter != OpFilter::kWrite) {
    return absl::InvalidArgumentError(
        "operation fault: a silent or partial failure applies to writes; use OpFilter::kWrite");
  }
  if ((fault.error == FaultError::kNvmeStatus) != (fault.nvme_status != 0)) {
    return absl::InvalidArgumentError(
        "operation fault: kNvmeStatus takes a non-zero nvme_status, and only it does");
  }
  absl::MutexLock lock(&mu_);
  armed_.push_back(ArmedFault{fault, 0});
  return absl::OkStatus();
}

void FaultState::SetCut(uint64_t count, OpFilter filter) {
  absl::MutexLock lock(&mu_);
  cut_plan_ = CutPlan{count, filter, 0};
}

std::optional<OperationFault> FaultState::FiringFault(IoOp op) {
  std::optional<OperationFault> firing;
  // Every armed fault counts the operation; when two reach their nth at once, the one armed
  // first decides and both are spent.
  for (auto it = armed_.begin(); it != armed_.end();) {
    if (Matches(it->fault.filter, op) && ++it->seen == it->fault.nth) {
      if (!firing.has_value()) firing = it->fault;
      it = armed_.erase(it);
    } else {
      ++it;
    }
  }
  return firing;
}

bool FaultState::CutDue(IoOp op) {
  if (!cut_plan_.has_value() || !Matches(cut_plan_->filter, op)) return false;
  if (++cut_plan_->seen < cut_plan_->count) return false;
  cut_plan_.reset();
  return true;
}

std::vector<bool> FaultState::WrittenSectors(const std::optional<OperationFault>& fault,
                                             uint32_t sector_count) {
  if (!fault.has_value()) return std::vector<bool>(sector_count, true);
  switch (fault->partial) {
    case PartialWrite::kNothing:
      break;
    case PartialWrite::kPrefix:
    case PartialWrite::kSuffix: {
      std::vector<bool> written(sector_count, false);
      const uint32_t count = std::min(fault->sectors, sector_count);
      if (fault->partial == PartialWrite::kPrefix) {
        std::fill(written.begin(), written.begin() + count, true);
      } else {
        std::fill(written.end() - count, written.end(), true);
      }
      return written;
    }
    case PartialWrite::kRandomSectors:
      return RandomSectors(rng_, sector_count);
  }
  return std::vector<bool>(sector_count, false);
}

Buffer FaultState::Scratch(uint32_t bytes) {
  if (bytes > scratch_bytes_) {
    const uint32_t alignment = std::max(info_.memory_alignment, kScratchAlignment);
    const auto size = static_cast<uint32_t>(AlignUp(bytes, alignment));
    scratch_.reset(static_cast<uint8_t*>(std::aligned_alloc(alignment, size)));
    NVKV_CHECK(scratch_ != nullptr);
    scratch_bytes_ = size;
  }
  return Buffer{scratch_.get(), scratch_bytes_, -1, 0};
}

absl::Status FaultState::Write(Device& inner, const IoRequest& request,
                               const std::vector<bool>& sectors, uint64_t* write_id) {
  const uint32_t bytes = request.lba_count * info_.lba_bytes;
  Buffer scratch = Scratch(bytes);
  // Prior contents first, so a cut can put them back. This is the extra read every write costs.
  NVKV_RETURN_IF_ERROR(ReadBlocks(inner, request.lba, request.lba_count, scratch));
  LoggedWrite logged;
  logged.id = next_write_id_++;
  logged.lba = request.lba;
  logged.lba_count = request.lba_count;
  logged.before.assign(scratch.data, scratch.data + bytes);
  absl::Status written;
  if (AllOf(sectors, true)) {
    written = WriteBlocks(inner, request.lba, request.lba_count, request.buffer, request.fua,
                          request.placement);
  } else {
    // A torn write: the prior contents with the written sectors laid over them, in one write
    // (a sector may be smaller than a block, so the inner device cannot take it sector by
    // sector).
    for (uint32_t s = 0; s < sectors.size(); ++s) {
      if (!sectors[s]) continue;
      std::memcpy(scratch.data + size_t{s} * sector_bytes(),
                  request.buffer.data + size_t{s} * sector_bytes(), sector_bytes());
    }
    written = WriteBlocks(inner, request.lba, request.lba_count, scratch, request.fua,
                          request.placement);
  }
  // Logged even when the inner write failed: it may have changed part of the range.
  log_.push_back(std::move(logged));
  *write_id = log_.back().id;
  return written;
}

uint64_t FaultState::ZoneWritten(uint64_t zone) const {
  const std::vector<ZoneDescriptor> report = zoned_storage_->Report(zone, 1);
  NVKV_CHECK(report.size() == 1);
  return report[0].write_pointer - report[0].start;
}

absl::Status FaultState::WriteZone(Device& inner, IoRequest& request,
                                   const std::vector<bool>& sectors, uint64_t* write_id) {
  const uint64_t zone = info_.zones.ZoneOf(request.lba);
  const uint32_t bytes = request.lba_count * info_.lba_bytes;
  IoRequest inner_request;
  inner_request.op = request.op;
  inner_request.fua = request.fua;
  inner_request.placement = request.placement;
  inner_request.lba = request.lba;
  inner_request.lba_count = request.lba_count;
  inner_request.buffer = request.buffer;
  if (!AllOf(sectors, true)) {
    // A torn write: what lies above a write pointer (zeros) with the written sectors over it.
    Buffer scratch = Scratch(bytes);
    std::memset(scratch.data, 0, bytes);
    for (uint32_t s = 0; s < sectors.size(); ++s) {
      if (!sectors[s]) continue;
      std::memcpy(scratch.data + size_t{s} * sector_bytes(),
                  request.buffer.data + size_t{s} * sector_bytes(), sector_bytes());
    }
    inner_request.buffer = scratch;
  }
  LoggedWrite logged;
  logged.op = request.op;
  logged.zone_written = ZoneWritten(zone);
  // Refused by the zone rules: nothing changed, nothing to log.
  NVKV_RETURN_IF_ERROR(RunOne(inner, inner_request));
  if (request.op == IoOp::kZoneAppend) request.appended_lba = inner_request.appended_lba;
  logged.id = next_write_id_++;
  logged.lba = request.op == IoOp::kZoneAppend ? inner_request.appended_lba : request.lba;
  logged.lba_count = request.lba_count;
  logged.before.assign(bytes, 0);
  log_.push_back(std::move(logged));
  *write_id = log_.back().id;
  return absl::OkStatus();
}

absl::Status FaultState::ManageZone(Device& inner, const IoRequest& request, uint64_t* write_id) {
  const uint64_t zone = info_.zones.ZoneOf(request.lba);
  LoggedWrite logged;
  logged.op = request.op;
  logged.lba = request.lba;
  logged.zone_written = ZoneWritten(zone);
  if (request.op == IoOp::kZoneReset && logged.zone_written > 0) {
    // What a lost reset puts back.
    logged.lba_count = static_cast<uint32_t>(logged.zone_written);
    logged.before = zoned_storage_->CopyOut(request.lba, logged.lba_count);
  }
  IoRequest inner_request;
  inner_request.op = request.op;
  inner_request.lba = request.lba;
  NVKV_RETURN_IF_ERROR(RunOne(inner, inner_request));
  logged.id = next_write_id_++;
  log_.push_back(std::move(logged));
  *write_id = log_.back().id;
  return absl::OkStatus();
}

absl::Status FaultState::CarryOut(Device& inner, FaultDevice::Pending* pending) {
  IoRequest& request = *pending->request;
  absl::MutexLock lock(&mu_);
  if (!powered_) return PowerOffError(info_);
  ++stats_.operations;
  stats_.reads += request.op == IoOp::kRead ? 1 : 0;
  stats_.writes += request.op == IoOp::kWrite || request.op == IoOp::kZoneAppend ? 1 : 0;
  stats_.flushes += request.op == IoOp::kFlush ? 1 : 0;
  stats_.zone_resets += request.op == IoOp::kZoneReset ? 1 : 0;
  stats_.zone_finishes += request.op == IoOp::kZoneFinish ? 1 : 0;
  std::optional<OperationFault> fault = FiringFault(request.op);
  if (request.op == IoOp::kRead && !fault.has_value()) {
    for (const BadBlocks& bad : bad_blocks_) {
      if (request.lba < bad.lba + bad.lba_count && bad.lba < request.lba + request.lba_count) {
        OperationFault bad_read;
        bad_read.filter = OpFilter::kRead;
        bad_read.error = bad.error;
        fault = bad_read;
        break;
      }
    }
  }
  absl::Status status;
  std::vector<bool> sectors;
  switch (request.op) {
    case IoOp::kRead:
      if (!fault.has_value()) {
        status = ReadBlocks(inner, request.lba, request.lba_count, request.buffer);
      }
      break;
    case IoOp::kWrite:
    case IoOp::kZoneAppend:
      sectors = WrittenSectors(fault, SectorCount(request.lba_count));
      if (AllOf(sectors, false)) {
        // Nothing written; a silent fault still says where an append landed: at the pointer.
        if (request.op == IoOp::kZoneAppend) {
          const uint64_t zone = info_.zones.ZoneOf(request.lba);
          request.appended_lba = info_.zones.StartOf(zone) + ZoneWritten(zone);
        }
        break;
      }
      status = zoned_storage_ != nullptr ? WriteZone(inner, request, sectors, &pending->write_id)
                                         : Write(inner, request, sectors, &pending->write_id);
      break;
    case IoOp::kFlush:
      // Writes completed so far are the ones this flush covers (model rule 3).
      pending->flush_horizon = completions_;
      if (!fault.has_value()) status = FlushDevice(inner);
      break;
    case IoOp::kZoneReset:
    case IoOp::kZoneFinish:
      if (!fault.has_value()) status = ManageZone(inner, request, &pending->write_id);
      break;
    case IoOp::kZoneReport:
      if (!fault.has_value()) {
        IoRequest report = request;
        status = RunOne(inner, report);
      }
      break;
    case IoOp::kWaitEvent:
      NVKV_CHECK(false);  // refused by ValidateRequest
  }
  if (fault.has_value()) {
    // A silent fault reports whatever the inner device said about the part that was written.
    absl::Status injected = InjectedStatus(*fault, request, info_);
    if (!injected.ok()) status = std::move(injected);
    ++stats_.faults_injected;
    injected_.push_back(InjectedFault{stats_.operations, request.op, request.lba,
                                      request.lba_count, status.code(), std::move(sectors)});
  }
  request.status = std::move(status);
  if (CutDue(request.op)) {
    // The rollback's own outcome is in the report; the caller's Enqueue still succeeded.
    (void)CutLocked(inner);
  }
  return absl::OkStatus();
}

LoggedWrite& FaultState::Find(uint64_t write_id) {
  NVKV_CHECK(!log_.empty());
  NVKV_CHECK(write_id >= log_.front().id);
  const uint64_t index = write_id - log_.front().id;
  NVKV_CHECK(index < log_.size());
  return log_[index];
}

void FaultState::MarkDurable(LoggedWrite& write) {
  if (write.durable) return;
  write.durable = true;
  ++stats_.durable_writes;
}

void FaultState::CompleteOne(FaultDevice::Pending& pending) {
  IoRequest& request = *pending.request;
  if (pending.write_id != 0) {  // a write, or a zone append, reset or finish
    LoggedWrite& write = Find(pending.write_id);
    write.completion = ++completions_;
    const bool fua = request.fua && (request.op == IoOp::kWrite || request.op == IoOp::kZoneAppend);
    if (request.status.ok() && (fua || !info_.volatile_write_cache)) MarkDurable(write);
  } else if (request.op == IoOp::kFlush && request.status.ok()) {
    for (LoggedWrite& write : log_) {
      if (write.completion != 0 && write.completion <= pending.flush_horizon) MarkDurable(write);
    }
  }
}

void FaultState::Complete(std::span<FaultDevice::Pending> batch) {
  absl::MutexLock lock(&mu_);
  for (FaultDevice::Pending& pending : batch) {
    if (!powered_) {
      // In flight at the cut: the cut already settled what it did to the data.
      pending.request->status = absl::UnavailableError(
          absl::StrCat(Where(*pending.request, info_), ": power cut while in flight"));
      continue;
    }
    CompleteOne(pending);
  }
  // Durable writes at the front can no longer be rolled back nor shield anything older.
  while (!log_.empty() && log_.front().durable) log_.pop_front();
}

CutWrite FaultState::DrawFate(const LoggedWrite& write) {
  // A reset or finish is done or not: it has no sectors of its own to tear.
  const bool carries_data = write.op == IoOp::kWrite || write.op == IoOp::kZoneAppend;
  const uint32_t sector_count = carries_data ? SectorCount(write.lba_count) : 0;
  uint64_t keep = options_.keep_weight;
  uint64_t drop = options_.drop_weight;
  const uint64_t tear = sector_count >= 2 ? options_.tear_weight : 0;
  if (keep + drop + tear == 0) keep = drop = 1;  // only tearing allowed, and this cannot tear
  const uint64_t draw = rng_.Below(keep + drop + tear);
  CutWrite cut;
  cut.op = write.op;
  cut.lba = write.lba;
  cut.lba_count = write.lba_count;
  cut.completed = write.completion != 0;
  if (draw < keep) {
    cut.fate = WriteFate::kKept;
    cut.sectors_kept.assign(sector_count, true);
  } else if (draw < keep + drop) {
    cut.fate = WriteFate::kDropped;
    cut.sectors_kept.assign(sector_count, false);
  } else {
    cut.fate = WriteFate::kTorn;
    cut.sectors_kept = RandomSectors(rng_, sector_count);
  }
  return cut;
}

absl::Status FaultState::Revert(Device& inner, const LoggedWrite& write,
                                const std::vector<bool>& kept,
                                std::unordered_set<uint64_t>* settled) {
  const uint64_t first_sector = write.lba * sectors_per_lba_;
  std::vector<uint32_t> revert;
  for (uint32_t s = 0; s < kept.size(); ++s) {
    // A settled sector holds a newer kept or durable write's data: leave it.
    if (settled->count(first_sector + s) != 0) continue;
    if (kept[s]) {
      settled->insert(first_sector + s);
    } else {
      revert.push_back(s);
    }
  }
  if (revert.empty()) return absl::OkStatus();
  // Read the range as it is now, put the prior contents back into the reverted sectors only,
  // and write it back whole (sectors may be smaller than blocks).
  Buffer scratch = Scratch(write.lba_count * info_.lba_bytes);
  NVKV_RETURN_IF_ERROR(ReadBlocks(inner, write.lba, write.lba_count, scratch));
  for (uint32_t s : revert) {
    std::memcpy(scratch.data + size_t{s} * sector_bytes(),
                write.before.data() + size_t{s} * sector_bytes(), sector_bytes());
  }
  return WriteBlocks(inner, write.lba, write.lba_count, scratch);
}

absl::StatusOr<CutReport> FaultState::Cut(Device& inner) {
  absl::MutexLock lock(&mu_);
  return CutLocked(inner);
}

std::vector<CutWrite> FaultState::DrawFates() {
  const bool zoned = zoned_storage_ != nullptr;
  // A durable write to a zone keeps every earlier reset or finish of it: the last one's index.
  std::map<uint64_t, size_t> last_durable_write;
  std::unordered_set<uint64_t> lost_reset;  // zones whose reset was dropped so far
  for (size_t i = 0; zoned && i < log_.size(); ++i) {
    const bool data = log_[i].op == IoOp::kWrite || log_[i].op == IoOp::kZoneAppend;
    if (data && log_[i].durable) last_durable_write[info_.zones.ZoneOf(log_[i].lba)] = i;
  }
  std::vector<CutWrite> fates;
  fates.reserve(log_.size());
  for (size_t i = 0; i < log_.size(); ++i) {
    const LoggedWrite& write = log_[i];
    const uint64_t zone = zoned ? info_.zones.ZoneOf(write.lba) : 0;
    const auto durable_after = last_durable_write.find(zone);
    const bool kept_by_later =
        zoned && durable_after != last_durable_write.end() && durable_after->second > i;
    CutWrite cut;
    if (write.durable || (kept_by_later && write.op != IoOp::kWrite &&
                          write.op != IoOp::kZoneAppend)) {
      cut.fate = WriteFate::kKept;
    } else if (zoned && lost_reset.count(zone) != 0) {
      cut.fate = WriteFate::kDropped;  // placed after a reset the device did not keep
    } else {
      fates.push_back(DrawFate(write));  // oldest first, so the report reads in submission order
      if (write.op == IoOp::kZoneReset && fates.back().fate == WriteFate::kDropped) {
        lost_reset.insert(zone);
      }
      continue;
    }
    cut.op = write.op;
    cut.lba = write.lba;
    cut.lba_count = write.lba_count;
    cut.completed = write.completion != 0;
    const bool data = write.op == IoOp::kWrite || write.op == IoOp::kZoneAppend;
    cut.sectors_kept.assign(data ? SectorCount(write.lba_count) : 0,
                            cut.fate == WriteFate::kKept);
    fates.push_back(std::move(cut));
  }
  return fates;
}

void FaultState::RewindZones(const std::vector<CutWrite>& fates) {
  std::map<uint64_t, std::vector<ZoneOpAtCut>> by_zone;  // in zone order, for the seeded coins
  for (size_t i = 0; i < log_.size(); ++i) {
    const LoggedWrite& write = log_[i];
    ZoneOpAtCut op;
    op.op = write.op;
    op.lba = write.lba;
    op.lba_count = write.lba_count;
    op.before = &write.before;
    op.written_before = write.zone_written;
    op.kept = fates[i].sectors_kept;
    op.survives = fates[i].fate != WriteFate::kDropped;
    by_zone[info_.zones.ZoneOf(write.lba)].push_back(std::move(op));
  }
  for (const auto& [zone, ops] : by_zone) {
    const bool pointer_stays = rng_.Below(2) == 1;
    std::vector<uint8_t> image = zoned_storage_->CopyOut(
        info_.zones.StartOf(zone), static_cast<uint32_t>(info_.zones.zone_blocks));
    const ZoneAfterCut after = RewindZone(info_.zones, zone, ops, ZoneWritten(zone),
                                          pointer_stays, info_.lba_bytes, sector_bytes(), image);
    zoned_storage_->RestoreZone(zone, after.written, after.state, image);
  }
  zoned_storage_->CloseOpenZones();  // the zones no unflushed operation touched
}

absl::StatusOr<CutReport> FaultState::CutLocked(Device& inner) {
  if (!powered_) return PowerOffError(info_);
  powered_ = false;
  ++stats_.cuts;
  CutReport report;
  report.operation = stats_.operations;
  // Fates are drawn oldest first, applied newest first.
  const std::vector<CutWrite> fates = DrawFates();
  for (size_t i = 0; i < log_.size(); ++i) {
    if (log_[i].durable) continue;
    const CutWrite& cut = fates[i];
    report.writes.push_back(cut);
    report.writes_kept += cut.fate == WriteFate::kKept ? 1 : 0;
    report.writes_dropped += cut.fate == WriteFate::kDropped ? 1 : 0;
    report.writes_torn += cut.fate == WriteFate::kTorn ? 1 : 0;
  }
  if (zoned_storage_ != nullptr) {
    RewindZones(fates);
  } else {
    std::unordered_set<uint64_t> settled;  // absolute sector numbers no older write may touch
    for (size_t i = log_.size(); i > 0; --i) {
      absl::Status reverted = Revert(inner, log_[i - 1], fates[i - 1].sectors_kept, &settled);
      if (!reverted.ok() && report.status.ok()) report.status = reverted;
    }
  }
  // Make the rollback itself durable on an inner device that has a cache (a file).
  absl::Status flushed = FlushDevice(inner);
  if (!flushed.ok() && report.status.ok()) report.status = flushed;
  log_.clear();
  armed_.clear();
  cut_plan_.reset();
  last_cut_ = report;
  return report;
}

FaultStats FaultState::stats() const {
  absl::MutexLock lock(&mu_);
  FaultStats stats = stats_;
  stats.unflushed_writes = static_cast<uint64_t>(std::count_if(
      log_.begin(), log_.end(), [](const LoggedWrite& write) { return !write.durable; }));
  stats.powered = powered_;
  return stats;
}

// ------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FaultDevice>> FaultDevice::Create(
    std::unique_ptr<Device> inner, const FaultDeviceOptions& options) {
  NVKV_CHECK(inner != nullptr);
  const DeviceInfo& info = inner->info();
  if (!IsPowerOfTwo(options.sector_bytes) || options.sector_bytes < 512 ||
      options.sector_bytes > info.lba_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault device: sector_bytes ", options.sector_bytes,
        " must be a power of two from 512 up to the block size ", info.lba_bytes));
  }
  if (uint64_t{options.keep_weight} + options.drop_weight + options.tear_weight == 0) {
    return absl::InvalidArgumentError("fault device: the cut weights are all zero");
  }
  if (info.ring.queue_depth == 0) {
    return absl::InvalidArgumentError("fault device: the inner device reports queue depth 0");
  }
  // A cut on zones puts write pointers back, which no device command can: only a memory
  // device's storage lets it (MemStorage::RestoreZone).
  std::shared_ptr<MemStorage> zoned_storage;
  if (info.zoned) {
    auto* memory = dynamic_cast<MemDevice*>(inner.get());
    if (memory == nullptr || !info.zones.zoned()) {
      return absl::UnimplementedError(absl::StrCat(
          "fault device: ", info.path,
          " is zoned, and power cuts on zones are modelled over a zoned memory device only"));
    }
    zoned_storage = memory->storage();
  }
  auto state = std::make_shared<FaultState>(options, info, std::move(zoned_storage));
  return std::unique_ptr<FaultDevice>(new FaultDevice(std::move(inner), std::move(state)));
}

FaultDevice::FaultDevice(std::unique_ptr<Device> inner, std::shared_ptr<FaultState> state)
    : inner_(std::move(inner)), state_(std::move(state)) {
  pending_.reserve(inner_->info().ring.queue_depth);
  running_.reserve(inner_->info().ring.queue_depth);
}

FaultDevice::~FaultDevice() = default;

absl::StatusOr<std::unique_ptr<Device>> FaultDevice::OpenQueue(const QueueOptions& options) {
  auto queue = inner_->OpenQueue(options);
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<Device>(new FaultDevice(std::move(*queue), state_));
}

absl::Status FaultDevice::Enqueue(IoRequest* request) {
  // A device without power answers nothing, not even "invalid".
  if (!state_->powered()) return PowerOffError(info());
  NVKV_RETURN_IF_ERROR(ValidateRequest(info(), *request));
  if (in_flight() >= info().ring.queue_depth) {
    return absl::UnavailableError(absl::StrCat("queue full (", in_flight(),
                                               " requests in flight, depth ",
                                               info().ring.queue_depth, "): reap first"));
  }
  if (request->op == IoOp::kWrite || request->op == IoOp::kZoneAppend) {
    if (const auto observer = state_->write_observer()) (*observer)(*request);
  }
  request->status = absl::OkStatus();
  request->parts_pending = 1;
  request->next_done = nullptr;
  Pending pending;
  pending.request = request;
  if (request->op == IoOp::kZoneAppend) {
    // Carried out with its batch (model rule 7), so that appends in flight together land in
    // any order.
    pending.awaiting_submit = true;
    ++awaiting_submit_;
  } else {
    // Power may have gone off on another queue since the check above; then nothing is accepted.
    NVKV_RETURN_IF_ERROR(state_->CarryOut(*inner_, &pending));
  }
  pending_.push_back(pending);
  ++unsubmitted_;
  ++stats_.requests_enqueued;
  stats_.enter_syscalls = inner_->stats().enter_syscalls;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> FaultDevice::Submit() {
  if (!state_->powered()) return PowerOffError(info());
  return Push();
}

uint32_t FaultDevice::Push() {
  if (awaiting_submit_ > 0) {
    std::vector<Pending*> appends;
    for (Pending& pending : pending_) {
      if (pending.awaiting_submit) appends.push_back(&pending);
    }
    state_->Shuffle(std::span<Pending*>(appends));
    for (Pending* pending : appends) {
      pending->awaiting_submit = false;
      // Without power it is not carried out: its harvest reports the cut.
      (void)state_->CarryOut(*inner_, pending);
    }
    awaiting_submit_ = 0;
  }
  // Every other request was carried out when enqueued; pushing them is bookkeeping only.
  const uint32_t pushed = unsubmitted_;
  unsubmitted_ = 0;
  if (pushed > 0) {
    ++stats_.submit_calls;
    CountCall(pushed);
  }
  return pushed;
}

uint32_t FaultDevice::Harvest() {
  running_.clear();
  running_.swap(pending_);  // both keep their capacity: no allocation per reap
  // On zones completions come in any order (model rule 7).
  if (info().zoned) state_->Shuffle(std::span<Pending>(running_));
  state_->Complete(std::span<Pending>(running_));
  return static_cast<uint32_t>(running_.size());
}

absl::StatusOr<uint32_t> FaultDevice::Reap(uint32_t) {
  // Everything was carried out at Enqueue, or (zone appends) by the Push below, so whatever
  // min_complete asks is available now.
  // Without power the requests in flight still complete (with an error), so callers can unwind.
  Push();
  const uint32_t harvested = Harvest();
  if (harvested > 0) {
    ++stats_.reap_calls;
    stats_.completions_reaped += harvested;
    stats_.max_completions_per_reap =
        std::max<uint64_t>(stats_.max_completions_per_reap, harvested);
  }
  callbacks_left_ = harvested;
  for (Pending& pending : running_) {
    IoRequest* request = pending.request;
    request->parts_pending = 0;
    ++stats_.requests_completed;
    if (!request->status.ok()) ++stats_.requests_failed;
    --callbacks_left_;  // before the call: a callback that enqueues finds its own slot free
    if (request->on_done != nullptr) request->on_done(request);
  }
  CountCompleted(harvested);
  running_.clear();
  return harvested;
}

absl::Status FaultDevice::FailOperation(const OperationFault& fault) {
  return state_->Arm(fault);
}

absl::Status FaultDevice::FailReadsOf(uint64_t lba, uint32_t lba_count, FaultError error) {
  return state_->AddBadBlocks(lba, lba_count, error);
}

void FaultDevice::HealReads() { state_->ClearBadBlocks(); }

absl::Status FaultDevice::SetCutAfterOperations(uint64_t count, OpFilter filter) {
  if (count == 0) return absl::InvalidArgumentError("cut after operations: count from 1");
  state_->SetCut(count, filter);
  return absl::OkStatus();
}

absl::StatusOr<CutReport> FaultDevice::CutPower() { return state_->Cut(*inner_); }

void FaultDevice::SetWriteObserver(WriteObserver observer) {
  state_->SetWriteObserver(std::move(observer));
}

FaultStats FaultDevice::fault_stats() const { return state_->stats(); }

std::optional<CutReport> FaultDevice::last_cut() const { return state_->last_cut(); }

std::vector<InjectedFault> FaultDevice::injected_faults() const { return state_->injected(); }

}  // namespace nvkv::storage
