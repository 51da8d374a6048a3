#include "storage/mem_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/base/align.h"
#include "storage/base/check.h"

namespace nvkv::storage {
namespace {

constexpr uint32_t kMinLbaBytes = 512;
constexpr uint32_t kMaxLbaBytes = 1u << 20;
constexpr uint32_t kMaxQueueDepth = 4096;  // same bound as the io_uring backends
// Informational, like the file backends: a memcpy has no transfer limit.
constexpr uint32_t kMaxTransferBytes = 1u << 20;

}  // namespace

absl::StatusOr<std::shared_ptr<MemStorage>> MemStorage::Create(uint32_t lba_bytes,
                                                               uint64_t lba_count) {
  if (!IsPowerOfTwo(lba_bytes) || lba_bytes < kMinLbaBytes || lba_bytes > kMaxLbaBytes) {
    return absl::InvalidArgumentError(absl::StrCat("memory storage: lba_bytes ", lba_bytes,
                                                   " must be a power of two between ",
                                                   kMinLbaBytes, " and ", kMaxLbaBytes));
  }
  if (lba_count == 0 || lba_count > UINT64_MAX / lba_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory storage: lba_count ", lba_count, " is zero or too large"));
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
      new MemStorage(lba_bytes, lba_count, static_cast<uint8_t*>(memory)));
}

MemStorage::MemStorage(uint32_t lba_bytes, uint64_t lba_count, uint8_t* bytes)
    : lba_bytes_(lba_bytes), lba_count_(lba_count), bytes_(bytes) {}

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

void MemStorage::Write(uint64_t lba, uint32_t lba_count, const uint8_t* data) {
  const uint64_t offset = CheckedOffset(lba, lba_count);
  absl::MutexLock lock(&mu_);
  std::memcpy(bytes_ + offset, data, size_t{lba_count} * lba_bytes_);
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
  auto storage = MemStorage::Create(options.lba_bytes, options.lba_count);
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
  return std::unique_ptr<MemDevice>(
      new MemDevice(std::move(info), std::move(storage), std::move(*pool), options));
}

MemDevice::MemDevice(DeviceInfo info, std::shared_ptr<MemStorage> storage,
                     std::unique_ptr<BufferPool> pool, const MemDeviceOptions& options)
    : info_(std::move(info)),
      storage_(std::move(storage)),
      pool_(std::move(pool)),
      options_(options) {
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

void MemDevice::Execute(const IoRequest& request) {
  switch (request.op) {
    case IoOp::kRead:
      storage_->Read(request.lba, request.lba_count, request.buffer.data);
      break;
    case IoOp::kWrite:
      storage_->Write(request.lba, request.lba_count, request.buffer.data);
      break;
    case IoOp::kFlush:
      break;  // RAM has no cache to flush; FaultDevice models one
    case IoOp::kWaitEvent:
      NVKV_CHECK(false);  // refused by ValidateRequest
  }
}

absl::StatusOr<uint32_t> MemDevice::Submit() {
  const auto pushed = static_cast<uint32_t>(queued_.size());
  if (pushed == 0) return 0u;
  ++stats_.submit_calls;
  CountCall(pushed);
  // In order: a later request of the batch sees the effect of an earlier one (NVMe promises no
  // order between commands in flight; this is one of the orders it allows).
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
