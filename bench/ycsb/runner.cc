#include "bench/ycsb/runner.h"

#include <sys/resource.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace nvkv::ycsb {
namespace {

constexpr uint64_t kNsPerSecond = 1'000'000'000;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kNsPerSecond + static_cast<uint64_t>(ts.tv_nsec);
}

// What one client thread shows the progress reporter: written by the client, read each second.
struct LiveStats {
  std::atomic<uint64_t> operations{0};
  std::mutex mu;
  LatencyHistogram interval;  // every operation type, since the last report; guarded by mu
};

class ClientThread {
 public:
  // Everything passed is borrowed and outlives the client.
  ClientThread(Store* db, const WorkloadConfig& config, const ClientOptions& options,
               SharedCounters* counters, uint64_t seed, uint64_t quota, uint64_t deadline_ns,
               LiveStats* live)
      : db_(db),
        config_(config),
        options_(options),
        counters_(counters),
        chooser_(config, counters, seed),
        quota_(quota),
        deadline_ns_(deadline_ns),
        live_(live) {}

  absl::Status Load();
  absl::Status Run();

  const std::array<LatencyHistogram, kOpTypes>& latency() const { return latency_; }
  const std::array<uint64_t, kOpTypes>& failures() const { return failures_; }
  const std::string& first_error() const { return first_error_; }
  uint64_t operations() const { return operations_; }

 private:
  // One operation in flight: a GetAsync or PutAsync whose callback has not been handled yet.
  struct Slot {
    OpType type = OpType::kRead;
    bool writing = false;    // the read is done (or there was none): its PutAsync is in flight
    uint64_t start_ns = 0;   // the operation's issue
    uint64_t write_ns = 0;   // its write's issue
    uint64_t key_number = 0;  // an insert's, to acknowledge
    uint32_t field = 0;
    std::string key;
    absl::StatusOr<std::string> result;
    absl::Status write_status;
  };

  bool Expired(uint64_t now_ns) const { return deadline_ns_ != 0 && now_ns >= deadline_ns_; }
  void Record(OpType type, uint64_t ns);
  void Fail(OpType type, const absl::Status& status);
  void OperationDone() { live_->operations.store(++operations_, std::memory_order_relaxed); }

  void StartRead(OpType type, uint64_t now_ns);
  // Starts the write of `slot` (slots_[index]) with `record`; false when it ended at once (its
  // failure is recorded).
  bool StartWrite(uint32_t index, const std::string& record);
  void FinishCompleted();
  // Finish an operation whose read (or write) completed at or before `now_ns`; return the clock
  // after, and whether the operation is over (else its write is in flight).
  bool FinishRead(uint32_t index, uint64_t* now_ns);
  void FinishWrite(Slot& slot, uint64_t now_ns);
  // Starts an insert or a blind update: a whole new record for key `key_number`.
  void StartRecordWrite(OpType type, uint64_t key_number, uint64_t now_ns);
  void DoScan();

  Store* db_;
  const WorkloadConfig& config_;
  const ClientOptions& options_;
  SharedCounters* counters_;
  OperationChooser chooser_;
  const uint64_t quota_;
  const uint64_t deadline_ns_;
  LiveStats* live_;

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> completed_;   // filled by GetAsync callbacks (inside DB calls)
  std::vector<uint32_t> processing_;  // the batch being finished
  uint32_t in_flight_ = 0;
  std::string value_;                 // scratch record
  std::vector<std::pair<std::string, std::string>> scan_out_;

  std::array<LatencyHistogram, kOpTypes> latency_;
  std::array<uint64_t, kOpTypes> failures_{};
  std::string first_error_;
  uint64_t operations_ = 0;
};

void ClientThread::Record(OpType type, uint64_t ns) {
  latency_[static_cast<int>(type)].Record(ns);
  std::lock_guard<std::mutex> lock(live_->mu);
  live_->interval.Record(ns);
}

void ClientThread::Fail(OpType type, const absl::Status& status) {
  if (failures_[static_cast<int>(type)]++ == 0 && first_error_.empty()) {
    first_error_ = absl::StrCat(OpName(type), ": ", status.ToString());
  }
}

absl::Status ClientThread::Load() {
  std::string key;
  for (uint64_t i = 0; i < quota_; ++i) {
    const uint64_t start = NowNs();
    if (Expired(start)) break;
    key = KeyName(config_, counters_->load_sequence.Next());
    chooser_.BuildRecord(key, &value_);
    absl::Status status = db_->Put(key, value_, options_.load_durable);
    if (status.ok()) {
      Record(OpType::kInsert, NowNs() - start);
    } else {
      Fail(OpType::kInsert, status);
      // The store is full or broken: nothing more will succeed.
      if (!absl::IsInvalidArgument(status)) return status;
    }
    OperationDone();
  }
  return absl::OkStatus();
}

absl::Status ClientThread::Run() {
  slots_.resize(options_.queue_depth);
  for (uint32_t i = options_.queue_depth; i > 0; --i) free_slots_.push_back(i - 1);
  completed_.reserve(options_.queue_depth);
  processing_.reserve(options_.queue_depth);
  uint64_t issued = 0;
  uint32_t unsubmitted = 0;  // reads started since the last Poll
  bool expired = false;
  for (;;) {
    uint64_t now = NowNs();
    expired = expired || Expired(now);
    while (!free_slots_.empty() && issued < quota_ && !expired) {
      ++issued;
      const OpType type = chooser_.NextOperation();
      if (type == OpType::kInsert) {
        StartRecordWrite(OpType::kInsert, counters_->insert_sequence.Next(), now);
        continue;
      } else if (type == OpType::kScan) {
        DoScan();
      } else if (type == OpType::kUpdate && config_.write_all_fields) {
        // A blind update: a whole new record, no read.
        StartRecordWrite(OpType::kUpdate, chooser_.NextKeyNumber(), now);
        continue;
      } else {
        StartRead(type, now);
        if (options_.submit_batch != 0 && ++unsubmitted == options_.submit_batch) {
          unsubmitted = 0;
          absl::StatusOr<uint32_t> pushed = db_->Poll(0);  // submit now, never wait
          if (!pushed.ok()) return pushed.status();
        }
        continue;
      }
      now = NowNs();  // after a synchronous operation
      expired = Expired(now);
    }
    if (in_flight_ == 0) {
      if (issued >= quota_ || expired) break;
      continue;
    }
    if (completed_.empty()) {
      // Submits the reads queued since the last Poll and waits for nvkv.reapbatch completions
      // (or those in flight, if fewer), in one system call.
      absl::StatusOr<uint32_t> polled = db_->Poll(std::min(options_.reap_batch, in_flight_));
      if (!polled.ok()) return polled.status();
      unsubmitted = 0;
    }
    FinishCompleted();
  }
  return absl::OkStatus();
}

void ClientThread::StartRead(OpType type, uint64_t now_ns) {
  const uint32_t index = free_slots_.back();
  Slot& slot = slots_[index];
  slot.type = type;
  slot.start_ns = now_ns;
  slot.key = KeyName(config_, chooser_.NextKeyNumber());
  slot.field = chooser_.NextField();
  // Captures 12 bytes: std::function keeps it inline, no allocation per read. The callback
  // may run inside any later DB call on this thread, so it only notes the slot.
  absl::Status started = db_->GetAsync(slot.key, [this, index](absl::StatusOr<std::string> v) {
    slots_[index].result = std::move(v);
    completed_.push_back(index);
  });
  if (!started.ok()) {
    Fail(type, started);
    OperationDone();
    return;
  }
  free_slots_.pop_back();
  ++in_flight_;
}

void ClientThread::FinishCompleted() {
  std::swap(completed_, processing_);
  uint64_t now = NowNs();
  for (const uint32_t index : processing_) {
    Slot& slot = slots_[index];
    if (slot.writing) {
      FinishWrite(slot, now);
    } else if (!FinishRead(index, &now)) {
      continue;  // its write is in flight
    }
    --in_flight_;
    free_slots_.push_back(index);
    OperationDone();
  }
  processing_.clear();
}

bool ClientThread::FinishRead(uint32_t index, uint64_t* now_ns) {
  Slot& slot = slots_[index];
  absl::StatusOr<std::string>& result = slot.result;
  const bool read_ok = result.ok() && chooser_.CheckRecord(slot.key, *result);
  if (slot.type == OpType::kRead) {
    if (read_ok) {
      Record(OpType::kRead, *now_ns - slot.start_ns);
    } else {
      Fail(OpType::kRead, result.ok() ? absl::DataLossError("record malformed or wrong")
                                      : result.status());
    }
    return true;
  }
  // An update or read-modify-write: write back the record with one field replaced.
  const bool rmw = slot.type == OpType::kReadModifyWrite;
  if (!read_ok) {
    const absl::Status why =
        result.ok() ? absl::DataLossError("record malformed or wrong") : result.status();
    if (rmw) Fail(OpType::kRead, why);
    Fail(slot.type, why);
    return true;
  }
  if (rmw) Record(OpType::kRead, *now_ns - slot.start_ns);
  std::string& record = *result;
  if (config_.write_all_fields) {
    chooser_.BuildRecord(slot.key, &record);
  } else {
    chooser_.UpdateField(slot.key, slot.field, &record);
  }
  slot.write_ns = *now_ns;
  const bool started = StartWrite(index, record);
  *now_ns = NowNs();
  return !started;
}

bool ClientThread::StartWrite(uint32_t index, const std::string& record) {
  Slot& slot = slots_[index];
  slot.writing = true;
  // Captures 12 bytes, as GetAsync's callback does: no allocation per write.
  absl::Status started =
      db_->PutAsync(slot.key, record, options_.durable, [this, index](absl::Status status) {
        slots_[index].write_status = std::move(status);
        completed_.push_back(index);
      });
  if (started.ok()) return true;
  slot.write_status = std::move(started);
  FinishWrite(slot, NowNs());
  return false;
}

void ClientThread::FinishWrite(Slot& slot, uint64_t now_ns) {
  slot.writing = false;
  const OpType type = slot.type;
  if (type == OpType::kInsert) {
    // Acknowledged even when it failed, as YCSB does, so readers are not held back forever.
    counters_->insert_sequence.Acknowledge(slot.key_number);
  }
  const bool rmw = type == OpType::kReadModifyWrite;
  if (!slot.write_status.ok()) {
    Fail(rmw ? OpType::kUpdate : type, slot.write_status);
    if (rmw) Fail(OpType::kReadModifyWrite, slot.write_status);
    return;
  }
  if (rmw) {
    Record(OpType::kUpdate, now_ns - slot.write_ns);
    Record(OpType::kReadModifyWrite, now_ns - slot.start_ns);
  } else {
    Record(type, now_ns - slot.start_ns);
  }
}

void ClientThread::StartRecordWrite(OpType type, uint64_t key_number, uint64_t now_ns) {
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  ++in_flight_;
  Slot& slot = slots_[index];
  slot.type = type;
  slot.start_ns = slot.write_ns = now_ns;
  slot.key_number = key_number;
  slot.key = KeyName(config_, key_number);
  chooser_.BuildRecord(slot.key, &value_);
  if (!StartWrite(index, value_)) {
    --in_flight_;
    free_slots_.push_back(index);
    OperationDone();
  }
}

void ClientThread::DoScan() {
  const uint64_t start = NowNs();
  const std::string key = KeyName(config_, chooser_.NextKeyNumber());
  const uint32_t length = chooser_.NextScanLength();
  absl::Status status = db_->Scan(key, length, &scan_out_);
  if (status.ok()) {
    for (const auto& [k, v] : scan_out_) {
      if (!chooser_.CheckRecord(k, v)) {
        status = absl::DataLossError(absl::StrCat("scan: record of ", k, " malformed or wrong"));
        break;
      }
    }
  }
  if (status.ok()) {
    Record(OpType::kScan, NowNs() - start);
  } else {
    Fail(OpType::kScan, status);
  }
  OperationDone();
}

QueueCalls Delta(const QueueCalls& before, const QueueCalls& after) {
  return {.requests = after.requests - before.requests,
          .calls = after.calls - before.calls,
          .submitting_calls = after.submitting_calls - before.submitting_calls,
          .requests_submitted = after.requests_submitted - before.requests_submitted};
}

StoreDelta Delta(const Stats& before, const Stats& after) {
  StoreDelta d;
  d.gets = after.gets - before.gets;
  d.puts = after.puts - before.puts;
  d.page_reads = after.page_reads - before.page_reads;
  d.key_check_page_reads = after.key_check_page_reads - before.key_check_page_reads;
  d.pages_written = after.pages_written - before.pages_written;
  d.page_write_commands = after.page_write_commands - before.page_write_commands;
  d.verify_reads = after.verify_reads - before.verify_reads;
  d.blind_writes = after.blind_writes - before.blind_writes;
  d.settle_page_reads = after.settle_page_reads - before.settle_page_reads;
  d.flushes = after.flushes - before.flushes;
  d.fua_writes = after.fua_writes - before.fua_writes;
  d.user_bytes_written = after.user_bytes_written - before.user_bytes_written;
  d.device_bytes_written = after.device_bytes_written - before.device_bytes_written;
  d.compaction_bytes_written = after.compaction_bytes_written - before.compaction_bytes_written;
  d.zoned = after.device.zoned;
  d.zone_resets = after.device.zones.resets - before.device.zones.resets;
  d.zones_in_use = after.device.zones.in_use;
  d.cache_hits = after.cache_hits - before.cache_hits;
  d.cache_misses = after.cache_misses - before.cache_misses;
  d.checkpoints_written = after.checkpoints_written - before.checkpoints_written;
  d.checkpoint_seconds = after.checkpoint_seconds - before.checkpoint_seconds;
  d.checkpoint_writes_held_seconds =
      after.checkpoint_writes_held_seconds - before.checkpoint_writes_held_seconds;
  d.queues.reads = Delta(before.queues.reads, after.queues.reads);
  d.queues.log_writes = Delta(before.queues.log_writes, after.queues.log_writes);
  d.queues.compaction = Delta(before.queues.compaction, after.queues.compaction);
  d.queues.open = Delta(before.queues.open, after.queues.open);
  d.queues.checkpoints = Delta(before.queues.checkpoints, after.queues.checkpoints);
  d.queues.check = Delta(before.queues.check, after.queues.check);
  return d;
}

// Prints a status line every second until stopped.
class ProgressReporter {
 public:
  ProgressReporter(const std::string& phase, std::vector<std::unique_ptr<LiveStats>>* live)
      : phase_(phase), live_(live), start_ns_(NowNs()) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressReporter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  void Loop() {
    uint64_t last_ops = 0;
    uint64_t last_ns = start_ns_;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) return;
      const uint64_t now = NowNs();
      uint64_t ops = 0;
      LatencyHistogram interval;
      for (auto& live : *live_) {
        ops += live->operations.load(std::memory_order_relaxed);
        std::lock_guard<std::mutex> live_lock(live->mu);
        interval.Merge(live->interval);
        live->interval.Clear();
      }
      const double seconds = static_cast<double>(now - last_ns) / kNsPerSecond;
      std::fprintf(stderr, "[%s] %4.0f s: %llu ops, %.0f ops/s, p99 %.0f us\n", phase_.c_str(),
                   static_cast<double>(now - start_ns_) / kNsPerSecond,
                   static_cast<unsigned long long>(ops),
                   seconds > 0 ? static_cast<double>(ops - last_ops) / seconds : 0.0,
                   interval.Percentile(0.99) / 1e3);
      last_ops = ops;
      last_ns = now;
    }
  }

  const std::string phase_;
  std::vector<std::unique_ptr<LiveStats>>* live_;
  const uint64_t start_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

absl::StatusOr<PhaseResult> RunPhase(Store* db, const WorkloadConfig& config,
                                     const ClientOptions& options, SharedCounters* counters,
                                     bool load) {
  PhaseResult result;
  result.phase = load ? "load" : "run";
  result.threads = options.threads;
  result.queue_depth = load ? 1 : options.queue_depth;
  result.durable = load ? options.load_durable : options.durable;
  const uint64_t total = load ? config.insert_count : config.operation_count;
  uint64_t seed = config.seed != 0 ? config.seed : NowNs();
  if (!load) seed ^= 0x5851f42d4c957f2dull;  // the run draws differently from the load

  std::vector<std::unique_ptr<LiveStats>> live;
  std::vector<std::unique_ptr<ClientThread>> clients;
  const Stats before = db->GetStats();
  rusage usage_before;
  getrusage(RUSAGE_SELF, &usage_before);
  const uint64_t start_ns = NowNs();
  const uint64_t deadline_ns =
      config.max_execution_s == 0 ? 0 : start_ns + config.max_execution_s * kNsPerSecond;
  for (uint32_t i = 0; i < options.threads; ++i) {
    const uint64_t quota = total / options.threads + (i < total % options.threads ? 1 : 0);
    live.push_back(std::make_unique<LiveStats>());
    clients.push_back(std::make_unique<ClientThread>(
        db, config, options, counters, seed + 0x9e3779b97f4a7c15ull * (i + 1), quota,
        deadline_ns, live.back().get()));
  }
  std::vector<absl::Status> statuses(options.threads);
  {
    std::unique_ptr<ProgressReporter> reporter;
    if (options.progress) reporter = std::make_unique<ProgressReporter>(result.phase, &live);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < options.threads; ++i) {
      threads.emplace_back([&, i] {
        statuses[i] = load ? clients[i]->Load() : clients[i]->Run();
      });
    }
    for (std::thread& thread : threads) thread.join();
    if (load) {
      absl::Status flushed = db->Flush();  // every loaded record durable before we report
      if (!flushed.ok()) statuses.push_back(flushed);
    }
  }
  result.elapsed_s = static_cast<double>(NowNs() - start_ns) / kNsPerSecond;
  rusage usage_after;
  getrusage(RUSAGE_SELF, &usage_after);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  result.cpu_user_s = seconds(usage_after.ru_utime) - seconds(usage_before.ru_utime);
  result.cpu_sys_s = seconds(usage_after.ru_stime) - seconds(usage_before.ru_stime);
  result.store = Delta(before, db->GetStats());
  for (const auto& client : clients) {
    for (int t = 0; t < kOpTypes; ++t) {
      result.latency[t].Merge(client->latency()[t]);
      result.failures[t] += client->failures()[t];
    }
    result.operations += client->operations();
    if (result.first_error.empty()) result.first_error = client->first_error();
  }
  for (const absl::Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return result;
}

}  // namespace

absl::StatusOr<PhaseResult> RunLoad(Store* db, const WorkloadConfig& config,
                                    const ClientOptions& options, SharedCounters* counters) {
  return RunPhase(db, config, options, counters, /*load=*/true);
}

absl::StatusOr<PhaseResult> RunTransactions(Store* db, const WorkloadConfig& config,
                                            const ClientOptions& options,
                                            SharedCounters* counters) {
  return RunPhase(db, config, options, counters, /*load=*/false);
}

}  // namespace nvkv::ycsb
