#include "bench/ycsb/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/json_writer.h"

namespace nvkv::ycsb {
namespace {

using util::JsonObject;

constexpr double kQuantiles[] = {0.50, 0.90, 0.99, 0.999, 0.9999};

double Us(uint64_t ns) { return static_cast<double>(ns) / 1e3; }

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

double PerSecond(uint64_t count, double seconds) { return seconds > 0 ? count / seconds : 0; }

// Pages the gets read (scans' reads are gets too), each: the writes' key checks left out.
double PerGetPageReads(const StoreDelta& s) {
  const uint64_t reads = s.page_reads - std::min(s.page_reads, s.key_check_page_reads);
  return s.gets == 0 ? 0.0 : static_cast<double>(reads) / s.gets;
}

// The kinds of queue a phase uses: every kind but Open's and Check's.
std::vector<std::pair<const char*, const QueueCalls*>> RunQueues(const QueueKindCalls& q) {
  std::vector<std::pair<const char*, const QueueCalls*>> kinds;
  for (const auto& kind : q.by_name()) {
    if (kind.second != &q.open && kind.second != &q.check) kinds.push_back(kind);
  }
  return kinds;
}

}  // namespace

std::string FormatTable(const RunDescription& run, const PhaseResult& phase) {
  std::string out = absl::StrFormat(
      "[%s] %s  records=%d  threads=%d  queue_depth=%d  durable=%s  store=%s (%s, %s index)\n",
      phase.phase == "load" ? "LOAD" : "RUN", run.workload, run.record_count, phase.threads,
      phase.queue_depth, phase.durable ? "true" : "false", run.db_path, run.device, run.index);
  absl::StrAppendFormat(
      &out, "[%s] %d operations in %.3f s: %.0f ops/s; cpu user %.2f s sys %.2f s (%.2f us/op)\n",
      phase.phase == "load" ? "LOAD" : "RUN", phase.operations, phase.elapsed_s,
      phase.ops_per_s(), phase.cpu_user_s, phase.cpu_sys_s,
      phase.operations == 0 ? 0.0
                            : (phase.cpu_user_s + phase.cpu_sys_s) * 1e6 / phase.operations);
  absl::StrAppendFormat(&out, "%-18s %9s %10s %9s %9s %9s %9s %9s %9s %10s %7s\n", "operation",
                        "count", "ops/s", "avg_us", "p50_us", "p90_us", "p99_us", "p99.9_us",
                        "p99.99_us", "max_us", "failed");
  for (int t = 0; t < kOpTypes; ++t) {
    const LatencyHistogram& h = phase.latency[t];
    if (h.count() == 0 && phase.failures[t] == 0) continue;
    absl::StrAppendFormat(&out, "%-18s %9d %10.0f %9.1f", OpName(static_cast<OpType>(t)),
                          h.count(), PerSecond(h.count(), phase.elapsed_s), h.mean_ns() / 1e3);
    for (double q : kQuantiles) absl::StrAppendFormat(&out, " %9.1f", Us(h.Percentile(q)));
    absl::StrAppendFormat(&out, " %10.1f %7d\n", Us(h.max_ns()), phase.failures[t]);
  }
  const StoreDelta& s = phase.store;
  absl::StrAppendFormat(
      &out,
      "store: page_reads=%d (%.2f per get; %d by writes' key checks, %.2f per put) "
      "pages_written=%d verify_reads=%d blind_writes=%d "
      "settle_page_reads=%d flushes=%d fua_writes=%d user_MB=%.1f device_MB=%.1f "
      "compaction_MB=%.1f write_amp=%.2f user_MB/s=%.1f cache_hits=%d cache_misses=%d\n",
      s.page_reads, PerGetPageReads(s), s.key_check_page_reads,
      s.puts == 0 ? 0.0 : static_cast<double>(s.key_check_page_reads) / s.puts,
      s.pages_written, s.verify_reads, s.blind_writes, s.settle_page_reads, s.flushes,
      s.fua_writes, s.user_bytes_written / 1e6,
      s.device_bytes_written / 1e6, s.compaction_bytes_written / 1e6, s.write_amplification(),
      PerSecond(s.user_bytes_written, phase.elapsed_s) / 1e6, s.cache_hits, s.cache_misses);
  if (s.zoned) {
    absl::StrAppendFormat(&out,
                          "zones: %d reset by compaction, %d holding the store at the end (the "
                          "device adds no write amplification of its own)\n",
                          s.zone_resets, s.zones_in_use);
  }
  const DiskDelta& d = phase.disk;
  // Group commit at a glance: how many puts shared a page write, how often the store flushed,
  // and what each page write cost the disk underneath (the file system's own writes included).
  absl::StrAppendFormat(
      &out, "writes: %.2f puts per page written, %.2f pages per write command, %.0f flushes/s",
      s.pages_written == 0 ? 0.0 : static_cast<double>(s.puts) / s.pages_written,
      s.page_write_commands == 0 ? 0.0
                                 : static_cast<double>(s.pages_written) / s.page_write_commands,
      PerSecond(s.flushes, phase.elapsed_s));
  if (d.valid && s.pages_written > 0) {
    absl::StrAppendFormat(&out, ", %.2f disk writes per page written",
                          static_cast<double>(d.writes) / s.pages_written);
  }
  out += "\n";
  // Batching of submission: requests each system call pushed, per kind of queue.
  std::string queues;
  for (const auto& [name, calls] : RunQueues(s.queues)) {
    if (calls->calls == 0) continue;
    absl::StrAppendFormat(&queues, "%s%s %d requests in %d system calls (%.2f per submitting call)",
                          queues.empty() ? "" : "; ", name, calls->requests, calls->calls,
                          calls->requests_per_submitting_call());
  }
  if (!queues.empty()) absl::StrAppend(&out, "queues: ", queues, "\n");
  if (d.valid) {
    absl::StrAppendFormat(
        &out,
        "disk %s (whole device): %d reads %.1f MB, %d writes %.1f MB (%.1f KiB each), "
        "write %.1f MB/s, avg queue depth %.2f\n",
        d.name, d.reads, d.read_bytes / 1e6, d.writes, d.write_bytes / 1e6,
        d.writes == 0 ? 0.0 : d.write_bytes / 1024.0 / d.writes,
        PerSecond(d.write_bytes, phase.elapsed_s) / 1e6, d.avg_queue_depth);
  }
  if (!phase.first_error.empty()) absl::StrAppend(&out, "first error: ", phase.first_error, "\n");
  return out;
}

std::string FormatJson(const RunDescription& run, const PhaseResult& phase) {
  constexpr JsonObject::Style kSpaced = JsonObject::Style::kSpaced;
  JsonObject json(kSpaced);
  json.Add("tool", "nvkv-ycsb")
      .Add("phase", phase.phase)
      .Add("workload", run.workload)
      .Add("db", run.db_path)
      .Add("device", run.device)
      .Add("index", run.index)
      .Add("recordcount", run.record_count)
      .Add("capacity_bytes", run.capacity_bytes)
      .Add("threads", phase.threads)
      .Add("queue_depth", phase.queue_depth)
      .Add("durable", phase.durable)
      .Add("operations", phase.operations)
      .AddFixed("elapsed_s", phase.elapsed_s, 6)
      .AddFixed("ops_per_s", phase.ops_per_s(), 1)
      .AddFixed("user_bytes_per_s", PerSecond(phase.store.user_bytes_written, phase.elapsed_s),
                0)
      .AddFixed("cpu_user_s", phase.cpu_user_s, 3)
      .AddFixed("cpu_sys_s", phase.cpu_sys_s, 3);
  JsonObject ops(kSpaced);
  for (int t = 0; t < kOpTypes; ++t) {
    const LatencyHistogram& h = phase.latency[t];
    if (h.count() == 0 && phase.failures[t] == 0) continue;
    JsonObject op(kSpaced);
    op.Add("count", h.count())
        .Add("failed", phase.failures[t])
        .AddFixed("ops_per_s", PerSecond(h.count(), phase.elapsed_s), 1)
        .AddFixed("avg_us", h.mean_ns() / 1e3, 2)
        .AddFixed("p50_us", Us(h.Percentile(0.5)), 2)
        .AddFixed("p90_us", Us(h.Percentile(0.9)), 2)
        .AddFixed("p99_us", Us(h.Percentile(0.99)), 2)
        .AddFixed("p99_9_us", Us(h.Percentile(0.999)), 2)
        .AddFixed("p99_99_us", Us(h.Percentile(0.9999)), 2)
        .AddFixed("max_us", Us(h.max_ns()), 2);
    ops.AddRaw(OpName(static_cast<OpType>(t)), op.Finish());
  }
  json.AddRaw("ops", ops.Finish());
  const StoreDelta& s = phase.store;
  JsonObject store(kSpaced);
  store.Add("gets", s.gets)
      .Add("puts", s.puts)
      .Add("page_reads", s.page_reads)
      .Add("key_check_page_reads", s.key_check_page_reads)
      .Add("pages_written", s.pages_written)
      .Add("page_write_commands", s.page_write_commands)
      .Add("verify_reads", s.verify_reads)
      .Add("blind_writes", s.blind_writes)
      .Add("settle_page_reads", s.settle_page_reads)
      .Add("flushes", s.flushes)
      .Add("fua_writes", s.fua_writes)
      .Add("user_bytes_written", s.user_bytes_written)
      .Add("device_bytes_written", s.device_bytes_written)
      .Add("compaction_bytes_written", s.compaction_bytes_written)
      .AddFixed("write_amplification", s.write_amplification(), 3)
      .Add("zoned", s.zoned)
      .Add("zone_resets", s.zone_resets)
      .Add("zones_in_use", s.zones_in_use)
      .Add("cache_hits", s.cache_hits)
      .Add("cache_misses", s.cache_misses)
      .Add("checkpoints_written", s.checkpoints_written)
      .Add("checkpoint_seconds", s.checkpoint_seconds)
      .Add("checkpoint_writes_held_seconds", s.checkpoint_writes_held_seconds);
  JsonObject queues(kSpaced);
  for (const auto& [name, calls] : RunQueues(s.queues)) {
    JsonObject kind(kSpaced);
    kind.Add("requests", calls->requests)
        .Add("calls", calls->calls)
        .Add("submitting_calls", calls->submitting_calls)
        .Add("requests_submitted", calls->requests_submitted)
        .AddFixed("requests_per_submitting_call", calls->requests_per_submitting_call(), 2);
    queues.AddRaw(name, kind.Finish());
  }
  store.AddRaw("queues", queues.Finish());
  json.AddRaw("store", store.Finish());
  const DiskDelta& d = phase.disk;
  if (d.valid) {
    JsonObject disk(kSpaced);
    disk.Add("name", d.name)
        .Add("reads", d.reads)
        .Add("writes", d.writes)
        .Add("read_bytes", d.read_bytes)
        .Add("write_bytes", d.write_bytes)
        .AddFixed("avg_queue_depth", d.avg_queue_depth, 3);
    json.AddRaw("disk", disk.Finish());
  }
  json.Add("first_error", phase.first_error);
  return json.Finish() + "\n";
}

// --- SVG ---
//
// Plot area: x = nines = -log10(1 - p), from 0 (p = 0) to kMaxNines (99.999%); y = log10(us).
// A curve's point for a histogram bucket is (nines of the fraction of values below the bucket's
// top, the bucket's middle): a step curve of the empirical distribution, drawn as a polyline.
namespace {

constexpr double kWidth = 960, kHeight = 600;
constexpr double kLeft = 80, kRight = 250, kTop = 50, kBottom = 60;
constexpr double kMaxNines = 5;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

struct Curve {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (nines, us)
};

Curve MakeCurve(const std::string& label, const LatencyHistogram& h) {
  Curve curve;
  curve.label = label;
  const double count = static_cast<double>(h.count());
  // The last value is at nines = log10(count): beyond it the data says nothing.
  const double max_nines = std::min(kMaxNines, std::log10(count));
  uint64_t seen = 0;
  for (uint32_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    const uint64_t n = h.bucket_count(i);
    if (n == 0) continue;
    const double us = std::clamp(LatencyHistogram::BucketMiddle(i), h.min_ns(), h.max_ns()) / 1e3;
    const double p_before = static_cast<double>(seen) / count;
    seen += n;
    const double p_after = static_cast<double>(seen) / count;
    const double x0 = std::min(max_nines, -std::log10(1 - p_before));
    const double x1 = seen == h.count() ? max_nines : std::min(max_nines, -std::log10(1 - p_after));
    curve.points.emplace_back(x0, us);
    curve.points.emplace_back(x1, us);
    if (x1 >= max_nines) break;
  }
  return curve;
}

}  // namespace

std::string FormatSvg(const RunDescription& run, const std::vector<PhaseResult>& phases) {
  std::vector<Curve> curves;
  double min_us = 1e18, max_us = 0;
  for (const PhaseResult& phase : phases) {
    for (int t = 0; t < kOpTypes; ++t) {
      const LatencyHistogram& h = phase.latency[t];
      if (h.count() == 0) continue;
      const std::string label = absl::StrCat(phase.phase, " ", OpName(static_cast<OpType>(t)));
      curves.push_back(MakeCurve(label, h));
      min_us = std::min(min_us, std::max(h.min_ns() / 1e3, 0.1));
      max_us = std::max(max_us, h.max_ns() / 1e3);
    }
  }
  if (curves.empty()) {
    min_us = 1;
    max_us = 10;
  }
  // Whole decades around the data.
  const double y_lo = std::floor(std::log10(min_us));
  const double y_hi = std::max(y_lo + 1, std::ceil(std::log10(max_us)));
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double nines) { return kLeft + nines / kMaxNines * plot_w; };
  auto py = [&](double us) {
    return kTop + plot_h - (std::log10(std::max(us, 1e-3)) - y_lo) / (y_hi - y_lo) * plot_h;
  };

  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"13\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppendFormat(&out,
                        "<text x=\"%.0f\" y=\"28\" font-size=\"16\" font-weight=\"bold\">"
                        "nvkv-ycsb latency by percentile: %s (%d records, %s)</text>\n",
                        kLeft, XmlEscape(run.workload), run.record_count, XmlEscape(run.device));
  // Grid and axis labels.
  for (int nines = 0; nines <= kMaxNines; ++nines) {
    const double x = px(nines);
    static constexpr const char* kLabels[] = {"0%", "90%", "99%", "99.9%", "99.99%", "99.999%"};
    const char* label = kLabels[nines];
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          x, kTop, x, kTop + plot_h, x, kTop + plot_h + 20, label);
  }
  for (int decade = static_cast<int>(y_lo); decade <= static_cast<int>(y_hi); ++decade) {
    for (int m = 1; m <= 9; ++m) {
      const double us = m * std::pow(10.0, decade);
      if (std::log10(us) > y_hi + 1e-9) break;
      const double y = py(us);
      absl::StrAppendFormat(&out,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"%s\"/>\n",
                            kLeft, y, kLeft + plot_w, y, m == 1 ? "#ccc" : "#f0f0f0");
      if (m == 1) {
        const std::string text = us >= 1 ? absl::StrFormat("%.0f", us) : absl::StrFormat("%g", us);
        absl::StrAppendFormat(&out,
                              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                              kLeft - 8, y + 4, text);
      }
    }
  }
  absl::StrAppendFormat(&out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"#333\"/>\n",
                        kLeft, kTop, plot_w, plot_h);
  absl::StrAppendFormat(&out,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">percentile</text>\n"
                        "<text transform=\"translate(22 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">latency (us, log scale)</text>\n",
                        kLeft + plot_w / 2, kHeight - 15, kTop + plot_h / 2);
  // Curves and legend.
  for (size_t c = 0; c < curves.size(); ++c) {
    const char* color = kColors[c % std::size(kColors)];
    std::string points;
    for (const auto& [nines, us] : curves[c].points) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", px(nines), py(us));
    }
    absl::StrAppendFormat(&out,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                          "points=\"%s\"/>\n",
                          color, points);
    const double ly = kTop + 10 + 22 * static_cast<double>(c);
    const double lx = kLeft + plot_w + 20;
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          lx, ly, lx + 24, ly, color, lx + 30, ly + 4,
                          XmlEscape(curves[c].label));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace nvkv::ycsb
