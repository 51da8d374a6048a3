// Engine::Impl::Stats: what the engine's parts count, in the public Stats (nvkv/stats.h); and
// Engine::InspectDevice, what a device is without a store.
#include <algorithm>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "kv/engine_impl.h"
#include "kv/read_queue.h"

namespace nvkv::kv {
namespace {

// What Stats says of the device (nvkv/stats.h), from what the storage layer knows.
::nvkv::DeviceKind PublicKind(storage::DeviceKind kind) {
  switch (kind) {
    case storage::DeviceKind::kNvmePassthrough:
      return ::nvkv::DeviceKind::kNvmePassthrough;
    case storage::DeviceKind::kDirectFile:
      return ::nvkv::DeviceKind::kDirectFile;
    case storage::DeviceKind::kSyncFile:
      return ::nvkv::DeviceKind::kSyncFile;
    case storage::DeviceKind::kMemory:
      return ::nvkv::DeviceKind::kMemory;
  }
  return ::nvkv::DeviceKind::kMemory;
}

::nvkv::RingFeatures PublicRing(const storage::RingFeatures& in) {
  ::nvkv::RingFeatures out;
  out.queue_depth = in.queue_depth;
  out.sq_entries = in.sq_entries;
  out.sqe128_cqe32 = in.sqe128_cqe32;
  out.single_issuer = in.single_issuer;
  out.defer_taskrun = in.defer_taskrun;
  out.coop_taskrun = in.coop_taskrun;
  out.registered_ring_fd = in.registered_ring_fd;
  out.registered_file = in.registered_file;
  out.fixed_buffers = in.fixed_buffers;
  out.sqpoll = in.sqpoll;
  out.iopoll = in.iopoll;
  return out;
}

::nvkv::DeviceStats PublicDevice(const storage::DeviceInfo& in) {
  ::nvkv::DeviceStats out;
  out.kind = PublicKind(in.kind);
  out.path = in.path;
  out.lba_bytes = in.lba_bytes;
  out.lba_count = in.lba_count;
  out.capacity_bytes = in.capacity_bytes();
  out.max_transfer_bytes = in.max_transfer_bytes;
  out.volatile_write_cache = in.volatile_write_cache;
  out.block_device = in.block_device;
  out.nsid = in.nsid;
  out.zoned = in.zoned;
  const storage::ZoneModel& zones = in.zones;
  out.zones.zone_count = zones.zone_count;
  out.zones.zone_bytes = zones.zone_blocks * in.lba_bytes;
  out.zones.zone_capacity_bytes = zones.capacity_blocks * in.lba_bytes;
  out.zones.max_open = zones.max_open;
  out.zones.max_active = zones.max_active;
  out.zones.max_append_bytes = zones.max_append_blocks * in.lba_bytes;
  out.placement.ids = in.placement_ids;
  out.ring = PublicRing(in.ring);
  out.notes = in.notes;
  return out;
}

// Counts the zones of `report` by state into `out`.
void CountZoneStates(const std::vector<storage::ZoneDescriptor>& report, ::nvkv::ZoneStats& out) {
  out.states_reported = true;
  for (const storage::ZoneDescriptor& zone : report) {
    switch (zone.state) {
      case storage::ZoneState::kEmpty:
        ++out.empty;
        break;
      case storage::ZoneState::kImplicitlyOpen:
      case storage::ZoneState::kExplicitlyOpen:
        ++out.open;
        break;
      case storage::ZoneState::kClosed:
        ++out.closed;
        break;
      case storage::ZoneState::kFull:
        ++out.full;
        break;
      case storage::ZoneState::kReadOnly:
        ++out.read_only;
        break;
      case storage::ZoneState::kOffline:
        ++out.offline;
        break;
    }
  }
}

// The index and the record cache, over every shard.
void AddShardStats(const ShardSet& shards, EngineStats& s) {
  for (auto& shard : shards) {
    absl::MutexLock lock(&shard->mu);
    const IndexStats index = shard->index->stats();
    s.live_keys += index.entries - std::min(index.entries, shard->stale_entries);
    s.stale_entries += shard->stale_entries;
    s.index_bytes += index.memory_bytes;
    const RecordCache::Counters cache = shard->cache->counters();
    s.cache_hits += cache.hits;
    s.cache_misses += cache.misses;
    s.cache_evictions += cache.evictions;
    s.cache_bytes += cache.bytes;
    s.cache_entries += cache.entries;
    s.cache_capacity_bytes += shard->cache->capacity_bytes();
  }
  s.index_bytes_per_key = s.live_keys ? static_cast<double>(s.index_bytes) / s.live_keys : 0;
}

// What the Open's recovery found.
void AddRecoveryStats(const RecoveryReport& recovery, EngineStats& s) {
  s.recovery_pages_scanned = recovery.pages;
  s.recovery_segments_skipped = recovery.segments_skipped;
  s.recovery_map_pages_damaged = recovery.map_pages_damaged;
  s.recovery_segments_summarized = recovery.segments_summarized;
  s.recovery_summaries_unused = recovery.summaries_unused;
  s.recovery_start = recovery.start;
  s.recovery_base_segments_freed = recovery.base_segments_freed;
  s.recovery_heads_resumed = recovery.heads_resumed;
  s.recovery_checkpoints_unused = recovery.checkpoint_unused.empty() ? 0 : 1;
  s.recovery_checkpoint_unused_why = recovery.checkpoint_unused;
  s.recovery_records = recovery.records;
  s.recovery_batches_discarded = recovery.batches_discarded;
  s.recovery_damaged_pages = recovery.damaged_pages;
  s.recovery_table_bytes = recovery.table_bytes_peak;
  s.recovery_passes = recovery.passes;
  s.recovery_restarts = recovery.restarts;
  s.recovery_seconds = recovery.seconds;
}

// What each kind of queue asked of the device.
void AddQueueStats(const std::array<storage::SharedIoCounts, kQueueKinds>& counts,
                   EngineStats& s) {
  const auto calls_of = [&counts](QueueKind kind) {
    const storage::SharedIoCounts& of = counts[static_cast<size_t>(kind)];
    QueueCalls calls;
    calls.requests = of.requests_completed.load(std::memory_order_relaxed);
    calls.calls = of.calls.load(std::memory_order_relaxed);
    calls.submitting_calls = of.submitting_calls.load(std::memory_order_relaxed);
    calls.requests_submitted = of.requests_submitted.load(std::memory_order_relaxed);
    return calls;
  };
  s.queues.reads = calls_of(QueueKind::kReads);
  s.queues.log_writes = calls_of(QueueKind::kLogWrites);
  s.queues.compaction = calls_of(QueueKind::kCompaction);
  s.queues.open = calls_of(QueueKind::kOpen);
  s.queues.checkpoints = calls_of(QueueKind::kCheckpoints);
  s.queues.check = calls_of(QueueKind::kCheck);
}

// Segments: how many, in what use, and the space in them.
void AddSegmentStats(SegmentTable& segments, const Geometry& geometry, EngineStats& s) {
  s.segments_total = segments.count();
  s.segments_free = segments.free_count();
  s.segments_checkpoint = segments.kept_count();
  s.segments_retained = segments.retained().size();
  s.capacity_bytes = geometry.segment_count * geometry.segment_bytes();
  s.live_bytes = segments.live_bytes_total();
  s.usable_bytes = segments.usable_bytes();
}

// What compaction did.
void AddCompactionStats(const Compactor& compactor, EngineStats& s) {
  s.compaction_bytes_written = compactor.copied_bytes();
  s.stale_entries_settled = compactor.stale_entries_settled();
  s.settle_page_reads = compactor.settle_page_reads();
  s.segments_cleaned = compactor.segments_cleaned();
  s.compaction_damaged_pages = compactor.damaged_pages();
}

}  // namespace

absl::StatusOr<::nvkv::DeviceStats> Engine::InspectDevice(const std::string& path) {
  storage::DeviceOptions options;
  options.read_only = true;  // a shared claim: a store open elsewhere keeps this off
  options.zoned_access = storage::ZonedAccess::kAnyNode;
  options.ring.queue_depth = 4;
  options.buffers.buffer_count = 2;
  options.buffers.chunk_count = 0;
  absl::StatusOr<std::unique_ptr<storage::Device>> device = storage::OpenDevice(path, options);
  if (!device.ok()) return device.status();
  ::nvkv::DeviceStats stats = PublicDevice((*device)->info());
  if ((*device)->info().zones.zoned()) {
    absl::StatusOr<std::vector<storage::ZoneDescriptor>> report =
        storage::ReportAllZones(**device);
    if (!report.ok()) return report.status();
    CountZoneStates(*report, stats.zones);
  }
  return stats;
}

EngineStats Engine::Impl::Stats() {
  EngineStats s;
  AddShardStats(shards_, s);
  AddRecoveryStats(recovery_, s);
  AddQueueStats(queue_counts_, s);
  AddSegmentStats(*segments_, shape_.geometry, s);
  if (compactor_ != nullptr) AddCompactionStats(*compactor_, s);
  // Pages the device could not read, at Open and since.
  s.unreadable_pages = recovery_.unreadable_pages +
                       (compactor_ != nullptr ? compactor_->unreadable_pages() : 0);
  if (writes_ != nullptr) {
    const UserWriteCounters& writes = writes_->counters();
    s.puts = writes.puts.load();
    s.deletes = writes.deletes.load();
    s.batches = writes.batches.load();
    s.user_bytes_written = writes.user_bytes.load();
    s.blind_writes = writes.blind_writes.load();
  }
  s.gets = reads_ != nullptr ? reads_->gets() : 0;
  s.device_bytes_written = write_counters_.device_bytes.load();
  s.write_amplification = s.user_bytes_written
                              ? static_cast<double>(s.device_bytes_written) / s.user_bytes_written
                              : 0;
  s.pages_written = write_counters_.pages_written.load();
  s.page_write_commands = write_counters_.page_write_commands.load();
  s.page_reads = reads_ != nullptr ? reads_->lookup().page_reads() : 0;
  s.key_check_page_reads = reads_ != nullptr ? reads_->lookup().key_check_page_reads() : 0;
  s.flushes = write_counters_.flushes.load();
  s.fua_writes = write_counters_.fua_writes.load();
  s.verify_reads = reads_ != nullptr ? reads_->verify_reads() : 0;
  if (checkpoints_ != nullptr) {
    s.checkpoints_written = checkpoints_->written();
    s.checkpoints_failed = checkpoints_->failed();
    s.checkpoint_seconds = checkpoints_->seconds();
    s.checkpoint_writes_held_seconds = checkpoints_->writes_held_seconds();
  }
  s.read_queues = reads_ != nullptr ? reads_->queue_count() : 0;
  s.device = PublicDevice(device_info_);
  if (!device_info_.placement_ids.empty()) {
    s.device.placement.log_id = device_info_.placement_ids[shape_.placement.log];
    s.device.placement.metadata_id = device_info_.placement_ids[shape_.placement.metadata];
  }
  if (zone_places_ != nullptr) s.device.zones.place_runs = zone_places_->run_count();
  if (compactor_ != nullptr) s.device.zones.resets = compactor_->zone_resets();
  if (shape_.geometry.zoned()) {
    s.device.zones.in_use =
        s.segments_total - s.segments_free - segments_->retired_count() + kMetadataZones;
    // The map's current zone holds a token of its own; the table has the rest. A reader
    // (read-only) has none, and keeps no zone active.
    const std::optional<uint32_t> tokens_free = segments_->zone_tokens_free();
    s.device.zones.active_budget = zone_budget_;
    s.device.zones.active = tokens_free ? zone_budget_ - *tokens_free : 0;
    s.device.zones.retired = segments_->retired_count();
  }
  {
    absl::MutexLock lock(&queue_notes_mu_);
    s.device.notes.insert(s.device.notes.end(), queue_notes_.begin(), queue_notes_.end());
  }
  // The first queue only holds the device; the writer's queue shows the ring features in use.
  if (writer_ != nullptr) s.device.ring = PublicRing(writer_->queue().info().ring);
  s.page_bytes = shape_.geometry.page_bytes;
  s.pages_per_segment = shape_.geometry.pages_per_segment;
  s.shard_count = static_cast<uint32_t>(shards_.size());
  s.index_mode = index_mode();
  s.durable_writes = durable_writes_;
  return s;
}

}  // namespace nvkv::kv
