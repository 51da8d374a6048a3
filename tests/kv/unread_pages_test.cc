// Pages the device fails to read at Open (a transient EIO, a controller reset, a path that comes
// back) are not damaged pages: they may read fine at the next Open, or later in the same
// session. By default such an Open fails and names them; Options::open_degraded opens
// without their records, and then no sequence it hands out, no compaction and no checkpoint may
// let those records, once they read again, win over newer writes or come back in part.
//
// Each test crashes the store (a power cut that keeps every durable write) so that Open reads
// the log, then reopens it on a FaultDevice whose reads of one page fail during that Open only.
// On a conventional device and on a zoned one (a zone of twice a segment's pages per segment),
// where appends land in order, so that a page's number is its block as on the other.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "storage/fault_device.h"
#include "storage/mem_device.h"
#include "tests/kv/engine_ops.h"
#include "tests/kv/mem_store.h"
#include "tests/kv/test_store.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;
using storage::FaultDevice;
using storage::MemDevice;

constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint64_t kSegments = 32;

storage::MemDeviceOptions MemOptions(Layout layout) {
  return layout == Layout::kZoned ? ZonedMemStoreOptions(kSegments, kPagesPerSegment, kPageBytes)
                                  : MemStoreOptions(kSegments, kPagesPerSegment, kPageBytes);
}

struct UnreadCase {
  IndexMode mode;
  Layout layout;
};

std::string Key(int i) { return absl::StrCat("<key-", 1000 + i, ">"); }
// A value that fills most of a page: one record per page.
std::string BigValue(int i) { return absl::StrCat("v", i, "-", std::string(3000, 'a' + i % 26)); }

class UnreadPagesTest : public ::testing::TestWithParam<UnreadCase> {
 protected:
  storage::MemDeviceOptions MemOptions() const { return nvkv::kv::MemOptions(GetParam().layout); }

  void SetUp() override {
    auto storage = storage::MemStorage::Create(MemOptions().lba_bytes, MemOptions().lba_count,
                                               MemOptions().zones);
    ASSERT_THAT(storage, IsOk());
    storage_ = *storage;
  }

  Options StoreOptions(bool degraded = false) const {
    Options options;
    options.segment_bytes = kPagesPerSegment * kPageBytes;
    options.shard_count = 1;
    options.page_buffers_per_shard = 16;
    options.index_mode = GetParam().mode;
    options.background_compaction = false;  // no I/O the test did not ask for
    options.cache_bytes = 0;                // every read goes to the device
    options.open_degraded = degraded;
    return options;
  }

  // Opens the store on a FaultDevice (fault_) whose reads of `unread_page` fail until Heal().
  absl::StatusOr<std::unique_ptr<Engine>> OpenFailingReadsOf(std::optional<uint64_t> unread_page,
                                                             const Options& options) {
    auto mem = MemDevice::Open(storage_, MemOptions());
    if (!mem.ok()) return mem.status();
    storage::FaultDeviceOptions fault_options;
    fault_options.drop_weight = 0;  // a cut keeps what reached the device: only the cut matters
    fault_options.tear_weight = 0;
    auto fault = FaultDevice::Create(std::move(*mem), fault_options);
    if (!fault.ok()) return fault.status();
    fault_ = fault->get();
    if (unread_page) {
      absl::Status failing = fault_->FailReadsOf(*unread_page, 1);  // 4 KiB blocks: LBA = page
      if (!failing.ok()) return failing;
    }
    return Engine::OpenOnDevice(std::move(*fault), options);
  }

  // Ends a session the way a crash does: power fails, nothing more is written (no Close).
  void Crash(std::unique_ptr<Engine> engine) {
    ASSERT_THAT(fault_->CutPower(), IsOk());
    engine.reset();
    fault_ = nullptr;
  }

  // The pages whose bytes hold `text` (4 KiB blocks: a page's number is its LBA).
  std::set<uint64_t> PagesHolding(std::string_view text) const {
    std::vector<uint8_t> block(storage_->lba_bytes());
    std::set<uint64_t> pages;
    for (uint64_t lba = 0; lba < storage_->lba_count(); ++lba) {
      storage_->Read(lba, 1, block.data());
      const std::string_view bytes(reinterpret_cast<const char*>(block.data()), block.size());
      if (bytes.find(text) != std::string_view::npos) pages.insert(lba);
    }
    return pages;
  }

  // The one page that holds `key`, which was written once.
  uint64_t PageOf(std::string_view key) const {
    const std::set<uint64_t> pages = PagesHolding(key);
    EXPECT_EQ(pages.size(), 1u) << key;
    return pages.empty() ? 0 : *pages.begin();
  }

  // Ten keys of a page each, then `small` keys of a few bytes together on the next page, the
  // last one durable: that page holds the newest sequences of the log. Then a crash.
  void WriteThenCrash(int small) {
    auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < 10; ++i) ASSERT_THAT(Put(**engine, Key(i), BigValue(i)), IsOk());
    for (int i = 10; i < 10 + small; ++i) {
      ASSERT_THAT(Put(**engine, Key(i), "old", /*durable=*/i == 9 + small), IsOk());
    }
    Crash(std::move(*engine));
  }

  std::shared_ptr<storage::MemStorage> storage_;
  FaultDevice* fault_ = nullptr;  // the device of the engine opened last; the engine owns it
};

// By default an Open that cannot read a page of a log fails, and says which page and what to do;
// once the page reads again, the store opens with every key. (It used to open without the
// page's records: a damaged page.)
TEST_P(UnreadPagesTest, AnOpenThatCannotReadAPageOfALogFailsAndNamesIt) {
  WriteThenCrash(/*small=*/1);
  const uint64_t unread = PageOf(Key(5));
  {
    auto engine = OpenFailingReadsOf(unread, StoreOptions());
    ASSERT_FALSE(engine.ok()) << "opened without page " << unread;
    const std::string message(engine.status().message());
    EXPECT_NE(message.find(absl::StrCat("page ", unread)), std::string::npos) << message;
    EXPECT_NE(message.find("open_degraded"), std::string::npos) << message;
  }
  auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*engine)->Get(Key(i)).value_or("?"), BigValue(i)) << i;
  EXPECT_EQ((*engine)->Get(Key(10)).value_or("?"), "old");
}

// A degraded Open hands out sequences above any the page it could not read may hold: a durable
// write made after it wins over that page's record of the key once the page reads again.
TEST_P(UnreadPagesTest, AWriteAfterADegradedOpenWinsOverThePageItCouldNotRead) {
  WriteThenCrash(/*small=*/20);
  const int newest = 29;  // the newest record on the page of small keys
  const uint64_t unread = PageOf(Key(newest));
  {
    auto engine = OpenFailingReadsOf(unread, StoreOptions(/*degraded=*/true));
    ASSERT_THAT(engine, IsOk());
    EXPECT_EQ((*engine)->Stats().unreadable_pages, 1u);
    EXPECT_FALSE((*engine)->Get(Key(newest)).ok()) << "its record was on the unread page";
    fault_->HealReads();
    ASSERT_THAT(Put(**engine, Key(newest), "new"), IsOk());
    Crash(std::move(*engine));
  }
  auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->Get(Key(newest)).value_or("?"), "new");
  EXPECT_EQ((*engine)->Get(Key(10)).value_or("?"), "old") << "the page read again";
}

// A batch {put A, delete K} on a page a degraded Open could not read was not applied. Once the
// page reads again, compaction must not copy part of it (the tombstone of K, as a lone record):
// after a crash the batch is applied whole, or not at all.
TEST_P(UnreadPagesTest, ABatchOnAPageADegradedOpenCouldNotReadIsNeverAppliedInPart) {
  const std::string a = "<batch-put-A>", k = "<batch-delete-K>";
  {
    auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT(Put(**engine, k, BigValue(0)), IsOk());
    for (int i = 0; i < 3; ++i) ASSERT_THAT(Put(**engine, Key(i), BigValue(i)), IsOk());
    const std::vector<WriteOp> batch = {WriteOp{false, a, "batched"}, WriteOp{true, k, {}}};
    ASSERT_THAT((*engine)->Write(batch, /*durable=*/true), IsOk());
    Crash(std::move(*engine));
  }
  const uint64_t unread = PageOf(a);
  {
    auto engine = OpenFailingReadsOf(unread, StoreOptions(/*degraded=*/true));
    ASSERT_THAT(engine, IsOk());
    EXPECT_FALSE((*engine)->Get(a).ok());
    EXPECT_EQ((*engine)->Get(k).value_or("?"), BigValue(0)) << "the batch was not applied";
    fault_->HealReads();
    ASSERT_THAT((*engine)->CompactAll(), IsOk());
    Crash(std::move(*engine));
  }
  auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  const absl::StatusOr<std::string> got_a = (*engine)->Get(a);
  const absl::StatusOr<std::string> got_k = (*engine)->Get(k);
  const bool applied = got_a.ok() && absl::IsNotFound(got_k.status());
  const bool not_applied = absl::IsNotFound(got_a.status()) && got_k.ok();
  EXPECT_TRUE(applied || not_applied)
      << "A " << got_a.status() << ", K " << got_k.status() << ": the batch applied in part";
  // The page reads again: the acknowledged batch is back, whole.
  EXPECT_TRUE(applied);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*engine)->Get(Key(i)).value_or("?"), BigValue(i)) << i;
}

// A degraded session writes no checkpoint, at Close or on demand: one would stand for the log
// without the unread page's records, and the next Open would never read that page again.
TEST_P(UnreadPagesTest, PagesADegradedOpenCouldNotReadComeBackOnceTheyRead) {
  WriteThenCrash(/*small=*/1);
  const uint64_t unread = PageOf(Key(5));
  {
    auto engine = OpenFailingReadsOf(unread, StoreOptions(/*degraded=*/true));
    ASSERT_THAT(engine, IsOk());
    EXPECT_FALSE((*engine)->Get(Key(5)).ok());
    EXPECT_THAT((*engine)->Checkpoint(), ::nvkv::testing::StatusIs(
                                             absl::StatusCode::kFailedPrecondition));
    fault_->HealReads();
    ASSERT_THAT(Put(**engine, Key(100), "after"), IsOk());
    ASSERT_THAT((*engine)->Close(), IsOk());
  }
  auto engine = OpenFailingReadsOf(std::nullopt, StoreOptions());
  ASSERT_THAT(engine, IsOk());
  for (int i = 0; i < 10; ++i) EXPECT_EQ((*engine)->Get(Key(i)).value_or("?"), BigValue(i)) << i;
  EXPECT_EQ((*engine)->Get(Key(100)).value_or("?"), "after");
}

INSTANTIATE_TEST_SUITE_P(Modes, UnreadPagesTest,
                         ::testing::Values(UnreadCase{IndexMode::kHash, Layout::kConventional},
                                           UnreadCase{IndexMode::kOrdered, Layout::kConventional},
                                           UnreadCase{IndexMode::kHash, Layout::kZoned},
                                           UnreadCase{IndexMode::kOrdered, Layout::kZoned}),
                         [](const auto& info) {
                           return std::string(info.param.layout == Layout::kZoned ? "Zoned" : "") +
                                  (info.param.mode == IndexMode::kHash ? "Hash" : "Ordered");
                         });

}  // namespace
}  // namespace nvkv::kv
