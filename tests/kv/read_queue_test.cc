// Per-thread read queues: each reading thread gets one queue (a ring, a file descriptor,
// registered buffers) per store, and gives it back when it exits, whether the store is still
// open or closed before the thread ends.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/engine.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::kv {
namespace {

using ::nvkv::testing::IsOk;

// The smallest store Open accepts with one shard: 8 segments of 256 KiB.
Options TinyStore() {
  Options options;
  options.capacity_bytes = 4 << 20;
  options.segment_bytes = 256 << 10;
  options.shard_count = 1;
  options.page_buffers_per_shard = 8;
  options.read_queue_depth = 4;
  options.background_compaction = false;
  return options;
}

absl::Status Put(Engine& engine, std::string_view key, std::string_view value) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
}

absl::Status Delete(Engine& engine, std::string_view key) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), /*durable=*/true);
}

// Open file descriptors of this process (each read queue holds two: its ring and its own
// descriptor of the store file).
size_t OpenFds() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

// Runs `body` on a new thread and waits for it to end (thread_local destructors included).
template <typename F>
void OnOwnThread(F body) {
  std::thread thread(body);
  thread.join();
}

TEST(ReadQueueTest, ThreadsThatExitReleaseTheirReadQueues) {
  nvkv::testing::TempDir dir;
  auto engine = Engine::Open(dir.File("store"), TinyStore());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "key", "value"), IsOk());
  OnOwnThread([&] { EXPECT_EQ(*(*engine)->Get("key"), "value"); });
  const size_t fds_before = OpenFds();
  constexpr int kThreads = 2000;
  constexpr int kAtOnce = 8;
  std::atomic<int> found{0};
  for (int i = 0; i < kThreads; i += kAtOnce) {
    std::vector<std::thread> wave;
    for (int j = 0; j < kAtOnce; ++j) {
      wave.emplace_back([&] {
        absl::StatusOr<std::string> value = (*engine)->Get("key");
        if (value.ok() && *value == "value") found.fetch_add(1);
      });
    }
    for (std::thread& thread : wave) thread.join();
  }
  EXPECT_EQ(found.load(), kThreads);
  EXPECT_EQ(OpenFds(), fds_before);
  EXPECT_EQ((*engine)->Stats().read_queues, 0u);
  EXPECT_THAT((*engine)->Close(), IsOk());
}

TEST(ReadQueueTest, ThreadReadingManyStoresKeepsOneQueuePerStore) {
  nvkv::testing::TempDir dir;
  constexpr int kStores = 11;  // more than any fixed-size per-thread cache would hold
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < kStores; ++i) {
    auto engine = Engine::Open(dir.File("store" + std::to_string(i)), TinyStore());
    ASSERT_THAT(engine, IsOk());
    ASSERT_THAT(Put(**engine, "key", std::to_string(i)), IsOk());
    engines.push_back(std::move(*engine));
  }
  OnOwnThread([&] {
    auto read_all = [&] {
      for (int i = 0; i < kStores; ++i) EXPECT_EQ(*engines[i]->Get("key"), std::to_string(i));
    };
    read_all();
    const size_t fds_after_first_round = OpenFds();
    for (int round = 0; round < 20; ++round) read_all();
    EXPECT_EQ(OpenFds(), fds_after_first_round);
    for (const auto& engine : engines) EXPECT_EQ(engine->Stats().read_queues, 1u);
  });
  for (const auto& engine : engines) EXPECT_EQ(engine->Stats().read_queues, 0u);
  for (const auto& engine : engines) EXPECT_THAT(engine->Close(), IsOk());
}

TEST(ReadQueueTest, WritingThreadsThatExitReleaseTheirQueues) {
  // In hash mode a delete of a key the record cache does not hold reads the key's pages to find
  // its entries, on the deleting thread's queue: no cache here, so that every delete does.
  nvkv::testing::TempDir dir;
  Options options = TinyStore();
  options.cache_bytes = 0;
  auto engine = Engine::Open(dir.File("store"), options);
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "key", "0"), IsOk());
  OnOwnThread([&] {
    EXPECT_THAT(Delete(**engine, "key"), IsOk());
    EXPECT_THAT(Put(**engine, "key", "1"), IsOk());
  });
  const size_t fds_before = OpenFds();
  const uint64_t verify_reads_before = (*engine)->Stats().verify_reads;
  constexpr int kThreads = 200;
  for (int i = 0; i < kThreads; ++i) {
    OnOwnThread([&] {
      EXPECT_THAT(Delete(**engine, "key"), IsOk());
      EXPECT_THAT(Put(**engine, "key", std::to_string(i)), IsOk());
    });
  }
  EXPECT_EQ((*engine)->Stats().verify_reads - verify_reads_before, uint64_t{kThreads});
  EXPECT_EQ(OpenFds(), fds_before);
  EXPECT_EQ((*engine)->Stats().read_queues, 0u);
  EXPECT_EQ(*(*engine)->Get("key"), std::to_string(kThreads - 1));
  EXPECT_THAT((*engine)->Close(), IsOk());
}

TEST(ReadQueueTest, ThreadOutlivingItsStoreExitsCleanly) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  const size_t fds_before = OpenFds();
  auto engine = Engine::Open(path, TinyStore());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "key", "value"), IsOk());
  std::atomic<int> step{0};
  std::thread reader([&] {
    EXPECT_EQ(*(*engine)->Get("key"), "value");
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    // The store is closed and destroyed now; this thread's queue went with it.
    auto reopened = Engine::Open(path, TinyStore());
    ASSERT_THAT(reopened, IsOk());
    EXPECT_EQ(*(*reopened)->Get("key"), "value");
    EXPECT_EQ((*reopened)->Stats().read_queues, 1u);
    EXPECT_THAT((*reopened)->Close(), IsOk());
  });
  while (step.load() != 1) std::this_thread::yield();
  EXPECT_EQ((*engine)->Stats().read_queues, 1u);
  EXPECT_THAT((*engine)->Close(), IsOk());
  engine->reset();
  step.store(2);
  reader.join();
  EXPECT_EQ(OpenFds(), fds_before);
}

TEST(ReadQueueTest, StoreClosingWhileItsReadersExit) {
  nvkv::testing::TempDir dir;
  auto engine = Engine::Open(dir.File("store"), TinyStore());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT(Put(**engine, "key", "value"), IsOk());
  constexpr int kReaders = 8;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      EXPECT_EQ(*(*engine)->Get("key"), "value");
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      // Exits (and gives its queue back) while the store closes.
    });
  }
  while (ready.load() != kReaders) std::this_thread::yield();
  go.store(true);
  EXPECT_THAT((*engine)->Close(), IsOk());
  for (std::thread& reader : readers) reader.join();
  engine->reset();
}

// Threads with durable asynchronous writes still waiting (their eventfds listening to the log
// writer) exit while the store closes and is destroyed: a queue released during Close must stop
// listening before the log writer is freed (ASan sees the use after free otherwise), and every
// eventfd goes with its queue.
TEST(ReadQueueTest, StoreClosingWhileThreadsWithWaitingWritesExit) {
  nvkv::testing::TempDir dir;
  const size_t fds_before = OpenFds();
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    // A store per round: the tiny store has room for a few reopens only.
    auto engine = Engine::Open(dir.File("store" + std::to_string(round)), TinyStore());
    ASSERT_THAT(engine, IsOk());
    constexpr int kWriters = 4;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> writers;
    for (int i = 0; i < kWriters; ++i) {
      writers.emplace_back([&, i] {
        for (int j = 0; j < 3; ++j) {
          const std::string key = "w" + std::to_string(i) + "-" + std::to_string(j);
          WriteOp op{false, key, "v"};
          EXPECT_THAT((*engine)->WriteAsync(std::span<const WriteOp>(&op, 1), true,
                                            [](absl::Status) {}),
                      IsOk());
        }
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        // Exits with its writes' callbacks never run, while the store closes.
      });
    }
    while (ready.load() != kWriters) std::this_thread::yield();
    go.store(true);
    EXPECT_THAT((*engine)->Close(), IsOk());
    engine->reset();
    for (std::thread& writer : writers) writer.join();
  }
  EXPECT_EQ(OpenFds(), fds_before);
  // Everything the abandoned writes put there is durable (Close flushed it).
  auto engine = Engine::Open(dir.File("store" + std::to_string(kRounds - 1)), TinyStore());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ(*(*engine)->Get("w3-2"), "v");
}

// A queue's ring is entered only by its own thread (registered ring descriptors are per thread,
// and DEFER_TASKRUN rings refuse other threads): so no queue may be left with a request in
// flight for another thread to wait out when it is destroyed. Here this thread reads store B,
// then store A, writes A asynchronously (durable) and closes A: A's log writer and this
// thread's queue of A must have no eventfd wait left armed (in the first case, the closing
// thread entered store B's idle ring through the writer's registered index, and waited there
// for ever).
TEST(ReadQueueTest, ClosingAStoreLeavesNoWaitArmedForAnotherThreadToReap) {
  for (bool single_issuer : {true, false}) {
    SCOPED_TRACE(single_issuer ? "single issuer" : "not single issuer");
    nvkv::testing::TempDir dir;
    Options options = TinyStore();
    options.single_issuer = single_issuer;
    options.cache_bytes = 0;  // the reads below go to the device
    auto store_b = Engine::Open(dir.File("b"), options);
    ASSERT_THAT(store_b, IsOk());
    ASSERT_THAT(Put(**store_b, "key", "b"), IsOk());
    auto store_a = Engine::Open(dir.File("a"), options);
    ASSERT_THAT(store_a, IsOk());
    for (int i = 0; i < 8; ++i) ASSERT_THAT(Put(**store_a, "k" + std::to_string(i), "a"), IsOk());
    EXPECT_EQ(*(*store_b)->Get("key"), "b");
    // Reads of A in flight while durable writes wait: Poll arms its eventfd wait on A's queue.
    int done = 0;
    for (int i = 0; i < 3; ++i) {
      ASSERT_THAT((*store_a)->GetAsync("k" + std::to_string(i),
                                       [&done](absl::StatusOr<std::string>) { ++done; }),
                  IsOk());
      const std::string key = "n" + std::to_string(i);
      WriteOp op{false, key, "v"};
      ASSERT_THAT((*store_a)->WriteAsync(std::span<const WriteOp>(&op, 1), true,
                                         [&done](absl::Status) { ++done; }),
                  IsOk());
    }
    while ((*store_a)->pending_reads() + (*store_a)->pending_writes() > 0) {
      ASSERT_THAT((*store_a)->Poll(1), IsOk());
    }
    EXPECT_EQ(done, 6);
    EXPECT_THAT((*store_a)->Close(), IsOk());
    store_a->reset();
    EXPECT_EQ(*(*store_b)->Get("key"), "b");
    EXPECT_THAT((*store_b)->Close(), IsOk());
  }
}

TEST(ReadQueueTest, ThreadExitingWithReadsInFlightAbandonsThem) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  {
    auto engine = Engine::Open(path, TinyStore());
    ASSERT_THAT(engine, IsOk());
    for (int i = 0; i < 4; ++i) ASSERT_THAT(Put(**engine, "k" + std::to_string(i), "v"), IsOk());
  }
  // Reopened: every record is on the device, so each GetAsync reads a page.
  auto engine = Engine::Open(path, TinyStore());
  ASSERT_THAT(engine, IsOk());
  const size_t fds_before = OpenFds();
  std::atomic<int> callbacks{0};
  OnOwnThread([&] {
    for (int i = 0; i < 4; ++i) {
      ASSERT_THAT((*engine)->GetAsync("k" + std::to_string(i),
                                      [&](absl::StatusOr<std::string>) { callbacks.fetch_add(1); }),
                  IsOk());
    }
    EXPECT_EQ((*engine)->pending_reads(), 4u);
  });
  EXPECT_EQ(callbacks.load(), 0);  // only a Poll on that thread could have run them
  EXPECT_EQ(OpenFds(), fds_before);
  EXPECT_EQ((*engine)->Stats().read_queues, 0u);
  EXPECT_EQ(*(*engine)->Get("k3"), "v");
  EXPECT_THAT((*engine)->Close(), IsOk());
}

}  // namespace
}  // namespace nvkv::kv
