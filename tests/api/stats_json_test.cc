// Stats::ToJson: the exact text it writes for known counters, and JSON that stays valid UTF-8
// whatever bytes the device path and notes hold.
#include "nvkv/stats.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "tests/testutil/json_check.h"

namespace nvkv {
namespace {

Stats SampleStats() {
  Stats s;
  s.live_keys = 2;
  s.index_bytes = 4096;
  s.index_bytes_per_key = 2048;
  s.read_queues = 1;
  s.puts = 3;
  s.deletes = 1;
  s.gets = 2;
  s.batches = 1;
  s.user_bytes_written = 18;
  s.device_bytes_written = 8192;
  s.compaction_bytes_written = 0;
  s.write_amplification = 455.111111;
  s.pages_written = 2;
  s.page_write_commands = 1;
  s.page_reads = 1;
  s.flushes = 1;
  s.fua_writes = 0;
  s.verify_reads = 0;
  s.cache_hits = 7;
  s.cache_misses = 3;
  s.cache_evictions = 1;
  s.cache_bytes = 2048;
  s.cache_entries = 2;
  s.cache_capacity_bytes = 1048576;
  s.capacity_bytes = 33554432;
  s.usable_bytes = 30000000;
  s.live_bytes = 40;
  s.segments_total = 64;
  s.segments_free = 62;
  s.segments_cleaned = 0;
  s.segments_retained = 0;
  s.compaction_damaged_pages = 0;
  s.unreadable_pages = 0;
  s.recovery_pages_scanned = 5;
  s.recovery_segments_skipped = 60;
  s.recovery_map_pages_damaged = 1;
  s.recovery_segments_summarized = 7;
  s.recovery_summaries_unused = 2;
  s.recovery_start = RecoveryStart::kCleanClose;
  s.recovery_heads_resumed = 3;
  s.recovery_records = 4;
  s.recovery_batches_discarded = 0;
  s.recovery_damaged_pages = 0;
  s.recovery_table_bytes = 96;
  s.recovery_passes = 2;
  s.recovery_restarts = 1;
  s.recovery_seconds = 0.00125;
  s.page_bytes = 4096;
  s.pages_per_segment = 128;
  s.shard_count = 4;
  s.index_mode = IndexMode::kOrdered;
  s.device.kind = DeviceKind::kDirectFile;
  s.device.path = "/tmp/store \"a\\b\"";
  s.device.lba_bytes = 512;
  s.device.lba_count = 65536;
  s.device.capacity_bytes = 33554432;
  s.device.max_transfer_bytes = 131072;
  s.device.volatile_write_cache = true;
  s.device.block_device = false;
  s.device.nsid = 0;
  s.device.ring.queue_depth = 64;
  s.device.ring.sq_entries = 64;
  s.device.ring.single_issuer = true;
  s.device.ring.defer_taskrun = true;
  s.device.ring.fixed_buffers = true;
  s.device.notes = {"first\tnote", "second\nnote \x01"};
  s.queues.reads = {.requests = 10, .calls = 3, .submitting_calls = 2, .requests_submitted = 10};
  s.queues.log_writes = {.requests = 4, .calls = 4, .submitting_calls = 4, .requests_submitted = 4};
  return s;
}

TEST(StatsJsonTest, WritesEveryFieldInOrder) {
  EXPECT_EQ(
      SampleStats().ToJson(),
      "{\"live_keys\":2,\"stale_entries\":0,\"index_bytes\":4096,\"index_bytes_per_key\":2048,\"read_queues\":1,"
      "\"puts\":3,"
      "\"deletes\":1,\"gets\":2,\"batches\":1,\"user_bytes_written\":18,"
      "\"device_bytes_written\":8192,\"compaction_bytes_written\":0,"
      "\"write_amplification\":455.111,\"pages_written\":2,\"page_write_commands\":1,\"page_reads\":1,\"key_check_page_reads\":0,\"flushes\":1,"
      "\"fua_writes\":0,\"verify_reads\":0,\"blind_writes\":0,\"stale_entries_settled\":0,"
      "\"settle_page_reads\":0,\"cache_hits\":7,\"cache_misses\":3,"
      "\"cache_evictions\":1,\"cache_bytes\":2048,\"cache_entries\":2,"
      "\"cache_capacity_bytes\":1048576,\"capacity_bytes\":33554432,"
      "\"usable_bytes\":30000000,\"live_bytes\":40,\"segments_total\":64,\"segments_free\":62,"
      "\"segments_checkpoint\":0,\"checkpoints_written\":0,\"checkpoints_failed\":0,"
      "\"checkpoint_seconds\":0,\"checkpoint_writes_held_seconds\":0,"
      "\"segments_cleaned\":0,\"segments_retained\":0,\"compaction_damaged_pages\":0,"
      "\"unreadable_pages\":0,\"recovery_pages_scanned\":5,\"recovery_segments_skipped\":60,"
      "\"recovery_map_pages_damaged\":1,\"recovery_segments_summarized\":7,"
      "\"recovery_summaries_unused\":2,\"recovery_start\":\"clean_close\","
      "\"recovery_base_segments_freed\":0,"
      "\"recovery_checkpoints_unused\":0,\"recovery_checkpoint_unused_why\":\"\","
      "\"recovery_heads_resumed\":3,"
      "\"recovery_records\":4,"
      "\"recovery_batches_discarded\":0,\"recovery_damaged_pages\":0,"
      "\"recovery_table_bytes\":96,\"recovery_passes\":2,\"recovery_restarts\":1,"
      "\"recovery_seconds\":0.00125,\"page_bytes\":4096,\"pages_per_segment\":128,"
      "\"shard_count\":4,\"index_mode\":\"ordered\",\"durable_writes\":\"fua\",\"device\":{\"kind\":\"direct-file\","
      "\"path\":\"/tmp/store \\\"a\\\\b\\\"\",\"lba_bytes\":512,\"lba_count\":65536,"
      "\"capacity_bytes\":33554432,\"max_transfer_bytes\":131072,"
      "\"volatile_write_cache\":true,\"block_device\":false,\"nsid\":0,\"zoned\":false,"
      "\"ring\":{\"queue_depth\":64,\"sq_entries\":64,\"sqe128_cqe32\":false,"
      "\"single_issuer\":true,\"defer_taskrun\":true,\"coop_taskrun\":false,"
      "\"registered_ring_fd\":false,\"registered_file\":false,\"fixed_buffers\":true,"
      "\"sqpoll\":false,\"iopoll\":false},"
      "\"notes\":[\"first\\tnote\",\"second\\nnote \\u0001\"]},"
      "\"queues\":{\"reads\":{\"requests\":10,\"calls\":3,\"submitting_calls\":2,"
      "\"requests_submitted\":10,\"requests_per_submitting_call\":5},"
      "\"log_writes\":{\"requests\":4,\"calls\":4,\"submitting_calls\":4,"
      "\"requests_submitted\":4,\"requests_per_submitting_call\":1},"
      "\"compaction\":{\"requests\":0,\"calls\":0,\"submitting_calls\":0,"
      "\"requests_submitted\":0,\"requests_per_submitting_call\":0},"
      "\"open\":{\"requests\":0,\"calls\":0,\"submitting_calls\":0,"
      "\"requests_submitted\":0,\"requests_per_submitting_call\":0},"
      "\"checkpoints\":{\"requests\":0,\"calls\":0,\"submitting_calls\":0,"
      "\"requests_submitted\":0,\"requests_per_submitting_call\":0},"
      "\"check\":{\"requests\":0,\"calls\":0,\"submitting_calls\":0,"
      "\"requests_submitted\":0,\"requests_per_submitting_call\":0}}}");
}

// A zoned device's zones follow its "zoned" (a device without zones has no "zones" at all).
TEST(StatsJsonTest, AZonedDeviceWritesItsZones) {
  Stats s = SampleStats();
  s.device.zoned = true;
  s.device.zones = {.zone_count = 4, .zone_bytes = 33554432, .zone_capacity_bytes = 25165824,
                    .max_open = 2, .max_active = 3, .max_append_bytes = 131072,
                    .states_reported = true, .empty = 1, .open = 1, .closed = 1, .full = 1,
                    .place_runs = 6, .resets = 5, .in_use = 3, .active = 2, .active_budget = 3,
                    .retired = 1};
  EXPECT_NE(s.ToJson().find(
                "\"nsid\":0,\"zoned\":true,\"zones\":{\"zone_count\":4,\"zone_bytes\":33554432,"
                "\"zone_capacity_bytes\":25165824,\"max_open\":2,\"max_active\":3,"
                "\"max_append_bytes\":131072,\"states_reported\":true,\"empty\":1,\"open\":1,"
                "\"closed\":1,\"full\":1,\"read_only\":0,\"offline\":0,\"place_runs\":6,"
                "\"resets\":5,\"in_use\":3,\"active\":2,\"active_budget\":3,\"retired\":1},"
                "\"ring\":{"),
            std::string::npos)
      << s.ToJson();
  EXPECT_NE(s.ToString().find("zones: 4 of 33554432 bytes (25165824 writable), at most 2 open "
                              "and 3 active"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.ToString().find("zones in use: 3 (2 active of the 3 the store keeps at most), 5 "
                              "reset by compaction, 6 runs of pages landed apart, 1 retired (out "
                              "of service)"),
            std::string::npos)
      << s.ToString();
}

// Placement handles follow the zones (a device without them has no "placement" at all).
TEST(StatsJsonTest, ADeviceWithPlacementHandlesWritesThem) {
  Stats s = SampleStats();
  EXPECT_EQ(s.ToJson().find("\"placement\""), std::string::npos);
  s.device.placement = {.ids = {4, 7, 9}, .log_id = 4, .metadata_id = 7};
  EXPECT_NE(s.ToJson().find("\"zoned\":false,\"placement\":{\"ids\":[4,7,9],\"log_id\":4,"
                            "\"metadata_id\":7},\"ring\":{"),
            std::string::npos)
      << s.ToJson();
  EXPECT_NE(s.ToString().find("placement: 3 FDP handles; the log's writes name identifier 4, "
                              "the metadata's 7\n"),
            std::string::npos)
      << s.ToString();
}

TEST(StatsJsonTest, NumbersThatJsonCannotHoldAreNull) {
  Stats s;
  s.write_amplification = std::numeric_limits<double>::infinity();
  s.index_bytes_per_key = std::numeric_limits<double>::quiet_NaN();
  const std::string json = s.ToJson();
  EXPECT_NE(json.find("\"write_amplification\":null,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"index_bytes_per_key\":null,"), std::string::npos) << json;
}

// A store path is bytes, not text: whatever it holds, the JSON is valid UTF-8 and parses, and
// each byte that is not UTF-8 reads back as U+FFFD (util/json_writer.h).
TEST(StatsJsonTest, IsValidUtf8WhateverBytesThePathAndNotesHold) {
  Stats s;
  s.device.path = "/tmp/\xff\xfe-\xc3\xa9-\xe2\x82";
  s.device.notes = {"fell back from \xed\xa0\x80"};
  const std::string json = s.ToJson();
  EXPECT_TRUE(testing::IsValidUtf8(json)) << json;
  absl::StatusOr<testing::JsonValue> value = testing::ParseJson(json);
  ASSERT_TRUE(value.ok()) << value.status() << " in " << json;
  const testing::JsonValue* device = value->Find("device");
  ASSERT_NE(device, nullptr);
  ASSERT_NE(device->Find("path"), nullptr);
  EXPECT_EQ(device->Find("path")->text,
            "/tmp/\xef\xbf\xbd\xef\xbf\xbd-\xc3\xa9-\xef\xbf\xbd\xef\xbf\xbd");
  ASSERT_NE(device->Find("notes"), nullptr);
  ASSERT_EQ(device->Find("notes")->items.size(), 1u);
  EXPECT_EQ(device->Find("notes")->items[0].text,
            "fell back from \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

}  // namespace
}  // namespace nvkv
