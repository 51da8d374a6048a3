// nvkv-iobench: raw I/O throughput and latency of one storage::Device queue, in the spirit of
// fio's t/io_uring. It keeps `--iodepth` requests in flight on one thread and reports IOPS,
// bandwidth, I/Os per system call and latency percentiles, so the Device seam (RingDevice over
// io_uring, the sync fallback, later NVMe passthrough) can be held against fio on the same file.
//
// The hot loop (Runner::Run) follows t/io_uring's submitter: requests are prepared once at start;
// each turn reaps at least `--reap-batch` completions and refills every freed request right away,
// pushing them `--submit-batch` at a time; the last batch of a turn goes out with the next Reap,
// in the same io_uring_enter that waits (submit-and-wait). The default batch is 1, as fio's
// iodepth_batch_submit: on the virtio-blk disk this was tuned on, requests handed to the device
// one by one finish sooner than bursts of ten or more (bench/README.md, "Submit batching").
// Per I/O there is no allocation, no data generation (write buffers are filled once) and one
// PRNG step; clocks are read once per reap and once per refill, not per request.
//
// Thread contract: single-threaded; the process's one thread is the device's issuing thread.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "storage/base/align.h"
#include "storage/device.h"
#include "util/json_writer.h"
#include "util/latency_histogram.h"
#include "util/size_parse.h"

namespace nvkv::bench {
namespace {

using storage::Device;
using storage::IoOp;
using storage::IoRequest;
using util::LatencyHistogram;

constexpr uint32_t kMaxIodepth = 4096;  // storage::RingOptions::queue_depth limit
constexpr uint64_t kNsPerSecond = 1'000'000'000;

enum class Pattern : uint8_t { kRandRead, kRandWrite, kSeqRead, kSeqWrite, kZoneAppend };

struct BenchOptions {
  std::string filename;
  Pattern pattern = Pattern::kRandRead;
  uint32_t block_bytes = 4096;
  uint32_t iodepth = 1;
  uint64_t runtime_ns = 10 * kNsPerSecond;
  bool runtime_given = false;
  uint64_t number_ios = 0;      // 0: no limit; else stop after issuing this many
  uint64_t size_bytes = 0;      // 0: the whole existing file
  uint32_t submit_batch = 1;    // requests per Submit (fio's iodepth_batch_submit)
  uint32_t reap_batch = 1;      // min completions per Reap
  bool fixed_buffers = true;
  bool sqpoll = false;
  bool iopoll = false;
  bool single_issuer = true;
  bool register_files = true;
  bool register_ring = true;
  storage::Backend backend = storage::Backend::kAuto;
  bool json = false;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  uint32_t zones = 0;  // zoneappend: zones appended to at once; 0: the device's open limit
};

const char kUsage[] =
    "Usage: nvkv-iobench --filename=PATH [options]\n"
    "\n"
    "Drives one nvkv storage::Device queue like fio's t/io_uring and reports IOPS, bandwidth,\n"
    "I/Os per system call and latency.\n"
    "\n"
    "  --filename=PATH        file or block device (a file is created at --size if missing)\n"
    "  --rw=MODE              randread (default) | randwrite | read | write | zoneappend\n"
    "                         (zoneappend: Zone Append on a zoned namespace's /dev/ngXnY, into\n"
    "                         --zones zones reset first, round robin, until they are full)\n"
    "  --zones=N              zoneappend: zones at once (default: the device's open limit, or 4)\n"
    "  --bs=N                 block size, multiple of the device LBA size (default 4k)\n"
    "  --iodepth=N            requests in flight (default 1, max 4096)\n"
    "  --runtime=T            run time: 10, 10s, 500ms, 2m (default 10s)\n"
    "  --number-ios=N         stop after N I/Os (then no time limit unless --runtime given);\n"
    "                         e.g. --rw=write --bs=128k --number-ios=SIZE/128k writes a file once\n"
    "  --size=N               bytes of the file to use / to create (default: whole file)\n"
    "  --submit-batch=N       requests queued per Submit (default 1, as fio); the last batch\n"
    "                         of a refill goes out with the next Reap's wait (one syscall)\n"
    "  --reap-batch=N         min completions per Reap (default 1)\n"
    "  --fixedbufs=0|1        registered buffers (default 1)\n"
    "  --sqpoll[=0|1]         kernel SQ polling thread (default 0)\n"
    "  --iopoll[=0|1]         polled completions, needs NVMe poll queues (default 0)\n"
    "  --single-issuer=0|1    SINGLE_ISSUER + DEFER_TASKRUN (default 1)\n"
    "  --register-files=0|1   fixed file table (default 1)\n"
    "  --register-ring=0|1    registered ring fd (default 1)\n"
    "  --backend=KIND         auto (default) | direct | sync | nvme\n"
    "  --output-format=FMT    normal (default) | json (one JSON object on stdout)\n"
    "  --seed=N               PRNG seed for random offsets\n"
    "  --help                 this text\n"
    "  --version              print the version\n"
    "\n"
    "Sizes take k, m, g, t suffixes (powers of 1024, as fio). Exit status: 0 ok, 1 run failed,\n"
    "2 bad options.\n";

// ---------------------------------------------------------------------------------------------
// Option parsing: plain, no libraries. Every error names the option and the bad value.

absl::Status BadOption(std::string_view name, std::string_view value, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", std::string(name), "=", std::string(value), ": ", std::string(why)));
}

// "10" or "10s" (seconds), "500ms", "2m" -> nanoseconds.
bool ParseDuration(std::string_view text, uint64_t* ns) {
  uint64_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data()) return false;
  const std::string_view suffix(end, text.data() + text.size() - end);
  uint64_t unit;
  if (suffix.empty() || suffix == "s") {
    unit = kNsPerSecond;
  } else if (suffix == "ms") {
    unit = kNsPerSecond / 1000;
  } else if (suffix == "m") {
    unit = 60 * kNsPerSecond;
  } else {
    return false;
  }
  if (number > UINT64_MAX / unit) return false;
  *ns = number * unit;
  return true;
}

bool ParseUint(std::string_view text, uint64_t* value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

absl::Status ParseFlag(std::string_view name, std::string_view value, bool* flag) {
  if (value == "1") {
    *flag = true;
  } else if (value == "0") {
    *flag = false;
  } else {
    return BadOption(name, value, "expected 0 or 1");
  }
  return absl::OkStatus();
}

absl::Status ParseCount(std::string_view name, std::string_view value, uint64_t max,
                        uint32_t* count) {
  uint64_t parsed = 0;
  if (!ParseUint(value, &parsed) || parsed == 0 || parsed > max) {
    return BadOption(name, value, absl::StrCat("expected a whole number from 1 to ", max));
  }
  *count = static_cast<uint32_t>(parsed);
  return absl::OkStatus();
}

// Options that may be given bare (--sqpoll) and then mean 1.
bool IsBareFlag(std::string_view name) { return name == "sqpoll" || name == "iopoll"; }

absl::Status ApplyOption(std::string_view name, std::string_view value, BenchOptions* options) {
  if (name == "filename") {
    if (value.empty()) return BadOption(name, value, "empty path");
    options->filename = std::string(value);
  } else if (name == "rw" || name == "readwrite") {
    if (value == "randread") options->pattern = Pattern::kRandRead;
    else if (value == "randwrite") options->pattern = Pattern::kRandWrite;
    else if (value == "read") options->pattern = Pattern::kSeqRead;
    else if (value == "write") options->pattern = Pattern::kSeqWrite;
    else if (value == "zoneappend") options->pattern = Pattern::kZoneAppend;
    else return BadOption(name, value, "expected randread, randwrite, read, write or zoneappend");
  } else if (name == "bs") {
    absl::StatusOr<uint64_t> bytes = util::ParseSize(value);
    if (!bytes.ok()) return BadOption(name, value, std::string(bytes.status().message()));
    if (*bytes < 512 || *bytes > storage::kMaxRegisteredBytes || *bytes % 512 != 0) {
      return BadOption(name, value, absl::StrCat("expected a multiple of 512 bytes up to ",
                                                 storage::kMaxRegisteredBytes / 1024, "k"));
    }
    options->block_bytes = static_cast<uint32_t>(*bytes);
  } else if (name == "iodepth") {
    return ParseCount(name, value, kMaxIodepth, &options->iodepth);
  } else if (name == "runtime") {
    if (!ParseDuration(value, &options->runtime_ns) || options->runtime_ns == 0) {
      return BadOption(name, value, "expected a positive duration such as 10, 10s, 500ms, 2m");
    }
    options->runtime_given = true;
  } else if (name == "number-ios" || name == "number_ios") {
    if (!ParseUint(value, &options->number_ios) || options->number_ios == 0) {
      return BadOption(name, value, "expected a positive count");
    }
  } else if (name == "size") {
    absl::StatusOr<uint64_t> bytes = util::ParsePositiveSize(value);
    if (!bytes.ok()) return BadOption(name, value, std::string(bytes.status().message()));
    options->size_bytes = *bytes;
  } else if (name == "submit-batch") {
    return ParseCount(name, value, kMaxIodepth, &options->submit_batch);
  } else if (name == "reap-batch") {
    return ParseCount(name, value, kMaxIodepth, &options->reap_batch);
  } else if (name == "fixedbufs") {
    return ParseFlag(name, value, &options->fixed_buffers);
  } else if (name == "sqpoll") {
    return ParseFlag(name, value, &options->sqpoll);
  } else if (name == "iopoll" || name == "hipri") {
    return ParseFlag(name, value, &options->iopoll);
  } else if (name == "single-issuer") {
    return ParseFlag(name, value, &options->single_issuer);
  } else if (name == "register-files" || name == "registerfiles") {
    return ParseFlag(name, value, &options->register_files);
  } else if (name == "register-ring") {
    return ParseFlag(name, value, &options->register_ring);
  } else if (name == "backend") {
    if (value == "auto") options->backend = storage::Backend::kAuto;
    else if (value == "direct") options->backend = storage::Backend::kDirectFile;
    else if (value == "sync") options->backend = storage::Backend::kSyncFile;
    else if (value == "nvme") options->backend = storage::Backend::kNvmePassthrough;
    else return BadOption(name, value, "expected auto, direct, sync or nvme");
  } else if (name == "output-format") {
    if (value == "json") options->json = true;
    else if (value == "normal") options->json = false;
    else return BadOption(name, value, "expected normal or json");
  } else if (name == "zones") {
    return ParseCount(name, value, UINT32_MAX, &options->zones);
  } else if (name == "seed") {
    if (!ParseUint(value, &options->seed)) return BadOption(name, value, "expected a number");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown option --", std::string(name), " (see --help)"));
  }
  return absl::OkStatus();
}

// Accepts --name=value and --name value. Returns false (after printing usage) for --help, and
// after printing the version for --version.
absl::StatusOr<bool> ParseOptions(int argc, char** argv, BenchOptions* options) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return false;
    }
    if (arg == "--version") {
      std::printf("nvkv-iobench %s\n", NVKV_VERSION_STRING);
      return false;
    }
    if (arg.substr(0, 2) != "--" || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", std::string(arg), "'"));
    }
    arg.remove_prefix(2);
    std::string_view name = arg;
    std::string_view value;
    const size_t equals = arg.find('=');
    if (equals != std::string_view::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    } else if (IsBareFlag(name) &&
               (i + 1 == argc || (std::strcmp(argv[i + 1], "0") != 0 &&
                                  std::strcmp(argv[i + 1], "1") != 0))) {
      value = "1";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", std::string(name), " needs a value"));
    }
    absl::Status applied = ApplyOption(name, value, options);
    if (!applied.ok()) return applied;
  }
  if (options->filename.empty()) return absl::InvalidArgumentError("--filename is required");
  if (options->number_ios != 0 && !options->runtime_given) options->runtime_ns = UINT64_MAX / 4;
  if (options->submit_batch > options->iodepth) {
    return absl::InvalidArgumentError(absl::StrCat("--submit-batch=", options->submit_batch,
                                                   " exceeds --iodepth=", options->iodepth));
  }
  if (options->reap_batch > options->iodepth) {
    return absl::InvalidArgumentError(absl::StrCat("--reap-batch=", options->reap_batch,
                                                   " exceeds --iodepth=", options->iodepth));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Measurement helpers.

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kNsPerSecond + static_cast<uint64_t>(ts.tv_nsec);
}

// xorshift64*: one multiply per offset; quality is ample for spreading offsets over a file.
class Prng {
 public:
  explicit Prng(uint64_t seed) : state_(seed != 0 ? seed : 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dull;
  }
  // Uniform in [0, bound) without a division (Lemire's multiply-shift).
  uint64_t Below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// ---------------------------------------------------------------------------------------------
// The run.

struct Summary {
  uint64_t ios = 0;
  uint64_t errors = 0;
  std::string first_error;
  double elapsed_s = 0;
  uint64_t completions = 0;     // IoStats over the measured window
  uint64_t enter_syscalls = 0;
  uint64_t reap_calls = 0;
  double cpu_user_s = 0;
  double cpu_sys_s = 0;
  uint64_t context_switches = 0;
  std::vector<std::string> notes;  // the bench's own, printed after the device's
};

class Runner;

// One request slot: the request the device holds plus the bench's bookkeeping for it.
struct Slot {
  IoRequest request;
  Runner* runner = nullptr;  // borrowed; outlives every slot
  uint64_t issue_ns = 0;
};

class Runner {
 public:
  Runner(const BenchOptions& options, Device* device)
      : options_(options), device_(device), prng_(options.seed) {}

  absl::Status Setup(std::vector<std::string>* notes);
  absl::Status Run(Summary* summary);
  const LatencyHistogram& histogram() const { return histogram_; }

 private:
  static void OnIoDone(IoRequest* request);
  // zoneappend: the zones to append to, reset; the appends they take.
  absl::Status SetupZones(std::vector<std::string>* notes);
  void NextOffset(Slot* slot);
  absl::Status Issue(Slot* slot, uint32_t* unsubmitted);
  absl::Status Refill();
  void MaybeReport(uint64_t now_ns);

  const BenchOptions& options_;
  Device* device_;  // borrowed; outlives the runner
  Prng prng_;
  IoOp op_ = IoOp::kRead;
  bool random_ = true;
  uint32_t lba_per_io_ = 0;
  uint64_t blocks_ = 0;         // whole bs-sized blocks in the used region
  uint64_t next_block_ = 0;     // sequential patterns
  uint32_t zones_ = 0;          // zoneappend: zones 0..zones_-1 take the appends in turn
  uint64_t issued_ = 0;
  uint64_t issue_limit_ = UINT64_MAX;
  std::vector<Slot> slots_;     // sized at Setup, never resized (requests point into it)
  std::vector<Slot*> free_;     // capacity iodepth; slots whose callback has run
  uint32_t free_count_ = 0;
  bool measuring_ = true;
  uint64_t reap_now_ns_ = 0;    // clock read by the first callback of a reap, 0 before
  uint64_t ios_ = 0;
  uint64_t errors_ = 0;
  std::string first_error_;
  LatencyHistogram histogram_;
  // Per-second report state.
  uint64_t start_ns_ = 0;
  uint64_t next_report_ns_ = 0;
  uint64_t last_report_ns_ = 0;
  uint64_t last_ios_ = 0;
  uint64_t last_completed_ = 0;
  uint64_t last_syscalls_ = 0;
};

absl::Status Runner::SetupZones(std::vector<std::string>* notes) {
  const storage::DeviceInfo& info = device_->info();
  const storage::ZoneModel& zones = info.zones;
  if (!zones.zoned()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rw=zoneappend needs a zoned namespace's generic device (/dev/ngXnY); ", info.path,
        " has no zones"));
  }
  if (zones.max_append_blocks != 0 && lba_per_io_ > zones.max_append_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("--bs=", options_.block_bytes, ": ",
                                                   info.path, " appends at most ",
                                                   zones.max_append_blocks * info.lba_bytes,
                                                   " bytes at once"));
  }
  zones_ = options_.zones != 0 ? options_.zones : (zones.max_open != 0 ? zones.max_open : 4);
  if (zones_ > zones.zone_count) {
    return absl::InvalidArgumentError(absl::StrCat("--zones=", zones_, ": ", info.path,
                                                   " has ", zones.zone_count));
  }
  std::vector<IoRequest> resets(zones_);
  for (uint32_t z = 0; z < zones_; ++z) {
    resets[z].op = IoOp::kZoneReset;
    resets[z].lba = zones.StartOf(z);
  }
  absl::Status reset = storage::RunAll(*device_, resets);
  for (const IoRequest& request : resets) {
    if (reset.ok()) reset = request.status;
  }
  if (!reset.ok()) return reset;
  const uint64_t appends = uint64_t{zones_} * (zones.capacity_blocks / lba_per_io_);
  issue_limit_ = std::min(issue_limit_, appends);
  notes->push_back(absl::StrCat("zone append into zones 0..", zones_ - 1, " (reset first) of ",
                                zones.capacity_blocks * info.lba_bytes / (1 << 20),
                                " MiB capacity each, in turn: at most ", appends, " appends"));
  return absl::OkStatus();
}

absl::Status Runner::Setup(std::vector<std::string>* notes) {
  const storage::DeviceInfo& info = device_->info();
  if (options_.block_bytes % info.lba_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--bs=", options_.block_bytes,
                                                   " is not a multiple of the LBA size ",
                                                   info.lba_bytes, " of ", info.path));
  }
  const uint64_t region =
      options_.size_bytes != 0 ? std::min(options_.size_bytes, info.capacity_bytes())
                               : info.capacity_bytes();
  blocks_ = region / options_.block_bytes;
  if (blocks_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(info.path, " holds no whole block of ",
                                                   options_.block_bytes, " bytes"));
  }
  lba_per_io_ = options_.block_bytes / info.lba_bytes;
  op_ = options_.pattern == Pattern::kZoneAppend ? IoOp::kZoneAppend
        : (options_.pattern == Pattern::kRandWrite || options_.pattern == Pattern::kSeqWrite)
            ? IoOp::kWrite
            : IoOp::kRead;
  random_ = options_.pattern == Pattern::kRandRead || options_.pattern == Pattern::kRandWrite;
  if (options_.number_ios != 0) issue_limit_ = options_.number_ios;
  if (op_ == IoOp::kZoneAppend) {
    absl::Status zones = SetupZones(notes);
    if (!zones.ok()) return zones;
  }
  slots_.resize(options_.iodepth);
  free_.assign(options_.iodepth, nullptr);
  Prng fill(options_.seed ^ 0x5bd1e995);
  for (Slot& slot : slots_) {
    slot.runner = this;
    slot.request.op = op_;
    slot.request.lba_count = lba_per_io_;
    slot.request.on_done = &Runner::OnIoDone;
    slot.request.context = &slot;
    // MakeDeviceOptions gave the pool either one page or one chunk per slot.
    const bool chunks = device_->buffers().page_count() == 0;
    slot.request.buffer = chunks ? device_->buffers().GetChunk() : device_->buffers().GetPage();
    if (!slot.request.buffer.valid()) return absl::InternalError("buffer pool too small");
    if (op_ != IoOp::kRead) {  // fill once: incompressible, never regenerated per I/O
      for (uint32_t i = 0; i + 8 <= options_.block_bytes; i += 8) {
        const uint64_t word = fill.Next();
        std::memcpy(slot.request.buffer.data + i, &word, 8);
      }
    }
    free_[free_count_++] = &slot;
  }
  return absl::OkStatus();
}

// Runs on the issuing thread inside Device::Reap: record, free the slot, nothing else.
void Runner::OnIoDone(IoRequest* request) {
  Slot* slot = static_cast<Slot*>(request->context);
  Runner* runner = slot->runner;
  if (runner->measuring_) {
    if (runner->reap_now_ns_ == 0) runner->reap_now_ns_ = NowNs();
    runner->histogram_.Record(runner->reap_now_ns_ - slot->issue_ns);
    ++runner->ios_;
    if (!request->status.ok()) {
      if (runner->errors_++ == 0) runner->first_error_ = request->status.ToString();
    }
  }
  runner->free_[runner->free_count_++] = slot;
}

void Runner::NextOffset(Slot* slot) {
  if (op_ == IoOp::kZoneAppend) {  // the zone only: the device picks the place
    slot->request.lba = device_->info().zones.StartOf((issued_ - 1) % zones_);
    return;
  }
  uint64_t block;
  if (random_) {
    block = prng_.Below(blocks_);
  } else {
    block = next_block_;
    if (++next_block_ == blocks_) next_block_ = 0;
  }
  slot->request.lba = block * lba_per_io_;
}

absl::Status Runner::Issue(Slot* slot, uint32_t* unsubmitted) {
  NextOffset(slot);
  absl::Status queued = device_->Enqueue(&slot->request);
  if (!queued.ok()) return queued;
  // A full batch goes out now only when more refills follow it; the last batch rides with the
  // next Reap, whose io_uring_enter then both submits and waits (t/io_uring's submit-and-wait).
  if (++*unsubmitted == options_.submit_batch && free_count_ > 0 && issued_ < issue_limit_) {
    absl::StatusOr<uint32_t> pushed = device_->Submit();
    if (!pushed.ok()) return pushed.status();
    *unsubmitted = 0;
  }
  return absl::OkStatus();
}

// Puts every free slot back in flight: full --submit-batch batches are pushed by Submit, the
// last one by the next Reap together with its wait.
absl::Status Runner::Refill() {
  const uint64_t now = reap_now_ns_ != 0 ? reap_now_ns_ : NowNs();
  uint32_t unsubmitted = 0;
  while (free_count_ > 0 && issued_ < issue_limit_) {
    ++issued_;
    Slot* slot = free_[--free_count_];
    slot->issue_ns = now;
    absl::Status issued = Issue(slot, &unsubmitted);
    if (!issued.ok()) return issued;
  }
  return absl::OkStatus();
}

void Runner::MaybeReport(uint64_t now_ns) {
  if (options_.json || now_ns < next_report_ns_) return;
  const storage::IoStats& stats = device_->stats();
  const double seconds = static_cast<double>(now_ns - last_report_ns_) / kNsPerSecond;
  const uint64_t ios = ios_ - last_ios_;
  const uint64_t syscalls = stats.enter_syscalls - last_syscalls_;
  const uint64_t completed = stats.requests_completed - last_completed_;
  std::printf("[%4.0fs] IOPS=%.0f BW=%.1fMiB/s IOS/call=%.2f\n",
              static_cast<double>(now_ns - start_ns_) / kNsPerSecond, ios / seconds,
              static_cast<double>(ios) * options_.block_bytes / seconds / (1 << 20),
              syscalls == 0 ? 0.0 : static_cast<double>(completed) / syscalls);
  std::fflush(stdout);
  last_report_ns_ = now_ns;
  last_ios_ = ios_;
  last_syscalls_ = stats.enter_syscalls;
  last_completed_ = stats.requests_completed;
  next_report_ns_ += kNsPerSecond;
}

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

absl::Status Runner::Run(Summary* summary) {
  const storage::IoStats& stats = device_->stats();
  const storage::IoStats before = stats;
  rusage usage_before;
  getrusage(RUSAGE_SELF, &usage_before);
  start_ns_ = last_report_ns_ = NowNs();
  next_report_ns_ = start_ns_ + kNsPerSecond;
  const uint64_t deadline_ns = start_ns_ + options_.runtime_ns;
  uint64_t now = start_ns_;
  absl::Status status = Refill();
  // Like fio without continue_on_error, the first failed I/O ends the run.
  while (status.ok() && errors_ == 0 && now < deadline_ns && g_stop == 0 &&
         device_->in_flight() > 0) {
    reap_now_ns_ = 0;
    absl::StatusOr<uint32_t> reaped = device_->Reap(options_.reap_batch);
    if (!reaped.ok()) {
      status = reaped.status();
      break;
    }
    now = reap_now_ns_ != 0 ? reap_now_ns_ : NowNs();
    if (now >= deadline_ns) break;
    status = Refill();
    MaybeReport(now);
  }
  const uint64_t end_ns = std::min(now, deadline_ns);
  measuring_ = false;
  summary->completions = stats.requests_completed - before.requests_completed;
  summary->enter_syscalls = stats.enter_syscalls - before.enter_syscalls;
  summary->reap_calls = stats.reap_calls - before.reap_calls;
  rusage usage_after;
  getrusage(RUSAGE_SELF, &usage_after);
  summary->cpu_user_s = Seconds(usage_after.ru_utime) - Seconds(usage_before.ru_utime);
  summary->cpu_sys_s = Seconds(usage_after.ru_stime) - Seconds(usage_before.ru_stime);
  summary->context_switches = (usage_after.ru_nvcsw + usage_after.ru_nivcsw) -
                              (usage_before.ru_nvcsw + usage_before.ru_nivcsw);
  // Drain: the kernel must be done with every buffer before the device goes away.
  while (device_->in_flight() > 0) {
    absl::StatusOr<uint32_t> reaped = device_->Reap(device_->in_flight());
    if (!reaped.ok()) {
      if (status.ok()) status = reaped.status();
      break;
    }
  }
  summary->ios = ios_;
  summary->errors = errors_;
  summary->first_error = first_error_;
  summary->elapsed_s = static_cast<double>(end_ns - start_ns_) / kNsPerSecond;
  return status;
}

// ---------------------------------------------------------------------------------------------
// Output.

const char* PatternName(Pattern pattern) {
  switch (pattern) {
    case Pattern::kRandRead: return "randread";
    case Pattern::kRandWrite: return "randwrite";
    case Pattern::kSeqRead: return "read";
    case Pattern::kSeqWrite: return "write";
    case Pattern::kZoneAppend: return "zoneappend";
  }
  return "unknown";
}

// One object over seven lines (bench/README.md shows it); bench/compare_fio.sh reads "iops".
void PrintJson(const BenchOptions& options, const storage::DeviceInfo& info,
               const Summary& summary, const LatencyHistogram& latency) {
  constexpr util::JsonObject::Style kSpaced = util::JsonObject::Style::kSpaced;
  const storage::RingFeatures& ring = info.ring;
  const double iops = summary.elapsed_s > 0 ? summary.ios / summary.elapsed_s : 0;
  util::JsonObject json(kSpaced);
  json.Add("tool", "nvkv-iobench")
      .Add("filename", info.path)
      .Add("backend", storage::DeviceKindName(info.kind))
      .Add("rw", PatternName(options.pattern))
      .Add("bs", options.block_bytes)
      .Add("iodepth", options.iodepth)
      .Add("submit_batch", options.submit_batch)
      .Add("reap_batch", options.reap_batch)
      .Add("lba_bytes", info.lba_bytes);
  json.BreakLine()
      .AddFixed("iops", iops, 1)
      .AddFixed("bw_bytes", iops * options.block_bytes, 0)
      .Add("ios", summary.ios)
      .Add("errors", summary.errors)
      .AddFixed("runtime_s", summary.elapsed_s, 3);
  json.BreakLine()
      .AddFixed("ios_per_syscall",
                summary.enter_syscalls == 0
                    ? 0.0
                    : static_cast<double>(summary.completions) / summary.enter_syscalls,
                3)
      .Add("enter_syscalls", summary.enter_syscalls)
      .Add("reap_calls", summary.reap_calls);
  util::JsonObject lat(kSpaced);
  lat.AddFixed("mean", latency.mean_ns(), 0)
      .Add("p50", latency.Percentile(0.50))
      .Add("p90", latency.Percentile(0.90))
      .Add("p99", latency.Percentile(0.99))
      .Add("p99_9", latency.Percentile(0.999))
      .Add("max", latency.max_ns());
  json.BreakLine().AddRaw("lat_ns", lat.Finish());
  util::JsonObject cpu(kSpaced);
  cpu.AddFixed("user_s", summary.cpu_user_s, 3)
      .AddFixed("sys_s", summary.cpu_sys_s, 3)
      .Add("context_switches", summary.context_switches);
  json.BreakLine().AddRaw("cpu", cpu.Finish());
  util::JsonObject features(kSpaced);
  features.Add("queue_depth", ring.queue_depth)
      .Add("sq_entries", ring.sq_entries)
      .Add("single_issuer", ring.single_issuer)
      .Add("defer_taskrun", ring.defer_taskrun)
      .Add("coop_taskrun", ring.coop_taskrun)
      .Add("registered_ring_fd", ring.registered_ring_fd)
      .Add("registered_file", ring.registered_file)
      .Add("fixed_buffers", ring.fixed_buffers)
      .Add("sqpoll", ring.sqpoll)
      .Add("iopoll", ring.iopoll);
  json.BreakLine().AddRaw("ring", features.Finish());
  std::vector<std::string> notes = info.notes;
  notes.insert(notes.end(), summary.notes.begin(), summary.notes.end());
  if (!summary.first_error.empty()) notes.push_back("first I/O error: " + summary.first_error);
  json.BreakLine().AddStrings("notes", notes);
  std::printf("%s\n", json.Finish().c_str());
}

void PrintNormal(const BenchOptions& options, const storage::DeviceInfo& info,
                 const Summary& summary, const LatencyHistogram& latency) {
  const double iops = summary.elapsed_s > 0 ? summary.ios / summary.elapsed_s : 0;
  std::printf("\n%s %s bs=%u iodepth=%u on %s (%s): %llu I/Os in %.2fs, %llu errors\n",
              "nvkv-iobench", PatternName(options.pattern), options.block_bytes, options.iodepth,
              info.path.c_str(), storage::DeviceKindName(info.kind),
              static_cast<unsigned long long>(summary.ios), summary.elapsed_s,
              static_cast<unsigned long long>(summary.errors));
  std::printf("  IOPS=%.0f BW=%.1fMiB/s IOS/call=%.2f (%llu enter syscalls)\n", iops,
              iops * options.block_bytes / (1 << 20),
              summary.enter_syscalls == 0
                  ? 0.0
                  : static_cast<double>(summary.completions) / summary.enter_syscalls,
              static_cast<unsigned long long>(summary.enter_syscalls));
  std::printf("  lat (us): avg=%.1f p50=%.1f p90=%.1f p99=%.1f p99.9=%.1f max=%.1f\n",
              latency.mean_ns() / 1e3, latency.Percentile(0.50) / 1e3,
              latency.Percentile(0.90) / 1e3, latency.Percentile(0.99) / 1e3,
              latency.Percentile(0.999) / 1e3, latency.max_ns() / 1e3);
  std::printf("  cpu: user=%.2fs sys=%.2fs ctx=%llu\n", summary.cpu_user_s, summary.cpu_sys_s,
              static_cast<unsigned long long>(summary.context_switches));
  const storage::RingFeatures& ring = info.ring;
  std::printf("  ring: sq_entries=%u single_issuer=%d defer_taskrun=%d coop_taskrun=%d "
              "reg_ring=%d reg_file=%d fixedbufs=%d sqpoll=%d iopoll=%d\n",
              ring.sq_entries, ring.single_issuer, ring.defer_taskrun, ring.coop_taskrun,
              ring.registered_ring_fd, ring.registered_file, ring.fixed_buffers, ring.sqpoll,
              ring.iopoll);
  for (const std::string& note : info.notes) std::printf("  note: %s\n", note.c_str());
  for (const std::string& note : summary.notes) std::printf("  note: %s\n", note.c_str());
  if (!summary.first_error.empty()) {
    std::printf("  first I/O error: %s\n", summary.first_error.c_str());
  }
}

storage::DeviceOptions MakeDeviceOptions(const BenchOptions& options) {
  storage::DeviceOptions device;
  device.backend = options.backend;
  // An explicit io_uring backend must measure io_uring or fail, never fall back silently.
  device.allow_sync_fallback = options.backend == storage::Backend::kAuto;
  device.create_bytes = options.size_bytes;
  device.min_bytes = options.size_bytes;
  device.ring.queue_depth = options.iodepth;
  device.ring.fixed_buffers = options.fixed_buffers;
  device.ring.sqpoll = options.sqpoll;
  device.ring.iopoll = options.iopoll;
  device.ring.single_issuer = options.single_issuer;
  device.ring.register_file = options.register_files;
  device.ring.register_ring_fd = options.register_ring;
  if (options.pattern == Pattern::kZoneAppend) {
    device.zoned_access = storage::ZonedAccess::kGenericNodeOnly;
  }
  // One buffer per request: pages when bs is a power of two, else whole chunks (508 KiB).
  if (IsPowerOfTwo(options.block_bytes)) {
    device.buffers.buffer_bytes = std::max<uint32_t>(options.block_bytes, 512);
    device.buffers.buffer_count = options.iodepth;
    device.buffers.chunk_count = 0;
  } else {
    device.buffers.buffer_count = 0;
    device.buffers.chunk_count = options.iodepth;
  }
  return device;
}

int Main(int argc, char** argv) {
  BenchOptions options;
  absl::StatusOr<bool> parsed = ParseOptions(argc, argv, &options);
  if (!parsed.ok()) {
    std::fprintf(stderr, "nvkv-iobench: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (!*parsed) return 0;
  struct stat st;
  const bool existed = stat(options.filename.c_str(), &st) == 0;
  auto device = storage::OpenDevice(options.filename, MakeDeviceOptions(options));
  if (!device.ok()) {
    std::fprintf(stderr, "nvkv-iobench: %s\n", device.status().ToString().c_str());
    return 1;
  }
  Runner runner(options, device->get());
  Summary summary;
  absl::Status setup = runner.Setup(&summary.notes);
  if (!setup.ok()) {
    std::fprintf(stderr, "nvkv-iobench: %s\n", setup.ToString().c_str());
    return absl::IsInvalidArgument(setup) ? 2 : 1;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (!existed) {
    summary.notes.push_back(
        "file created (fallocated): blocks never written read back as zeros without device "
        "I/O; write the file once (--rw=write) before measuring reads");
  }
  absl::Status run = runner.Run(&summary);
  if (options.json) {
    PrintJson(options, (*device)->info(), summary, runner.histogram());
  } else {
    PrintNormal(options, (*device)->info(), summary, runner.histogram());
  }
  if (!run.ok()) {
    std::fprintf(stderr, "nvkv-iobench: %s\n", run.ToString().c_str());
    return 1;
  }
  if (summary.errors != 0) {
    std::fprintf(stderr, "nvkv-iobench: stopped at the first I/O error: %s\n",
                 summary.first_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace nvkv::bench

int main(int argc, char** argv) { return nvkv::bench::Main(argc, argv); }
