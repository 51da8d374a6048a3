// The commands that look after a store: format, stats, check, compact, info.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nvkv/db.h"
#include "nvkv/stats.h"
#include "tools/cli/cli.h"
#include "tools/cli/progress.h"
#include "util/json_writer.h"
#include "util/size_parse.h"

namespace nvkv::cli {
namespace {

// Rows of "name  value", the names padded to one column.
class Table {
 public:
  void Row(std::string name, std::string value) {
    rows_.emplace_back(std::move(name), std::move(value));
  }
  std::string Text() const {
    size_t width = 0;
    for (const auto& row : rows_) width = std::max(width, row.first.size());
    std::string out;
    for (const auto& [name, value] : rows_) {
      absl::StrAppend(&out, name, std::string(width - name.size() + 2, ' '), value, "\n");
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

std::string Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? "0.0%" : absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

std::string RingFeatureNames(const RingFeatures& ring) {
  std::vector<std::string> names;
  auto add = [&names](bool on, const char* name) {
    if (on) names.emplace_back(name);
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
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

Outcome PrintAndClose(DB& db, const std::string& text) {
  (void)WriteOut(text);
  if (Outcome out = FinishStdout(); out.exit_code != kExitOk) return out;
  return FromStatus(db.Close());
}

// ----- format helpers -----

// Open finds the superblocks in the first 128 KiB of the device (both copies, for any page size
// up to 64 KiB) and formats when those bytes are all zero. The public API has no way to
// reformat an existing store, so `format --force` on a block device zeroes them itself.
constexpr size_t kSuperblockAreaBytes = 128 * 1024;

absl::Status ZeroSuperblockArea(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  void* zeros = nullptr;
  if (posix_memalign(&zeros, 4096, kSuperblockAreaBytes) != 0) {
    close(fd);
    return absl::ResourceExhaustedError("no memory");
  }
  std::memset(zeros, 0, kSuperblockAreaBytes);
  absl::Status status;
  if (pwrite(fd, zeros, kSuperblockAreaBytes, 0) != static_cast<ssize_t>(kSuperblockAreaBytes)) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("zeroing the start of ", path));
  } else if (fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("fsync ", path));
  }
  std::free(zeros);
  close(fd);
  return status;
}

// Fails when another opener holds the store (Open takes the same flock).
absl::Status CheckNotInUse(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  const int locked = flock(fd, LOCK_EX | LOCK_NB);
  const int error = errno;
  close(fd);  // releases the lock: Open takes it again on its own descriptor
  if (locked != 0 && error == EWOULDBLOCK) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is open in another process"));
  }
  if (locked != 0) return absl::ErrnoToStatus(error, absl::StrCat("flock ", path));
  return absl::OkStatus();
}

// Makes `path` formattable after Open refused it (`refusal`): a store file is deleted and
// created afresh, a block device has its superblock area zeroed, and anything else that is not
// a store is left for force_format. Returns the options for the next Open.
absl::StatusOr<Options> PrepareForce(const std::string& path, const absl::Status& refusal,
                                     Options options, bool capacity_given) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  if (absl::Status free = CheckNotInUse(path); !free.ok()) return free;
  options.error_if_exists = false;
  options.force_format = true;
  if (S_ISREG(st.st_mode)) {
    if (!capacity_given) options.capacity_bytes = static_cast<uint64_t>(st.st_size);
    if (unlink(path.c_str()) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("unlink ", path));
    return options;
  }
  if (!absl::IsAlreadyExists(refusal)) return options;  // not a store: force_format does it
  if (S_ISBLK(st.st_mode)) {
    if (absl::Status zeroed = ZeroSuperblockArea(path); !zeroed.ok()) return zeroed;
    return options;
  }
  return absl::UnimplementedError(absl::StrCat(
      path, " holds a store, and nvkv cannot yet reformat a store on a character device; wipe "
            "the namespace first (for example blkdiscard on its /dev/nvmeXnY block device)"));
}

}  // namespace

// ----- format -----

Outcome RunFormat(const Context& context) {
  const std::string& path = context.db_path;
  Options options;
  options.index_mode = context.index_mode;  // recorded: later commands open with it
  options.backend = context.backend;
  if (context.shard_count != 0) options.shard_count = context.shard_count;
  options.background_compaction = false;  // an empty store has nothing to compact
  options.error_if_exists = true;
  const bool capacity_given = context.Has("--capacity");
  struct {
    const char* name;
    uint32_t* field;
  } const layout[] = {{"--page-bytes", &options.page_bytes},
                      {"--segment-bytes", &options.segment_bytes}};
  for (const auto& [name, field] : layout) {
    if (!context.Has(name)) continue;
    absl::StatusOr<uint64_t> size = util::ParsePositiveSize(context.Get(name));
    if (!size.ok()) return Usage(absl::StrCat(name, ": ", size.status().message()));
    if (*size > UINT32_MAX) return Usage(absl::StrCat(name, ": ", *size, " is too large"));
    *field = static_cast<uint32_t>(*size);
  }
  if (capacity_given) {
    absl::StatusOr<uint64_t> size = util::ParsePositiveSize(context.Get("--capacity"));
    if (!size.ok()) return Usage(absl::StrCat("--capacity: ", size.status().message()));
    options.capacity_bytes = *size;
  }
  // An empty file holds nothing to lose, but Open would keep its size of zero.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
    if (unlink(path.c_str()) != 0) return Failure(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  // Only what --force overrides: a store there, or data that is not one (not a store in use, or
  // a device that fails the format's writes).
  const bool refused = absl::IsAlreadyExists(db.status()) ||
                       db.status().GetPayload(DB::kFormatRefusedPayload).has_value();
  if (refused && !context.Has("--force")) {
    if (absl::IsAlreadyExists(db.status())) {
      return Failure(absl::StrCat(path, " already holds an nvkv store; add --force to destroy "
                                        "it and format a new one"));
    }
    return Failure(absl::StrCat(OneLine(db.status().message()), " (--force formats anyway)"));
  }
  if (refused) {
    absl::StatusOr<Options> forced = PrepareForce(path, db.status(), options, capacity_given);
    if (!forced.ok()) return FromStatus(forced.status());
    db = DB::Open(*forced, path);
  }
  if (!db.ok()) return FromStatus(db.status());
  const Stats stats = (*db)->GetStats();
  const uint64_t segment_bytes = uint64_t{stats.page_bytes} * stats.pages_per_segment;
  return PrintAndClose(
      **db, absl::StrFormat("formatted %s: %s on %s, %d-byte pages, %s segments (%d of them, %s "
                            "for the log)\n",
                            path, FormatBytes(stats.device.capacity_bytes),
                            DeviceKindName(stats.device.kind), stats.page_bytes,
                            FormatBytes(segment_bytes), stats.segments_total,
                            FormatBytes(stats.capacity_bytes)));
}

// ----- stats -----

// On a zoned namespace, the zones the store holds and keeps active, and what compaction reset.
void AddZonesInUseRow(const Stats& s, Table& table) {
  if (!s.device.zoned) return;
  const ZoneStats& z = s.device.zones;
  const std::string active =
      z.active_budget == 0
          ? std::string("none active (opened to read)")
          : absl::StrFormat("%d active of the %d it keeps at most", z.active, z.active_budget);
  table.Row("zones in use",
            absl::StrFormat("%d hold the store, %s; %d reset by compaction, %d runs of pages "
                            "landed apart, %d retired (out of service; the device adds no write "
                            "amplification of its own)",
                            z.in_use, active, z.resets, z.place_runs, z.retired));
}

Outcome RunStats(const Context& context) {
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return FromStatus(db.status());
  const Stats s = (*db)->GetStats();
  if (context.Has("--json")) return PrintAndClose(**db, s.ToJson() + "\n");
  Table table;
  table.Row("live keys", absl::StrCat(s.live_keys, s.stale_entries > 0
                                                      ? absl::StrCat(" (and ", s.stale_entries,
                                                                     " stale index entries)")
                                                      : std::string()));
  table.Row("index memory", absl::StrFormat("%s (%.1f bytes per key, %s index)",
                                            FormatBytes(s.index_bytes), s.index_bytes_per_key,
                                            IndexModeName(s.index_mode)));
  table.Row("live bytes", absl::StrFormat("%s of %s (%s); %s usable", FormatBytes(s.live_bytes),
                                          FormatBytes(s.capacity_bytes),
                                          Percent(s.live_bytes, s.capacity_bytes),
                                          FormatBytes(s.usable_bytes)));
  table.Row("segments", absl::StrFormat("%d total, %d free, %d cleaned", s.segments_total,
                                        s.segments_free, s.segments_cleaned));
  table.Row("damage", absl::StrFormat("%d segments retained, %d damaged pages met by "
                                      "compaction, %d pages unreadable (check names them)",
                                      s.segments_retained, s.compaction_damaged_pages,
                                      s.unreadable_pages));
  table.Row("recovery", absl::StrFormat("%s, %d pages scanned, %d free segments not read, %d "
                                        "map pages damaged, %d segments read by summary, %d "
                                        "summaries unused, %d records, %d torn batches "
                                        "discarded, %d damaged pages skipped, %s of table at "
                                        "most, %d pass(es), %d restart(s), %.3f s",
                                        s.recovery_source(),
                                        s.recovery_pages_scanned, s.recovery_segments_skipped,
                                        s.recovery_map_pages_damaged,
                                        s.recovery_segments_summarized,
                                        s.recovery_summaries_unused, s.recovery_records,
                                        s.recovery_batches_discarded, s.recovery_damaged_pages,
                                        FormatBytes(s.recovery_table_bytes),
                                        s.recovery_passes, s.recovery_restarts,
                                        s.recovery_seconds));
  table.Row("operations", absl::StrFormat("%d puts, %d deletes, %d gets, %d batches", s.puts,
                                          s.deletes, s.gets, s.batches));
  table.Row("bytes written", absl::StrFormat("%s by users, %s to the device (%s by "
                                             "compaction), write amplification %.2f",
                                             FormatBytes(s.user_bytes_written),
                                             FormatBytes(s.device_bytes_written),
                                             FormatBytes(s.compaction_bytes_written),
                                             s.write_amplification));
  AddZonesInUseRow(s, table);
  table.Row("device operations",
            absl::StrFormat("%d page writes in %d commands, %d page reads (%d of them by %d "
                            "writes' key checks), %d flushes, %d FUA writes",
                            s.pages_written, s.page_write_commands, s.page_reads,
                            s.key_check_page_reads, s.verify_reads, s.flushes, s.fua_writes));
  table.Row("hash overwrites",
            absl::StrFormat("%d blind writes; compaction settled %d stale entries with %d page "
                            "reads",
                            s.blind_writes, s.stale_entries_settled, s.settle_page_reads));
  table.Row("cache", absl::StrFormat("%d hits, %d misses, %d evictions; %d keys in %s of %s",
                                     s.cache_hits, s.cache_misses, s.cache_evictions,
                                     s.cache_entries, FormatBytes(s.cache_bytes),
                                     FormatBytes(s.cache_capacity_bytes)));
  return PrintAndClose(**db, absl::StrCat(table.Text(),
                                          "(operation counters count since this command "
                                          "opened the store)\n"));
}

// ----- check -----

Outcome RunCheck(const Context& context) {
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return FromStatus(db.status());
  const auto start = std::chrono::steady_clock::now();
  Progress progress("check", "segments");
  absl::StatusOr<CheckReport> report =
      (*db)->Check([&progress](uint64_t done, uint64_t total) { progress.Update(done, total); });
  progress.Finish();
  if (!report.ok()) return FromStatus(report.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const CheckReport& r = *report;
  if (context.Has("--json")) {
    util::JsonObject json;
    json.Add("store", context.db_path)
        .Add("ok", r.ok())
        .Add("segments_scanned", r.segments_scanned)
        .Add("segments_in_use", r.segments_in_use)
        .Add("pages_scanned", r.pages_scanned)
        .Add("pages_valid", r.pages_valid)
        .Add("pages_in_holes", r.pages_in_holes)
        .Add("pages_stale", r.pages_stale)
        .Add("pages_unwritten", r.pages_unwritten)
        .Add("pages_unreadable", r.pages_unreadable)
        .Add("torn_tails", r.torn_tails)
        .Add("records", r.records)
        .Add("live_keys_checked", r.live_keys_checked)
        .Add("seconds", seconds)
        .AddStrings("problems", r.problems)
        .AddStrings("notes", r.notes);
    if (Outcome out = PrintAndClose(**db, json.Finish() + "\n"); out.exit_code != kExitOk) {
      return out;
    }
    if (r.ok()) return Ok();
    return Outcome{kExitDamage, absl::StrCat("found ", r.problems.size(),
                                             r.problems.size() == 1 ? " problem" : " problems",
                                             " (in the JSON on stdout)")};
  }
  Table table;
  table.Row("store", context.db_path);
  table.Row("segments", absl::StrFormat("%d scanned, %d in use", r.segments_scanned,
                                        r.segments_in_use));
  table.Row("pages", absl::StrFormat("%d scanned: %d valid, %d damaged inside a log, %d stale, "
                                     "%d never written, %d unreadable",
                                     r.pages_scanned, r.pages_valid, r.pages_in_holes,
                                     r.pages_stale, r.pages_unwritten, r.pages_unreadable));
  table.Row("torn tails", absl::StrFormat("%d (logs ending at a write cut short by a crash)",
                                          r.torn_tails));
  table.Row("records", absl::StrFormat("%d in the logs; %d live keys read back and compared",
                                       r.records, r.live_keys_checked));
  table.Row("time", absl::StrFormat("%.2f s", seconds));
  std::string text = table.Text();
  for (const std::string& note : r.notes) absl::StrAppend(&text, "note: ", note, "\n");
  for (const std::string& problem : r.problems) absl::StrAppend(&text, "problem: ", problem, "\n");
  absl::StrAppend(&text, r.ok() ? "result: no problems found\n"
                                : absl::StrCat("result: DAMAGED, ", r.problems.size(),
                                               r.problems.size() == 1 ? " problem\n"
                                                                      : " problems\n"));
  if (Outcome out = PrintAndClose(**db, text); out.exit_code != kExitOk) return out;
  if (r.ok()) return Ok();
  return Outcome{kExitDamage,
                 absl::StrCat("found ", r.problems.size(),
                              r.problems.size() == 1 ? " problem" : " problems",
                              " (listed on stdout); the first: ", r.problems.front())};
}

// ----- compact -----

Outcome RunCompact(const Context& context) {
  // Background compaction stays off: the engine's compaction queue is a SINGLE_ISSUER ring that
  // both its compaction thread and CompactAll's caller submit to, and once the thread has used
  // it, CompactAll on another thread hangs (and the other way round, the thread's next clean
  // fails). With one issuer, this thread, the question does not arise.
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kCompact);
  if (!db.ok()) return FromStatus(db.status());
  DB& store = **db;
  const Stats before = store.GetStats();
  const uint64_t in_use = before.segments_total - before.segments_free;
  absl::Status status;
  {
    // CompactAll reports no progress of its own: watch the cleaned-segment counter.
    Progress progress("compact", "segments");
    std::atomic<bool> done{false};
    std::thread watcher;
    if (progress.enabled()) {
      watcher = std::thread([&] {
        while (!done.load()) {
          const uint64_t cleaned = store.GetStats().segments_cleaned - before.segments_cleaned;
          progress.Update(std::min(cleaned, in_use), in_use);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
    }
    status = store.CompactAll();
    done.store(true);
    if (watcher.joinable()) watcher.join();
    progress.Finish();
  }
  if (!status.ok()) return FromStatus(status);
  const Stats after = store.GetStats();
  // What the user asks of compact: how much room it gave back. Cleaning copies live records
  // into other segments, so the segments cleaned are not all free afterwards: say both.
  const uint64_t segment_bytes = uint64_t{after.page_bytes} * after.pages_per_segment;
  const uint64_t gained = after.segments_free > before.segments_free
                              ? after.segments_free - before.segments_free
                              : 0;
  return PrintAndClose(
      store, absl::StrFormat("compacted %s: %s reclaimed (%d segments cleaned, %d more free: "
                             "%d of %d free now); %s of live data kept\n",
                             context.db_path, FormatBytes(gained * segment_bytes),
                             after.segments_cleaned - before.segments_cleaned, gained,
                             after.segments_free, after.segments_total,
                             FormatBytes(after.live_bytes)));
}

// ----- resize -----

Outcome RunResize(const Context& context) {
  Options options = context.OptionsFor(Context::Use::kCompact);  // nothing cleans meanwhile
  options.grow_store = true;
  options.capacity_bytes = 0;  // the file as it is, unless --capacity
  struct stat st;
  const bool regular_file = stat(context.db_path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  if (context.Has("--capacity")) {
    absl::StatusOr<uint64_t> size = util::ParsePositiveSize(context.Get("--capacity"));
    if (!size.ok()) return Usage(absl::StrCat("--capacity: ", size.status().message()));
    if (!regular_file) {
      return Usage(absl::StrCat("--capacity: ", context.db_path,
                                " is not a store file; a store on a device grows to the device "
                                "(resize without --capacity)"));
    }
    if (*size < static_cast<uint64_t>(st.st_size)) {
      return Usage(absl::StrCat("--capacity: a store never shrinks; ", context.db_path, " is ",
                                FormatBytes(static_cast<uint64_t>(st.st_size)), " already"));
    }
    options.capacity_bytes = *size;
  }
  uint64_t before_bytes = 0, before_segments = 0;
  {
    absl::StatusOr<std::unique_ptr<DB>> reader = context.Open(Context::Use::kRead);
    if (!reader.ok()) return FromStatus(reader.status());
    const Stats before = (*reader)->GetStats();
    before_bytes = before.capacity_bytes;
    before_segments = before.segments_total;
    if (Outcome closed = FromStatus((*reader)->Close()); closed.exit_code != kExitOk) {
      return closed;
    }
  }
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(options);
  if (!db.ok()) return FromStatus(db.status());
  const Stats after = (*db)->GetStats();
  if (after.segments_total == before_segments) {
    return PrintAndClose(
        **db, absl::StrFormat("%s: unchanged, %s for the log (%d segments): its %s holds no "
                              "more%s\n",
                              context.db_path, FormatBytes(after.capacity_bytes),
                              after.segments_total, regular_file ? "file" : "device",
                              regular_file ? "; give --capacity to grow the file" : ""));
  }
  return PrintAndClose(
      **db, absl::StrFormat("resized %s: %s -> %s for the log (%d -> %d segments), every key "
                            "kept\n",
                            context.db_path, FormatBytes(before_bytes),
                            FormatBytes(after.capacity_bytes), before_segments,
                            after.segments_total));
}

// ----- info -----

// The rows that say what the device is, and its zones when it has them.
void AddDeviceRows(const DeviceStats& d, Table& table) {
  table.Row("path", d.path);
  table.Row("backend", absl::StrCat(DeviceKindName(d.kind),
                                    d.nsid != 0 ? absl::StrCat(" (namespace ", d.nsid, ")") : "",
                                    d.block_device ? " (block device)" : ""));
  table.Row("device", absl::StrFormat("%d-byte LBAs x %d = %s; max transfer %s; %s write cache",
                                      d.lba_bytes, d.lba_count, FormatBytes(d.capacity_bytes),
                                      FormatBytes(d.max_transfer_bytes),
                                      d.volatile_write_cache ? "volatile" : "no volatile"));
  if (!d.zoned) return;
  const ZoneStats& z = d.zones;
  if (z.zone_count == 0) {
    table.Row("zones", "zoned; its zone model is read through the NVMe generic node (/dev/ngXnY)");
    return;
  }
  auto limit = [](uint32_t n) { return n == 0 ? std::string("no limit") : absl::StrCat(n); };
  table.Row("zones", absl::StrFormat("%d zones of %s, %s writable each; at most %s open and %s "
                                     "active; appends up to %s",
                                     z.zone_count, FormatBytes(z.zone_bytes),
                                     FormatBytes(z.zone_capacity_bytes), limit(z.max_open),
                                     limit(z.max_active), FormatBytes(z.max_append_bytes)));
  if (z.states_reported) {
    std::string states = absl::StrFormat("%d empty, %d open, %d closed, %d full", z.empty,
                                         z.open, z.closed, z.full);
    if (z.read_only + z.offline != 0) {
      absl::StrAppendFormat(&states, ", %d read-only, %d offline", z.read_only, z.offline);
    }
    table.Row("zone states", states);
  }
}

// A device no store opens on that is zoned: what it is, and why there is no store.
Outcome InfoWithoutStore(const Context& context, const absl::Status& open_error) {
  absl::StatusOr<DeviceStats> device = DB::InspectDevice(context.db_path);
  if (context.Has("--json") || !device.ok() || !device->zoned) return FromStatus(open_error);
  Table table;
  AddDeviceRows(*device, table);
  table.Row("store", OneLine(open_error.message()));
  (void)WriteOut(table.Text());
  if (Outcome out = FinishStdout(); out.exit_code != kExitOk) return out;
  return FromStatus(open_error);
}

Outcome RunInfo(const Context& context) {
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return InfoWithoutStore(context, db.status());
  const Stats s = (*db)->GetStats();
  if (context.Has("--json")) {
    // The limits beside the store's configuration and state as Stats gives them (its
    // operation counters count this command's own open only).
    util::JsonObject json;
    json.Add("max_key_bytes", DB::kMaxKeyBytes)
        .Add("max_value_bytes", (*db)->max_value_bytes())
        .Add("max_batch_bytes", (*db)->max_batch_bytes())
        .AddRaw("store", s.ToJson());
    return PrintAndClose(**db, json.Finish() + "\n");
  }
  const DeviceStats& d = s.device;
  const uint64_t segment_bytes = uint64_t{s.page_bytes} * s.pages_per_segment;
  Table table;
  AddDeviceRows(d, table);
  if (!d.placement.ids.empty()) {
    table.Row("placement", absl::StrFormat("%d FDP placement handles (%s); the log writes through "
                                           "%d, the metadata through %d",
                                           d.placement.ids.size(),
                                           absl::StrJoin(d.placement.ids, ", "),
                                           d.placement.log_id, d.placement.metadata_id));
  }
  table.Row("layout", absl::StrFormat("%d-byte pages, %d pages (%s) per segment, %d segments",
                                      s.page_bytes, s.pages_per_segment,
                                      FormatBytes(segment_bytes), s.segments_total));
  table.Row("capacity", absl::StrFormat("%s for the log, %s of it usable by puts (the rest "
                                        "is kept free for compaction)",
                                        FormatBytes(s.capacity_bytes),
                                        FormatBytes(s.usable_bytes)));
  table.Row("use", absl::StrFormat("%s live (%s) in %d keys; %d of %d segments free",
                                   FormatBytes(s.live_bytes),
                                   Percent(s.live_bytes, s.capacity_bytes),
                                   s.live_keys, s.segments_free, s.segments_total));
  AddZonesInUseRow(s, table);
  table.Row("index", absl::StrFormat("%s (the store's unless --ordered or --hash asks for the "
                                     "other), %d shards",
                                     IndexModeName(s.index_mode), s.shard_count));
  table.Row("limits", absl::StrFormat("keys up to %d bytes, values up to %d bytes, batches up "
                                      "to %d bytes",
                                      DB::kMaxKeyBytes, (*db)->max_value_bytes(),
                                      (*db)->max_batch_bytes()));
  table.Row("cache", s.cache_capacity_bytes == 0
                         ? std::string("off")
                         : absl::StrFormat("%s for recently used values (S3-FIFO)",
                                           FormatBytes(s.cache_capacity_bytes)));
  table.Row("durable", !d.volatile_write_cache
                           ? std::string("every completed write (no volatile write cache)")
                           : s.durable_writes == DurableWrites::kFlush
                                 ? std::string("pages written plainly, then one flush for all "
                                               "completed (group commit)")
                                 : std::string("each page a durable write waits on written with "
                                               "FUA"));
  table.Row("ring", absl::StrFormat("depth %d, %d SQ entries; %s", d.ring.queue_depth,
                                    d.ring.sq_entries, RingFeatureNames(d.ring)));
  for (const std::string& note : d.notes) table.Row("note", note);
  return PrintAndClose(**db, table.Text());
}

}  // namespace nvkv::cli
