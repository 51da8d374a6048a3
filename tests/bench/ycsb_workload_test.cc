// Short runs of the shipped workloads A-F against a small store: each performs the operation mix
// its file asks for, checks every record it reads (dataintegrity), and exits 0.
#include <cstdio>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/ycsb/cli.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::ycsb {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

constexpr uint64_t kRecords = 1000;
constexpr uint64_t kOperations = 2000;

std::vector<std::string> Args(const std::string& workload, const std::string& db) {
  // Non-durable run-phase writes keep the test fast (a durable write waits for the disk).
  return {"-P", std::string(NVKV_YCSB_WORKLOADS_DIR) + "/" + workload,
          "-p", "recordcount=" + std::to_string(kRecords),
          "-p", "operationcount=" + std::to_string(kOperations),
          "-p", "nvkv.capacity=32m",
          "-p", "nvkv.queuedepth=8",
          "-p", "nvkv.durable=false",
          "-p", "nvkv.seed=7",
          "-p", "dataintegrity=true",
          "--db", db, "--quiet"};
}

struct Expected {
  const char* workload;
  // Expected counts of READ, UPDATE, INSERT, SCAN, READ-MODIFY-WRITE in the run phase.
  double counts[kOpTypes];
};

class WorkloadMix : public ::testing::TestWithParam<Expected> {};

TEST_P(WorkloadMix, PerformsTheExpectedOperationMix) {
  const Expected& expected = GetParam();
  nvkv::testing::TempDir dir;
  absl::StatusOr<CommandLine> cl = ParseCommandLine(Args(expected.workload, dir.File("y.db")));
  ASSERT_THAT(cl, IsOk());
  absl::StatusOr<BenchmarkResult> result = RunBenchmark(*cl);
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->phases.size(), 2u);
  const PhaseResult& load = result->phases[0];
  EXPECT_EQ(load.latency[static_cast<int>(OpType::kInsert)].count(), kRecords);
  const PhaseResult& run = result->phases[1];
  EXPECT_EQ(run.operations, kOperations);
  for (int t = 0; t < kOpTypes; ++t) {
    EXPECT_EQ(run.failures[t], 0u) << OpName(static_cast<OpType>(t)) << ": " << run.first_error;
    const double want = expected.counts[t];
    // Binomial noise: 2000 draws at p = 0.5 have sd 22, at p = 0.05 sd 10.
    const double tolerance = want == 0 ? 0 : std::max(50.0, 0.1 * want);
    EXPECT_NEAR(run.latency[t].count(), want, tolerance) << OpName(static_cast<OpType>(t));
  }
}

// F: every read-modify-write also counts one READ and one UPDATE, as in YCSB.
INSTANTIATE_TEST_SUITE_P(
    CoreWorkloads, WorkloadMix,
    ::testing::Values(Expected{"workloada", {1000, 1000, 0, 0, 0}},
                      Expected{"workloadb", {1900, 100, 0, 0, 0}},
                      Expected{"workloadc", {2000, 0, 0, 0, 0}},
                      Expected{"workloadd", {1900, 0, 100, 0, 0}},
                      Expected{"workloade", {0, 0, 100, 1900, 0}},
                      Expected{"workloadf", {2000, 1000, 0, 0, 1000}}),
    [](const ::testing::TestParamInfo<Expected>& info) {
      return std::string(info.param.workload);
    });

// warmupoperationcount runs that many operations of the mix first, reported apart: the run phase
// still counts exactly operationcount, and the warm-up has filled the cache (workload C reads
// only, so after the warm-up the zipfian hot set is cached and the run hits more than it did).
TEST(Warmup, RunsUnmeasuredOperationsBeforeTheRun) {
  nvkv::testing::TempDir dir;
  std::vector<std::string> args = Args("workloadc", dir.File("y.db"));
  args.insert(args.end(), {"-p", "warmupoperationcount=3000", "-p", "nvkv.cache=1m"});
  absl::StatusOr<CommandLine> cl = ParseCommandLine(args);
  ASSERT_THAT(cl, IsOk());
  absl::StatusOr<BenchmarkResult> result = RunBenchmark(*cl);
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->phases.size(), 3u);
  EXPECT_EQ(result->phases[0].phase, "load");
  const PhaseResult& warmup = result->phases[1];
  const PhaseResult& run = result->phases[2];
  EXPECT_EQ(warmup.phase, "warmup");
  EXPECT_EQ(warmup.operations, 3000u);
  EXPECT_EQ(run.phase, "run");
  EXPECT_EQ(run.operations, kOperations);
  EXPECT_EQ(run.failures[static_cast<int>(OpType::kRead)], 0u) << run.first_error;
  const auto hit_rate = [](const PhaseResult& p) {
    return static_cast<double>(p.store.cache_hits) / (p.store.cache_hits + p.store.cache_misses);
  };
  EXPECT_GT(hit_rate(run), hit_rate(warmup));
}

// nvkv.reapbatch: a client that waits for completions in batches of four still performs and
// checks every operation (reads and writes in flight together: workload A); 0 is refused.
TEST(ReapBatch, ClientsWaitingForBatchesOfCompletionsFinishEveryOperation) {
  nvkv::testing::TempDir dir;
  std::vector<std::string> args = Args("workloada", dir.File("y.db"));
  args.insert(args.end(), {"-p", "nvkv.reapbatch=4"});
  absl::StatusOr<CommandLine> cl = ParseCommandLine(args);
  ASSERT_THAT(cl, IsOk());
  absl::StatusOr<BenchmarkResult> result = RunBenchmark(*cl);
  ASSERT_THAT(result, IsOk());
  const PhaseResult& run = result->phases.back();
  EXPECT_EQ(run.operations, kOperations);
  for (int t = 0; t < kOpTypes; ++t) {
    EXPECT_EQ(run.failures[t], 0u) << OpName(static_cast<OpType>(t)) << ": " << run.first_error;
  }
  EXPECT_GT(run.latency[static_cast<int>(OpType::kRead)].count(), 0u);
  EXPECT_GT(run.latency[static_cast<int>(OpType::kUpdate)].count(), 0u);

  args.insert(args.end(), {"-p", "nvkv.reapbatch=0"});
  cl = ParseCommandLine(args);
  ASSERT_THAT(cl, IsOk());
  EXPECT_THAT(RunBenchmark(*cl).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "nvkv.reapbatch"));
}

TEST(Main, ExitsZeroAndWritesSvgAndJson) {
  nvkv::testing::TempDir dir;
  std::vector<std::string> args = Args("workloadb", dir.File("y.db"));
  args.push_back("--svg");
  args.push_back(dir.File("lat.svg"));
  args.push_back("--json");
  std::vector<char*> argv = {const_cast<char*>("nvkv-ycsb")};
  for (std::string& arg : args) argv.push_back(arg.data());
  EXPECT_EQ(Main(static_cast<int>(argv.size()), argv.data()), 0);
  std::FILE* svg = std::fopen(dir.File("lat.svg").c_str(), "r");
  ASSERT_NE(svg, nullptr);
  char head[5] = {};
  EXPECT_EQ(std::fread(head, 1, 4, svg), 4u);
  std::fclose(svg);
  EXPECT_STREQ(head, "<svg");
}

TEST(Main, BadUsageExitsTwo) {
  std::vector<std::string> args = {"nvkv-ycsb", "-P"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  EXPECT_EQ(Main(static_cast<int>(argv.size()), argv.data()), 2);
}

}  // namespace
}  // namespace nvkv::ycsb
