// The Abseil annotations of absl_sync_annotations.cc, under TSan (NVKV_TSAN builds only). Each
// test hands data from one thread to another through one Abseil primitive nvkv uses, with no
// other synchronization: if a wrapper were missing or wrong, TSan would report the handoff as a
// data race and (halt_on_error=1, tools/ci/tsan.sh) fail the test. race_is_reported (the
// tsan_race_reporter program) checks the other direction: the wrappers do not hide a real race.
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

struct Guarded {
  absl::Mutex mu;
  absl::CondVar changed;
  int value ABSL_GUARDED_BY(mu) = 0;
  bool ready ABSL_GUARDED_BY(mu) = false;
};

TEST(TsanAnnotationsTest, MutexOrdersWritesOfTwoThreads) {
  Guarded g;
  std::thread other([&] {
    for (int i = 0; i < 1000; ++i) {
      absl::MutexLock lock(&g.mu);
      ++g.value;
    }
  });
  for (int i = 0; i < 1000; ++i) {
    absl::MutexLock lock(&g.mu);
    ++g.value;
  }
  other.join();
  absl::MutexLock lock(&g.mu);
  EXPECT_EQ(g.value, 2000);
}

TEST(TsanAnnotationsTest, CondVarWaitSeesWhatTheSignallerWrote) {
  Guarded g;
  int payload = 0;  // unguarded: ordered by the handoff alone
  std::thread other([&] {
    payload = 42;
    absl::MutexLock lock(&g.mu);
    g.ready = true;
    g.changed.SignalAll();
  });
  {
    absl::MutexLock lock(&g.mu);
    while (!g.ready) g.changed.WaitWithTimeout(&g.mu, absl::Milliseconds(10));
  }
  EXPECT_EQ(payload, 42);
  other.join();
}

TEST(TsanAnnotationsTest, AwaitSeesWhatTheUnlockerWrote) {
  Guarded g;
  int payload = 0;
  std::thread other([&] {
    payload = 7;
    absl::MutexLock lock(&g.mu);
    g.ready = true;
  });
  {
    absl::MutexLock lock(&g.mu);
    bool* ready = &g.ready;
    g.mu.AwaitWithTimeout(absl::Condition(ready), absl::Seconds(20));
    EXPECT_TRUE(g.ready);
  }
  EXPECT_EQ(payload, 7);
  other.join();
}

TEST(TsanAnnotationsTest, NotificationOrdersNotifierBeforeWaiter) {
  absl::Notification done;
  int payload = 0;
  std::thread other([&] {
    payload = 9;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(payload, 9);
  other.join();
}

}  // namespace
