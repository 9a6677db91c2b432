// Trace and plan files: round trips, real traces, and one clear error per kind of bad input.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "memoplan/planner/planner.h"
#include "memoplan/trace_io.h"
#include "random_traces.h"

namespace memoplan {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("memoplan_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& content = "") const {
    const std::string p = (path_ / name).string();
    if (!content.empty()) std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  fs::path path_;
};

fs::path test_data() {
  const char* dir = std::getenv("MEMOPLAN_TEST_DATA");
  return dir ? fs::path(dir) : fs::path("tests/data");
}

std::string trace_json(const std::string& columns, const std::string& extra = "") {
  return R"({"format":"memoplan-trace","version":1,)" + extra + R"("columns":{)" + columns + "}}";
}

// The error names the file and contains `expected`.
void expect_trace_error(const std::string& content, const std::string& expected,
                        const std::string& name = "bad.json") {
  TempDir dir;
  const std::string path = dir.file(name, content);
  Result<Trace> trace = read_trace(path);
  ASSERT_FALSE(trace.ok()) << "accepted: " << content.substr(0, 200);
  EXPECT_NE(trace.error().find(path), std::string::npos) << trace.error();
  EXPECT_NE(trace.error().find(expected), std::string::npos) << trace.error();
}

TEST(TraceIo, JsonRoundTripKeepsEveryField) {
  TempDir dir;
  Trace trace = testing::random_trace(testing::TraceShape::kDnnLike, 300, 7);
  trace.allocations[3].align = 256;
  trace.allocations[4].provenance.callsite = (uint64_t{1} << 60) + 5;
  trace.allocations[5].provenance.thread = 3;
  trace.meta.input_shapes = "1x3x224x224";
  for (const std::string name : {"t.json", "t.json.gz"}) {
    const std::string path = dir.file(name);
    ASSERT_EQ(write_trace(trace, path), "");
    Result<Trace> back = read_trace(path);
    ASSERT_TRUE(back.ok()) << back.error();
    ASSERT_EQ(back->allocations.size(), trace.allocations.size());
    EXPECT_EQ(trace_fingerprint(*back), trace_fingerprint(trace));
    EXPECT_EQ(back->meta.input_shapes, "1x3x224x224");
    for (size_t i = 0; i < trace.allocations.size(); ++i) {
      const Allocation &a = trace.allocations[i], &b = back->allocations[i];
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.escapes, b.escapes);
      EXPECT_EQ(a.provenance.op, b.provenance.op);
      EXPECT_EQ(a.provenance.callsite, b.provenance.callsite);
      EXPECT_EQ(a.provenance.thread, b.provenance.thread);
    }
  }
}

// The torch extension's provenance: outer op and graph node survive a round trip; a trace without
// them is written with exactly the columns older readers know.
TEST(TraceIo, OuterOpAndNodeRoundTripAndAreOptional) {
  TempDir dir;
  Trace trace = testing::random_trace(testing::TraceShape::kDnnLike, 50, 11);
  const std::string plain = dir.file("plain.json");
  ASSERT_EQ(write_trace(trace, plain), "");
  Result<std::string> text = read_file_text(plain);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("outer_op"), std::string::npos);
  EXPECT_EQ(text->find("\"node\""), std::string::npos);
  Result<Trace> old = read_trace(plain);
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_EQ(old->allocations[0].provenance.node, -1);
  EXPECT_EQ(old->allocations[0].provenance.outer_op, "");

  trace.allocations[1].provenance.outer_op = "aten::max_pool2d";
  trace.allocations[1].provenance.op = "aten::max_pool2d_with_indices";
  trace.allocations[1].provenance.node = 7;
  trace.allocations[2].provenance.node = 0;
  const std::string path = dir.file("torch.json");
  ASSERT_EQ(write_trace(trace, path), "");
  Result<Trace> back = read_trace(path);
  ASSERT_TRUE(back.ok()) << back.error();
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const Provenance &a = trace.allocations[i].provenance, &b = back->allocations[i].provenance;
    EXPECT_EQ(a.op, b.op) << i;
    EXPECT_EQ(a.outer_op, b.outer_op) << i;
    EXPECT_EQ(a.node, b.node) << i;
  }
  EXPECT_EQ(back->allocations[3].provenance.node, -1);
}

// Aliasing claims (alias_of, slice_of): written only when a row has one, read back as ids, and
// they change the fingerprint; an aliased plan keeps both bounds.
TEST(TraceIo, AliasingClaimsRoundTrip) {
  TempDir dir;
  Trace trace;
  for (uint64_t i = 0; i < 4; ++i) {
    Allocation a;
    a.id = 10 + i;
    a.size = 1024;
    a.begin = i;
    a.end = 8;
    trace.allocations.push_back(a);
  }
  trace.allocations[3].size = 2048;
  const std::string before = trace_fingerprint(trace);
  trace.allocations[1].alias_of = 10;
  trace.allocations[2].slice_of = 13;
  trace.allocations[2].slice_offset = 1024;
  EXPECT_NE(trace_fingerprint(trace), before);
  const std::string path = dir.file("aliases.json");
  ASSERT_EQ(write_trace(trace, path), "");
  Result<Trace> back = read_trace(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(trace_fingerprint(*back), trace_fingerprint(trace));
  EXPECT_EQ(back->allocations[0].alias_of, kNoRow);
  EXPECT_EQ(back->allocations[1].alias_of, 10u);
  EXPECT_EQ(back->allocations[2].slice_of, 13u);
  EXPECT_EQ(back->allocations[2].slice_offset, 1024u);
  EXPECT_EQ(back->allocations[3].slice_of, kNoRow);

  PlanOptions options;
  options.aliases = true;
  Result<Plan> plan = plan_trace(*back, options);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_LT(plan->lower_bound_bytes, plan->offset_lower_bound_bytes);
  const std::string plan_path = dir.file("aliases.plan.json");
  ASSERT_EQ(write_plan(*plan, plan_path), "");
  Result<Plan> plan_back = read_plan(plan_path);
  ASSERT_TRUE(plan_back.ok()) << plan_back.error();
  EXPECT_EQ(plan_back->offset_lower_bound_bytes, plan->offset_lower_bound_bytes);
  EXPECT_EQ(plan_back->lower_bound_bytes, plan->lower_bound_bytes);
  EXPECT_EQ(plan_back->aliased_rows, 2u);

  // A claim naming no row is the trace's error, reported on reading.
  trace.allocations[1].alias_of = 99;
  ASSERT_EQ(write_trace(trace, path), "");
  Result<Trace> bad = read_trace(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("names no other row"), std::string::npos) << bad.error();
}

TEST(TraceIo, PlanRoundTrip) {
  TempDir dir;
  const Trace trace = testing::random_trace(testing::TraceShape::kResidual, 100, 3);
  Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok());
  const std::string path = dir.file("p.json");
  ASSERT_EQ(write_plan(*plan, path), "");
  Result<Plan> back = read_plan(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->offsets, plan->offsets);
  EXPECT_EQ(back->slab_bytes, plan->slab_bytes);
  EXPECT_EQ(back->strategy, plan->strategy);
  EXPECT_EQ(back->status, plan->status);
  EXPECT_EQ(back->trace_fingerprint, plan->trace_fingerprint);
}

TEST(TraceIo, CsvWithOptionalColumnsInAnyOrder) {
  TempDir dir;
  const std::string path = dir.file("t.csv",
                                    "name,end,size,begin,align\n"
                                    "conv1,5,802816,0,64\n"
                                    "\"relu, inplace\",2,4096,1,\n"
                                    "\n# comments and blank lines are skipped\r\n"
                                    "x,3,0,3,\n");
  Result<Trace> trace = read_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.error();
  ASSERT_EQ(trace->allocations.size(), 3u);
  EXPECT_EQ(trace->allocations[0].size, 802816u);
  EXPECT_EQ(trace->allocations[1].provenance.op, "relu, inplace");
  EXPECT_EQ(trace->allocations[1].align, 0u);
  EXPECT_EQ(trace->allocations[2].id, 2u);
  EXPECT_TRUE(plan_trace(*trace).ok());
}

TEST(TraceIo, CsvReadsMiniMallocColumnNames) {
  // MiniMalloc's id,lower,upper,size (lifetimes half-open, as ours), alignment for align.
  TempDir dir;
  Result<Trace> trace = read_trace(dir.file("m.csv",
                                            "id,lower,upper,size,alignment\n"
                                            "7,0,3,4096,\n"
                                            "8,3,9,100,128\n"));
  ASSERT_TRUE(trace.ok()) << trace.error();
  ASSERT_EQ(trace->allocations.size(), 2u);
  EXPECT_EQ(trace->allocations[0].id, 7u);
  EXPECT_EQ(trace->allocations[0].begin, 0u);
  EXPECT_EQ(trace->allocations[0].end, 3u);
  EXPECT_EQ(trace->allocations[0].size, 4096u);
  EXPECT_EQ(trace->allocations[1].begin, 3u);
  EXPECT_EQ(trace->allocations[1].end, 9u);
  EXPECT_EQ(trace->allocations[1].align, 128u);
  expect_trace_error("size,begin,lower,end\n", "column \"lower\" twice (or with its alias)",
                     "m.csv");

  // Its challenging benchmark, as committed (tests/data/minimalloc/README.md).
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(test_data() / "minimalloc")) {
    if (entry.path().extension() != ".csv") continue;
    Result<Trace> challenging = read_trace(entry.path().string());
    ASSERT_TRUE(challenging.ok()) << challenging.error();
    EXPECT_GE(challenging->allocations.size(), 154u) << entry.path();
    EXPECT_LE(challenging->allocations.size(), 454u) << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 11u);
}

TEST(TraceIo, CommittedModelTracesLoadAndPlan) {
  size_t loaded = 0;
  for (const auto& entry : fs::directory_iterator(test_data() / "traces")) {
    Result<Trace> trace = read_trace(entry.path().string());
    ASSERT_TRUE(trace.ok()) << trace.error();
    EXPECT_GT(trace->allocations.size(), 10u) << entry.path();
    Result<Plan> plan = plan_trace(*trace);
    ASSERT_TRUE(plan.ok()) << entry.path() << ": " << plan.error();
    ++loaded;
  }
  EXPECT_GE(loaded, 4u);
}

TEST(TraceIoErrors, FileProblems) {
  Result<Trace> missing = read_trace("/nonexistent/trace.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("/nonexistent/trace.json: cannot open"), std::string::npos);
  expect_trace_error("   \n", "file is empty");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1])").substr(0, 40),
                     "not valid JSON");
  expect_trace_error("\x1f\x8b\x08\x00garbage", "gzip data is", "bad.json.gz");
}

TEST(TraceIoErrors, HeaderProblems) {
  expect_trace_error("[1,2]", "expected a JSON object");
  expect_trace_error(R"({"version":1})", "no \"format\" field");
  expect_trace_error(R"({"format":"memoplan-plan","version":1})", "format is \"memoplan-plan\"");
  expect_trace_error(R"({"format":"memoplan-trace","version":7})",
                     "unsupported memoplan-trace version 7");
  expect_trace_error(R"({"format":"memoplan-trace","version":1})", "missing \"columns\"");
}

TEST(TraceIoErrors, ColumnProblems) {
  expect_trace_error(trace_json(R"("begin":[0],"end":[1])"), "missing required column \"size\"");
  expect_trace_error(trace_json(R"("size":[1],"end":[1])"), "missing required column \"begin\"");
  expect_trace_error(trace_json(R"("size":[1,2],"begin":[0],"end":[1,2])"),
                     "column \"begin\" has 1 values");
  expect_trace_error(trace_json(R"("size":[-4],"begin":[0],"end":[1])"),
                     "size[0] must be a non-negative integer, got -4");
  expect_trace_error(trace_json(R"("size":["big"],"begin":[0],"end":[1])"), "got \"big\"");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1],"sise":[1])"),
                     "unknown column \"sise\"");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1],"op":[3])", R"("ops":["a"],)"),
                     "op[0] = 3 is past the end of \"ops\"");
  expect_trace_error(
      trace_json(R"("size":[1],"begin":[0],"end":[1],"outer_op":[1])", R"("ops":["a"],)"),
      "outer_op[0] = 1 is past the end of \"ops\"");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1],"node":[0.5])"),
                     "node[0] must be an integer, got 0.5");
  expect_trace_error(trace_json(R"("size":[1],"begin":[5],"end":[1])"), "before it begins");
  expect_trace_error(trace_json(R"("size":[1,1],"begin":[0,0],"end":[1,1],"id":[4,4])"),
                     "duplicate id");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1],"align":[48])"),
                     "alignment 48 is not a power of two");
  expect_trace_error(trace_json(R"("size":[1],"begin":[0],"end":[1])", R"("meta":[],)"),
                     "\"meta\" must be an object");
}

TEST(TraceIoErrors, CsvProblems) {
  expect_trace_error("size,begin\n1,0\n", "must name the columns size, begin and end", "b.csv");
  expect_trace_error("size,begin,end,colour\n", "unknown column \"colour\"", "b.csv");
  expect_trace_error("size,begin,end\n1,0\n", ":2: 2 fields, the header has 3", "b.csv");
  expect_trace_error("size,begin,end\n1,x,2\n", ":2: begin \"x\" is not a non-negative integer",
                     "b.csv");
  expect_trace_error("size,begin,end,name\n1,0,2,\"open\n", "unterminated quoted field", "b.csv");
  expect_trace_error("size,begin,end\n1,3,2\n", "before it begins", "b.csv");
}

TEST(PlanIoErrors, EachProblemNamed) {
  TempDir dir;
  auto plan_error = [&](const std::string& content) {
    Result<Plan> plan = read_plan(dir.file("p.json", content));
    return plan.ok() ? std::string("accepted") : plan.error();
  };
  const std::string head = R"({"format":"memoplan-plan","version":1,)";
  EXPECT_NE(plan_error(head + R"("slab_bytes":1,"alignment":64})").find("missing \"offsets\""),
            std::string::npos);
  EXPECT_NE(plan_error(head + R"("slab_bytes":1,"alignment":48,"offsets":[]})")
                .find("alignment 48 is not a power of two"),
            std::string::npos);
  EXPECT_NE(plan_error(head + R"("slab_bytes":1,"alignment":64,"offsets":[1.5]})")
                .find("offsets[0] must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(plan_error(head + R"("slab_bytes":1,"alignment":64,"offsets":[],"status":"great"})")
                .find("unknown status \"great\""),
            std::string::npos);
  EXPECT_NE(plan_error(R"({"format":"memoplan-plan","version":2})").find("unsupported"),
            std::string::npos);
}

}  // namespace
}  // namespace memoplan
