// `best`: valid, never worse than any strategy in its portfolio, optimal where greedy_by_size is
// not, and a valid plan under any time limit (how far it overruns one: bench/planner_bench).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "offset_placer.h"
#include "order_search.h"
#include "plan_checks.h"
#include "random_traces.h"
#include "trace_rows.h"

namespace memoplan {
namespace {

using testing::TraceShape;

using testing::KiB;

using testing::plan_with;

std::vector<std::string> portfolio_members() {
  std::vector<std::string> names;
  for (const planner::StrategyInfo& info : planner::all_strategies()) {
    const bool places =
        info.family == planner::Family::kOffsets || info.family == planner::Family::kSharedObjects;
    if (info.fast && places && std::string(info.name) != "best") names.push_back(info.name);
  }
  return names;
}

TEST(BestTest, ValidAndNoWorseThanAnyFastStrategy) {
  const std::vector<std::string> members = portfolio_members();
  ASSERT_GE(members.size(), 2u);
  for (TraceShape shape : testing::all_shapes()) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const Trace trace = testing::random_trace(shape, 200, seed);
      const std::string name = trace.meta.name + " seed " + std::to_string(seed);
      Result<Plan> best = plan_with(trace, "best", 0.1);
      ASSERT_TRUE(best.ok()) << name << ": " << best.error();
      const ValidationReport report = validate_plan(trace, *best);
      ASSERT_TRUE(report.valid) << name << ": " << report.messages.front();
      EXPECT_GE(best->slab_bytes, best->lower_bound_bytes) << name;
      for (const std::string& member : members) {
        Result<Plan> other = plan_with(trace, member, 0.1);
        ASSERT_TRUE(other.ok()) << name << " " << member << ": " << other.error();
        EXPECT_LE(best->slab_bytes, other->slab_bytes) << name << ": " << member << " beat best";
      }
    }
  }
}

// Four blocks, sizes in KiB:  A 4 live [0,2)   B 4 live [1,4)   C 2 live [3,6)   D 4 live [4,6).
// At most 8 KiB are live at once (A+B at tick 1, C+D at ticks 4-5), and 8 KiB suffice: B at 0,
// A and C at 4, D at 0. Largest-first ties break by begin, so greedy_by_size puts A at 0, B above
// it at 4, D at 0 (B is dead by then), and C, live alongside B at [4,8) and D at [0,4), on top:
// 10 KiB.
Trace greedy_trap() {
  return testing::trace_from_rows(
      {{4 * KiB, 0, 2}, {4 * KiB, 1, 4}, {2 * KiB, 3, 6}, {4 * KiB, 4, 6}});
}

TEST(BestTest, FindsTheOptimumWhereGreedyBySizeDoesNot) {
  const Trace trace = greedy_trap();
  Result<Plan> greedy = plan_with(trace, "greedy_by_size", 0.25);
  ASSERT_TRUE(greedy.ok()) << greedy.error();
  EXPECT_EQ(greedy->slab_bytes, 10 * KiB);

  Result<Plan> best = plan_with(trace, "best", 0.25);
  ASSERT_TRUE(best.ok()) << best.error();
  EXPECT_EQ(best->slab_bytes, 8 * KiB);
  EXPECT_EQ(best->lower_bound_bytes, 8 * KiB);
  EXPECT_EQ(best->status, SolveStatus::kOptimal);
  EXPECT_TRUE(validate_plan(trace, *best).valid);
}

TEST(BestTest, TheOrderSearchAloneEscapesGreedyBySize) {
  // The portfolio may already hold the optimum; the search must get there by itself too.
  Result<planner::Problem> problem = planner::make_problem(greedy_trap());
  ASSERT_TRUE(problem.ok());
  const std::vector<uint64_t> greedy =
      planner::place_in_order(*problem, planner::order_by_size_desc(*problem), planner::Fit::kBest);
  ASSERT_EQ(planner::slab_size(*problem, greedy), 10 * KiB);
  planner::OrderSearchOptions options;
  options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  options.max_iterations = 1000;
  options.target_slab = planner::offset_lower_bound(*problem);
  const planner::OrderSearchResult result =
      planner::search_placement_orders(*problem, greedy, options);
  EXPECT_EQ(result.slab, 8 * KiB);
  EXPECT_LT(result.iterations, options.max_iterations) << "stops once optimal";
}

// How long `best` overruns its limit is a timing: bench/planner_bench (best/time_limit_ms) measures
// it. Here: what a limited run returns.
TEST(BestTest, ALimitedRunReturnsAValidPlanNoWorseThanTheDefault) {
  const Trace trace = testing::random_trace(TraceShape::kDnnLike, 20000, 3);
  Result<Plan> greedy = plan_with(trace, std::string(planner::kDefaultStrategy), 0.1);
  Result<Plan> best = plan_with(trace, "best", 0.1);
  ASSERT_TRUE(greedy.ok()) << greedy.error();
  ASSERT_TRUE(best.ok()) << best.error();
  EXPECT_LE(best->slab_bytes, greedy->slab_bytes);
  EXPECT_TRUE(validate_plan(trace, *best).valid);
}

TEST(BestTest, NoTimeAtAllStillGivesTheDefaultStrategysPlan) {
  const Trace trace = testing::random_trace(TraceShape::kDnnLike, 2000, 4);
  Result<Plan> greedy = plan_with(trace, std::string(planner::kDefaultStrategy), 0.0);
  ASSERT_TRUE(greedy.ok()) << greedy.error();
  for (double limit : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    Result<Plan> best = plan_with(trace, "best", limit);
    ASSERT_TRUE(best.ok()) << limit << ": " << best.error();
    EXPECT_LE(best->slab_bytes, greedy->slab_bytes) << limit;
    // One member, then nothing more: the rest skipped, no order search.
    EXPECT_NE(best->note.find("skipped: time limit"), std::string::npos)
        << limit << ": " << best->note;
    EXPECT_EQ(best->note.find("order search"), std::string::npos) << limit << ": " << best->note;
    EXPECT_TRUE(validate_plan(trace, *best).valid) << limit;
  }
}

TEST(BestTest, NoteNamesTheWinner) {
  Result<Plan> best = plan_with(testing::random_trace(TraceShape::kUniform, 150, 1), "best", 0.05);
  ASSERT_TRUE(best.ok()) << best.error();
  bool names_a_member = false;
  for (const std::string& member : portfolio_members()) {
    names_a_member |= best->note.find("portfolio winner " + member + " ") != std::string::npos;
  }
  EXPECT_TRUE(names_a_member) << best->note;
}

}  // namespace
}  // namespace memoplan
