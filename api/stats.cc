#include "nvkv/stats.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/json_writer.h"

namespace nvkv {
namespace {

using util::JsonObject;

std::string RingJson(const RingFeatures& ring) {
  JsonObject json;
  json.Add("queue_depth", ring.queue_depth);
  json.Add("sq_entries", ring.sq_entries);
  json.Add("sqe128_cqe32", ring.sqe128_cqe32);
  json.Add("single_issuer", ring.single_issuer);
  json.Add("defer_taskrun", ring.defer_taskrun);
  json.Add("coop_taskrun", ring.coop_taskrun);
  json.Add("registered_ring_fd", ring.registered_ring_fd);
  json.Add("registered_file", ring.registered_file);
  json.Add("fixed_buffers", ring.fixed_buffers);
  json.Add("sqpoll", ring.sqpoll);
  json.Add("iopoll", ring.iopoll);
  return json.Finish();
}

std::string ZonesJson(const ZoneStats& zones) {
  JsonObject json;
  json.Add("zone_count", zones.zone_count);
  json.Add("zone_bytes", zones.zone_bytes);
  json.Add("zone_capacity_bytes", zones.zone_capacity_bytes);
  json.Add("max_open", zones.max_open);
  json.Add("max_active", zones.max_active);
  json.Add("max_append_bytes", zones.max_append_bytes);
  json.Add("states_reported", zones.states_reported);
  json.Add("empty", zones.empty);
  json.Add("open", zones.open);
  json.Add("closed", zones.closed);
  json.Add("full", zones.full);
  json.Add("read_only", zones.read_only);
  json.Add("offline", zones.offline);
  json.Add("place_runs", zones.place_runs);
  json.Add("resets", zones.resets);
  json.Add("in_use", zones.in_use);
  json.Add("active", zones.active);
  json.Add("active_budget", zones.active_budget);
  json.Add("retired", zones.retired);
  return json.Finish();
}

std::string PlacementJson(const PlacementStats& placement) {
  std::string ids = "[";
  for (size_t i = 0; i < placement.ids.size(); ++i) {
    absl::StrAppend(&ids, i == 0 ? "" : ",", placement.ids[i]);
  }
  JsonObject json;
  json.AddRaw("ids", ids + "]");
  json.Add("log_id", placement.log_id);
  json.Add("metadata_id", placement.metadata_id);
  return json.Finish();
}

std::string DeviceJson(const DeviceStats& device) {
  JsonObject json;
  json.Add("kind", DeviceKindName(device.kind));
  json.Add("path", device.path);
  json.Add("lba_bytes", device.lba_bytes);
  json.Add("lba_count", device.lba_count);
  json.Add("capacity_bytes", device.capacity_bytes);
  json.Add("max_transfer_bytes", device.max_transfer_bytes);
  json.Add("volatile_write_cache", device.volatile_write_cache);
  json.Add("block_device", device.block_device);
  json.Add("nsid", device.nsid);
  json.Add("zoned", device.zoned);
  if (device.zoned) json.AddRaw("zones", ZonesJson(device.zones));
  if (!device.placement.ids.empty()) json.AddRaw("placement", PlacementJson(device.placement));
  json.AddRaw("ring", RingJson(device.ring));
  json.AddStrings("notes", device.notes);
  return json.Finish();
}

std::string QueueCallsJson(const QueueCalls& calls) {
  JsonObject json;
  json.Add("requests", calls.requests);
  json.Add("calls", calls.calls);
  json.Add("submitting_calls", calls.submitting_calls);
  json.Add("requests_submitted", calls.requests_submitted);
  json.Add("requests_per_submitting_call", calls.requests_per_submitting_call());
  return json.Finish();
}

// Ring features in force, as a list of names ("sqe128_cqe32 single_issuer ...").
std::string RingFeatureNames(const RingFeatures& ring) {
  std::string names;
  auto add = [&names](bool on, const char* name) {
    if (on) absl::StrAppend(&names, names.empty() ? "" : " ", name);
  };
  add(ring.sqe128_cqe32, "sqe128_cqe32");
  add(ring.single_issuer, "single_issuer");
  add(ring.defer_taskrun, "defer_taskrun");
  add(ring.coop_taskrun, "coop_taskrun");
  add(ring.registered_ring_fd, "registered_ring_fd");
  add(ring.registered_file, "registered_file");
  add(ring.fixed_buffers, "fixed_buffers");
  add(ring.sqpoll, "sqpoll");
  add(ring.iopoll, "iopoll");
  return names.empty() ? "none" : names;
}

}  // namespace

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kNvmePassthrough:
      return "nvme-passthrough";
    case DeviceKind::kDirectFile:
      return "direct-file";
    case DeviceKind::kSyncFile:
      return "sync-file";
    case DeviceKind::kMemory:
      return "memory";
  }
  return "unknown";
}

const char* IndexModeName(IndexMode mode) {
  switch (mode) {
    case IndexMode::kHash:
      return "hash";
    case IndexMode::kOrdered:
      return "ordered";
    case IndexMode::kAsFormatted:
      return "as-formatted";
  }
  return "unknown";
}

const char* DurableWritesName(DurableWrites method) {
  switch (method) {
    case DurableWrites::kAuto:
      return "auto";
    case DurableWrites::kFua:
      return "fua";
    case DurableWrites::kFlush:
      return "flush";
  }
  return "unknown";
}

const char* RecoveryStartName(RecoveryStart start) {
  switch (start) {
    case RecoveryStart::kNewStore:
      return "new_store";
    case RecoveryStart::kCleanClose:
      return "clean_close";
    case RecoveryStart::kBaseCheckpoint:
      return "base_checkpoint";
    case RecoveryStart::kLog:
      return "log";
  }
  return "unknown";
}

std::string Stats::recovery_source() const {
  switch (recovery_start) {
    case RecoveryStart::kNewStore:
      return "none (a new store)";
    case RecoveryStart::kCleanClose:
      return "from the clean-close checkpoint";
    case RecoveryStart::kBaseCheckpoint:
      return "from the last checkpoint and the log written after it";
    case RecoveryStart::kLog:
      break;
  }
  if (recovery_checkpoints_unused != 0) {
    return absl::StrCat("from the log (its checkpoint was not usable: ",
                        recovery_checkpoint_unused_why, ")");
  }
  return "from the log";
}

std::string Stats::ToString() const {
  std::string out;
  absl::StrAppendFormat(&out, "device: %s %s, %u-byte LBAs, %u LBAs (%u bytes)\n",
                        DeviceKindName(device.kind), device.path, device.lba_bytes,
                        device.lba_count, device.capacity_bytes);
  if (device.zoned) {
    const ZoneStats& z = device.zones;
    absl::StrAppendFormat(&out,
                          "zones: %u of %u bytes (%u writable), at most %u open and %u active "
                          "(0: no limit), appends up to %u bytes\n",
                          z.zone_count, z.zone_bytes, z.zone_capacity_bytes, z.max_open,
                          z.max_active, z.max_append_bytes);
    absl::StrAppendFormat(&out,
                          "zones in use: %u (%u active of the %u the store keeps at most), %u "
                          "reset by compaction, %u runs of pages landed apart, %u retired (out "
                          "of service)\n",
                          z.in_use, z.active, z.active_budget, z.resets, z.place_runs, z.retired);
  }
  if (!device.placement.ids.empty()) {
    absl::StrAppendFormat(&out,
                          "placement: %u FDP handles; the log's writes name identifier %u, the "
                          "metadata's %u\n",
                          device.placement.ids.size(), device.placement.log_id,
                          device.placement.metadata_id);
  }
  absl::StrAppendFormat(&out, "ring: depth %u, %s\n", device.ring.queue_depth,
                        RingFeatureNames(device.ring));
  for (const std::string& note : device.notes) absl::StrAppend(&out, "note: ", note, "\n");
  absl::StrAppendFormat(&out, "layout: %u-byte pages, %u pages per segment, %u shards, %s index\n",
                        page_bytes, pages_per_segment, shard_count, IndexModeName(index_mode));
  absl::StrAppendFormat(&out, "durable writes: %s%s\n", DurableWritesName(durable_writes),
                        device.volatile_write_cache
                            ? (durable_writes == DurableWrites::kFlush
                                   ? " (pages written plainly, one flush for all completed)"
                                   : " (each page waited on written with FUA)")
                            : " (moot: the device has no volatile write cache)");
  absl::StrAppendFormat(&out, "keys: %u live (%u stale index entries), index %u bytes (%.1f bytes "
                              "per key)\n", live_keys, stale_entries,
                        index_bytes, index_bytes_per_key);
  absl::StrAppendFormat(&out, "operations: %u puts, %u deletes, %u gets, %u batches\n", puts,
                        deletes, gets, batches);
  absl::StrAppendFormat(&out,
                        "written: %u user bytes, %u device bytes (%u by compaction), "
                        "write amplification %.2f\n",
                        user_bytes_written, device_bytes_written, compaction_bytes_written,
                        write_amplification);
  absl::StrAppendFormat(&out,
                        "device operations: %u page writes in %u page write commands, %u page "
                        "reads (%u of them by %u writes' key checks), %u flushes, %u FUA writes\n",
                        pages_written, page_write_commands, page_reads, key_check_page_reads,
                        verify_reads, flushes, fua_writes);
  absl::StrAppendFormat(&out, "hash overwrites: %u blind writes; compaction settled %u stale "
                              "entries with %u page reads\n",
                        blind_writes, stale_entries_settled, settle_page_reads);
  absl::StrAppendFormat(&out, "cache: %u hits, %u misses, %u evictions; %u keys in %u of %u "
                              "bytes\n",
                        cache_hits, cache_misses, cache_evictions, cache_entries, cache_bytes,
                        cache_capacity_bytes);
  absl::StrAppendFormat(&out, "space: %u of %u bytes live, %u usable; segments %u total, "
                              "%u free, %u holding the checkpoint, %u cleaned\n",
                        live_bytes, capacity_bytes, usable_bytes, segments_total, segments_free,
                        segments_checkpoint, segments_cleaned);
  absl::StrAppendFormat(&out, "damage: %u segments retained, %u damaged pages met by "
                              "compaction, %u pages unreadable\n",
                        segments_retained, compaction_damaged_pages, unreadable_pages);
  absl::StrAppendFormat(&out, "recovery: %s, %u pages scanned, %u free segments not read, %u "
                              "map pages damaged, %u segments read by summary, %u summaries "
                              "unused, %u records, %u batches discarded, "
                              "%u damaged pages skipped, %u bytes of table at most, %u "
                              "pass(es), %u restart(s), %.3f s\n",
                        recovery_source().c_str(), recovery_pages_scanned, recovery_segments_skipped,
                        recovery_map_pages_damaged, recovery_segments_summarized,
                        recovery_summaries_unused, recovery_records, recovery_batches_discarded,
                        recovery_damaged_pages, recovery_table_bytes, recovery_passes,
                        recovery_restarts, recovery_seconds);
  for (const auto& [name, calls] : queues.by_name()) {
    if (calls->calls == 0 && calls->requests == 0) continue;
    absl::StrAppendFormat(&out, "queue %s: %u requests in %u system calls, %.2f requests per "
                                "submitting call\n",
                          name, calls->requests, calls->calls,
                          calls->requests_per_submitting_call());
  }
  return out;
}

std::string Stats::ToJson() const {
  JsonObject json;
  json.Add("live_keys", live_keys);
  json.Add("stale_entries", stale_entries);
  json.Add("index_bytes", index_bytes);
  json.Add("index_bytes_per_key", index_bytes_per_key);
  json.Add("read_queues", read_queues);
  json.Add("puts", puts);
  json.Add("deletes", deletes);
  json.Add("gets", gets);
  json.Add("batches", batches);
  json.Add("user_bytes_written", user_bytes_written);
  json.Add("device_bytes_written", device_bytes_written);
  json.Add("compaction_bytes_written", compaction_bytes_written);
  json.Add("write_amplification", write_amplification);
  json.Add("pages_written", pages_written);
  json.Add("page_write_commands", page_write_commands);
  json.Add("page_reads", page_reads);
  json.Add("key_check_page_reads", key_check_page_reads);
  json.Add("flushes", flushes);
  json.Add("fua_writes", fua_writes);
  json.Add("verify_reads", verify_reads);
  json.Add("blind_writes", blind_writes);
  json.Add("stale_entries_settled", stale_entries_settled);
  json.Add("settle_page_reads", settle_page_reads);
  json.Add("cache_hits", cache_hits);
  json.Add("cache_misses", cache_misses);
  json.Add("cache_evictions", cache_evictions);
  json.Add("cache_bytes", cache_bytes);
  json.Add("cache_entries", cache_entries);
  json.Add("cache_capacity_bytes", cache_capacity_bytes);
  json.Add("capacity_bytes", capacity_bytes);
  json.Add("usable_bytes", usable_bytes);
  json.Add("live_bytes", live_bytes);
  json.Add("segments_total", segments_total);
  json.Add("segments_free", segments_free);
  json.Add("segments_checkpoint", segments_checkpoint);
  json.Add("checkpoints_written", checkpoints_written);
  json.Add("checkpoints_failed", checkpoints_failed);
  json.Add("checkpoint_seconds", checkpoint_seconds);
  json.Add("checkpoint_writes_held_seconds", checkpoint_writes_held_seconds);
  json.Add("segments_cleaned", segments_cleaned);
  json.Add("segments_retained", segments_retained);
  json.Add("compaction_damaged_pages", compaction_damaged_pages);
  json.Add("unreadable_pages", unreadable_pages);
  json.Add("recovery_pages_scanned", recovery_pages_scanned);
  json.Add("recovery_segments_skipped", recovery_segments_skipped);
  json.Add("recovery_map_pages_damaged", recovery_map_pages_damaged);
  json.Add("recovery_segments_summarized", recovery_segments_summarized);
  json.Add("recovery_summaries_unused", recovery_summaries_unused);
  json.Add("recovery_start", RecoveryStartName(recovery_start));
  json.Add("recovery_base_segments_freed", recovery_base_segments_freed);
  json.Add("recovery_checkpoints_unused", recovery_checkpoints_unused);
  json.Add("recovery_checkpoint_unused_why", recovery_checkpoint_unused_why);
  json.Add("recovery_heads_resumed", recovery_heads_resumed);
  json.Add("recovery_records", recovery_records);
  json.Add("recovery_batches_discarded", recovery_batches_discarded);
  json.Add("recovery_damaged_pages", recovery_damaged_pages);
  json.Add("recovery_table_bytes", recovery_table_bytes);
  json.Add("recovery_passes", recovery_passes);
  json.Add("recovery_restarts", recovery_restarts);
  json.Add("recovery_seconds", recovery_seconds);
  json.Add("page_bytes", page_bytes);
  json.Add("pages_per_segment", pages_per_segment);
  json.Add("shard_count", shard_count);
  json.Add("index_mode", IndexModeName(index_mode));
  json.Add("durable_writes", DurableWritesName(durable_writes));
  json.AddRaw("device", DeviceJson(device));
  JsonObject kinds;
  for (const auto& [name, calls] : queues.by_name()) {
    kinds.AddRaw(name, QueueCallsJson(*calls));
  }
  json.AddRaw("queues", kinds.Finish());
  return json.Finish();
}

}  // namespace nvkv
