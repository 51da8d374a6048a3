// nvkv-soak: a crash soak of the public API, for minutes in CI and for hours by hand.
//
// A supervisor forks a writer child. The child opens the store and runs a random mix of durable
// and non-durable puts, deletes and atomic batches (values from a few bytes to max_value_bytes())
// over a bounded key space whose live data is kept near the store's usable capacity, so that
// compaction always works hard and "store full" (kResourceExhausted) refusals happen; it checks
// every read it makes against the exact current state. Before each write is issued the child
// tells the supervisor over a pipe what it is about to write (intent), and after the write
// returns what came of it (ack). At random moments the supervisor kills the child with SIGKILL,
// opens the store again at once and checks every key of the key space against its model:
//
//   - a write is MUST-SURVIVE once it was acknowledged durable, or, acknowledged non-durable,
//     once a later durable write or a Flush/Close returned OK (options.h, WriteOptions::durable:
//     "durable once a later durable write or DB::Flush() has returned OK"; --promise flush
//     counts only Flush and Close: a weaker model, to tell a loss of that promise apart from
//     others when one is suspected, as when this tool found it broken across shards);
//   - after a kill a key may hold its last must-survive state or the state of any write issued
//     after it (acknowledged or not: which non-durable writes survive is unspecified), nothing
//     else; a write refused with kResourceExhausted is never applied;
//   - a batch is all or nothing: when one of its keys shows the batch's value, every other key
//     of the batch shows the batch's entry or a write issued after the batch.
//
// Values verify themselves: each embeds its key, the operation's sequence number, its entry
// index in a batch, its length and a checksum, and its payload is derived from those, so a torn,
// misplaced or stale value is told apart from a lost one. The state found after a reopen (and a
// clean Close) is the next round's starting point. Uses only the public headers.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "nvkv/db.h"
#include "nvkv/options.h"
#include "nvkv/stats.h"
#include "nvkv/write_batch.h"

namespace nvkv::soak {
namespace {

constexpr const char* kUsage =
    "usage: nvkv-soak --db PATH --seconds N [options]\n"
    "\n"
    "Runs a writer child against the store at PATH for N seconds, kills it with SIGKILL at\n"
    "random intervals, reopens the store at once and checks every key against a model of what\n"
    "the writer was acknowledged (see nvkv/db.h and nvkv/options.h for the contract checked).\n"
    "Prints one line per --report-seconds and ends with 'acknowledged writes lost: N'.\n"
    "\n"
    "Options:\n"
    "  --db PATH             the store: a file (created when missing), block device or\n"
    "                        /dev/ngXnY. The keys 'soak/...' of the key space are deleted at\n"
    "                        start; other keys are left alone.\n"
    "  --seconds N           how long to run (required; e.g. 120, or 28800 for 8 hours)\n"
    "  --seed S              seed of every random choice (default: from the clock; printed).\n"
    "                        Kill times depend on timing, so a seed reproduces a run's mix,\n"
    "                        not its exact interleaving.\n"
    "  --capacity-mib M      size of a store file created here (default 64); small stores\n"
    "                        make compaction run constantly\n"
    "  --fresh               delete an existing store FILE at PATH first (never a device)\n"
    "  --kill-every-ms A..B  kill the writer after a uniform random A..B ms (default 200..3000)\n"
    "  --value-max BYTES     largest value (default and upper bound: the store's\n"
    "                        max_value_bytes())\n"
    "  --keys N              size of the key space (default: sized so that the live data can\n"
    "                        reach --fill-percent of the usable capacity)\n"
    "  --fill-percent P      live data the writer aims at, in % of Stats::usable_bytes\n"
    "                        (default 85): above it, it deletes more and writes small values\n"
    "  --durable-percent P   share of writes made with WriteOptions::durable (default 50)\n"
    "  --check-every N       run DB::Check after every Nth reopen (default 10; 0: never);\n"
    "                        problems it reports are printed as notes, not failures\n"
    "  --report-seconds N    seconds between progress lines (default 60)\n"
    "  --shards N            shards to open the store with (default: Options' 4); a zoned\n"
    "                        namespace with few open or active zones takes fewer\n"
    "  --promise P           what makes an acknowledged non-durable write one that must\n"
    "                        survive a kill: later-durable (default; what options.h promises:\n"
    "                        a later durable write, Flush or Close returned OK) or flush\n"
    "                        (only a later Flush or Close: looks past that promise)\n"
    "  --transient-read-faults  before half of the reopens, open the store (read-only) while a\n"
    "                        random page of its segments fails to read, as a transient error:\n"
    "                        refused naming the page, or opened when nothing of it was needed;\n"
    "                        then opened degraded (Options::open_degraded). Needs\n"
    "                        libnvkv_fail_pread.so in LD_PRELOAD (tools/ci/soak.sh does it)\n"
    "  --help                this text\n"
    "\n"
    "Exit status: 0 no violation; 1 a violation (lost or torn write, corrupt value, wrong read,\n"
    "an unexpected error from nvkv); 2 bad usage; 3 the run could not be set up.\n";

// ---------------------------------------------------------------------------------------------
// Configuration.

struct Config {
  std::string db;
  double seconds = -1;
  uint64_t seed = 0;
  bool seed_given = false;
  uint64_t capacity_mib = 64;
  bool fresh = false;
  uint32_t kill_min_ms = 200;
  uint32_t kill_max_ms = 3000;
  uint32_t value_max = 0;
  uint32_t keys = 0;
  uint32_t fill_percent = 85;
  uint32_t durable_percent = 50;
  uint32_t check_every = 10;
  uint32_t report_seconds = 60;
  uint32_t shard_count = 0;  // --shards; 0: Options' default
  // What makes an acknowledged non-durable write must-survive: true, as options.h promises, any
  // later durable write, Flush or Close returning OK; false, only a later Flush or Close.
  bool later_durable_covers = true;
  bool transient_read_faults = false;  // --transient-read-faults
};

// Parses argv into *config; returns an error message, or "" on success ("help" for --help).
std::string ParseArgs(int argc, char** argv, Config* config) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return "help";
    if (arg == "--fresh") {
      config->fresh = true;
      continue;
    }
    if (arg == "--transient-read-faults") {
      config->transient_read_faults = true;
      continue;
    }
    if (i + 1 >= argc) return absl::StrCat("missing value after ", arg);
    absl::string_view value = argv[++i];
    auto u32 = [&](uint32_t* out, uint32_t lo, uint32_t hi) -> std::string {
      if (!absl::SimpleAtoi(value, out) || *out < lo || *out > hi) {
        return absl::StrCat(arg, " wants a number in ", lo, "..", hi, ", not '", value, "'");
      }
      return "";
    };
    std::string error;
    if (arg == "--db") {
      config->db = std::string(value);
    } else if (arg == "--seconds") {
      if (!absl::SimpleAtod(value, &config->seconds) || config->seconds < 0) {
        error = absl::StrCat("--seconds wants a number >= 0, not '", value, "'");
      }
    } else if (arg == "--seed") {
      if (!absl::SimpleAtoi(value, &config->seed)) error = "--seed wants an unsigned number";
      config->seed_given = true;
    } else if (arg == "--capacity-mib") {
      if (!absl::SimpleAtoi(value, &config->capacity_mib) || config->capacity_mib < 4) {
        error = "--capacity-mib wants a number >= 4";
      }
    } else if (arg == "--kill-every-ms") {
      std::vector<absl::string_view> parts = absl::StrSplit(value, "..");
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &config->kill_min_ms) ||
          !absl::SimpleAtoi(parts[1], &config->kill_max_ms) || config->kill_min_ms < 1 ||
          config->kill_min_ms > config->kill_max_ms) {
        error = "--kill-every-ms wants A..B with 1 <= A <= B (milliseconds)";
      }
    } else if (arg == "--value-max") {
      error = u32(&config->value_max, 64, UINT32_MAX);
    } else if (arg == "--keys") {
      error = u32(&config->keys, 16, 10'000'000);
    } else if (arg == "--fill-percent") {
      error = u32(&config->fill_percent, 1, 100);
    } else if (arg == "--durable-percent") {
      error = u32(&config->durable_percent, 0, 100);
    } else if (arg == "--check-every") {
      error = u32(&config->check_every, 0, UINT32_MAX);
    } else if (arg == "--promise") {
      if (value == "later-durable") {
        config->later_durable_covers = true;
      } else if (value == "flush") {
        config->later_durable_covers = false;
      } else {
        error = "--promise wants later-durable or flush";
      }
    } else if (arg == "--report-seconds") {
      error = u32(&config->report_seconds, 1, UINT32_MAX);
    } else if (arg == "--shards") {
      error = u32(&config->shard_count, 1, 64);
    } else {
      error = absl::StrCat("unknown option ", arg);
    }
    if (!error.empty()) return error;
  }
  if (config->db.empty()) return "--db PATH is required";
  if (config->seconds < 0) return "--seconds N is required";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Keys and self-verifying values.

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Keys of several lengths, each naming its index.
std::string Key(uint32_t index) {
  return absl::StrCat(absl::StrFormat("soak/%07u/", index),
                      std::string(index % 29, static_cast<char>('a' + index % 26)));
}

// Value layout (little-endian): magic u32 | key u32 | seq u64 | entry u16 | zero u16 | length u32
// | checksum u64 | payload. The checksum covers every byte but its own; the payload follows from
// (key, seq, entry), so a value can be checked whole without the model.
constexpr uint32_t kMagic = 0x4b53564e;  // "NVSK"
constexpr size_t kHeaderBytes = 32;
constexpr size_t kChecksumOffset = 24;

uint64_t Checksum(std::string_view v) {
  uint64_t h = Mix(v.size());
  auto add = [&h](std::string_view part) {
    size_t i = 0;
    for (; i + 8 <= part.size(); i += 8) {
      uint64_t word;
      std::memcpy(&word, part.data() + i, 8);
      h = Mix(h ^ word);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, part.data() + i, part.size() - i);
    h = Mix(h ^ tail ^ (uint64_t{part.size() - i} << 56));
  };
  add(v.substr(0, kChecksumOffset));
  if (v.size() > kHeaderBytes) add(v.substr(kHeaderBytes));
  return h;
}

void FillPayload(uint32_t key, uint64_t seq, uint16_t entry, char* out, size_t n) {
  const uint64_t base = Mix(Mix(seq) ^ (uint64_t{key} << 16) ^ entry);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = Mix(base + i);
    std::memcpy(out + i, &word, std::min<size_t>(8, n - i));
  }
}

std::string MakeValue(uint32_t key, uint64_t seq, uint16_t entry, uint32_t length) {
  std::string v(std::max<size_t>(length, kHeaderBytes), '\0');
  const uint16_t zero = 0;
  const uint32_t len = static_cast<uint32_t>(v.size());
  std::memcpy(&v[0], &kMagic, 4);
  std::memcpy(&v[4], &key, 4);
  std::memcpy(&v[8], &seq, 8);
  std::memcpy(&v[16], &entry, 2);
  std::memcpy(&v[18], &zero, 2);
  std::memcpy(&v[20], &len, 4);
  FillPayload(key, seq, entry, &v[kHeaderBytes], v.size() - kHeaderBytes);
  const uint64_t sum = Checksum(v);
  std::memcpy(&v[kChecksumOffset], &sum, 8);
  return v;
}

// What a key holds: absent, or the value entry `entry` of operation `seq` wrote. For an absent
// state, seq is the delete that made it so (0: never written since the soak began).
struct State {
  bool present = false;
  uint64_t seq = 0;
  uint16_t entry = 0;
  uint32_t length = 0;

  bool SameContent(const State& o) const {
    return present == o.present &&
           (!present || (seq == o.seq && entry == o.entry && length == o.length));
  }
};

std::string Describe(const State& s) {
  if (!s.present) return s.seq == 0 ? "absent" : absl::StrCat("absent (deleted by op ", s.seq, ")");
  return absl::StrCat("value of op ", s.seq, " entry ", s.entry, " (", s.length, " bytes)");
}

// Decodes and checks a value read for `key`; on failure returns false with *why set.
bool ParseValue(uint32_t key, std::string_view v, State* out, std::string* why) {
  if (v.size() < kHeaderBytes) {
    *why = absl::StrCat("corrupt: ", v.size(), " bytes, shorter than any soak value");
    return false;
  }
  uint32_t magic, vkey, len;
  uint64_t seq, sum;
  uint16_t entry;
  std::memcpy(&magic, &v[0], 4);
  std::memcpy(&vkey, &v[4], 4);
  std::memcpy(&seq, &v[8], 8);
  std::memcpy(&entry, &v[16], 2);
  std::memcpy(&len, &v[20], 4);
  std::memcpy(&sum, &v[kChecksumOffset], 8);
  if (magic != kMagic) {
    *why = "corrupt: bad magic";
    return false;
  }
  if (len != v.size()) {
    *why = absl::StrCat("corrupt: ", v.size(), " bytes, its header says ", len);
    return false;
  }
  if (Checksum(v) != sum) {
    *why = absl::StrCat("corrupt: checksum mismatch (header says op ", seq, " entry ", entry,
                        " key ", vkey, ")");
    return false;
  }
  if (vkey != key) {
    *why = absl::StrCat("misplaced: the value of key ", vkey, " (op ", seq, ")");
    return false;
  }
  std::string payload(v.size() - kHeaderBytes, '\0');
  FillPayload(key, seq, entry, payload.data(), payload.size());
  if (v.substr(kHeaderBytes) != payload) {
    *why = "corrupt: payload differs from the one its header implies";
    return false;
  }
  *out = State{true, seq, entry, len};
  return true;
}

// ---------------------------------------------------------------------------------------------
// The pipe between writer and supervisor: one write(2) per message, each at most PIPE_BUF bytes
// so that it arrives whole or not at all.

enum MsgType : uint8_t { kIntent = 1, kAck = 2, kReads = 3, kFail = 4, kStats = 5 };
enum OpKind : uint8_t { kPut = 0, kDelete = 1, kBatch = 2, kFlush = 3, kClose = 4 };
enum AckResult : uint8_t { kOk = 0, kRefused = 1 };

constexpr size_t kMaxBatchEntries = 32;

struct WireEntry {
  uint32_t key;
  uint32_t length;  // of the value; 0 for a delete
  uint8_t is_delete;
  uint8_t pad[3];
};

struct IntentMsg {
  uint64_t seq;
  uint8_t kind;
  uint8_t durable;
  uint16_t count;
  uint32_t pad;
  WireEntry entries[kMaxBatchEntries];
};

struct AckMsg {
  uint64_t seq;
  uint8_t result;
  uint8_t pad[7];
  uint64_t bytes;  // key and value bytes the write carried
};

struct StatsMsg {
  uint64_t live_bytes;
  uint64_t usable_bytes;
};

struct MsgHeader {
  uint32_t bytes;  // the whole message, header included
  uint8_t type;
  uint8_t pad[3];
};

static_assert(sizeof(MsgHeader) + sizeof(IntentMsg) < PIPE_BUF);

void Send(int fd, MsgType type, const void* payload, size_t n) {
  char buffer[PIPE_BUF];
  n = std::min(n, sizeof(buffer) - sizeof(MsgHeader));
  MsgHeader header{static_cast<uint32_t>(sizeof(MsgHeader) + n), type, {}};
  std::memcpy(buffer, &header, sizeof(header));
  std::memcpy(buffer + sizeof(header), payload, n);
  const size_t total = sizeof(header) + n;
  ssize_t written;
  do {
    written = write(fd, buffer, total);
  } while (written < 0 && errno == EINTR);
  if (written != static_cast<ssize_t>(total)) std::_Exit(5);  // the supervisor is gone
}

// ---------------------------------------------------------------------------------------------
// What both processes need to know about the store.

struct Setup {
  uint32_t keys = 0;
  uint32_t value_max = 0;
  uint64_t batch_max = 0;  // bytes of WriteBatch::ApproximateSize() the writer goes up to
  uint32_t page_bytes = 4096;
  uint64_t segment_pages = 0;  // pages of every segment together (Stats)
};

// Either index mode may reopen a store whichever wrote it (db.h); each opener picks one.
Options StoreOptions(const Config& config, bool ordered) {
  Options options;
  options.index_mode = ordered ? IndexMode::kOrdered : IndexMode::kHash;
  options.capacity_bytes = config.capacity_mib << 20;
  if (config.shard_count != 0) options.shard_count = config.shard_count;
  // A killed writer's rings are torn down by the kernel shortly after it died (options.h); wait
  // for that rather than fail.
  options.lock_wait_ms = 30'000;
  return options;
}

// ---------------------------------------------------------------------------------------------
// The writer child.

class Writer {
 public:
  Writer(const Config& config, const Setup& setup, std::vector<State> current, uint64_t next_seq,
         uint64_t seed, int fd)
      : config_(config),
        setup_(setup),
        current_(std::move(current)),
        seq_(next_seq),
        rng_(seed),
        fd_(fd) {}

  [[noreturn]] void Run() {
    OpenOrDie();
    for (uint64_t n = 0;; ++n) {
      if (n % 32 == 0) RefreshFill();
      const double r = Uniform();
      if (r < 0.25) {
        CheckReads();
      } else if (r < 0.28) {
        Flush();
      } else if (r < 0.2812) {
        CloseAndReopen();
      } else if (r < 0.40) {
        WriteBatchOp();
      } else if (r < 0.40 + DeleteShare()) {
        DeleteOp();
      } else {
        PutOp();
      }
    }
  }

 private:
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  uint32_t Below(uint64_t n) {
    return static_cast<uint32_t>(std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_));
  }
  uint32_t Between(uint32_t lo, uint32_t hi) {  // inclusive
    return std::uniform_int_distribution<uint32_t>(lo, std::max(lo, hi))(rng_);
  }

  [[noreturn]] void Fail(const std::string& what) {
    Send(fd_, kFail, what.data(), what.size());
    std::_Exit(1);
  }

  void OpenOrDie() {
    absl::StatusOr<std::unique_ptr<DB>> db =
        DB::Open(StoreOptions(config_, Below(2) == 0), config_.db);
    if (!db.ok()) Fail(absl::StrCat("writer: Open failed: ", db.status().ToString()));
    db_ = std::move(*db);
  }

  void RefreshFill() {
    const Stats stats = db_->GetStats();
    fill_ =
        stats.usable_bytes == 0 ? 1.0 : static_cast<double>(stats.live_bytes) / stats.usable_bytes;
    StatsMsg msg{stats.live_bytes, stats.usable_bytes};
    Send(fd_, kStats, &msg, sizeof(msg));
  }

  bool OverTarget() const { return fill_ * 100 > config_.fill_percent || refused_recently_ > 0; }
  double DeleteShare() const { return OverTarget() ? 0.30 : 0.04; }

  // Value lengths: mostly small, some over a page, some large up to value_max (a few exactly).
  uint32_t PickLength(bool small_only) {
    const uint32_t page = setup_.page_bytes;
    const double r = Uniform();
    uint32_t length;
    if (r < 0.6 || (small_only && r < 0.8)) {
      length = Between(kHeaderBytes, 256);
    } else if (r < 0.9 || small_only) {
      length = Between(257, 3 * page);
    } else if (r < 0.92) {
      length = setup_.value_max;
    } else {
      length = Between(3 * page, setup_.value_max);
    }
    return std::min(length, setup_.value_max);
  }

  WriteOptions PickDurability() {
    WriteOptions options;
    options.durable = Below(100) < config_.durable_percent;
    return options;
  }

  uint32_t PickKey() { return Below(setup_.keys); }

  // Sends the intent of an operation on `entries` (empty for Flush and Close) and returns its
  // sequence number.
  uint64_t Intent(OpKind kind, bool durable, const std::vector<WireEntry>& entries) {
    IntentMsg msg{};
    msg.seq = seq_++;
    msg.kind = kind;
    msg.durable = durable;
    msg.count = static_cast<uint16_t>(entries.size());
    std::copy(entries.begin(), entries.end(), msg.entries);
    Send(fd_, kIntent, &msg, offsetof(IntentMsg, entries) + entries.size() * sizeof(WireEntry));
    return msg.seq;
  }

  // Reports the outcome of operation `seq`: kOk, or kRefused for a full store; any other error
  // is a failure of nvkv (the file backend has no device errors to excuse it).
  bool Ack(uint64_t seq, const absl::Status& status, uint64_t bytes, const char* what) {
    AckMsg msg{};
    msg.seq = seq;
    msg.bytes = bytes;
    if (status.ok()) {
      msg.result = kOk;
      if (refused_recently_ > 0) --refused_recently_;
    } else if (status.code() == absl::StatusCode::kResourceExhausted) {
      msg.result = kRefused;
      refused_recently_ = 64;  // make room: delete more and write small for a while
    } else {
      Fail(absl::StrCat("writer: ", what, " (op ", seq, ") failed: ", status.ToString()));
    }
    Send(fd_, kAck, &msg, sizeof(msg));
    return status.ok();
  }

  void PutOp() {
    const uint32_t key = PickKey();
    const uint32_t length = PickLength(OverTarget());
    const WriteOptions options = PickDurability();
    const uint64_t seq = Intent(kPut, options.durable, {WireEntry{key, length, 0, {}}});
    const std::string value = MakeValue(key, seq, 0, length);
    const std::string k = Key(key);
    if (Ack(seq, db_->Put(k, value, options), k.size() + value.size(), "Put")) {
      current_[key] = State{true, seq, 0, static_cast<uint32_t>(value.size())};
    }
  }

  void DeleteOp() {
    const uint32_t key = PickKey();
    const WriteOptions options = PickDurability();
    const uint64_t seq = Intent(kDelete, options.durable, {WireEntry{key, 0, 1, {}}});
    const std::string k = Key(key);
    if (Ack(seq, db_->Delete(k, options), k.size(), "Delete")) current_[key] = State{false, seq};
  }

  // A batch of puts and deletes (a key may repeat: the later entry wins), up to batch_max.
  // The engine takes a value larger than a page's payload only in a batch of one entry (it
  // refuses it in a larger batch with kInvalidArgument, which db.h does not say), so a tenth of
  // the batches are single puts of any size and the others keep each value within a page.
  void WriteBatchOp() {
    std::vector<WireEntry> entries;
    if (Below(10) == 0) {
      entries.push_back(WireEntry{PickKey(), PickLength(OverTarget()), 0, {}});
    } else {
      const size_t count = Between(2, 16);
      size_t size = 0;
      for (size_t i = 0; i < count; ++i) {
        const uint32_t key = PickKey();
        const size_t overhead = Key(key).size() + WriteBatch::kEntryOverheadBytes;
        if (size + overhead + kHeaderBytes > setup_.batch_max) break;
        if (Below(5) == 0) {
          entries.push_back(WireEntry{key, 0, 1, {}});
          size += overhead;
          continue;
        }
        // A page's payload is page_bytes - 40 (db.h: 4,056 bytes per 4 KiB page).
        const uint64_t fits_page = setup_.page_bytes - 40 - overhead;
        uint64_t length = PickLength(/*small_only=*/true);
        length = std::min({length, fits_page, setup_.batch_max - size - overhead});
        entries.push_back(WireEntry{key, std::max<uint32_t>(length, kHeaderBytes), 0, {}});
        size += overhead + entries.back().length;
      }
    }
    const WriteOptions options = PickDurability();
    const uint64_t seq = Intent(kBatch, options.durable, entries);
    WriteBatch batch;
    uint64_t bytes = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string k = Key(entries[i].key);
      if (entries[i].is_delete) {
        batch.Delete(k);
        bytes += k.size();
      } else {
        const std::string value =
            MakeValue(entries[i].key, seq, static_cast<uint16_t>(i), entries[i].length);
        batch.Put(k, value);
        bytes += k.size() + value.size();
      }
    }
    if (Ack(seq, db_->Write(batch, options), bytes, "Write(batch)")) {
      for (size_t i = 0; i < entries.size(); ++i) {
        current_[entries[i].key] =
            entries[i].is_delete ? State{false, seq}
                                 : State{true, seq, static_cast<uint16_t>(i), entries[i].length};
      }
    }
  }

  void Flush() {
    const uint64_t seq = Intent(kFlush, true, {});
    Ack(seq, db_->Flush(), 0, "Flush");
  }

  void CloseAndReopen() {
    const uint64_t seq = Intent(kClose, true, {});
    absl::Status status = db_->Close();
    if (!status.ok()) Fail(absl::StrCat("writer: Close failed: ", status.ToString()));
    Ack(seq, status, 0, "Close");
    db_.reset();
    OpenOrDie();
  }

  // A read must see exactly the last acknowledged write of its key (db.h: "A read sees every
  // write that returned before it started").
  void Compare(uint32_t key, const absl::StatusOr<std::string>& got, const char* how) {
    const State& want = current_[key];
    std::string found, why;
    State state;
    if (got.ok()) {
      found = ParseValue(key, *got, &state, &why) ? Describe(state) : why;
    } else if (absl::IsNotFound(got.status())) {
      state = State{false, 0};
      found = "absent";
    } else {
      found = absl::StrCat("error ", got.status().ToString());
    }
    const bool match = (got.ok() && why.empty() && want.SameContent(state)) ||
                       (!got.ok() && absl::IsNotFound(got.status()) && !want.present);
    if (!match) {
      Fail(absl::StrCat("writer: ", how, " of key ", key, " '", Key(key), "' returned ", found,
                        "; the last acknowledged write left ", Describe(want)));
    }
  }

  void CheckReads() {
    const double r = Uniform();
    uint64_t reads = 0;
    if (r < 0.7) {
      const uint32_t key = PickKey();
      Compare(key, db_->Get(Key(key)), "Get");
      reads = 1;
    } else if (r < 0.9) {
      std::vector<uint32_t> keys(8);
      std::vector<std::string> names;
      for (uint32_t& k : keys) {
        k = PickKey();
        names.push_back(Key(k));
      }
      std::vector<std::string_view> views(names.begin(), names.end());
      std::vector<absl::StatusOr<std::string>> got = db_->MultiGet(views);
      for (size_t i = 0; i < keys.size(); ++i) Compare(keys[i], got[i], "MultiGet");
      reads = keys.size();
    } else {
      const size_t n = 4;
      std::vector<std::pair<uint32_t, absl::StatusOr<std::string>>> results;
      results.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t key = PickKey();
        absl::Status started =
            db_->GetAsync(Key(key), [&results, key](absl::StatusOr<std::string> v) {
              results.emplace_back(key, std::move(v));
            });
        if (!started.ok()) Fail(absl::StrCat("writer: GetAsync failed: ", started.ToString()));
      }
      while (db_->PendingReads() > 0) {
        absl::StatusOr<uint32_t> polled = db_->Poll(1);
        if (!polled.ok()) Fail(absl::StrCat("writer: Poll failed: ", polled.status().ToString()));
      }
      for (const auto& [key, value] : results) Compare(key, value, "GetAsync");
      reads = results.size();
    }
    Send(fd_, kReads, &reads, sizeof(reads));
  }

  const Config& config_;
  const Setup setup_;
  std::vector<State> current_;  // exactly what each key holds now
  uint64_t seq_;
  std::mt19937_64 rng_;
  int fd_;
  std::unique_ptr<DB> db_;
  double fill_ = 0;
  int refused_recently_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The supervisor: the model, kills and verification.

struct Pending {
  uint64_t seq;
  State state;
  bool acked;
};

struct KeyModel {
  State base;                    // the last must-survive state
  std::string base_why;          // what made it must-survive, for the report
  std::vector<Pending> pending;  // writes issued after it, in order
};

const char* KindName(OpKind kind) {
  switch (kind) {
    case kPut:
      return "Put";
    case kDelete:
      return "Delete";
    case kBatch:
      return "Write(batch)";
    case kFlush:
      return "Flush";
    case kClose:
      return "Close";
  }
  return "?";
}

struct Op {
  OpKind kind;
  bool durable;
  std::vector<std::pair<uint32_t, State>> effects;  // per key, its final entry in the op
};

struct Counters {
  uint64_t kills = 0;
  uint64_t reopens = 0;
  uint64_t ops = 0;
  uint64_t acked = 0;
  uint64_t acked_durable = 0;
  uint64_t bytes = 0;
  uint64_t reads_checked = 0;
  uint64_t keys_verified = 0;
  uint64_t refusals = 0;
  uint64_t unacked_at_kill = 0;   // writes in flight when the writer died
  uint64_t survived_unacked = 0;  // ... of which the store showed the value afterwards
  uint64_t checks = 0;
  uint64_t check_problems = 0;
  // Violations.
  uint64_t lost = 0;     // an acknowledged (must-survive) write missing after a reopen
  uint64_t corrupt = 0;  // a value that does not verify, or sits under the wrong key
  uint64_t phantom = 0;  // a value no write issued (or a refused write) put there
  uint64_t torn = 0;     // a batch partly applied
  uint64_t read_errors = 0;
  uint64_t writer_failures = 0;  // the writer saw a wrong read or an unexpected error
  uint64_t other_failures = 0;   // Open or Close failed after a kill, the writer exited
  // --transient-read-faults: Opens refused naming the page that failed to read, Opens that
  // needed nothing of it, and degraded Opens.
  uint64_t opens_refused_unread = 0, opens_past_unread = 0, degraded_opens = 0;

  uint64_t Violations() const {
    return lost + corrupt + phantom + torn + read_errors + writer_failures + other_failures;
  }
};

class Supervisor {
 public:
  explicit Supervisor(Config config) : config_(std::move(config)) {}

  int Run() {
    if (!config_.seed_given) {
      config_.seed =
          Mix(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
              getpid());
    }
    rng_.seed(config_.seed);
    if (const char* trace = std::getenv("NVKV_SOAK_TRACE"); trace != nullptr && *trace != 0) {
      trace_path_ = trace;
      trace_ = std::fopen(trace, "w");
      if (trace_ == nullptr) {
        std::fprintf(stderr, "nvkv-soak: cannot write %s: %s\n", trace, std::strerror(errno));
        return 3;
      }
    }
    if (config_.transient_read_faults && !FailPreadLoaded()) {
      std::fprintf(stderr, "nvkv-soak: --transient-read-faults needs libnvkv_fail_pread.so in "
                           "LD_PRELOAD (tools/ci/soak.sh)\n");
      return 3;
    }
    const int setup = Prepare();
    if (setup != 0) return setup;
    std::printf("nvkv-soak: %s, %.0f s, seed %" PRIu64
                ", %u keys, values up to %u bytes, batches up "
                "to %" PRIu64 " bytes, kill every %u..%u ms, fill target %u%%%s\n",
                config_.db.c_str(), config_.seconds, config_.seed, setup_.keys, setup_.value_max,
                setup_.batch_max, config_.kill_min_ms, config_.kill_max_ms, config_.fill_percent,
                config_.later_durable_covers ? "" : ", --promise flush");
    std::printf(
        "nvkv-soak: reproduce the mix with: nvkv-soak --db %s --seconds %.0f --seed %" PRIu64
        " --capacity-mib %" PRIu64 " --kill-every-ms %u..%u%s%s%s%s\n",
        config_.db.c_str(), config_.seconds, config_.seed, config_.capacity_mib,
        config_.kill_min_ms, config_.kill_max_ms,
        config_.shard_count ? absl::StrCat(" --shards ", config_.shard_count).c_str() : "",
        config_.value_max ? absl::StrCat(" --value-max ", config_.value_max).c_str() : "",
        config_.later_durable_covers ? "" : " --promise flush",
        config_.transient_read_faults ? " --transient-read-faults" : "");
    std::fflush(stdout);
    start_ = Now();
    next_report_ = start_ + config_.report_seconds;
    for (uint64_t generation = 0; Now() - start_ < config_.seconds && c_.Violations() == 0;
         ++generation) {
      RunGeneration(generation);
    }
    if (Now() - reported_at_ > 1) Report();  // unless the last line was just printed
    return Verdict();
  }

 private:
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Creates or opens the store, sizes the key space, and deletes every key of it.
  int Prepare() {
    if (config_.fresh) {
      struct stat st;
      if (stat(config_.db.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
          std::fprintf(stderr, "nvkv-soak: --fresh deletes only files; %s is not one\n",
                       config_.db.c_str());
          return 3;
        }
        if (unlink(config_.db.c_str()) != 0) {
          std::fprintf(stderr, "nvkv-soak: cannot delete %s: %s\n", config_.db.c_str(),
                       std::strerror(errno));
          return 3;
        }
      }
    }
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(StoreOptions(config_, false), config_.db);
    if (!db.ok()) {
      std::fprintf(stderr, "nvkv-soak: cannot open %s: %s\n", config_.db.c_str(),
                   db.status().ToString().c_str());
      return 3;
    }
    const Stats stats = (*db)->GetStats();
    setup_.page_bytes = stats.page_bytes;
    setup_.segment_pages = stats.segments_total * stats.pages_per_segment;
    setup_.value_max = (*db)->max_value_bytes();
    if (config_.value_max != 0) setup_.value_max = std::min(setup_.value_max, config_.value_max);
    setup_.value_max = std::max<uint32_t>(setup_.value_max, kHeaderBytes);
    // Well under the limit: near it, two keys whose index tags collide may make a batch too big
    // for a shard (db.h, max_batch_bytes), a legal refusal this soak does not model.
    setup_.batch_max = (*db)->max_batch_bytes() * 3 / 4;
    if (config_.keys != 0) {
      setup_.keys = config_.keys;
    } else {
      // The mean length PickLength() draws (when under target), and three times the keys that
      // would hold the target: deletes, batches of small values and overwrites keep many keys
      // small or absent, and the writer steers the fill by deleting more above the target.
      const double page = setup_.page_bytes, vmax = setup_.value_max;
      const double mean =
          0.6 * 144 + 0.3 * (1.5 * page) + 0.02 * vmax + 0.08 * (1.5 * page + vmax / 2);
      const double target = static_cast<double>(stats.usable_bytes) * config_.fill_percent / 100;
      setup_.keys = static_cast<uint32_t>(std::clamp(3.0 * target / (mean + 64), 64.0, 1e7));
    }
    models_.assign(setup_.keys, KeyModel{});
    WriteOptions lazy;
    lazy.durable = false;
    for (uint32_t key = 0; key < setup_.keys; ++key) {
      absl::Status status = (*db)->Delete(Key(key), lazy);
      if (!status.ok()) {
        std::fprintf(stderr, "nvkv-soak: cannot clear key %u: %s\n", key,
                     status.ToString().c_str());
        return 3;
      }
    }
    absl::Status status = (*db)->Close();
    if (!status.ok()) {
      std::fprintf(stderr, "nvkv-soak: Close failed: %s\n", status.ToString().c_str());
      return 3;
    }
    return 0;
  }

  void RunGeneration(uint64_t generation) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::fprintf(stderr, "nvkv-soak: pipe: %s\n", std::strerror(errno));
      ++c_.other_failures;
      return;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::vector<State> current(models_.size());
    for (size_t k = 0; k < models_.size(); ++k) current[k] = models_[k].base;
    const uint64_t child_seed = Mix(config_.seed ^ Mix(generation + 1));
    const pid_t child = fork();
    if (child < 0) {
      std::fprintf(stderr, "nvkv-soak: fork: %s\n", std::strerror(errno));
      ++c_.other_failures;
      return;
    }
    if (child == 0) {
      close(fds[0]);
      Writer(config_, setup_, std::move(current), next_seq_, child_seed, fds[1]).Run();
    }
    close(fds[1]);
    const double now = Now();
    const double kill_at = std::min(now + std::uniform_int_distribution<uint32_t>(
                                              config_.kill_min_ms, config_.kill_max_ms)(rng_) /
                                              1e3,
                                    start_ + config_.seconds);
    bool eof = false;
    while (!eof && Now() < kill_at) {
      const double wake = std::min(kill_at, next_report_);
      pollfd p{fds[0], POLLIN, 0};
      const int timeout_ms = static_cast<int>(std::max(0.0, (wake - Now()) * 1e3)) + 1;
      if (poll(&p, 1, timeout_ms) > 0) eof = !ReadMessages(fds[0]);
      MaybeReport();
    }
    int wait_status = 0;
    if (!eof) {
      kill(child, SIGKILL);
      ++c_.kills;
    }
    while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
    }
    while (ReadMessages(fds[0])) {  // everything it sent before it died counts
    }
    close(fds[0]);
    inbuf_.clear();
    if (!WIFSIGNALED(wait_status) || WTERMSIG(wait_status) != SIGKILL) {
      std::printf("VIOLATION: the writer exited by itself (%s %d)%s%s\n",
                  WIFEXITED(wait_status) ? "exit status" : "signal",
                  WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : WTERMSIG(wait_status),
                  writer_failure_.empty() ? "" : ": ", writer_failure_.c_str());
      if (writer_failure_.empty()) ++c_.other_failures;
      return;
    }
    Verify();
    MaybeReport();
  }

  // Reads what is in the pipe and handles every whole message; false at end of file.
  bool ReadMessages(int fd) {
    char buffer[1 << 16];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    inbuf_.append(buffer, n);
    size_t at = 0;
    while (inbuf_.size() - at >= sizeof(MsgHeader)) {
      MsgHeader header;
      std::memcpy(&header, inbuf_.data() + at, sizeof(header));
      if (inbuf_.size() - at < header.bytes) break;
      Handle(header.type,
             std::string_view(inbuf_).substr(at + sizeof(header), header.bytes - sizeof(header)));
      at += header.bytes;
    }
    inbuf_.erase(0, at);
    return true;
  }

  void Handle(uint8_t type, std::string_view payload) {
    switch (type) {
      case kIntent: {
        IntentMsg msg{};
        std::memcpy(&msg, payload.data(), std::min(payload.size(), sizeof(msg)));
        OnIntent(msg);
        break;
      }
      case kAck: {
        AckMsg msg{};
        std::memcpy(&msg, payload.data(), std::min(payload.size(), sizeof(msg)));
        OnAck(msg);
        break;
      }
      case kReads: {
        uint64_t n = 0;
        std::memcpy(&n, payload.data(), std::min(payload.size(), sizeof(n)));
        c_.reads_checked += n;
        break;
      }
      case kStats: {
        StatsMsg msg{};
        std::memcpy(&msg, payload.data(), std::min(payload.size(), sizeof(msg)));
        last_stats_ = msg;
        break;
      }
      case kFail:
        writer_failure_ = std::string(payload);
        ++c_.writer_failures;
        break;
    }
  }

  void OnIntent(const IntentMsg& msg) {
    ++c_.ops;
    if (trace_ != nullptr) {
      std::fprintf(trace_, "intent %" PRIu64 " %s%s", msg.seq,
                   KindName(static_cast<OpKind>(msg.kind)), msg.durable ? " durable" : "");
      for (uint16_t i = 0; i < msg.count; ++i) {
        std::fprintf(trace_, " %s%u:%u", msg.entries[i].is_delete ? "-" : "", msg.entries[i].key,
                     msg.entries[i].length);
      }
      std::fputc('\n', trace_);
    }
    next_seq_ = std::max(next_seq_, msg.seq + 1);
    Op op{static_cast<OpKind>(msg.kind), msg.durable != 0, {}};
    for (uint16_t i = 0; i < msg.count; ++i) {
      const WireEntry& e = msg.entries[i];
      const State state = e.is_delete ? State{false, msg.seq} : State{true, msg.seq, i, e.length};
      auto it = std::find_if(op.effects.begin(), op.effects.end(),
                             [&e](const auto& p) { return p.first == e.key; });
      if (it != op.effects.end()) {
        it->second = state;  // a later entry of the batch for the same key wins
      } else {
        op.effects.emplace_back(e.key, state);
      }
    }
    for (const auto& [key, state] : op.effects) {
      models_[key].pending.push_back(Pending{msg.seq, state, false});
    }
    window_[msg.seq] = std::move(op);
  }

  void OnAck(const AckMsg& msg) {
    if (trace_ != nullptr) {
      std::fprintf(trace_, "ack %" PRIu64 " %s\n", msg.seq, msg.result == kOk ? "ok" : "refused");
    }
    auto it = window_.find(msg.seq);
    if (it == window_.end()) return;
    Op& op = it->second;
    if (msg.result == kRefused) {
      ++c_.refusals;
      for (const auto& [key, state] : op.effects) {
        auto& pending = models_[key].pending;
        pending.erase(std::remove_if(pending.begin(), pending.end(),
                                     [&](const Pending& p) { return p.seq == msg.seq; }),
                      pending.end());
      }
      window_.erase(it);
      return;
    }
    ++c_.acked;
    c_.bytes += msg.bytes;
    for (const auto& [key, state] : op.effects) {
      for (Pending& p : models_[key].pending) {
        if (p.seq == msg.seq) p.acked = true;
      }
    }
    if (!op.durable) return;
    ++c_.acked_durable;
    const std::string why =
        absl::StrCat(KindName(op.kind), " op ", msg.seq, " acknowledged durable");
    if (config_.later_durable_covers || op.kind == kFlush || op.kind == kClose) {
      Promote(msg.seq, why);
      return;
    }
    // --promise flush: the write itself must survive, and no older write of its keys may
    // show through it; other keys' earlier writes stay as they were.
    for (const auto& [key, state] : op.effects) {
      KeyModel& m = models_[key];
      m.base = state;
      m.base_why = why;
      m.pending.erase(std::remove_if(m.pending.begin(), m.pending.end(),
                                     [&](const Pending& p) { return p.seq <= msg.seq; }),
                      m.pending.end());
    }
    window_.erase(it);
  }

  // Operation `frontier` was acknowledged durable (or was a Flush or Close): it and every write
  // acknowledged before it must survive. The writer is sequential, so those are exactly the
  // acknowledged operations with a sequence number up to `frontier`.
  void Promote(uint64_t frontier, const std::string& why) {
    for (auto it = window_.begin(); it != window_.end() && it->first <= frontier;) {
      for (const auto& [key, state] : it->second.effects) {
        KeyModel& m = models_[key];
        size_t keep = 0;
        for (const Pending& p : m.pending) {
          if (p.seq <= frontier) {
            if (p.acked) {
              m.base = p.state;
              m.base_why = p.seq == frontier ? why : absl::StrCat("acknowledged, then ", why);
            }
          } else {
            m.pending[keep++] = p;
          }
        }
        m.pending.resize(keep);
      }
      it = window_.erase(it);
    }
  }

  // Whether `found` is one of the states `m` allows after a crash.
  static bool Allowed(const KeyModel& m, const State& found) {
    if (m.base.SameContent(found)) return true;
    for (const Pending& p : m.pending) {
      if (p.state.SameContent(found)) return true;
    }
    return false;
  }

  static std::string AllowedSet(const KeyModel& m) {
    std::string out = absl::StrCat("{must-survive: ", Describe(m.base), " [",
                                   m.base_why.empty() ? "start" : m.base_why, "]");
    for (const Pending& p : m.pending) {
      absl::StrAppend(
          &out, "; or op ", p.seq,
          p.acked ? " (acked, not yet durable): " : " (issued, not acked): ", Describe(p.state));
    }
    return out + "}";
  }

  void Violation(const std::string& line) {
    if (++violation_lines_ <= 50) std::printf("VIOLATION: %s\n", line.c_str());
  }

  // --transient-read-faults: whether pread fails on the range NVKV_FAIL_PREAD names, as it does
  // under libnvkv_fail_pread.so.
  static bool FailPreadLoaded() {
    const int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0) return false;
    setenv("NVKV_FAIL_PREAD", "0:1", 1);
    char byte = 0;
    const ssize_t n = pread(fd, &byte, 1, 0);
    const int error = errno;
    unsetenv("NVKV_FAIL_PREAD");
    close(fd);
    return n < 0 && error == EIO;
  }

  // A transient read error at Open: a random page of the segments fails to read during one
  // Open (read-only, by pread: the kSyncFile backend). It is refused, naming the page, or opens
  // when it needed nothing of it (a free segment, one read by its summary or a checkpoint);
  // opened degraded it opens. Neither writes anything: the Open after it finds what the kill
  // left.
  void TryOpensWhileAPageFailsToRead() {
    if (setup_.segment_pages == 0) return;
    const uint64_t page = 2 + rng_() % setup_.segment_pages;  // FORMAT.md: segments from page 2
    setenv("NVKV_FAIL_PREAD",
           absl::StrCat(page * setup_.page_bytes, ":", setup_.page_bytes).c_str(), 1);
    Options options = StoreOptions(config_, (rng_() & 1) != 0);
    options.read_only = true;
    options.backend = Backend::kSyncFile;
    absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, config_.db);
    if (db.ok()) {
      ++c_.opens_past_unread;
    } else if (absl::IsUnavailable(db.status()) &&
               absl::StrContains(db.status().message(), absl::StrCat("page ", page, " "))) {
      ++c_.opens_refused_unread;
    } else {
      Violation(absl::StrCat("Open while page ", page, " failed to read: ",
                             db.status().ToString()));
      ++c_.other_failures;
    }
    db = absl::StatusOr<std::unique_ptr<DB>>();
    options.open_degraded = true;
    absl::StatusOr<std::unique_ptr<DB>> degraded = DB::Open(options, config_.db);
    if (degraded.ok()) {
      ++c_.degraded_opens;
    } else {
      Violation(absl::StrCat("a degraded Open while page ", page, " failed to read: ",
                             degraded.status().ToString()));
      ++c_.other_failures;
    }
    unsetenv("NVKV_FAIL_PREAD");
  }

  // Opens the store right after the kill, checks every key against the model, and makes what it
  // found the next generation's starting point.
  void Verify() {
    if (config_.transient_read_faults && (rng_() & 1) != 0) TryOpensWhileAPageFailsToRead();
    absl::StatusOr<std::unique_ptr<DB>> db =
        DB::Open(StoreOptions(config_, (rng_() & 1) != 0), config_.db);
    if (!db.ok()) {
      Violation(absl::StrCat("Open after the kill failed: ", db.status().ToString()));
      ++c_.other_failures;
      return;
    }
    ++c_.reopens;
    if (trace_ != nullptr) std::fprintf(trace_, "killed; reopen %" PRIu64 "\n", c_.reopens);
    std::vector<State> found(models_.size());
    std::vector<bool> readable(models_.size(), true);
    constexpr uint32_t kChunk = 64;
    for (uint32_t first = 0; first < models_.size(); first += kChunk) {
      const uint32_t end = std::min<uint32_t>(first + kChunk, models_.size());
      std::vector<std::string> names;
      for (uint32_t k = first; k < end; ++k) names.push_back(Key(k));
      std::vector<std::string_view> views(names.begin(), names.end());
      std::vector<absl::StatusOr<std::string>> got = (*db)->MultiGet(views);
      for (uint32_t k = first; k < end; ++k) {
        const absl::StatusOr<std::string>& v = got[k - first];
        const KeyModel& m = models_[k];
        ++c_.keys_verified;
        std::string why;
        if (absl::IsNotFound(v.status())) {
          found[k] = State{false, 0};
        } else if (!v.ok()) {
          readable[k] = false;
          ++c_.read_errors;
          Violation(absl::StrCat("key ", k, " '", Key(k), "': read failed: ", v.status().ToString(),
                                 "; expected one of ", AllowedSet(m)));
          continue;
        } else if (!ParseValue(k, *v, &found[k], &why)) {
          readable[k] = false;
          ++c_.corrupt;
          Violation(absl::StrCat("key ", k, " '", Key(k), "': found ", why, "; expected one of ",
                                 AllowedSet(m)));
          continue;
        }
        for (const Pending& p : m.pending) {
          if (!p.acked) {
            ++c_.unacked_at_kill;
            if (p.state.present && p.state.SameContent(found[k])) ++c_.survived_unacked;
          }
        }
        if (Allowed(m, found[k])) continue;
        // Absent, or older than the must-survive state: an acknowledged write (or delete) is
        // lost. Newer than it but issued by no write of this key: a phantom.
        const bool older = !found[k].present || found[k].seq < m.base.seq;
        ++(older ? c_.lost : c_.phantom);
        Violation(absl::StrCat(
            "key ", k, " '", Key(k), "': found ", Describe(found[k]),
            older ? " (an acknowledged write is lost)" : " (written by no issued, unrefused write)",
            "; expected one of ", AllowedSet(m)));
      }
    }
    CheckBatches(found, readable);
    if (config_.check_every != 0 && c_.reopens % config_.check_every == 0) {
      absl::StatusOr<CheckReport> report = (*db)->Check();
      ++c_.checks;
      if (!report.ok()) {
        std::printf("note: Check failed: %s\n", report.status().ToString().c_str());
        ++c_.check_problems;
      } else {
        for (const std::string& problem : report->problems) {
          std::printf("note: Check after reopen %" PRIu64 ": %s\n", c_.reopens, problem.c_str());
          ++c_.check_problems;
        }
      }
    }
    absl::Status closed = (*db)->Close();
    if (!closed.ok()) {
      Violation(absl::StrCat("Close after the verification failed: ", closed.ToString()));
      ++c_.other_failures;
    }
    generation_first_seq_.push_back(next_seq_);
    if (trace_ != nullptr && c_.Violations() == 0) {
      trace_ = std::freopen(trace_path_.c_str(), "w", trace_);
      if (trace_ != nullptr) std::fprintf(trace_, "after reopen %" PRIu64 "\n", c_.reopens);
    }
    for (size_t k = 0; k < models_.size(); ++k) {
      models_[k].base_why = absl::StrCat("found after reopen ", c_.reopens);
      models_[k].base = found[k];
      models_[k].pending.clear();
    }
    window_.clear();
  }

  // All or nothing: a batch one of whose entries is visible must be visible whole, except where
  // a write issued after the batch replaced an entry.
  void CheckBatches(const std::vector<State>& found, const std::vector<bool>& readable) {
    for (const auto& [seq, op] : window_) {
      if (op.kind != kBatch || op.effects.size() < 2) continue;
      bool visible = false;
      for (const auto& [key, state] : op.effects) {
        visible |= readable[key] && state.present && state.SameContent(found[key]);
      }
      if (!visible) continue;
      for (const auto& [key, state] : op.effects) {
        if (!readable[key]) continue;
        const State& f = found[key];
        bool consistent = state.SameContent(f) || (f.present && f.seq > seq);
        if (!consistent && !f.present) {  // deleted by a later write?
          const KeyModel& m = models_[key];
          consistent = !m.base.present && m.base.seq > seq;
          for (const Pending& p : m.pending) {
            consistent |= p.seq > seq && !p.state.present;
          }
        }
        if (consistent) continue;
        ++c_.torn;
        Violation(absl::StrCat("batch op ", seq, " is partly applied: key ", key, " '", Key(key),
                               "' holds ", Describe(f), " instead of the batch's ", Describe(state),
                               " or a later write"));
      }
    }
  }

  void MaybeReport() {
    if (Now() < next_report_) return;
    next_report_ += config_.report_seconds;
    Report();
  }

  void Report() {
    const double fill = last_stats_.usable_bytes == 0
                            ? 0
                            : 100.0 * last_stats_.live_bytes / last_stats_.usable_bytes;
    std::printf("[%6.0f s] kills %" PRIu64 "  reopens %" PRIu64 "  ops %" PRIu64 "  acked %" PRIu64
                " (durable %" PRIu64 ")  bytes %.1f MiB  reads checked %" PRIu64
                "  keys verified %" PRIu64 "  store-full refusals %" PRIu64
                "  unacked survived %" PRIu64 "/%" PRIu64 "  fill %.0f%%\n",
                Now() - start_, c_.kills, c_.reopens, c_.ops, c_.acked, c_.acked_durable,
                c_.bytes / 1048576.0, c_.reads_checked, c_.keys_verified, c_.refusals,
                c_.survived_unacked, c_.unacked_at_kill, fill);
    std::fflush(stdout);
    reported_at_ = Now();
  }

  int Verdict() {
    if (!writer_failure_.empty()) std::printf("VIOLATION: %s\n", writer_failure_.c_str());
    if (c_.Violations() != 0) {
      std::string starts;
      for (uint64_t seq : generation_first_seq_) absl::StrAppend(&starts, " ", seq);
      std::printf("nvkv-soak: the writers' first ops:%s\n", starts.c_str());
    }
    std::printf("nvkv-soak: %s after %.0f s, seed %" PRIu64 ": corrupt values %" PRIu64
                ", phantom values %" PRIu64 ", torn batches %" PRIu64 ", read errors %" PRIu64
                ", writer failures %" PRIu64 ", other failures %" PRIu64 ", Check notes %" PRIu64
                " in %" PRIu64 " checks\n",
                c_.Violations() == 0 ? "PASS" : "FAIL", Now() - start_, config_.seed, c_.corrupt,
                c_.phantom, c_.torn, c_.read_errors, c_.writer_failures, c_.other_failures,
                c_.check_problems, c_.checks);
    if (config_.transient_read_faults) {
      std::printf("nvkv-soak: Opens while a page failed to read: %" PRIu64
                  " refused naming it, %" PRIu64 " needed nothing of it, %" PRIu64
                  " opened degraded\n",
                  c_.opens_refused_unread, c_.opens_past_unread, c_.degraded_opens);
    }
    std::printf("acknowledged writes lost: %" PRIu64 "\n", c_.lost);
    if (trace_ != nullptr) std::fclose(trace_);
    std::fflush(stdout);
    return c_.Violations() == 0 ? 0 : 1;
  }

  Config config_;
  Setup setup_;
  std::mt19937_64 rng_;
  std::vector<KeyModel> models_;
  std::map<uint64_t, Op> window_;  // operations not yet must-survive (none of them refused)
  uint64_t next_seq_ = 1;
  std::vector<uint64_t> generation_first_seq_{1};  // first op of each writer
  std::string inbuf_;
  std::string writer_failure_;
  StatsMsg last_stats_{};
  Counters c_;
  // $NVKV_SOAK_TRACE: every intent and ack since the last clean verification (it starts afresh
  // after each), for post-mortems.
  FILE* trace_ = nullptr;
  std::string trace_path_;
  uint64_t violation_lines_ = 0;
  double start_ = 0;
  double next_report_ = 0;
  double reported_at_ = 0;
};

}  // namespace
}  // namespace nvkv::soak

int main(int argc, char** argv) {
  nvkv::soak::Config config;
  const std::string error = nvkv::soak::ParseArgs(argc, argv, &config);
  if (error == "help") {
    std::fputs(nvkv::soak::kUsage, stdout);
    return 0;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "nvkv-soak: %s\n\n%s", error.c_str(), nvkv::soak::kUsage);
    return 2;
  }
  // A write to the pipe of a writer that died must not kill the supervisor.
  signal(SIGPIPE, SIG_IGN);
  return nvkv::soak::Supervisor(std::move(config)).Run();
}
