#include "storage/mem_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/base/align.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::storage {
namespace {

constexpr uint32_t kMinLbaBytes = 512;
constexpr uint32_t kMaxLbaBytes = 1u << 20;
constexpr uint32_t kMaxQueueDepth = 4096;  // same bound as the io_uring backends
// Informational, like the file backends: a memcpy has no transfer limit.
constexpr uint32_t kMaxTransferBytes = 1u << 20;

}  // namespace

absl::StatusOr<std::shared_ptr<MemStorage>> MemStorage::Create(uint32_t lba_bytes,
                                                               uint64_t lba_count,
                                                               const ZoneModel& zones) {
  if (!IsPowerOfTwo(lba_bytes) || lba_bytes < kMinLbaBytes || lba_bytes > kMaxLbaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("memory storage: lba_bytes ", lba_bytes,
                                                   " must be a power of two between ",
                                                   kMinLbaBytes, " and ", kMaxLbaBytes));
  }
  if (lba_count == 0 || lba_count > UINT64_MAX / lba_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory storage: lba_count ", lba_count, " is zero or too large"));
  }
  if (zones.zoned() && (zones.zone_blocks == 0 || zones.capacity_blocks == 0 ||
                        zones.capacity_blocks > zones.zone_blocks ||
                        zones.zone_count != lba_count / zones.zone_blocks ||
                        lba_count % zones.zone_blocks != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory storage: ", zones.zone_count, " zones of ", zones.zone_blocks, " blocks (",
        zones.capacity_blocks, " writable) do not make ", lba_count, " blocks"));
  }
  const uint64_t bytes = uint64_t{lba_bytes} * lba_count;
  // Anonymous memory reads as zeros and is only backed once touched, so a large, mostly empty
  // store costs little; NORESERVE keeps overcommit accounting from refusing it up front.
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("memory storage: cannot map ", bytes, " bytes: ", strerror(errno)));
  }
  return std::shared_ptr<MemStorage>(
      new MemStorage(lba_bytes, lba_count, static_cast<uint8_t*>(memory), zones));
}

MemStorage::MemStorage(uint32_t lba_bytes, uint64_t lba_count, uint8_t* bytes,
                       const ZoneModel& zones)
    : lba_bytes_(lba_bytes),
      lba_count_(lba_count),
      zones_(zones),
      bytes_(bytes),
      zone_(zones.zone_count) {}

MemStorage::~MemStorage() { munmap(bytes_, capacity_bytes()); }

uint64_t MemStorage::CheckedOffset(uint64_t lba, uint32_t lba_count) const {
  NVKV_CHECK(lba < lba_count_);
  NVKV_CHECK(lba_count <= lba_count_ - lba);
  return lba * lba_bytes_;
}

void MemStorage::Read(uint64_t lba, uint32_t lba_count, uint8_t* out) const {
  const uint64_t offset = CheckedOffset(lba, lba_count);
  absl::MutexLock lock(&mu_);
  std::memcpy(out, bytes_ + offset, size_t{lba_count} * lba_bytes_);
}

void MemStorage::Write(uint64_t lba, uint32_t lba_count, const uint8_t* data,
                       std::optional<uint16_t> placement_id) {
  NVKV_CHECK(!zones_.zoned());
  const uint64_t offset = CheckedOffset(lba, lba_count);
  absl::MutexLock lock(&mu_);
  std::memcpy(bytes_ + offset, data, size_t{lba_count} * lba_bytes_);
  if (!placement_id.has_value() && placement_of_.empty()) return;
  if (placement_of_.empty()) placement_of_.assign(lba_count_, kNoPlacement);
  const int32_t placed = placement_id.has_value() ? *placement_id : kNoPlacement;
  std::fill_n(placement_of_.begin() + static_cast<ptrdiff_t>(lba), lba_count, placed);
  if (!placement_id.has_value()) return;
  if (blocks_placed_.size() <= *placement_id) blocks_placed_.resize(size_t{*placement_id} + 1);
  blocks_placed_[*placement_id] += lba_count;
}

std::optional<uint16_t> MemStorage::PlacementOf(uint64_t lba) const {
  NVKV_CHECK(lba < lba_count_);
  absl::MutexLock lock(&mu_);
  if (placement_of_.empty() || placement_of_[lba] == kNoPlacement) return std::nullopt;
  return static_cast<uint16_t>(placement_of_[lba]);
}

uint64_t MemStorage::BlocksPlacedWith(uint16_t placement_id) const {
  absl::MutexLock lock(&mu_);
  return placement_id < blocks_placed_.size() ? blocks_placed_[placement_id] : 0;
}

absl::Status MemStorage::OpenForWriteLocked(uint64_t z) {
  Zone& zone = zone_[z];
  if (zone.state == ZoneState::kImplicitlyOpen || zone.state == ZoneState::kExplicitlyOpen) {
    return absl::OkStatus();
  }
  uint64_t open = 0, active = 0, oldest = zone_.size();
  for (uint64_t i = 0; i < zone_.size(); ++i) {
    const ZoneState state = zone_[i].state;
    const bool is_open =
        state == ZoneState::kImplicitlyOpen || state == ZoneState::kExplicitlyOpen;
    open += is_open ? 1 : 0;
    active += is_open || state == ZoneState::kClosed ? 1 : 0;
    if (state == ZoneState::kImplicitlyOpen &&
        (oldest == zone_.size() || zone_[i].opened < zone_[oldest].opened)) {
      oldest = i;
    }
  }
  if (zone.state == ZoneState::kEmpty && zones_.max_active != 0 && active >= zones_.max_active) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Too Many Active Zones: zone ", z, " would be one more than the ",
                     zones_.max_active, " the device keeps active"));
  }
  if (zones_.max_open != 0 && open >= zones_.max_open) {
    // A device at its open limit closes a zone it opened itself to open another.
    if (oldest == zone_.size()) {
      return absl::ResourceExhaustedError(absl::StrCat("Too Many Open Zones: zone ", z));
    }
    zone_[oldest].state = ZoneState::kClosed;
  }
  zone.state = ZoneState::kImplicitlyOpen;
  zone.opened = ++open_clock_;
  return absl::OkStatus();
}

absl::Status MemStorage::WriteAtPointerLocked(uint64_t z, uint32_t lba_count,
                                              const uint8_t* data) {
  Zone& zone = zone_[z];
  if (zone.written + lba_count > zones_.capacity_blocks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Zone Boundary Error: ", lba_count, " blocks at zone ", z, "'s write pointer (",
        zone.written, " of ", zones_.capacity_blocks, " blocks written) cross its capacity"));
  }
  NVKV_RETURN_IF_ERROR(OpenForWriteLocked(z));
  const uint64_t lba = zones_.StartOf(z) + zone.written;
  std::memcpy(bytes_ + lba * lba_bytes_, data, size_t{lba_count} * lba_bytes_);
  zone.written += lba_count;
  if (zone.written == zones_.capacity_blocks) zone.state = ZoneState::kFull;
  return absl::OkStatus();
}

absl::Status MemStorage::InServiceLocked(uint64_t z) const {
  switch (zone_[z].state) {
    case ZoneState::kReadOnly:
      return absl::FailedPreconditionError(absl::StrCat("Zone Is Read Only: zone ", z));
    case ZoneState::kOffline:
      return absl::DataLossError(absl::StrCat("Zone Is Offline: zone ", z));
    default:
      return absl::OkStatus();
  }
}

bool MemStorage::RetireZone(uint64_t zone, ZoneState state, std::optional<ZoneState> only_from) {
  NVKV_CHECK(zone < zones_.zone_count &&
             (state == ZoneState::kReadOnly || state == ZoneState::kOffline));
  absl::MutexLock lock(&mu_);
  if (only_from && zone_[zone].state != *only_from) return false;
  if (state == ZoneState::kOffline) {
    std::memset(bytes_ + zones_.StartOf(zone) * lba_bytes_, 0, zones_.zone_blocks * lba_bytes_);
    zone_[zone].written = 0;
  }
  zone_[zone].state = state;
  return true;
}

absl::Status MemStorage::CheckReadable(uint64_t lba, uint32_t lba_count) const {
  if (!zones_.zoned() || lba_count == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  for (uint64_t z = zones_.ZoneOf(lba); z <= zones_.ZoneOf(lba + lba_count - 1); ++z) {
    if (zone_[z].state == ZoneState::kOffline) {
      return absl::DataLossError(absl::StrCat("Zone Is Offline: zone ", z));
    }
  }
  return absl::OkStatus();
}

absl::Status MemStorage::WriteZoned(uint64_t lba, uint32_t lba_count, const uint8_t* data) {
  CheckedOffset(lba, lba_count);
  const uint64_t z = zones_.ZoneOf(lba);
  absl::MutexLock lock(&mu_);
  NVKV_RETURN_IF_ERROR(InServiceLocked(z));
  // As a drive checks them: the zone's state, then the write pointer, then the capacity.
  if (zone_[z].state == ZoneState::kFull) {
    return absl::ResourceExhaustedError(absl::StrCat("Zone Is Full: zone ", z));
  }
  const uint64_t pointer = zones_.StartOf(z) + zone_[z].written;
  if (lba != pointer) {
    return absl::FailedPreconditionError(absl::StrCat("Zone Invalid Write: LBA ", lba,
                                                      " is not zone ", z,
                                                      "'s write pointer, LBA ", pointer));
  }
  return WriteAtPointerLocked(z, lba_count, data);
}

absl::StatusOr<uint64_t> MemStorage::Append(uint64_t zone_start, uint32_t lba_count,
                                            const uint8_t* data) {
  const uint64_t z = zones_.ZoneOf(zone_start);
  NVKV_CHECK(z < zones_.zone_count && zone_start == zones_.StartOf(z));
  absl::MutexLock lock(&mu_);
  NVKV_RETURN_IF_ERROR(InServiceLocked(z));
  if (zone_[z].state == ZoneState::kFull) {
    return absl::ResourceExhaustedError(absl::StrCat("Zone Is Full: zone ", z));
  }
  const uint64_t lba = zone_start + zone_[z].written;
  NVKV_RETURN_IF_ERROR(WriteAtPointerLocked(z, lba_count, data));
  return lba;
}

absl::Status MemStorage::ResetZone(uint64_t zone_start) {
  const uint64_t z = zones_.ZoneOf(zone_start);
  NVKV_CHECK(z < zones_.zone_count && zone_start == zones_.StartOf(z));
  absl::MutexLock lock(&mu_);
  NVKV_RETURN_IF_ERROR(InServiceLocked(z));
  std::memset(bytes_ + zone_start * lba_bytes_, 0, zones_.zone_blocks * lba_bytes_);
  zone_[z] = Zone{};
  return absl::OkStatus();
}

absl::Status MemStorage::FinishZone(uint64_t zone_start) {
  const uint64_t z = zones_.ZoneOf(zone_start);
  NVKV_CHECK(z < zones_.zone_count && zone_start == zones_.StartOf(z));
  absl::MutexLock lock(&mu_);
  NVKV_RETURN_IF_ERROR(InServiceLocked(z));
  if (zone_[z].state == ZoneState::kFull) return absl::OkStatus();
  // An empty zone passes through open on its way to full: it needs an active slot for that.
  if (zone_[z].state == ZoneState::kEmpty) NVKV_RETURN_IF_ERROR(OpenForWriteLocked(z));
  zone_[z].state = ZoneState::kFull;
  zone_[z].written = zones_.capacity_blocks;
  return absl::OkStatus();
}

void MemStorage::RestoreZone(uint64_t zone, uint64_t written, ZoneState state,
                             std::span<const uint8_t> image) {
  NVKV_CHECK(zone < zones_.zone_count && written <= zones_.capacity_blocks);
  NVKV_CHECK(image.size() == zones_.zone_blocks * lba_bytes_);
  uint8_t* start = bytes_ + zones_.StartOf(zone) * lba_bytes_;
  const size_t kept_bytes = written * lba_bytes_;
  absl::MutexLock lock(&mu_);
  std::memcpy(start, image.data(), kept_bytes);
  std::memset(start + kept_bytes, 0, image.size() - kept_bytes);
  zone_[zone] = Zone{.written = written, .state = state, .opened = 0};
}

void MemStorage::CloseOpenZones() {
  absl::MutexLock lock(&mu_);
  for (Zone& zone : zone_) {
    if (zone.state == ZoneState::kImplicitlyOpen || zone.state == ZoneState::kExplicitlyOpen) {
      zone.state = ZoneState::kClosed;
    }
  }
}

ZoneDescriptor MemStorage::DescribeLocked(uint64_t z) const {
  ZoneDescriptor d;
  d.start = zones_.StartOf(z);
  d.capacity = zones_.capacity_blocks;
  d.state = zone_[z].state;
  // A full zone's write pointer is not valid on NVMe; reported at the end of its capacity.
  d.write_pointer = d.start + zone_[z].written;
  return d;
}

std::vector<ZoneDescriptor> MemStorage::Report(uint64_t first_zone, uint64_t max) const {
  std::vector<ZoneDescriptor> report;
  absl::MutexLock lock(&mu_);
  for (uint64_t z = first_zone; z < zones_.zone_count && report.size() < max; ++z) {
    report.push_back(DescribeLocked(z));
  }
  return report;
}

std::vector<uint8_t> MemStorage::CopyOut(uint64_t lba, uint32_t lba_count) const {
  std::vector<uint8_t> copy(size_t{lba_count} * lba_bytes_);
  Read(lba, lba_count, copy.data());
  return copy;
}

void MemStorage::Corrupt(uint64_t offset_bytes, uint64_t length_bytes, uint8_t xor_mask) {
  NVKV_CHECK(offset_bytes <= capacity_bytes());
  NVKV_CHECK(length_bytes <= capacity_bytes() - offset_bytes);
  absl::MutexLock lock(&mu_);
  for (uint64_t i = 0; i < length_bytes; ++i) bytes_[offset_bytes + i] ^= xor_mask;
}

bool MemStorage::CorruptIfUnchanged(uint64_t lba, const std::vector<uint8_t>& expected,
                                    uint64_t offset_bytes, uint64_t length_bytes,
                                    uint8_t xor_mask) {
  NVKV_CHECK(expected.size() % lba_bytes_ == 0);
  const uint64_t start = CheckedOffset(lba, static_cast<uint32_t>(expected.size() / lba_bytes_));
  NVKV_CHECK(offset_bytes >= start && length_bytes <= expected.size() &&
             offset_bytes - start <= expected.size() - length_bytes);
  absl::MutexLock lock(&mu_);
  if (std::memcmp(bytes_ + start, expected.data(), expected.size()) != 0) return false;
  for (uint64_t i = 0; i < length_bytes; ++i) bytes_[offset_bytes + i] ^= xor_mask;
  return true;
}

absl::StatusOr<std::unique_ptr<MemDevice>> MemDevice::Create(const MemDeviceOptions& options) {
  auto storage = MemStorage::Create(options.lba_bytes, options.lba_count, options.zones);
  if (!storage.ok()) return storage.status();
  return Open(std::move(*storage), options);
}

absl::StatusOr<std::unique_ptr<MemDevice>> MemDevice::Open(std::shared_ptr<MemStorage> storage,
                                                           const MemDeviceOptions& options) {
  NVKV_CHECK(storage != nullptr);
  if (storage->lba_bytes() != options.lba_bytes || storage->lba_count() != options.lba_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": options ask for ", options.lba_count, " blocks of ", options.lba_bytes,
        " bytes; the storage has ", storage->lba_count(), " of ", storage->lba_bytes()));
  }
  if (options.queue_depth == 0 || options.queue_depth > kMaxQueueDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": queue depth ", options.queue_depth, " must be between 1 and ",
        kMaxQueueDepth));
  }
  if (!IsPowerOfTwo(options.memory_alignment)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": memory_alignment ", options.memory_alignment,
        " must be a power of two"));
  }
  auto pool = BufferPool::Create(options.buffers);
  if (!pool.ok()) return pool.status();
  DeviceInfo info;
  info.kind = DeviceKind::kMemory;
  info.path = options.name;
  info.lba_bytes = storage->lba_bytes();
  info.lba_count = storage->lba_count();
  info.max_transfer_bytes = kMaxTransferBytes;
  info.memory_alignment = options.memory_alignment;
  info.volatile_write_cache = options.volatile_write_cache;
  info.ring.queue_depth = options.queue_depth;
  info.zones = storage->zones();
  info.zoned = info.zones.zoned();
  if (!options.placement_ids.empty() && (info.zoned || options.placement_ids.size() > 256)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": placement handles need a storage without zones, at most 256 of them"));
  }
  info.placement_ids = options.placement_ids;
  return std::unique_ptr<MemDevice>(
      new MemDevice(std::move(info), std::move(storage), std::move(*pool), options));
}

MemDevice::MemDevice(DeviceInfo info, std::shared_ptr<MemStorage> storage,
                     std::unique_ptr<BufferPool> pool, const MemDeviceOptions& options)
    : info_(std::move(info)),
      storage_(std::move(storage)),
      pool_(std::move(pool)),
      options_(options),
      order_(options.completion_seed) {
  // Sized once here so Enqueue and Reap never allocate (STYLE.md 4: allocate at open).
  queued_.reserve(info_.ring.queue_depth);
  done_.reserve(info_.ring.queue_depth);
  running_.reserve(info_.ring.queue_depth);
}

absl::StatusOr<std::unique_ptr<Device>> MemDevice::OpenQueue(const QueueOptions& queue_options) {
  MemDeviceOptions options = options_;
  options.queue_depth = queue_options.queue_depth;
  options.buffers = queue_options.buffers;
  auto queue = Open(storage_, options);
  if (!queue.ok()) return queue.status();
  return std::unique_ptr<Device>(std::move(*queue));
}

absl::Status MemDevice::Enqueue(IoRequest* request) {
  absl::Status valid = ValidateRequest(info_, *request);
  if (!valid.ok()) return valid;
  if (in_flight() >= info_.ring.queue_depth) {
    return absl::UnavailableError(absl::StrCat("queue full (", in_flight(),
                                               " requests in flight, depth ",
                                               info_.ring.queue_depth, "): reap first"));
  }
  request->status = absl::OkStatus();
  request->parts_pending = 1;
  request->next_done = nullptr;
  queued_.push_back(request);
  ++stats_.requests_enqueued;
  return absl::OkStatus();
}

void MemDevice::Execute(IoRequest& request) {
  switch (request.op) {
    case IoOp::kRead:
      request.status = storage_->CheckReadable(request.lba, request.lba_count);
      if (request.status.ok()) storage_->Read(request.lba, request.lba_count, request.buffer.data);
      break;
    case IoOp::kWrite:
      if (info_.zones.zoned()) {
        request.status = storage_->WriteZoned(request.lba, request.lba_count, request.buffer.data);
      } else {
        storage_->Write(request.lba, request.lba_count, request.buffer.data,
                        info_.placement_ids.empty()
                            ? std::nullopt
                            : std::optional<uint16_t>(info_.placement_ids[request.placement]));
      }
      break;
    case IoOp::kFlush:
      break;  // RAM has no cache to flush; FaultDevice models one
    case IoOp::kWaitEvent:
      NVKV_CHECK(false);  // refused by ValidateRequest
      break;
    case IoOp::kZoneAppend: {
      absl::StatusOr<uint64_t> lba =
          storage_->Append(request.lba, request.lba_count, request.buffer.data);
      if (lba.ok()) request.appended_lba = *lba;
      request.status = lba.status();
      break;
    }
    case IoOp::kZoneReset:
      request.status = storage_->ResetZone(request.lba);
      break;
    case IoOp::kZoneFinish:
      request.status = storage_->FinishZone(request.lba);
      break;
    case IoOp::kZoneReport: {
      const uint64_t bytes = uint64_t{request.lba_count} * info_.lba_bytes;
      const std::vector<ZoneDescriptor> zones =
          storage_->Report(info_.zones.ZoneOf(request.lba), ZoneDescriptorsIn(bytes));
      EncodeZoneReport(zones, std::span<uint8_t>(request.buffer.data, bytes));
      break;
    }
  }
  if (!request.status.ok()) {
    request.status = absl::Status(request.status.code(),
                                  absl::StrCat(info_.path, ": ", request.status.message()));
  }
}

void MemDevice::Shuffle() {
  for (size_t i = queued_.size(); i > 1; --i) {
    std::swap(queued_[i - 1], queued_[order_.Below(i)]);
  }
}

absl::StatusOr<uint32_t> MemDevice::Submit() {
  const auto pushed = static_cast<uint32_t>(queued_.size());
  if (pushed == 0) return 0u;
  ++stats_.submit_calls;
  CountCall(pushed);
  if (options_.completion_seed != 0) Shuffle();
  // In order (or the seeded order Shuffle drew): a later request of the batch sees the effect of
  // an earlier one (NVMe promises no order between commands in flight; this is one it allows).
  for (IoRequest* request : queued_) {
    Execute(*request);
    done_.push_back(request);
  }
  queued_.clear();
  return pushed;
}

absl::StatusOr<uint32_t> MemDevice::Reap(uint32_t) {
  // Every request completes inside Submit, so whatever min_complete asks is available now.
  auto pushed = Submit();
  if (!pushed.ok()) return pushed.status();
  // Detach the batch first: callbacks may Enqueue (and Submit), which must not disturb it. Both
  // vectors keep their capacity, so nothing is allocated per request.
  std::vector<IoRequest*>& batch = running_;
  batch.clear();
  batch.swap(done_);
  if (!batch.empty()) {
    ++stats_.reap_calls;
    stats_.completions_reaped += batch.size();
    stats_.max_completions_per_reap =
        std::max<uint64_t>(stats_.max_completions_per_reap, batch.size());
  }
  const auto ran = static_cast<uint32_t>(batch.size());
  callbacks_left_ = ran;
  for (IoRequest* request : batch) {
    request->parts_pending = 0;
    ++stats_.requests_completed;
    --callbacks_left_;  // before the call: a callback that enqueues finds its own slot free
    if (request->on_done != nullptr) request->on_done(request);
  }
  CountCompleted(ran);
  batch.clear();
  return ran;
}

}  // namespace nvkv::storage
