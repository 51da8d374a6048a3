// DurablePrefix (kv/durable_prefix.h): durable_through() moves only over a gapless prefix of
// durable pages, whatever order their writes complete in; a flush covers only the writes that
// completed before it was requested; a failed write never becomes durable.
#include "kv/durable_prefix.h"

#include <gtest/gtest.h>

namespace nvkv::kv {
namespace {

TEST(DurablePrefixTest, OutOfOrderCompletionWaitsForTheEarlierPage) {
  DurablePrefix prefix;
  prefix.Assign(1, 1);
  prefix.Assign(2, 1);
  prefix.Assign(3, 4);  // a large record's run: pages 3..6
  prefix.Complete(2, 1, /*failed=*/false, /*durable=*/true, 0);
  prefix.Complete(3, 4, false, true, 0);
  EXPECT_EQ(prefix.durable_through(), 0u) << "page 1 is still in flight";
  prefix.Complete(1, 1, false, true, 0);
  EXPECT_EQ(prefix.durable_through(), 6u);
}

TEST(DurablePrefixTest, OneCommandsCompletionCompletesEveryPageItWrote) {
  DurablePrefix prefix;
  for (uint64_t counter = 1; counter <= 5; ++counter) prefix.Assign(counter, 1);
  prefix.Complete(2, 3, /*failed=*/false, /*durable=*/true, 0);  // pages 2..4 in one write
  EXPECT_EQ(prefix.unwritten_ranges(), 2u);
  EXPECT_EQ(prefix.durable_through(), 0u);
  prefix.Complete(1, 1, false, true, 0);
  EXPECT_EQ(prefix.durable_through(), 4u) << "page 5 is still in flight";
  prefix.Complete(5, 1, /*failed=*/true, true, 0);
  EXPECT_EQ(prefix.durable_through(), 4u);
  EXPECT_EQ(prefix.unwritten_ranges(), 0u);
}

TEST(DurablePrefixTest, UnwrittenRangesCountAssignedRangesUntilTheirWritesComplete) {
  DurablePrefix prefix;
  EXPECT_EQ(prefix.unwritten_ranges(), 0u);
  prefix.Assign(1, 1);
  prefix.Assign(2, 3);  // a run counts once
  prefix.Assign(5, 1);
  EXPECT_EQ(prefix.unwritten_ranges(), 3u);
  prefix.Complete(2, 3, /*failed=*/false, /*durable=*/false, 0);
  EXPECT_EQ(prefix.unwritten_ranges(), 2u);
  prefix.Complete(2, 3, false, false, 0);  // a repeated completion changes nothing
  EXPECT_EQ(prefix.unwritten_ranges(), 2u);
  prefix.Complete(1, 1, /*failed=*/true, false, 0);  // failed is written, too (never durable)
  EXPECT_EQ(prefix.unwritten_ranges(), 1u);
  prefix.Complete(5, 1, false, true, 0);
  EXPECT_EQ(prefix.unwritten_ranges(), 0u);
}

TEST(DurablePrefixTest, AFlushCoversOnlyWritesCompletedBeforeItWasRequested) {
  DurablePrefix prefix;
  prefix.Assign(1, 1);
  prefix.Assign(2, 1);
  prefix.Complete(1, 1, false, /*durable=*/false, /*flush_epoch=*/5);
  prefix.Complete(2, 1, false, false, /*flush_epoch=*/7);
  prefix.Flushed(6);  // requested after page 1 completed, before page 2 did
  EXPECT_EQ(prefix.durable_through(), 1u);
  prefix.Flushed(7);
  EXPECT_EQ(prefix.durable_through(), 2u);
}

TEST(DurablePrefixTest, AFailedWriteNeverBecomesDurableNorLetsLaterPagesThrough) {
  DurablePrefix prefix;
  prefix.Assign(1, 1);
  prefix.Assign(2, 1);
  prefix.Complete(1, 1, /*failed=*/true, /*durable=*/true, 0);
  prefix.Complete(2, 1, false, true, 0);
  prefix.Flushed(100);
  EXPECT_EQ(prefix.durable_through(), 0u);
}

TEST(DurablePrefixTest, NeedsFlushOnlyWhenAWaitersPagesAllCompletedWithoutFua) {
  DurablePrefix prefix;
  prefix.Assign(1, 1);
  prefix.Assign(2, 1);
  EXPECT_FALSE(prefix.NeedsFlush()) << "nobody waits";
  prefix.Want(2);
  prefix.Complete(1, 1, false, /*durable=*/false, 0);
  EXPECT_FALSE(prefix.NeedsFlush()) << "page 2 is still in flight: wait for it";
  prefix.Complete(2, 1, false, /*durable=*/true, 0);
  EXPECT_TRUE(prefix.NeedsFlush()) << "page 1 completed without FUA";
  prefix.Flushed(0);
  EXPECT_EQ(prefix.durable_through(), 2u);
  EXPECT_FALSE(prefix.NeedsFlush());
}

TEST(DurablePrefixTest, HasUnflushedSkipsPagesTheFlushInFlightCovers) {
  DurablePrefix prefix;
  prefix.Assign(1, 1);
  prefix.Assign(2, 1);
  bool unfinished = false;
  EXPECT_FALSE(prefix.HasUnflushed(false, 0, &unfinished));
  EXPECT_TRUE(unfinished);
  prefix.Complete(1, 1, false, /*durable=*/false, /*flush_epoch=*/3);
  unfinished = false;
  EXPECT_TRUE(prefix.HasUnflushed(/*flush_in_flight=*/false, 0, &unfinished));
  EXPECT_FALSE(prefix.HasUnflushed(/*flush_in_flight=*/true, /*flush_request_epoch=*/3,
                                   &unfinished));
  EXPECT_TRUE(unfinished) << "page 2 is still being written";
}

}  // namespace
}  // namespace nvkv::kv
