// YCSB property files and -p settings: comments, continuations, overrides, and clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/ycsb/cli.h"
#include "bench/ycsb/properties.h"
#include "bench/ycsb/workload.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::ycsb {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

TEST(Properties, ReadsAssignmentsAndSkipsComments) {
  Properties p;
  ASSERT_THAT(p.ParseText("# a comment\n"
                          "! another\n"
                          "\n"
                          "recordcount=1000\n"
                          "  readproportion = 0.5  \n"
                          "requestdistribution: zipfian\r\n"
                          "fieldnameprefix=f=x\n",
                          "workloadx"),
              IsOk());
  EXPECT_EQ(p.GetString("recordcount", ""), "1000");
  EXPECT_EQ(p.GetString("readproportion", ""), "0.5");
  EXPECT_EQ(p.GetString("requestdistribution", ""), "zipfian");
  EXPECT_EQ(p.GetString("fieldnameprefix", ""), "f=x");  // split at the first separator
  EXPECT_FALSE(p.Has("# a comment"));
  EXPECT_EQ(p.all().size(), 4u);
}

TEST(Properties, JoinsContinuationLines) {
  Properties p;
  ASSERT_THAT(p.ParseText("table=user\\\n    table\n", "f"), IsOk());
  EXPECT_EQ(p.GetString("table", ""), "usertable");
}

TEST(Properties, LaterSettingsAndOverridesWin) {
  Properties p;
  ASSERT_THAT(p.ParseText("recordcount=1000\nrecordcount=2000\n", "f"), IsOk());
  EXPECT_EQ(p.GetString("recordcount", ""), "2000");
  ASSERT_THAT(p.ParseAssignment("recordcount=5"), IsOk());
  EXPECT_EQ(*p.GetUint("recordcount", 0), 5u);
}

TEST(Properties, BadLineNamesFileAndLine) {
  Properties p;
  EXPECT_THAT(p.ParseText("# ok\nrecordcount=1\nthis line has no separator\n", "workloads/w"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "workloads/w:3: expected name=value, got 'this line has no separator'"));
  EXPECT_THAT(p.ParseText("=value\n", "w"), StatusIs(absl::StatusCode::kInvalidArgument, "w:1"));
  EXPECT_THAT(p.ParseAssignment("recordcount"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Properties, TypedReadsRejectBadValues) {
  Properties p;
  p.Set("recordcount", "12x");
  p.Set("readproportion", "half");
  p.Set("readallfields", "yes");
  p.Set("nvkv.capacity", "256m");
  EXPECT_THAT(p.GetUint("recordcount", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "recordcount=12x"));
  EXPECT_THAT(p.GetDouble("readproportion", 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(p.GetBool("readallfields", true), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*p.GetBytes("nvkv.capacity", 0), 256u << 20);
  p.Set("nvkv.capacity", "1.5g");
  EXPECT_THAT(p.GetBytes("nvkv.capacity", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "nvkv.capacity=1.5g: '1.5g' is not"));
  EXPECT_EQ(*p.GetUint("absent", 7), 7u);
}

TEST(WorkloadConfig, DefaultsAreYcsbs) {
  Properties p;
  p.Set("recordcount", "100");
  absl::StatusOr<WorkloadConfig> c = WorkloadConfig::FromProperties(p);
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->field_count, 10u);
  EXPECT_EQ(c->field_length, 100u);
  EXPECT_EQ(c->read_proportion, 0.95);
  EXPECT_EQ(c->update_proportion, 0.05);
  EXPECT_EQ(c->max_scan_length, 1000u);
  EXPECT_EQ(c->request_distribution, KeyDistribution::kUniform);
  EXPECT_FALSE(c->ordered_inserts);
  EXPECT_TRUE(c->read_all_fields);
  EXPECT_FALSE(c->write_all_fields);
  EXPECT_EQ(c->insert_count, 100u);
}

TEST(WorkloadConfig, RejectsUnknownDistribution) {
  Properties p;
  p.Set("recordcount", "100");
  p.Set("requestdistribution", "gaussian");
  EXPECT_THAT(WorkloadConfig::FromProperties(p),
              StatusIs(absl::StatusCode::kInvalidArgument, "requestdistribution=gaussian"));
}

TEST(CommandLine, OverridesBeatFilesWhateverTheOrder) {
  absl::StatusOr<CommandLine> cl = ParseCommandLine(
      {"-p", "recordcount=7", "-P", NVKV_YCSB_WORKLOADS_DIR "/workloada", "-threads", "3",
       "-run", "--db", "x.db", "--json"});
  ASSERT_THAT(cl, IsOk());
  EXPECT_EQ(cl->properties.GetString("recordcount", ""), "7");
  EXPECT_EQ(cl->properties.GetString("readproportion", ""), "0.5");
  EXPECT_EQ(cl->threads, 3u);
  EXPECT_FALSE(cl->load);
  EXPECT_TRUE(cl->run);
  EXPECT_EQ(cl->db_path, "x.db");
  EXPECT_TRUE(cl->json);
}

// A misspelt nvkv property is refused, not ignored (it would leave its setting at the default).
TEST(CommandLine, UnknownNvkvPropertiesAreRefused) {
  EXPECT_THAT(ParseCommandLine({"-p", "nvkv.queudepth=8"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown property nvkv.queudepth"));
  absl::StatusOr<CommandLine> cl =
      ParseCommandLine({"-p", "nvkv.queuedepth=8", "-p", "nvkv.seed=3", "-p", "fieldcount=2"});
  ASSERT_THAT(cl, IsOk());
  EXPECT_EQ(cl->properties.GetString("nvkv.queuedepth", ""), "8");
}

TEST(CommandLine, MissingFileAndUnknownFlagAreErrors) {
  EXPECT_THAT(ParseCommandLine({"-P", "/nonexistent/workloadz"}),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/workloadz"));
  EXPECT_THAT(ParseCommandLine({"--bogus"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCommandLine({"-p"}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Records, EncodeAndDecodeFields) {
  std::string record;
  AppendField("field0", "abc", &record);
  AppendField("field1", "", &record);
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  ASSERT_TRUE(DecodeFields(record, &fields));
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0].first, "field0");
  EXPECT_EQ(fields[0].second, "abc");
  EXPECT_EQ(fields[1].second, "");
  EXPECT_FALSE(DecodeFields(record.substr(0, record.size() - 1), &fields));
}

}  // namespace
}  // namespace nvkv::ycsb
