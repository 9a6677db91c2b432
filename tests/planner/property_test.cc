// Every strategy on random traces of every shape: the plan is valid (checked independently) and
// never smaller than the lower bound.
#include <gtest/gtest.h>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "random_traces.h"

namespace memoplan {
namespace {

using testing::TraceShape;

struct Case {
  std::string strategy;
  TraceShape shape;
};

class EveryStrategy : public ::testing::TestWithParam<Case> {};

TEST_P(EveryStrategy, ValidAndAboveLowerBound) {
  const Case& c = GetParam();
  const planner::StrategyInfo* info = planner::find_strategy(c.strategy);
  ASSERT_NE(info, nullptr);
  // The exact solver is exercised on small problems only; the rest at sizes where ties and deep
  // overlaps are common.
  const std::vector<size_t> sizes = info->family == planner::Family::kExact
                                        ? std::vector<size_t>{6, 12, 25}
                                        : std::vector<size_t>{1, 7, 60, 400};
  for (size_t n : sizes) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const Trace trace = testing::random_trace(c.shape, n, seed);
      PlanOptions options;
      options.strategy = c.strategy;
      options.strategy_options.time_limit_s = 0.05;
      Result<Plan> plan = plan_trace(trace, options);
      ASSERT_TRUE(plan.ok()) << trace.meta.name << " seed " << seed << ": " << plan.error();
      const ValidationReport report = validate_plan(trace, *plan);
      ASSERT_TRUE(report.valid) << trace.meta.name << " seed " << seed << ": "
                                << (report.messages.empty() ? "" : report.messages[0]);
      EXPECT_GE(plan->slab_bytes, plan->lower_bound_bytes);
      EXPECT_EQ(plan->trace_fingerprint, trace_fingerprint(trace));
      if (info->family == planner::Family::kSharedObjects) {
        Result<planner::Problem> problem = planner::make_problem(trace);
        ASSERT_TRUE(problem.ok());
        EXPECT_GE(plan->slab_bytes, planner::shared_objects_lower_bound(*problem));
      }
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const planner::StrategyInfo& s : planner::all_strategies()) {
    for (TraceShape shape : testing::all_shapes()) cases.push_back({s.name, shape});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Random, EveryStrategy, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.strategy + "_" + testing::to_string(info.param.shape);
                         });

TEST(Planner, UnknownStrategyIsAnError) {
  PlanOptions options;
  options.strategy = "no_such_strategy";
  Result<Plan> plan = plan_trace(testing::random_trace(TraceShape::kChain, 10, 1), options);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().find("unknown strategy 'no_such_strategy'"), std::string::npos);
  EXPECT_NE(plan.error().find("greedy_by_size"), std::string::npos);
}

TEST(Planner, EmptyTracePlansToAnEmptySlab) {
  Result<Plan> plan = plan_trace(Trace{});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->slab_bytes, 0u);
  EXPECT_TRUE(plan->offsets.empty());
}

Allocation row(uint64_t id, uint64_t size, uint64_t begin, uint64_t end) {
  Allocation a;
  a.id = id;
  a.size = size;
  a.begin = begin;
  a.end = end;
  return a;
}

TEST(Planner, ZeroByteRowsTakeNoSpace) {
  Trace trace;
  trace.allocations = {row(0, 0, 0, 10), row(1, 128, 0, 10), row(2, 0, 0, 10)};
  Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->slab_bytes, 128u);
  EXPECT_EQ(plan->offsets, (std::vector<uint64_t>{0, 0, 0}));
}

TEST(Planner, EscapingRowsAreNeverPlaced) {
  // A block alive at the pass end would collide with the next pass's use of the slab.
  Trace trace;
  trace.allocations = {row(0, 256, 0, 10), row(1, 128, 0, 10), row(2, 4096, 5, 10)};
  trace.allocations[2].escapes = true;
  for (const planner::StrategyInfo& info : planner::all_strategies()) {
    const std::string strategy = info.name;
    PlanOptions options;
    options.strategy = strategy;
    Result<Plan> plan = plan_trace(trace, options);
    ASSERT_TRUE(plan.ok()) << strategy << ": " << plan.error();
    EXPECT_EQ(plan->slab_bytes, 384u) << strategy;
    EXPECT_EQ(plan->lower_bound_bytes, 384u) << strategy;
    EXPECT_EQ(plan->offsets[2], 0u) << strategy;
  }
}

TEST(Planner, MalformedTraceIsRejectedWithItsRow) {
  Trace trace;
  trace.allocations = {row(0, 64, 5, 3)};
  Result<Plan> plan = plan_trace(trace);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().find("row 0"), std::string::npos);
  EXPECT_NE(plan.error().find("before it begins"), std::string::npos);
}

}  // namespace
}  // namespace memoplan
