#include "bench/ycsb/cli.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace nvkv::ycsb {
namespace {

const char kUsage[] =
    "Usage: nvkv-ycsb [-load | -run | -t] -P WORKLOAD_FILE [-P ...] [-p name=value]...\n"
    "                 [-threads T] [--db PATH] [--keep] [--json] [--svg FILE] [--quiet]\n"
    "\n"
    "Runs a YCSB core workload (A-F, see bench/ycsb/workloads/) against an nvkv store.\n"
    "With neither -load nor -run, loads the store and then runs the workload.\n"
    "\n"
    "  -P FILE        YCSB property file (several allowed, later ones win)\n"
    "  -p NAME=VALUE  property override (beats -P whatever the order)\n"
    "  -threads T     client threads (default 1; also -p threadcount=T)\n"
    "  -s             accepted for YCSB compatibility (status is always on; see --quiet)\n"
    "  --db PATH      store path (default ./nvkv-ycsb.db); removed and re-created by a load\n"
    "  --keep         load into the existing store instead of re-creating it\n"
    "  --json         one JSON object per phase on stdout (tables go to stderr)\n"
    "  --svg FILE     write the latency percentile curves of every operation as SVG\n"
    "  --quiet        no per-second status line on stderr\n"
    "  --version      print the version and exit\n"
    "  --engine E     nvkv (default), or a peer built in from Debian's packages for\n"
    "                 side-by-side runs: rocksdb, lmdb (--db is then a directory; one\n"
    "                 operation at a time per thread; nvkv.cache is the peer's cache too,\n"
    "                 RocksDB's block cache; nvkv.capacity LMDB's map size)\n"
    "\n"
    "nvkv properties: nvkv.queuedepth (default 1), nvkv.submitbatch (0), nvkv.reapbatch (1),\n"
    "nvkv.durable (true), "
    "nvkv.load.durable (false; the load ends with a Flush), nvkv.capacity (3x the data,\n"
    "min 256m), "
"nvkv.index=auto|hash|ordered, nvkv.shards, nvkv.page_bytes (a new store's; 4096),\n"
    "nvkv.backend=auto|direct|sync|nvme,\n"
    "nvkv.max_write_delay_us, nvkv.durable_writes=auto|fua|flush, nvkv.single_issuer,\n"
    "nvkv.cache (record cache bytes, default\n"
    "32m; 0 off), nvkv.recovery_memory (bytes for recovery's tables after a crash; default\n"
    "0: from the memory limits), nvkv.checkpoint_log_ratio and nvkv.checkpoint_min_log\n"
    "(checkpoints while running: Options::checkpoint_log_ratio, 8, and checkpoint_min_log_bytes,\n"
    "64m), nvkv.seed; warmupoperationcount=N runs N operations of the\n"
    "mix before the run phase, unmeasured (reported as phase \"warmup\").\n"
    "Exit status: 0 ok, 1 failed, 2 bad usage, 3 some operations failed.\n";

struct NvkvSettings {
  uint32_t queue_depth = 1;
  uint32_t submit_batch = 0;
  uint32_t reap_batch = 1;
  bool durable = true;
  bool load_durable = false;
  uint64_t capacity_bytes = 0;
  IndexMode index_mode = IndexMode::kHash;
  Options options;
};

// The value the property `name` (default `fallback`) names among `choices`, or kInvalidArgument
// saying which words it takes ("NAME: expected a, b or c").
template <typename T>
absl::StatusOr<T> GetChoice(const Properties& p, const char* name, const char* fallback,
                            std::initializer_list<std::pair<const char*, T>> choices) {
  const std::string given = p.GetString(name, fallback);
  std::string expected;
  size_t i = 0;
  for (const auto& [word, value] : choices) {
    if (given == word) return value;
    absl::StrAppend(&expected, i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ", word);
    ++i;
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", expected));
}

absl::StatusOr<NvkvSettings> ReadNvkvSettings(const Properties& p, const WorkloadConfig& config) {
  NvkvSettings s;
#define NVKV_ASSIGN(lhs, expr)                    \
  do {                                            \
    auto assigned = (expr);                       \
    if (!assigned.ok()) return assigned.status(); \
    lhs = *assigned;                              \
  } while (0)
  uint64_t value = 0;
  NVKV_ASSIGN(value, p.GetUint("nvkv.queuedepth", 1));
  if (value == 0 || value > 4000) {
    return absl::InvalidArgumentError("nvkv.queuedepth: expected 1..4000");
  }
  s.queue_depth = static_cast<uint32_t>(value);
  NVKV_ASSIGN(value, p.GetUint("nvkv.submitbatch", 0));
  s.submit_batch = static_cast<uint32_t>(std::min<uint64_t>(value, s.queue_depth));
  NVKV_ASSIGN(value, p.GetUint("nvkv.reapbatch", 1));
  if (value == 0) return absl::InvalidArgumentError("nvkv.reapbatch: expected 1 or more");
  s.reap_batch = static_cast<uint32_t>(std::min<uint64_t>(value, s.queue_depth));
  NVKV_ASSIGN(s.durable, p.GetBool("nvkv.durable", true));
  NVKV_ASSIGN(s.load_durable, p.GetBool("nvkv.load.durable", false));
  // Room for every record the load and the run's inserts can write, three times over (dead
  // copies from updates and compaction's headroom), and never less than 256 MiB.
  const uint64_t records =
      config.insert_count +
      static_cast<uint64_t>(static_cast<double>(config.operation_count +
                                                config.warmup_operation_count) *
                            config.insert_proportion) +
      1;
  const uint64_t data = records * (config.ApproxRecordBytes() + 32);
  const uint64_t fallback = std::max<uint64_t>(256ull << 20, (3 * data + (1 << 20) - 1) &
                                                                 ~uint64_t{(1 << 20) - 1});
  NVKV_ASSIGN(s.capacity_bytes, p.GetBytes("nvkv.capacity", fallback));
  std::optional<IndexMode> index;  // nullopt: auto
  NVKV_ASSIGN(index, GetChoice<std::optional<IndexMode>>(
                         p, "nvkv.index", "auto",
                         {{"auto", std::nullopt},
                          {"hash", IndexMode::kHash},
                          {"ordered", IndexMode::kOrdered}}));
  s.index_mode = index.value_or(config.scan_proportion > 0 ? IndexMode::kOrdered
                                                           : IndexMode::kHash);
  if (config.scan_proportion > 0 && s.index_mode != IndexMode::kOrdered) {
    return absl::InvalidArgumentError("scans (scanproportion > 0) need nvkv.index=ordered");
  }
  Options& o = s.options;
  o.capacity_bytes = s.capacity_bytes;
  o.index_mode = s.index_mode;
  // GetAsync refuses reads beyond read_queue_depth; scans and hash-mode writes use the same
  // per-thread queue, so keep the engine's default as a floor.
  o.read_queue_depth = std::max<uint32_t>(s.queue_depth, o.read_queue_depth);
  o.write_queue_depth = std::max<uint32_t>(s.queue_depth, o.write_queue_depth);
  NVKV_ASSIGN(o.cache_bytes, p.GetBytes("nvkv.cache", o.cache_bytes));
  NVKV_ASSIGN(o.recovery_memory_bytes,
              p.GetBytes("nvkv.recovery_memory", o.recovery_memory_bytes));
  NVKV_ASSIGN(value, p.GetUint("nvkv.checkpoint_log_ratio", o.checkpoint_log_ratio));
  o.checkpoint_log_ratio = static_cast<uint32_t>(value);
  NVKV_ASSIGN(o.checkpoint_min_log_bytes,
              p.GetBytes("nvkv.checkpoint_min_log", o.checkpoint_min_log_bytes));
  NVKV_ASSIGN(value, p.GetUint("nvkv.shards", o.shard_count));
  o.shard_count = static_cast<uint32_t>(value);
  NVKV_ASSIGN(value, p.GetUint("nvkv.page_bytes", o.page_bytes));
  o.page_bytes = static_cast<uint32_t>(value);
  NVKV_ASSIGN(o.single_issuer, p.GetBool("nvkv.single_issuer", o.single_issuer));
  NVKV_ASSIGN(value, p.GetUint("nvkv.max_write_delay_us", o.max_write_delay_us));
  o.max_write_delay_us = static_cast<uint32_t>(value);
  NVKV_ASSIGN(o.durable_writes,
              GetChoice<DurableWrites>(p, "nvkv.durable_writes", "auto",
                                       {{"auto", DurableWrites::kAuto},
                                        {"fua", DurableWrites::kFua},
                                        {"flush", DurableWrites::kFlush}}));
  NVKV_ASSIGN(o.backend, GetChoice<Backend>(p, "nvkv.backend", "auto",
                                            {{"auto", Backend::kAuto},
                                             {"direct", Backend::kDirectFile},
                                             {"sync", Backend::kSyncFile},
                                             {"nvme", Backend::kNvmePassthrough}}));
#undef NVKV_ASSIGN
  return s;
}

// One /proc/diskstats line: the device holding `path` (st_dev of a file, st_rdev of a block
// device), as reads, sectors read, writes, sectors written, weighted ms doing I/O.
struct DiskSample {
  bool valid = false;
  std::string name;
  uint64_t reads = 0, read_sectors = 0, writes = 0, write_sectors = 0, weighted_ms = 0;
  uint64_t at_ns = 0;
};

DiskSample SampleDisk(const std::string& path) {
  DiskSample sample;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return sample;
  const dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
  std::ifstream in("/proc/diskstats");
  std::string line;
  while (std::getline(in, line)) {
    unsigned major_number = 0, minor_number = 0;
    char name[64] = {};
    unsigned long long f[11] = {};
    if (std::sscanf(line.c_str(),
                    "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                    &major_number, &minor_number, name, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                    &f[6], &f[7], &f[8], &f[9], &f[10]) != 14) {
      continue;
    }
    if (major_number != major(dev) || minor_number != minor(dev)) continue;
    sample.valid = true;
    sample.name = name;
    sample.reads = f[0];
    sample.read_sectors = f[2];
    sample.writes = f[4];
    sample.write_sectors = f[6];
    sample.weighted_ms = f[10];
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sample.at_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    break;
  }
  return sample;
}

DiskDelta DiskBetween(const DiskSample& a, const DiskSample& b) {
  DiskDelta d;
  if (!a.valid || !b.valid || b.at_ns <= a.at_ns) return d;
  d.valid = true;
  d.name = a.name;
  d.reads = b.reads - a.reads;
  d.writes = b.writes - a.writes;
  d.read_bytes = (b.read_sectors - a.read_sectors) * 512;
  d.write_bytes = (b.write_sectors - a.write_sectors) * 512;
  d.avg_queue_depth = static_cast<double>(b.weighted_ms - a.weighted_ms) /
                      (static_cast<double>(b.at_ns - a.at_ns) / 1e6);
  return d;
}

bool IsRegularFileOrMissing(const std::string& path, bool* exists) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *exists = false;
    return true;
  }
  *exists = true;
  return S_ISREG(st.st_mode);
}

}  // namespace

// The nvkv.* properties nvkv-ycsb reads (the usage text above says what each does): any other
// is refused, so that a misspelt one does not leave its setting silently at the default.
constexpr const char* kNvkvProperties[] = {
    "nvkv.queuedepth", "nvkv.submitbatch", "nvkv.reapbatch", "nvkv.durable", "nvkv.load.durable",
    "nvkv.capacity", "nvkv.index", "nvkv.cache", "nvkv.shards", "nvkv.page_bytes",
    "nvkv.single_issuer", "nvkv.max_write_delay_us", "nvkv.durable_writes", "nvkv.backend",
    "nvkv.recovery_memory", "nvkv.checkpoint_log_ratio", "nvkv.checkpoint_min_log", "nvkv.seed"};

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  std::vector<std::string> overrides;
  bool load_flag = false, run_flag = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto next = [&](std::string* out) -> absl::Status {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      }
      *out = args[++i];
      return absl::OkStatus();
    };
    std::string value;
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      cl.help = true;
    } else if (arg == "--version" || arg == "-version") {
      cl.version = true;
    } else if (arg == "-load") {
      load_flag = true;
    } else if (arg == "-run" || arg == "-t") {
      run_flag = true;
    } else if (arg == "-s") {
      // YCSB's status flag: status lines are always printed here (see --quiet).
    } else if (arg == "-P") {
      if (absl::Status s = next(&value); !s.ok()) return s;
      cl.workload_files.push_back(value);
    } else if (arg == "-p") {
      if (absl::Status s = next(&value); !s.ok()) return s;
      overrides.push_back(value);
    } else if (arg == "-threads" || arg == "--threads") {
      if (absl::Status s = next(&value); !s.ok()) return s;
      overrides.push_back(absl::StrCat("threadcount=", value));
    } else if (arg == "--db" || arg == "-db") {
      if (absl::Status s = next(&value); !s.ok()) return s;
      if (value.empty()) return absl::InvalidArgumentError("--db: empty path");
      cl.db_path = value;
    } else if (arg.rfind("--db=", 0) == 0) {
      cl.db_path = arg.substr(5);
    } else if (arg == "--engine" || arg.rfind("--engine=", 0) == 0) {
      if (arg == "--engine") {
        if (absl::Status s = next(&value); !s.ok()) return s;
      } else {
        value = arg.substr(9);
      }
      absl::StatusOr<Engine> engine = ParseEngine(value);
      if (!engine.ok()) return engine.status();
      cl.engine = *engine;
    } else if (arg == "--keep") {
      cl.keep = true;
    } else if (arg == "--json") {
      cl.json = true;
    } else if (arg == "--svg") {
      if (absl::Status s = next(&value); !s.ok()) return s;
      cl.svg_path = value;
    } else if (arg.rfind("--svg=", 0) == 0) {
      cl.svg_path = arg.substr(6);
    } else if (arg == "--quiet" || arg == "-q") {
      cl.progress = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument '", arg, "' (see --help)"));
    }
  }
  if (cl.help || cl.version) return cl;
  if (load_flag || run_flag) {
    cl.load = load_flag;
    cl.run = run_flag;
  }
  for (const std::string& file : cl.workload_files) {
    if (absl::Status s = cl.properties.ParseFile(file); !s.ok()) return s;
  }
  for (const std::string& assignment : overrides) {
    if (absl::Status s = cl.properties.ParseAssignment(assignment); !s.ok()) return s;
  }
  for (const auto& property : cl.properties.all()) {
    const std::string& name = property.first;
    if (!name.starts_with("nvkv.") ||
        std::any_of(std::begin(kNvkvProperties), std::end(kNvkvProperties),
                    [&name](const char* known) { return name == known; })) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown property ", name, " (nvkv's are ", absl::StrJoin(kNvkvProperties, ", "), ")"));
  }
  absl::StatusOr<uint64_t> threads = cl.properties.GetUint("threadcount", 1);
  if (!threads.ok()) return threads.status();
  if (*threads == 0 || *threads > 1024) {
    return absl::InvalidArgumentError("threadcount: expected 1..1024");
  }
  cl.threads = static_cast<uint32_t>(*threads);
  return cl;
}

namespace {

// Opens nvkv at --db: a load re-creates a store file (never a device, unless --keep).
absl::StatusOr<std::unique_ptr<Store>> OpenNvkv(const CommandLine& cl,
                                                 const NvkvSettings& settings,
                                                 RunDescription* run) {
  Options options = settings.options;
  bool exists = false;
  const bool regular = IsRegularFileOrMissing(cl.db_path, &exists);
  if (cl.load && !cl.keep) {
    if (!regular) {
      return absl::FailedPreconditionError(absl::StrCat(
          cl.db_path, " is a device: nvkv-ycsb deletes and re-creates only files; pass --keep "
          "to load into the store on it"));
    }
    if (exists && unlink(cl.db_path.c_str()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("removing ", cl.db_path));
    }
  }
  options.create_if_missing = cl.load;
  absl::StatusOr<std::unique_ptr<Store>> db = OpenNvkvStore(options, cl.db_path);
  if (!db.ok()) return db.status();
  const Stats stats = (*db)->GetStats();
  run->device = DeviceKindName(stats.device.kind);
  run->index = IndexModeName(stats.index_mode);
  run->capacity_bytes = stats.device.capacity_bytes;
  return db;
}

// Opens a peer in the directory --db: a load re-creates it (only a directory, and only one that
// holds nothing but that peer's files, is removed).
absl::StatusOr<std::unique_ptr<Store>> OpenPeer(const CommandLine& cl,
                                                 const NvkvSettings& settings,
                                                 RunDescription* run) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path dir(cl.db_path);
  if (cl.load && !cl.keep && fs::exists(dir, error)) {
    if (!fs::is_directory(dir, error)) {
      return absl::FailedPreconditionError(absl::StrCat(
          cl.db_path, " is not a directory: --engine ", EngineName(cl.engine),
          " keeps its store in one"));
    }
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      const bool peer_file = cl.engine == Engine::kLmdb
                                 ? (name == "data.mdb" || name == "lock.mdb")
                                 : (name == "CURRENT" || name == "IDENTITY" || name == "LOCK" ||
                                    name.starts_with("LOG") || name.starts_with("MANIFEST-") ||
                                    name.starts_with("OPTIONS-") || name.ends_with(".sst") ||
                                    name.ends_with(".log"));
      if (!peer_file) {
        return absl::FailedPreconditionError(absl::StrCat(
            cl.db_path, " holds ", name, ", which is not a ", EngineName(cl.engine),
            " file: nvkv-ycsb removes only its own stores"));
      }
    }
    fs::remove_all(dir, error);
    if (error) return absl::InternalError(absl::StrCat("removing ", cl.db_path, ": ", error.message()));
  }
  fs::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("creating ", cl.db_path, ": ", error.message()));
  }
  PeerOptions peer;
  peer.cache_bytes = settings.options.cache_bytes;
  peer.capacity_bytes = settings.capacity_bytes;
  run->device = EngineName(cl.engine);
  run->index = cl.engine == Engine::kLmdb ? "b+tree" : "lsm";
  run->capacity_bytes = settings.capacity_bytes;
  return OpenPeerStore(cl.engine, peer, cl.db_path);
}

}  // namespace

absl::StatusOr<BenchmarkResult> RunBenchmark(const CommandLine& cl) {
  absl::StatusOr<WorkloadConfig> config = WorkloadConfig::FromProperties(cl.properties);
  if (!config.ok()) return config.status();
  if (cl.run && config->operation_count == 0 && config->max_execution_s == 0) {
    return absl::InvalidArgumentError("operationcount must be given for a run phase");
  }
  if (config->operation_count == 0) config->operation_count = UINT64_MAX / 2;  // time-bound
  absl::StatusOr<NvkvSettings> settings = ReadNvkvSettings(cl.properties, *config);
  if (!settings.ok()) return settings.status();
  if (cl.engine != Engine::kNvkv && settings->queue_depth != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--engine ", EngineName(cl.engine), " answers reads synchronously: nvkv.queuedepth must "
        "be 1 (use more threads instead)"));
  }

  BenchmarkResult result;
  std::vector<std::string> names;  // file names only: titles stay short
  for (const std::string& file : cl.workload_files) {
    names.push_back(file.substr(file.rfind('/') + 1));
  }
  result.run.workload = names.empty() ? "(no -P)" : absl::StrJoin(names, ",");
  result.run.db_path = cl.db_path;
  result.run.record_count = config->record_count;
  absl::StatusOr<std::unique_ptr<Store>> db =
      cl.engine == Engine::kNvkv ? OpenNvkv(cl, *settings, &result.run)
                                 : OpenPeer(cl, *settings, &result.run);
  if (!db.ok()) return db.status();

  ClientOptions client;
  client.threads = cl.threads;
  client.queue_depth = settings->queue_depth;
  client.submit_batch = settings->submit_batch;
  client.reap_batch = settings->reap_batch;
  client.durable = settings->durable;
  client.load_durable = settings->load_durable;
  client.progress = cl.progress;
  SharedCounters counters(*config);
  if (cl.load) {
    const DiskSample before = SampleDisk(cl.db_path);
    absl::StatusOr<PhaseResult> load = RunLoad(db->get(), *config, client, &counters);
    if (!load.ok()) return load.status();
    load->disk = DiskBetween(before, SampleDisk(cl.db_path));
    result.phases.push_back(std::move(*load));
  }
  if (cl.run && config->warmup_operation_count > 0) {
    // The same mix, unmeasured, drawing another request stream than the run (with a fixed
    // nvkv.seed too): the run then starts with caches as warm as a long-running store's.
    WorkloadConfig warmup = *config;
    warmup.operation_count = config->warmup_operation_count;
    warmup.max_execution_s = 0;
    if (warmup.seed != 0) warmup.seed ^= 0x2545f4914f6cdd1dull;
    absl::StatusOr<PhaseResult> warm = RunTransactions(db->get(), warmup, client, &counters);
    if (!warm.ok()) return warm.status();
    warm->phase = "warmup";
    result.phases.push_back(std::move(*warm));
  }
  if (cl.run) {
    const DiskSample before = SampleDisk(cl.db_path);
    absl::StatusOr<PhaseResult> run = RunTransactions(db->get(), *config, client, &counters);
    if (!run.ok()) return run.status();
    run->disk = DiskBetween(before, SampleDisk(cl.db_path));
    result.phases.push_back(std::move(*run));
  }
  if (absl::Status closed = (*db)->Close(); !closed.ok()) return closed;
  return result;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<CommandLine> cl = ParseCommandLine(args);
  if (!cl.ok()) {
    std::fprintf(stderr, "nvkv-ycsb: %s\n", std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cl->version) {
    std::printf("nvkv-ycsb %s\n", NVKV_VERSION_STRING);
    return 0;
  }
  absl::StatusOr<BenchmarkResult> result = RunBenchmark(*cl);
  if (!result.ok()) {
    std::fprintf(stderr, "nvkv-ycsb: %s\n", result.status().ToString().c_str());
    return absl::IsInvalidArgument(result.status()) ? 2 : 1;
  }
  bool failures = false;
  for (const PhaseResult& phase : result->phases) {
    const std::string table = FormatTable(result->run, phase);
    if (cl->json) {
      std::fputs(table.c_str(), stderr);
      std::fputs(FormatJson(result->run, phase).c_str(), stdout);
    } else {
      std::fputs(table.c_str(), stdout);
    }
    for (uint64_t f : phase.failures) failures = failures || f != 0;
  }
  std::fflush(stdout);
  if (!cl->svg_path.empty()) {
    std::ofstream svg(cl->svg_path);
    svg << FormatSvg(result->run, result->phases);
    if (!svg) {
      std::fprintf(stderr, "nvkv-ycsb: cannot write %s\n", cl->svg_path.c_str());
      return 1;
    }
  }
  return failures ? 3 : 0;
}

}  // namespace nvkv::ycsb
