// Output of nvkv-ycsb: a table per phase, one JSON object per phase, and an SVG chart of the
// latency percentile curves.
//
// Thread contract: plain functions of finished results.
#ifndef NVKV_BENCH_YCSB_REPORT_H_
#define NVKV_BENCH_YCSB_REPORT_H_

#include <string>
#include <vector>

#include "bench/ycsb/runner.h"

namespace nvkv::ycsb {

// What the run was, for the headers of the table and the JSON.
struct RunDescription {
  std::string workload;  // the -P file(s)
  std::string db_path;
  std::string device;    // DeviceKindName of the store's backend
  std::string index;     // "hash" or "ordered"
  uint64_t record_count = 0;
  uint64_t capacity_bytes = 0;
};

// A header line, one row per operation type that ran (count, ops/s, avg, p50, p90, p99,
// p99.9, p99.99, max in microseconds, failures), and the store's counters.
std::string FormatTable(const RunDescription& run, const PhaseResult& phase);

// One line of JSON with the same content.
std::string FormatJson(const RunDescription& run, const PhaseResult& phase);

// An SVG document: one latency-by-percentile curve per operation type of every phase, x on a
// log "nines" axis (0, 90, 99, ... %), y in microseconds on a log axis, with a legend.
std::string FormatSvg(const RunDescription& run, const std::vector<PhaseResult>& phases);

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_REPORT_H_
