// The public Options as the engine applies them (engine_options.h).
#include "kv/engine_options.h"

#include "absl/strings/str_cat.h"
#include "kv/page_format.h"
#include "storage/base/align.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {
// An out-of-range enum value (a cast from a bad integer, e.g. through the C API) is a caller
// error like any other bad option, not undefined behaviour further down.
absl::Status ValidateEnums(const Options& o) {
  if (o.index_mode != IndexMode::kHash && o.index_mode != IndexMode::kOrdered &&
      o.index_mode != IndexMode::kAsFormatted) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown index_mode ", static_cast<int>(o.index_mode)));
  }
  if (o.compaction_policy != CompactionPolicy::kCostBenefit &&
      o.compaction_policy != CompactionPolicy::kGreedy) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compaction_policy ", static_cast<int>(o.compaction_policy)));
  }
  if (static_cast<int>(o.durable_writes) > static_cast<int>(DurableWrites::kFlush)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown durable_writes ", static_cast<int>(o.durable_writes)));
  }
  if (static_cast<int>(o.backend) > static_cast<int>(Backend::kSyncFile)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend ", static_cast<int>(o.backend)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const Options& o) {
  NVKV_RETURN_IF_ERROR(ValidateEnums(o));
  if (!IsPowerOfTwo(o.page_bytes) || o.page_bytes < kMinPageBytes || o.page_bytes > kMaxPageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("page_bytes ", o.page_bytes,
                                                   " must be a power of two from 4096 to 65536"));
  }
  if (o.segment_bytes != kAutoSegmentBytes &&
      (o.segment_bytes % o.page_bytes != 0 || o.segment_bytes / o.page_bytes < 16 ||
       o.segment_bytes > kMaxSegmentBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment_bytes ", o.segment_bytes,
        " must be 0 (sized to the store) or a multiple of page_bytes, at least 16 pages and at "
        "most 8 MiB"));
  }
  if (o.shard_count == 0 || o.shard_count > 64) {
    return absl::InvalidArgumentError("shard_count must be between 1 and 64");
  }
  if (o.page_buffers_per_shard < 8 || o.page_buffers_per_shard > 1024) {
    return absl::InvalidArgumentError("page_buffers_per_shard must be between 8 and 1024");
  }
  if (o.read_queue_depth == 0 || o.read_queue_depth > 1024) {
    return absl::InvalidArgumentError("read_queue_depth must be between 1 and 1024");
  }
  if (o.write_queue_depth == 0 || o.write_queue_depth > 65536) {
    return absl::InvalidArgumentError("write_queue_depth must be between 1 and 65536");
  }
  if (o.checkpoint_log_ratio > 1024) {
    return absl::InvalidArgumentError("checkpoint_log_ratio must be between 0 and 1024");
  }
  if (o.read_only && o.grow_store) {
    return absl::InvalidArgumentError("grow_store needs a writer: a read-only open writes nothing");
  }
  return absl::OkStatus();
}

namespace {

storage::Backend DeviceBackend(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return storage::Backend::kAuto;
    case Backend::kNvmePassthrough:
      return storage::Backend::kNvmePassthrough;
    case Backend::kDirectFile:
      return storage::Backend::kDirectFile;
    case Backend::kSyncFile:
      return storage::Backend::kSyncFile;
  }
  return storage::Backend::kAuto;
}

}  // namespace

storage::DeviceOptions DeviceOptionsOf(const Options& options) {
  storage::DeviceOptions device;
  device.backend = DeviceBackend(options.backend);
  device.allow_sync_fallback = options.allow_sync_fallback;
  device.lock_device = true;  // two writers would interleave their logs: never allowed
  device.lock_wait_ms = options.lock_wait_ms;
  device.read_only = options.read_only;
  // A zoned namespace opens through its generic node, for OpenOnDevice to judge; its block node
  // is refused naming the generic node.
  device.zoned_access = storage::ZonedAccess::kGenericNodeOnly;
  device.create_bytes =
      options.create_if_missing && !options.read_only ? options.capacity_bytes : 0;
  storage::RingOptions& ring = device.ring;
  ring.single_issuer = options.single_issuer;
  ring.register_ring_fd = options.register_ring_fd;
  ring.register_file = options.register_file;
  ring.fixed_buffers = options.fixed_buffers;
  ring.sqpoll = options.sqpoll;
  ring.sqpoll_idle_ms = options.sqpoll_idle_ms;
  ring.iopoll = options.iopoll;
  ring.queue_depth = 4;
  device.buffers.buffer_bytes = 4096;
  device.buffers.buffer_count = 1;
  device.buffers.chunk_count = 0;
  return device;
}

// Options::durable_writes as this engine applies it: kAuto is kFua on every backend today. On
// regular files (ext4 on this project's virtio disk) an FUA write costs the file system a second
// device write, yet FUA was faster than writing plainly and flushing, at 1 and 8 client threads,
// since a flush adds a round trip and pages hold few puts each (bench/README.md, "Durable
// writes: FUA or flush").
DurableWrites ChooseDurableWrites(DurableWrites asked) {
  return asked == DurableWrites::kAuto ? DurableWrites::kFua : asked;
}

}  // namespace nvkv::kv
