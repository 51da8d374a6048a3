// nvkv-ycsb's report: the table's write line, and the JSON line: the exact text for a known phase (scripts such as
// bench/ycsb/compare_fio.sh read it with sed), and valid UTF-8 whatever bytes a path holds.
#include <gtest/gtest.h>

#include <string>

#include "bench/ycsb/report.h"
#include "tests/testutil/json_check.h"

namespace nvkv::ycsb {
namespace {

RunDescription SampleRun() {
  RunDescription run;
  run.workload = "workloads/workloada";
  run.db_path = "/tmp/ycsb \"x\".db";
  run.device = "direct-file";
  run.index = "hash";
  run.record_count = 1000;
  run.capacity_bytes = 268435456;
  return run;
}

PhaseResult SamplePhase() {
  PhaseResult phase;
  phase.phase = "run";
  phase.threads = 2;
  phase.queue_depth = 8;
  phase.durable = true;
  phase.elapsed_s = 1.5;
  phase.operations = 300;
  for (uint64_t ns = 1000; ns <= 200000; ns += 1000) {
    phase.latency[static_cast<int>(OpType::kRead)].Record(ns);
  }
  for (uint64_t ns = 5000; ns <= 500000; ns += 5000) {
    phase.latency[static_cast<int>(OpType::kUpdate)].Record(ns);
  }
  phase.failures[static_cast<int>(OpType::kUpdate)] = 3;
  phase.first_error = "update user1: Unavailable: busy";
  phase.store.gets = 200;
  phase.store.puts = 100;
  phase.store.page_reads = 210;
  phase.store.key_check_page_reads = 10;
  phase.store.pages_written = 40;
  phase.store.page_write_commands = 10;
  phase.store.verify_reads = 1;
  phase.store.flushes = 7;
  phase.store.fua_writes = 2;
  phase.store.user_bytes_written = 110000;
  phase.store.device_bytes_written = 163840;
  phase.store.compaction_bytes_written = 4096;
  phase.store.cache_hits = 150;
  phase.store.cache_misses = 50;
  phase.store.checkpoints_written = 2;
  phase.store.checkpoint_seconds = 0.25;
  phase.store.checkpoint_writes_held_seconds = 0.125;
  phase.store.queues.reads = {.requests = 210, .calls = 40, .submitting_calls = 30,
                              .requests_submitted = 210};
  phase.store.queues.log_writes = {.requests = 49, .calls = 49, .submitting_calls = 49,
                                   .requests_submitted = 49};
  phase.disk.valid = true;
  phase.disk.name = "vda";
  phase.disk.reads = 210;
  phase.disk.writes = 41;
  phase.disk.read_bytes = 860160;
  phase.disk.write_bytes = 167936;
  phase.disk.avg_queue_depth = 1.25;
  phase.cpu_user_s = 0.25;
  phase.cpu_sys_s = 0.5;
  return phase;
}

// The table says what group commit did: puts per page written, pages per write command,
// flushes per second, and disk writes per page written.
TEST(YcsbReportTest, TableShowsPutsPerPageFlushesAndDiskWritesPerPage) {
  const std::string table = FormatTable(SampleRun(), SamplePhase());
  EXPECT_NE(table.find("writes: 2.50 puts per page written, 4.00 pages per write command, 5 "
                       "flushes/s, 1.02 disk writes per page written\n"),
            std::string::npos)
      << table;
}

// The table says how well each kind of queue batched its submissions.
TEST(YcsbReportTest, TableShowsRequestsPerSystemCallOfEachQueue) {
  const std::string table = FormatTable(SampleRun(), SamplePhase());
  EXPECT_NE(table.find("queues: reads 210 requests in 40 system calls (7.00 per submitting "
                       "call); log_writes 49 requests in 49 system calls (1.00 per submitting "
                       "call)\n"),
            std::string::npos)
      << table;
}

// The table gives the write amplification (host page bytes per user byte), and on a zoned
// namespace the zones reset and in use, where the device adds none of its own.
TEST(YcsbReportTest, TableShowsWriteAmplificationAndOnZonesTheZones) {
  PhaseResult phase = SamplePhase();
  std::string table = FormatTable(SampleRun(), phase);
  EXPECT_NE(table.find("compaction_MB=0.0 write_amp=1.49 "), std::string::npos) << table;
  EXPECT_EQ(table.find("zones:"), std::string::npos) << table;
  phase.store.zoned = true;
  phase.store.zone_resets = 12;
  phase.store.zones_in_use = 30;
  table = FormatTable(SampleRun(), phase);
  EXPECT_NE(table.find("zones: 12 reset by compaction, 30 holding the store at the end"),
            std::string::npos)
      << table;
}

// Page reads per get count the gets' reads only: the pages hash-mode writes read to find their
// key are said apart, per put (they were counted as the gets' once).
TEST(YcsbReportTest, PageReadsAreCountedPerGetAndPerPutApart) {
  const std::string table = FormatTable(SampleRun(), SamplePhase());
  EXPECT_NE(table.find("page_reads=210 (1.00 per get; 10 by writes' key checks, 0.10 per put)"),
            std::string::npos)
      << table;
}

TEST(YcsbReportTest, JsonLineHasEveryFieldInOrder) {
  EXPECT_EQ(
      FormatJson(SampleRun(), SamplePhase()),
      "{\"tool\": \"nvkv-ycsb\", \"phase\": \"run\", \"workload\": \"workloads/workloada\", "
      "\"db\": \"/tmp/ycsb \\\"x\\\".db\", \"device\": \"direct-file\", \"index\": \"hash\", "
      "\"recordcount\": 1000, \"capacity_bytes\": 268435456, \"threads\": 2, "
      "\"queue_depth\": 8, \"durable\": true, \"operations\": 300, \"elapsed_s\": 1.500000, "
      "\"ops_per_s\": 200.0, \"user_bytes_per_s\": 73333, \"cpu_user_s\": 0.250, "
      "\"cpu_sys_s\": 0.500, \"ops\": {"
      "\"READ\": {\"count\": 200, \"failed\": 0, \"ops_per_s\": 133.3, \"avg_us\": 100.50, "
      "\"p50_us\": 99.84, \"p90_us\": 179.20, \"p99_us\": 197.63, \"p99_9_us\": 200.00, "
      "\"p99_99_us\": 200.00, \"max_us\": 200.00}, "
      "\"UPDATE\": {\"count\": 100, \"failed\": 3, \"ops_per_s\": 66.7, \"avg_us\": 252.50, "
      "\"p50_us\": 250.88, \"p90_us\": 448.51, \"p99_us\": 493.57, \"p99_9_us\": 500.00, "
      "\"p99_99_us\": 500.00, \"max_us\": 500.00}}, "
      "\"store\": {\"gets\": 200, \"puts\": 100, \"page_reads\": 210, \"key_check_page_reads\": 10, \"pages_written\": 40, \"page_write_commands\": 10, "
      "\"verify_reads\": 1, \"blind_writes\": 0, \"settle_page_reads\": 0, \"flushes\": 7, \"fua_writes\": 2, \"user_bytes_written\": 110000, "
      "\"device_bytes_written\": 163840, \"compaction_bytes_written\": 4096, "
      "\"write_amplification\": 1.489, \"zoned\": false, \"zone_resets\": 0, "
      "\"zones_in_use\": 0, \"cache_hits\": 150, \"cache_misses\": 50, \"checkpoints_written\": 2, "
      "\"checkpoint_seconds\": 0.25, \"checkpoint_writes_held_seconds\": 0.125, "
      "\"queues\": {\"reads\": {\"requests\": 210, \"calls\": 40, \"submitting_calls\": 30, "
      "\"requests_submitted\": 210, \"requests_per_submitting_call\": 7.00}, "
      "\"log_writes\": {\"requests\": 49, \"calls\": 49, \"submitting_calls\": 49, "
      "\"requests_submitted\": 49, \"requests_per_submitting_call\": 1.00}, "
      "\"compaction\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}, \"checkpoints\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}}}, "
      "\"disk\": {\"name\": \"vda\", \"reads\": 210, \"writes\": 41, \"read_bytes\": 860160, "
      "\"write_bytes\": 167936, \"avg_queue_depth\": 1.250}, "
      "\"first_error\": \"update user1: Unavailable: busy\"}\n");
}

TEST(YcsbReportTest, JsonLineWithoutOperationsOrDisk) {
  PhaseResult phase;
  phase.phase = "load";
  EXPECT_EQ(FormatJson(RunDescription(), phase),
            "{\"tool\": \"nvkv-ycsb\", \"phase\": \"load\", \"workload\": \"\", \"db\": \"\", "
            "\"device\": \"\", \"index\": \"\", \"recordcount\": 0, \"capacity_bytes\": 0, "
            "\"threads\": 0, \"queue_depth\": 0, \"durable\": false, \"operations\": 0, "
            "\"elapsed_s\": 0.000000, \"ops_per_s\": 0.0, \"user_bytes_per_s\": 0, "
            "\"cpu_user_s\": 0.000, \"cpu_sys_s\": 0.000, \"ops\": {}, "
            "\"store\": {\"gets\": 0, \"puts\": 0, \"page_reads\": 0, \"key_check_page_reads\": 0, \"pages_written\": 0, \"page_write_commands\": 0, "
            "\"verify_reads\": 0, \"blind_writes\": 0, \"settle_page_reads\": 0, "
            "\"flushes\": 0, \"fua_writes\": 0, \"user_bytes_written\": 0, "
            "\"device_bytes_written\": 0, \"compaction_bytes_written\": 0, "
            "\"write_amplification\": 0.000, \"zoned\": false, \"zone_resets\": 0, "
            "\"zones_in_use\": 0, \"cache_hits\": 0, \"cache_misses\": 0, \"checkpoints_written\": 0, "
            "\"checkpoint_seconds\": 0, \"checkpoint_writes_held_seconds\": 0, "
            "\"queues\": {\"reads\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}, \"log_writes\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}, \"compaction\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}, "
            "\"checkpoints\": {\"requests\": 0, \"calls\": 0, \"submitting_calls\": 0, \"requests_submitted\": 0, \"requests_per_submitting_call\": 0.00}}}, "
            "\"first_error\": \"\"}\n");
}

// --db is a path, so any bytes: the line is still valid UTF-8 and parses.
TEST(YcsbReportTest, JsonLineIsValidUtf8WhateverBytesThePathHolds) {
  RunDescription run = SampleRun();
  run.db_path = "/tmp/\xff\xc0\xaf\n.db";
  PhaseResult phase = SamplePhase();
  phase.first_error = "put: \xe2\x82";
  const std::string json = FormatJson(run, phase);
  EXPECT_TRUE(testing::IsValidUtf8(json)) << json;
  absl::StatusOr<testing::JsonValue> value = testing::ParseJson(json);
  ASSERT_TRUE(value.ok()) << value.status() << " in " << json;
  ASSERT_NE(value->Find("db"), nullptr);
  EXPECT_EQ(value->Find("db")->text, "/tmp/\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\n.db");
  ASSERT_NE(value->Find("first_error"), nullptr);
  EXPECT_EQ(value->Find("first_error")->text, "put: \xef\xbf\xbd\xef\xbf\xbd");
}

}  // namespace
}  // namespace nvkv::ycsb
