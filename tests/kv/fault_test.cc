// Device faults under the engine (FaultDevice::FailOperation): a failed page write or flush makes
// the store refuse writes (sticky) while reads go on, and a reopen on the same bytes returns
// every write acknowledged as durable; a media error on a read fails that read only; a write the
// drive tore without saying so is caught by the page checksum, never read back as a wrong value;
// a full store and a full file system are kResourceExhausted. The store cases run on a
// conventional and on a zoned memory device.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/engine.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using storage::FaultDevice;
using storage::FaultError;
using storage::MemDevice;
using storage::MemDeviceOptions;
using storage::OperationFault;
using storage::OpFilter;

// 32 segments of 256 KiB: conventional, or zoned (a zone of 512 KiB per segment, 256 KiB of it
// writable, beside the metadata zones).
MemDeviceOptions MemOptions(Layout layout) {
  MemDeviceOptions options;
  options.lba_bytes = 4096;
  options.lba_count = 2 + 32 * 64;
  options.volatile_write_cache = true;
  if (layout == Layout::kZoned) return ZonedMemStoreOptions(32, 64);
  return options;
}

// Open reads the log here (the reads that fail are the log's): no clean-close checkpoint.
constexpr EngineSeams kSeams{.checkpoint_at_close = false};

Options StoreOptions(IndexMode mode) {
  Options options;
  options.segment_bytes = 256 << 10;
  options.shard_count = 2;
  options.index_mode = mode;
  options.max_write_delay_us = 1000;
  options.background_compaction = false;  // no I/O the test did not ask for
  // The device's failures as reads meet them: no record cache answers in front of it
  // (cache_test.cc and the crash test run with one).
  options.cache_bytes = 0;
  return options;
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value, bool durable) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

absl::Status Delete(Engine& engine, std::string_view key, bool durable) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

std::string Value(int i) { return absl::StrCat("value-", i, "-", std::string(100 + i % 50, 'v')); }

struct FaultCase {
  IndexMode mode;
  Layout layout;
};

// A store in memory, formatted without faults, reopened over a FaultDevice for the test.
class FaultTest : public ::testing::TestWithParam<FaultCase> {
 protected:
  IndexMode mode() const { return GetParam().mode; }
  bool zoned() const { return GetParam().layout == Layout::kZoned; }
  MemDeviceOptions MemOptions() const { return nvkv::kv::MemOptions(GetParam().layout); }

  void SetUp() override {
    auto device = MemDevice::Create(MemOptions());
    ASSERT_THAT(device, IsOk());
    storage_ = (*device)->storage();
    auto formatted = Engine::OpenOnDevice(std::move(*device), StoreOptions(mode()), kSeams);
    ASSERT_THAT(formatted, IsOk());
  }

  // The engine over a FaultDevice; fault_ points at the device it owns. `before_open` sets
  // faults up before Open reads anything.
  std::unique_ptr<Engine> OpenFaulty(
      const storage::FaultDeviceOptions& fault_options = {},
      const std::function<void(FaultDevice&)>& before_open = nullptr) {
    auto mem = MemDevice::Open(storage_, MemOptions());
    EXPECT_THAT(mem, IsOk());
    auto fault = FaultDevice::Create(std::move(*mem), fault_options);
    EXPECT_THAT(fault, IsOk());
    fault_ = fault->get();
    if (before_open) before_open(*fault_);
    auto engine = Engine::OpenOnDevice(std::move(*fault), options_, kSeams);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // The same bytes on a device without faults.
  std::unique_ptr<Engine> OpenClean() {
    auto mem = MemDevice::Open(storage_, MemOptions());
    EXPECT_THAT(mem, IsOk());
    auto engine = Engine::OpenOnDevice(std::move(*mem), StoreOptions(mode()), kSeams);
    EXPECT_THAT(engine, IsOk());
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // Every key in `durable` reads back its value.
  static void ExpectAll(Engine& engine, const std::map<std::string, std::string>& durable) {
    for (const auto& [key, value] : durable) {
      auto got = engine.Get(key);
      ASSERT_THAT(got, IsOk()) << key;
      EXPECT_EQ(*got, value) << key;
    }
  }

  std::shared_ptr<storage::MemStorage> storage_;
  FaultDevice* fault_ = nullptr;
  Options options_ = StoreOptions(mode());  // OpenFaulty's; a test may change them
};

TEST_P(FaultTest, FailedPageWriteStopsWritesButNotReads) {
  std::map<std::string, std::string> durable;
  {
    auto engine = OpenFaulty();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 50; ++i) {
      ASSERT_THAT(Put(*engine, absl::StrCat("k", i), Value(i), true), IsOk());
      durable[absl::StrCat("k", i)] = Value(i);
    }
    ASSERT_THAT(fault_->FailOperation({.nth = 1, .filter = OpFilter::kWrite}), IsOk());
    absl::Status failed = Put(*engine, "doomed", "never durable", true);
    EXPECT_FALSE(failed.ok());
    EXPECT_THAT(failed, StatusIs(absl::StatusCode::kFailedPrecondition, "Input/output error"));
    EXPECT_EQ(fault_->fault_stats().faults_injected, 1u);
    // Sticky: every later write is refused, durable or not, also batches and deletes.
    EXPECT_THAT(Put(*engine, "later", "x", true), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(Put(*engine, "later", "x", false), StatusIs(absl::StatusCode::kFailedPrecondition));
    WriteOp del{true, "k1", {}};
    EXPECT_THAT(engine->Write(std::span<const WriteOp>(&del, 1), true),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(engine->Flush(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(engine->CompactAll(), StatusIs(absl::StatusCode::kFailedPrecondition));
    // Reads still work.
    ExpectAll(*engine, durable);
    std::vector<std::string> keys = {"k3", "k7", "missing"};
    std::vector<std::string_view> views(keys.begin(), keys.end());
    std::vector<absl::StatusOr<std::string>> values;
    engine->MultiGet(views, &values);
    EXPECT_EQ(*values[0], Value(3));
    EXPECT_EQ(*values[1], Value(7));
    EXPECT_THAT(values[2], StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(engine->Close(), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  ExpectAll(*engine, durable);
  EXPECT_THAT(Put(*engine, "after-reopen", "works", true), IsOk());
}

TEST_P(FaultTest, FailedPageWriteReachesAsynchronousWritesThroughTheirCallbacks) {
  std::map<std::string, std::string> durable;
  {
    auto engine = OpenFaulty();
    ASSERT_NE(engine, nullptr);
    std::vector<absl::Status> outcomes;
    auto record = [&outcomes](absl::Status status) { outcomes.push_back(status); };
    for (int i = 0; i < 20; ++i) {
      const std::string key = absl::StrCat("k", i), value = Value(i);
      durable[key] = value;
      WriteOp op{false, key, value};
      ASSERT_THAT(engine->WriteAsync(std::span<const WriteOp>(&op, 1), true, record), IsOk());
    }
    while (engine->pending_writes() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
    ASSERT_EQ(outcomes.size(), 20u);
    for (const absl::Status& status : outcomes) EXPECT_THAT(status, IsOk());
    outcomes.clear();
    // The next page write fails: the writes waiting for it (and for any later page of its head:
    // the durable prefix never passes a failed page) hear so from their callbacks; those on the
    // other shard's head may still become durable, and say so. Once the writer has met the
    // failure, which may come before the loop ends, new writes are refused at once.
    ASSERT_THAT(fault_->FailOperation({.nth = 1, .filter = OpFilter::kWrite}), IsOk());
    size_t started = 0;
    std::map<std::string, absl::Status> doomed;  // by key: callbacks run in any order
    for (int i = 0; i < 5; ++i) {
      const std::string key = absl::StrCat("doomed", i);
      WriteOp op{false, key, "maybe durable"};
      absl::Status status = engine->WriteAsync(
          std::span<const WriteOp>(&op, 1), true,
          [&doomed, key](absl::Status outcome) { doomed[key] = std::move(outcome); });
      if (!status.ok()) {
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, "Input/output error"));
        break;
      }
      ++started;
    }
    ASSERT_GE(started, 1u);
    while (engine->pending_writes() > 0) ASSERT_THAT(engine->Poll(1), IsOk());
    ASSERT_EQ(doomed.size(), started);
    int failed = 0;
    for (const auto& [key, outcome] : doomed) {
      if (outcome.ok()) {
        durable[key] = "maybe durable";  // reported durable: it must survive
        continue;
      }
      ++failed;
      EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kFailedPrecondition, "Input/output error"));
    }
    EXPECT_GE(failed, 1) << "the write whose page failed was reported durable";
    // Sticky: later asynchronous writes are refused at once, and never call back.
    WriteOp later{false, "later", "x"};
    EXPECT_THAT(engine->WriteAsync(std::span<const WriteOp>(&later, 1), false, record),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_EQ(engine->pending_writes(), 0u);
  }
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  ExpectAll(*engine, durable);
}

TEST_P(FaultTest, FailedFlushStopsWritesButNotReads) {
  std::map<std::string, std::string> durable;
  {
    auto engine = OpenFaulty();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 20; ++i) {
      ASSERT_THAT(Put(*engine, absl::StrCat("d", i), Value(i), true), IsOk());
      durable[absl::StrCat("d", i)] = Value(i);
    }
    // Non-durable writes: written without FUA once their pages age out, so that a flush
    // command makes them durable (the writer's own, once they have waited max_write_delay_us,
    // or Flush's): that one fails.
    const uint64_t flushes_before = fault_->fault_stats().flushes;
    ASSERT_THAT(fault_->FailOperation({.nth = 1, .filter = OpFilter::kFlush}), IsOk());
    int written = 0;
    for (; written < 200; ++written) {
      absl::Status put = Put(*engine, absl::StrCat("n", written), Value(written), false);
      if (!put.ok()) {
        // The writer's timed flush of the earlier ones failed meanwhile (a slow machine, or a
        // sanitizer build): writes are refused from then on.
        ASSERT_THAT(put, StatusIs(absl::StatusCode::kFailedPrecondition));
        ASSERT_EQ(fault_->fault_stats().faults_injected, 1u);
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_THAT(engine->Flush(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_EQ(fault_->fault_stats().flushes, flushes_before + 1);
    EXPECT_EQ(fault_->fault_stats().faults_injected, 1u);
    // Not retried, sticky.
    EXPECT_THAT(engine->Flush(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(Put(*engine, "later", "x", true), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_EQ(fault_->fault_stats().flushes, flushes_before + 1);
    ExpectAll(*engine, durable);
    ASSERT_GT(written, 0);  // the flush fails only once some of them have been written
    const int probe = std::min(5, written - 1);
    auto got = engine->Get(absl::StrCat("n", probe));  // in memory or on the device: readable
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(*got, Value(probe));
  }
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  ExpectAll(*engine, durable);
}

// An NVMe status on a page write or on a flush (as the passthrough backend reports it) fails the
// write with a one-line error that names the status, every later write names it too, and a
// reopen finds every durable write. Each status and operation in turn, on one store.
TEST_P(FaultTest, NvmeStatusOnWriteOrFlushIsNamedAndLosesNothing) {
  struct Case {
    uint16_t nvme_status;
    const char* name;
  };
  const Case cases[] = {{storage::kNvmeWriteFault, "Write Fault"},
                        {storage::kNvmeNamespaceWriteProtected, "Namespace is Write Protected"},
                        {storage::kNvmeCapacityExceeded, "Capacity Exceeded"}};
  std::map<std::string, std::string> durable;
  int next_key = 0;
  for (const Case& c : cases) {
    for (const OpFilter filter : {OpFilter::kWrite, OpFilter::kFlush}) {
      SCOPED_TRACE(
          absl::StrCat(c.name, filter == OpFilter::kWrite ? " on a write" : " on a flush"));
      {
        auto engine = OpenFaulty();
        ASSERT_NE(engine, nullptr);
        for (int i = 0; i < 20; ++i, ++next_key) {
          const std::string key = absl::StrCat("k", next_key);
          ASSERT_THAT(Put(*engine, key, Value(next_key), true), IsOk());
          durable[key] = Value(next_key);
        }
        ASSERT_THAT(fault_->FailOperation({.nth = 1,
                                           .filter = filter,
                                           .error = FaultError::kNvmeStatus,
                                           .nvme_status = c.nvme_status}),
                    IsOk());
        absl::Status failed;
        if (filter == OpFilter::kWrite) {
          failed = Put(*engine, "doomed", "never durable", true);
        } else {
          // Non-durable writes go out without FUA once their pages age out, so a flush makes
          // them durable: the writer's timed one (then a put is refused first) or Flush's.
          for (int i = 0; i < 200 && failed.ok(); ++i) {
            failed = Put(*engine, absl::StrCat("n", next_key, "-", i), Value(i), false);
          }
          absl::SleepFor(absl::Milliseconds(100));
          if (failed.ok()) failed = engine->Flush();
        }
        ASSERT_FALSE(failed.ok());
        EXPECT_EQ(fault_->fault_stats().faults_injected, 1u);
        EXPECT_NE(failed.message().find(c.name), std::string_view::npos) << failed;
        EXPECT_EQ(failed.ToString().find('\n'), std::string::npos) << failed;
        const absl::Status later = Put(*engine, "later", "x", true);
        EXPECT_THAT(later, StatusIs(absl::StatusCode::kFailedPrecondition));
        EXPECT_NE(later.message().find(c.name), std::string_view::npos) << later;
        EXPECT_EQ(later.ToString().find('\n'), std::string::npos) << later;
        ExpectAll(*engine, durable);
      }
      auto engine = OpenClean();
      ASSERT_NE(engine, nullptr);
      ExpectAll(*engine, durable);
      EXPECT_THAT(engine->Get("later"), StatusIs(absl::StatusCode::kNotFound));
      ASSERT_THAT(engine->Close(), IsOk());
    }
  }
}

TEST_P(FaultTest, MediaErrorOnReadFailsThatReadOnly) {
  auto engine = OpenFaulty();
  ASSERT_NE(engine, nullptr);
  // Sequential durable puts: each seals its page, so the keys sit on different pages.
  for (int i = 0; i < 10; ++i) {
    ASSERT_THAT(Put(*engine, absl::StrCat("m", i), Value(i), true), IsOk());
  }
  ASSERT_THAT(fault_->FailOperation(
                  {.nth = 1, .filter = OpFilter::kRead, .error = FaultError::kMediaError}),
              IsOk());
  EXPECT_THAT(engine->Get("m4"), StatusIs(absl::StatusCode::kDataLoss, "Unrecovered Read Error"));
  EXPECT_EQ(fault_->fault_stats().faults_injected, 1u);
  for (int i = 0; i < 10; ++i) {
    auto got = engine->Get(absl::StrCat("m", i));
    ASSERT_THAT(got, IsOk()) << i;
    EXPECT_EQ(*got, Value(i));
  }
  // The store is not broken by a failed read.
  EXPECT_THAT(Put(*engine, "m4", "rewritten", true), IsOk());
  EXPECT_EQ(*engine->Get("m4"), "rewritten");
}

// Hash mode confirms a key by reading its page before an overwrite: a media error there fails
// that write (nothing was appended), not the store.
// A hash-mode delete reads its key's pages to find every entry of the key (an overwrite does
// not: it is written blind, blind_write_test.cc).
TEST_P(FaultTest, MediaErrorWhileADeleteChecksItsKeyFailsThatWriteOnly) {
  if (mode() != IndexMode::kHash) GTEST_SKIP() << "the ordered index needs no read to write";
  auto engine = OpenFaulty();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(Put(*engine, "key", "old", true), IsOk());
  ASSERT_THAT(fault_->FailOperation(
                  {.nth = 1, .filter = OpFilter::kRead, .error = FaultError::kMediaError}),
              IsOk());
  EXPECT_THAT(Delete(*engine, "key", true), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(*engine->Get("key"), "old");
  EXPECT_THAT(Delete(*engine, "key", true), IsOk());
  EXPECT_THAT(engine->Get("key"), StatusIs(absl::StatusCode::kNotFound));
}

// The drive reports success but only the first 512-byte sector of the page reached the media.
TEST_P(FaultTest, SilentlyTornWriteIsDataLossNeverAWrongValue) {
  {
    auto engine = OpenFaulty();
    ASSERT_NE(engine, nullptr);
    ASSERT_THAT(Put(*engine, "before", "intact", true), IsOk());
    ASSERT_THAT(Put(*engine, "torn", "first version", true), IsOk());
    ASSERT_THAT(fault_->FailOperation({.nth = 1,
                                       .filter = OpFilter::kWrite,
                                       .error = FaultError::kSilent,
                                       .partial = storage::PartialWrite::kPrefix,
                                       .sectors = 1}),
                IsOk());
    const std::string value(3000, 't');  // spans sectors the tear leaves behind
    ASSERT_THAT(Put(*engine, "torn", value, true), IsOk()) << "the drive said it was written";
    ASSERT_EQ(fault_->fault_stats().faults_injected, 1u);
    EXPECT_THAT(engine->Get("torn"), StatusIs(absl::StatusCode::kDataLoss, "checksum"));
    EXPECT_EQ(*engine->Get("before"), "intact");
  }
  // Recovery ends that segment's log at the torn page: the key is back at its earlier version or
  // absent, never garbage.
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  auto got = engine->Get("torn");
  if (got.ok()) {
    EXPECT_EQ(*got, "first version");
  } else {
    EXPECT_THAT(got, StatusIs(absl::StatusCode::kNotFound));
  }
}

// A write made with durable=false is durable within 2 x max_write_delay_us plus the device's
// write and flush time, also when no one waits for a durable write: well after that, power fails
// dropping every write the device was not told to flush, and every one of them is there.
// (The writer once sent a flush only for a waiting durable writer: non-durable writes stayed in
// the drive's volatile cache for as long as no durable write or Flush came.)
TEST_P(FaultTest, NonDurableWritesAreDurableAfterTheWriteDelay) {
  std::map<std::string, std::string> written;
  {
    storage::FaultDeviceOptions fault_options;
    fault_options.keep_weight = 0;  // at the cut, every write not flushed is lost
    fault_options.tear_weight = 0;
    auto engine = OpenFaulty(fault_options);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 200; ++i) {
      ASSERT_THAT(Put(*engine, absl::StrCat("n", i), Value(i), false), IsOk());
      written[absl::StrCat("n", i)] = Value(i);
    }
    // 100 x max_write_delay_us (1 ms): far beyond the bound, and nothing else happens. Then, so
    // that a loaded machine (a writer thread not scheduled) does not fail the test, up to 2 s
    // more while the device still holds unflushed writes: without a timed flush they stay.
    absl::SleepFor(absl::Milliseconds(100));
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (fault_->fault_stats().unflushed_writes > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    auto cut = fault_->CutPower();
    ASSERT_THAT(cut, IsOk());
    EXPECT_EQ(cut->writes_dropped, 0u) << "writes were still in the volatile cache";
    (void)engine->Close();
  }
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Stats().live_keys, written.size());
  ExpectAll(*engine, written);
}

// options.h: a non-durable write is durable once a later durable write has returned OK, whatever
// shards the two went to. Power fails right after the durable write, dropping every write the
// device was not told to flush, and every earlier non-durable write is there. (A durable write
// used to wait for its own shard's log only: the others' writes were lost.)
TEST_P(FaultTest, DurableWriteMakesEveryEarlierNonDurableWriteDurable) {
  options_.max_write_delay_us = 60'000'000;  // nothing ages out by itself meanwhile
  std::map<std::string, std::string> written;
  {
    storage::FaultDeviceOptions fault_options;
    fault_options.keep_weight = 0;  // at the cut, every write not flushed is lost
    fault_options.tear_weight = 0;
    auto engine = OpenFaulty(fault_options);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 40; ++i) {  // on both shards
      ASSERT_THAT(Put(*engine, absl::StrCat("n", i), Value(i), false), IsOk());
      written[absl::StrCat("n", i)] = Value(i);
    }
    ASSERT_THAT(Put(*engine, "durable", "last", true), IsOk());
    written["durable"] = "last";
    ASSERT_THAT(fault_->CutPower(), IsOk());
    (void)engine->Close();
  }
  auto engine = OpenClean();
  ASSERT_NE(engine, nullptr);
  ExpectAll(*engine, written);
  EXPECT_EQ(engine->Stats().live_keys, written.size());
}

// The timed flush is rate-limited: a steady non-durable load sends at most one flush per
// max_write_delay_us (1 ms here), however many pages complete meanwhile.
TEST_P(FaultTest, SteadyNonDurableLoadFlushesAtMostOncePerWriteDelay) {
  auto engine = OpenFaulty();
  ASSERT_NE(engine, nullptr);
  const uint64_t flushes_before = fault_->fault_stats().flushes;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 20000; ++i) {
    ASSERT_THAT(Put(*engine, absl::StrCat("n", i % 2000), Value(i), false), IsOk());
  }
  absl::SleepFor(absl::Milliseconds(20));
  const uint64_t flushes = fault_->fault_stats().flushes - flushes_before;
  const int64_t elapsed_us = absl::ToInt64Microseconds(absl::Now() - start);
  EXPECT_GT(flushes, 0u);
  EXPECT_LE(flushes, static_cast<uint64_t>(elapsed_us / 1000 + 1)) << elapsed_us << " us";
}

// Keys the test can find in raw bytes: "<key-NNNNN>".
std::string Key(int i) { return absl::StrCat("<key-", 10000 + i, ">"); }

// For every key of the form Key(i), the pages (4 KiB blocks: a page's number is its LBA) whose
// bytes hold it: its records.
std::map<std::string, std::set<uint64_t>> PagesOfKeys(const storage::MemStorage& storage) {
  std::vector<uint8_t> block(storage.lba_bytes());
  std::map<std::string, std::set<uint64_t>> pages;
  for (uint64_t lba = 0; lba < storage.lba_count(); ++lba) {
    storage.Read(lba, 1, block.data());
    const std::string_view bytes(reinterpret_cast<const char*>(block.data()), block.size());
    for (size_t at = bytes.find("<key-"); at != std::string_view::npos;
         at = bytes.find("<key-", at + 1)) {
      const size_t end = bytes.find('>', at);
      if (end == std::string_view::npos) continue;
      pages[std::string(bytes.substr(at, end + 1 - at))].insert(lba);
    }
  }
  return pages;
}

// One unreadable page (a bad sector: every read of it fails) in the middle of a segment's log.
// By default Open fails and names it (unread_pages_test.cc: the read may work later). Opened
// degraded, recovery takes it for a hole: Open succeeds, every key elsewhere reads back, the
// loss is counted, and `check` says where.
TEST_P(FaultTest, UnreadablePageFailsOpenOrIsAHoleForADegradedOne) {
  std::map<std::string, std::string> written;
  {
    auto engine = OpenClean();
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < 600; ++i) {
      written[Key(i)] = Value(i);
      ASSERT_THAT(Put(*engine, Key(i), Value(i), false), IsOk());
    }
    ASSERT_THAT(engine->Close(), IsOk());
  }
  // A page in the middle of the log that holds key 0, with other keys on it.
  std::map<std::string, std::set<uint64_t>> pages = PagesOfKeys(*storage_);
  ASSERT_EQ(pages[Key(0)].size(), 1u);
  const uint64_t bad_page = *pages[Key(0)].begin() + 2;
  std::set<std::string> lost;
  for (const auto& [key, value] : written) {
    if (pages[key].contains(bad_page)) lost.insert(key);
  }
  ASSERT_FALSE(lost.empty());
  for (const FaultError error : {FaultError::kIoError, FaultError::kMediaError}) {
    SCOPED_TRACE(error == FaultError::kIoError ? "EIO" : "media error");
    {
      auto mem = MemDevice::Open(storage_, MemOptions());
      ASSERT_THAT(mem, IsOk());
      auto fault = FaultDevice::Create(std::move(*mem), {});
      ASSERT_THAT(fault, IsOk());
      ASSERT_THAT((*fault)->FailReadsOf(bad_page, 1, error), IsOk());
      auto refused = Engine::OpenOnDevice(std::move(*fault), options_, kSeams);
      // On zones, which position the unreadable place held is unknown: every position no
      // readable page of the zone claims is named (each may have been there).
      EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable,
                                    zoned() ? absl::StrCat("page ", bad_page, ", ")
                                            : absl::StrCat("page ", bad_page,
                                                           " of the log cannot be read")));
    }
    options_.open_degraded = true;
    auto engine = OpenFaulty({}, [&](FaultDevice& device) {
      ASSERT_THAT(device.FailReadsOf(bad_page, 1, error), IsOk());  // 4 KiB blocks: LBA = page
    });
    options_.open_degraded = false;
    ASSERT_NE(engine, nullptr);
    const EngineStats stats = engine->Stats();
    EXPECT_GE(stats.recovery_damaged_pages, 1u);
    EXPECT_EQ(stats.unreadable_pages, 1u);
    for (const auto& [key, value] : written) {
      auto got = engine->Get(key);
      if (lost.contains(key)) {
        EXPECT_FALSE(got.ok()) << key << " was on the unreadable page";
        continue;
      }
      ASSERT_THAT(got, IsOk()) << key;
      EXPECT_EQ(*got, value);
    }
    absl::StatusOr<CheckReport> report = engine->Check();
    ASSERT_THAT(report, IsOk());
    bool named = false;
    for (const std::string& problem : report->problems) {
      named = named || (problem.find(absl::StrCat("page ", bad_page)) != std::string::npos &&
                        problem.find("unreadable") != std::string::npos);
    }
    EXPECT_TRUE(named) << "check does not name page " << bad_page;
  }
}

// Compaction meets an unreadable page in a victim: it copies what it can read, leaves the
// segment in place (its unreadable records may still be indexed), reports it, and the store
// goes on taking writes. It used to mark the store broken.
TEST_P(FaultTest, UnreadablePageInAVictimLeavesItInPlaceAndTheStoreWorking) {
  std::map<std::string, std::string> written;
  {
    auto engine = OpenClean();
    ASSERT_NE(engine, nullptr);
    for (int round = 0; round < 2; ++round) {  // the second round makes half the first one's dead
      for (int i = 0; i < 600; ++i) {
        if (round == 1 && i % 2 == 0) continue;  // these stay live in the old segments
        written[Key(i)] = Value(i + round);
        ASSERT_THAT(Put(*engine, Key(i), written[Key(i)], false), IsOk());
      }
    }
    ASSERT_THAT(engine->Close(), IsOk());
  }
  // Key 0 was written once, in the first round: the page after it is in an old segment, among
  // live keys and dead ones.
  std::map<std::string, std::set<uint64_t>> pages = PagesOfKeys(*storage_);
  ASSERT_EQ(pages[Key(0)].size(), 1u);
  const uint64_t bad_page = *pages[Key(0)].begin() + 1;
  std::set<std::string> lost;
  for (int i = 0; i < 600; i += 2) {
    if (pages[Key(i)].contains(bad_page)) lost.insert(Key(i));
  }
  ASSERT_FALSE(lost.empty());
  // The block goes bad after Open: recovery read it, compaction cannot.
  auto engine = OpenFaulty();
  ASSERT_NE(engine, nullptr);
  ASSERT_THAT(fault_->FailReadsOf(bad_page, 1, FaultError::kMediaError), IsOk());
  EXPECT_THAT(engine->CompactAll(), IsOk());
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.segments_cleaned, 0u);
  EXPECT_EQ(stats.unreadable_pages, 1u) << "compaction met the bad page once";
  EXPECT_GE(stats.compaction_damaged_pages, 1u);
  EXPECT_GE(stats.segments_retained, 1u) << "the victim with the bad page stays";
  // Keys on the bad page are still indexed there: reading them fails, never a wrong value.
  for (const std::string& key : lost) EXPECT_FALSE(engine->Get(key).ok()) << key;
  // Writes go on, and every key not on the bad page reads back.
  EXPECT_THAT(Put(*engine, "after", "compaction", true), IsOk());
  for (const auto& [key, value] : written) {
    if (lost.contains(key)) continue;
    auto got = engine->Get(key);
    ASSERT_THAT(got, IsOk()) << key;
    EXPECT_EQ(*got, value);
  }
  EXPECT_THAT(engine->Close(), IsOk());
  // And the next Open works too.
  auto reopened = OpenClean();
  ASSERT_NE(reopened, nullptr);
  EXPECT_THAT(reopened->Get("after"), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Modes, FaultTest,
                         ::testing::Values(FaultCase{IndexMode::kHash, Layout::kConventional},
                                           FaultCase{IndexMode::kOrdered, Layout::kConventional},
                                           FaultCase{IndexMode::kHash, Layout::kZoned},
                                           FaultCase{IndexMode::kOrdered, Layout::kZoned}),
                         [](const auto& info) {
                           return std::string(info.param.layout == Layout::kZoned ? "Zoned" : "") +
                                  (info.param.mode == IndexMode::kHash ? "Hash" : "Ordered");
                         });

// A full file system when the store file is created: Engine::Open says kResourceExhausted and
// leaves no file behind. Needs a small tmpfs (O_DIRECT on tmpfs: Linux 6.6+), mounted in a
// private mount namespace of a child process (root, or unprivileged user namespaces).
TEST(FileSystemFullTest, CreatingAStoreOnAFullFileSystemIsResourceExhausted) {
  char dir_template[] = "/tmp/nvkv-full-fs-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 0 pass, 77 skip, 1 fail (details on stderr).
    if (unshare(CLONE_NEWNS) != 0) {
      const uid_t uid = getuid();
      const gid_t gid = getgid();
      if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) _exit(77);
      const std::string uid_map = absl::StrCat("0 ", uid, " 1");
      const std::string gid_map = absl::StrCat("0 ", gid, " 1");
      int fd = open("/proc/self/setgroups", O_WRONLY);
      if (fd >= 0) {
        (void)!write(fd, "deny", 4);
        close(fd);
      }
      fd = open("/proc/self/uid_map", O_WRONLY);
      if (fd < 0 || write(fd, uid_map.data(), uid_map.size()) < 0) _exit(77);
      close(fd);
      fd = open("/proc/self/gid_map", O_WRONLY);
      if (fd < 0 || write(fd, gid_map.data(), gid_map.size()) < 0) _exit(77);
      close(fd);
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) _exit(77);
    const std::string path = dir + "/store";
    const int probe = open((dir + "/probe").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (probe < 0) _exit(77);  // this kernel's tmpfs refuses O_DIRECT
    close(probe);
    unlink((dir + "/probe").c_str());
    Options options;
    options.capacity_bytes = 64 << 20;
    options.segment_bytes = 256 << 10;
    options.shard_count = 2;
    auto engine = Engine::Open(path, options);
    int code = 0;
    if (engine.ok() || !absl::IsResourceExhausted(engine.status())) {
      std::fprintf(stderr, "Open on a full file system: %s\n",
                   engine.ok() ? "OK" : engine.status().ToString().c_str());
      code = 1;
    }
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      std::fprintf(stderr, "a partial store file was left behind (%lld bytes)\n",
                   static_cast<long long>(st.st_size));
      code = 1;
    }
    _exit(code);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  rmdir(dir.c_str());
  ASSERT_TRUE(WIFEXITED(wstatus));
  if (WEXITSTATUS(wstatus) == 77) {
    GTEST_SKIP() << "cannot mount a small tmpfs with O_DIRECT here (needs a mount namespace: "
                    "root or unprivileged user namespaces, and Linux 6.6+)";
  }
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

}  // namespace
}  // namespace nvkv::kv
