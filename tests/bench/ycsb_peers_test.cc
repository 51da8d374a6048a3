// nvkv-ycsb's peers (--engine rocksdb|lmdb, bench/ycsb/store.h): the same workloads run on them
// with every record read checked, and their directories are handled with care. Each test skips
// when this build has no such peer (Debian's librocksdb-dev / liblmdb-dev were absent).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/ycsb/cli.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::ycsb {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

std::vector<std::string> Args(Engine engine, const std::string& workload, const std::string& db,
                              const std::string& queue_depth = "1") {
  return {"--engine", EngineName(engine),
          "-P", std::string(NVKV_YCSB_WORKLOADS_DIR) + "/" + workload,
          "-p", "recordcount=500",
          "-p", "operationcount=1000",
          "-p", "nvkv.capacity=64m",
          "-p", "nvkv.cache=1m",
          "-p", "nvkv.queuedepth=" + queue_depth,
          "-p", "nvkv.durable=false",
          "-p", "nvkv.seed=7",
          "-p", "dataintegrity=true",
          "--db", db, "--quiet"};
}

class PeerTest : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    if (!EngineBuiltIn(GetParam())) GTEST_SKIP() << EngineName(GetParam()) << " not built in";
  }
  nvkv::testing::TempDir dir_;
};

TEST_P(PeerTest, RunsWorkloadsAndChecksEveryRecord) {
  for (const char* workload : {"workloada", "workloade", "workloadf"}) {
    SCOPED_TRACE(workload);
    absl::StatusOr<CommandLine> cl = ParseCommandLine(Args(GetParam(), workload, dir_.File("db")));
    ASSERT_THAT(cl, IsOk());
    absl::StatusOr<BenchmarkResult> result = RunBenchmark(*cl);
    ASSERT_THAT(result, IsOk());
    ASSERT_EQ(result->phases.size(), 2u);
    EXPECT_EQ(result->phases[0].latency[static_cast<int>(OpType::kInsert)].count(), 500u);
    const PhaseResult& run = result->phases[1];
    EXPECT_EQ(run.operations, 1000u);
    for (int t = 0; t < kOpTypes; ++t) {
      EXPECT_EQ(run.failures[t], 0u) << OpName(static_cast<OpType>(t)) << ": " << run.first_error;
    }
    EXPECT_EQ(result->run.device, EngineName(GetParam()));
  }
}

TEST_P(PeerTest, RefusesAQueueDepthAboveOne) {
  absl::StatusOr<CommandLine> cl =
      ParseCommandLine(Args(GetParam(), "workloadc", dir_.File("db"), "8"));
  ASSERT_THAT(cl, IsOk());
  EXPECT_THAT(RunBenchmark(*cl), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(PeerTest, ALoadNeverRemovesADirectoryHoldingOtherFiles) {
  const std::string db = dir_.File("db");
  ASSERT_TRUE(std::filesystem::create_directories(db));
  { std::ofstream(db + "/notes.txt") << "mine"; }
  absl::StatusOr<CommandLine> cl = ParseCommandLine(Args(GetParam(), "workloadc", db));
  ASSERT_THAT(cl, IsOk());
  EXPECT_THAT(RunBenchmark(*cl), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(std::filesystem::exists(db + "/notes.txt"));
}

INSTANTIATE_TEST_SUITE_P(Peers, PeerTest, ::testing::Values(Engine::kRocksDb, Engine::kLmdb),
                         [](const auto& info) { return std::string(EngineName(info.param)); });

}  // namespace
}  // namespace nvkv::ycsb
