// The min-cost-flow solver on hand-checked and brute-forced graphs, and the `mincost_flow`
// strategy (Lee et al. 2019) on random and hand-built traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "min_cost_flow.h"
#include "random_traces.h"
#include "trace_rows.h"

namespace memoplan {
namespace {

using planner::MinCostFlow;

TEST(MinCostFlowSolver, SendsEverythingDownASingleArc) {
  MinCostFlow flow(2);
  const size_t arc = flow.add_arc(0, 1, 5, 3);
  flow.add_supply(0, 4);
  flow.add_supply(1, -4);
  Result<int64_t> cost = flow.solve();
  ASSERT_TRUE(cost.ok()) << cost.error();
  EXPECT_EQ(*cost, 12);
  EXPECT_EQ(flow.flow(arc), 4);
}

TEST(MinCostFlowSolver, FillsTheCheapPathBeforeTheDearOne) {
  // s -> a -> t costs 2 per unit but carries 2; s -> b -> t costs 4 and carries 3.
  MinCostFlow flow(4);
  const size_t sa = flow.add_arc(0, 1, 2, 1), at = flow.add_arc(1, 3, 2, 1);
  const size_t sb = flow.add_arc(0, 2, 3, 2), bt = flow.add_arc(2, 3, 3, 2);
  flow.add_supply(0, 4);
  flow.add_supply(3, -4);
  Result<int64_t> cost = flow.solve();
  ASSERT_TRUE(cost.ok()) << cost.error();
  EXPECT_EQ(*cost, 2 * 2 + 2 * 4);
  EXPECT_EQ(flow.flow(sa), 2);
  EXPECT_EQ(flow.flow(at), 2);
  EXPECT_EQ(flow.flow(sb), 2);
  EXPECT_EQ(flow.flow(bt), 2);
}

TEST(MinCostFlowSolver, ReroutesAnEarlierChoiceThroughAReverseArc) {
  // Worker 0 is routed first and grabs job 2 (cost 1); worker 1 can then only do job 3 at 10
  // unless worker 0 moves to job 3 (cost 2) and worker 1 takes job 2 (cost 1): total 3.
  MinCostFlow flow(4);
  const size_t w0j2 = flow.add_arc(0, 2, 1, 1), w0j3 = flow.add_arc(0, 3, 1, 2);
  const size_t w1j2 = flow.add_arc(1, 2, 1, 1), w1j3 = flow.add_arc(1, 3, 1, 10);
  flow.add_supply(0, 1);
  flow.add_supply(1, 1);
  flow.add_supply(2, -1);
  flow.add_supply(3, -1);
  Result<int64_t> cost = flow.solve();
  ASSERT_TRUE(cost.ok()) << cost.error();
  EXPECT_EQ(*cost, 3);
  EXPECT_EQ(flow.flow(w0j2), 0);
  EXPECT_EQ(flow.flow(w0j3), 1);
  EXPECT_EQ(flow.flow(w1j2), 1);
  EXPECT_EQ(flow.flow(w1j3), 0);
}

TEST(MinCostFlowSolver, ZeroCostTiesStillGiveAFeasibleOptimum) {
  // Three sources, three sinks, every arc free: any perfect matching is optimal.
  MinCostFlow flow(6);
  std::vector<size_t> arcs;
  for (size_t s = 0; s < 3; ++s) {
    flow.add_supply(s, 1);
    flow.add_supply(3 + s, -1);
    for (size_t t = 3; t < 6; ++t) arcs.push_back(flow.add_arc(s, t, 1, 0));
  }
  Result<int64_t> cost = flow.solve();
  ASSERT_TRUE(cost.ok()) << cost.error();
  EXPECT_EQ(*cost, 0);
  std::vector<int64_t> into(6, 0), out_of(6, 0);
  for (size_t k = 0; k < arcs.size(); ++k) {
    out_of[k / 3] += flow.flow(arcs[k]);
    into[3 + k % 3] += flow.flow(arcs[k]);
  }
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(out_of[s], 1);
    EXPECT_EQ(into[3 + s], 1);
  }
}

TEST(MinCostFlowSolver, RejectsMalformedProblems) {
  {
    MinCostFlow flow(2);
    flow.add_arc(0, 1, 1, 1);
    flow.add_supply(0, 2);
    flow.add_supply(1, -1);
    EXPECT_FALSE(flow.solve().ok());  // unbalanced
  }
  {
    MinCostFlow flow(2);
    flow.add_arc(0, 1, 1, -1);
    flow.add_supply(0, 1);
    flow.add_supply(1, -1);
    EXPECT_FALSE(flow.solve().ok());  // negative cost
  }
  {
    MinCostFlow flow(3);
    flow.add_arc(0, 1, 1, 1);
    flow.add_supply(0, 1);
    flow.add_supply(2, -1);
    Result<int64_t> cost = flow.solve();
    ASSERT_FALSE(cost.ok());  // node 2 cannot be reached
    EXPECT_NE(cost.error().find("cannot reach"), std::string::npos);
  }
  {
    MinCostFlow flow(2);
    flow.add_arc(0, 1, 1, 1);
    flow.add_supply(0, 2);
    flow.add_supply(1, -2);
    EXPECT_FALSE(flow.solve().ok());  // capacity 1 cannot carry 2
  }
}

// Cheapest way for `workers` to each take a distinct allowed job or their fallback (cost[w][jobs]),
// by trying every choice.
int64_t brute_force_assignment(const std::vector<std::vector<int64_t>>& cost, size_t jobs,
                               size_t worker, std::vector<bool>& taken) {
  if (worker == cost.size()) return 0;
  int64_t best = cost[worker][jobs] + brute_force_assignment(cost, jobs, worker + 1, taken);
  for (size_t j = 0; j < jobs; ++j) {
    if (taken[j] || cost[worker][j] < 0) continue;
    taken[j] = true;
    best = std::min(best, cost[worker][j] + brute_force_assignment(cost, jobs, worker + 1, taken));
    taken[j] = false;
  }
  return best;
}

TEST(MinCostFlowSolver, MatchesBruteForceOnRandomAssignments) {
  // The shape of the planner's graph: every worker needs one unit, may use a distinct job (an
  // allowed arc, into a capacity-1 job node) or its own fallback arc straight into the sink.
  std::mt19937_64 rng(7);
  for (int instance = 0; instance < 200; ++instance) {
    const size_t workers = 1 + rng() % 6, jobs = 1 + rng() % 6;
    std::vector<std::vector<int64_t>> cost(workers, std::vector<int64_t>(jobs + 1));
    const size_t sink = workers + jobs;
    MinCostFlow flow(sink + 1);
    std::vector<std::vector<size_t>> arc(workers, std::vector<size_t>(jobs, 0));
    for (size_t j = 0; j < jobs; ++j) flow.add_arc(workers + j, sink, 1, 0);
    for (size_t w = 0; w < workers; ++w) {
      flow.add_supply(w, 1);
      cost[w][jobs] = 20 + static_cast<int64_t>(rng() % 20);
      flow.add_arc(w, sink, 1, cost[w][jobs]);
      for (size_t j = 0; j < jobs; ++j) {
        const bool allowed = rng() % 3 != 0;
        cost[w][j] = allowed ? static_cast<int64_t>(rng() % 25) : -1;
        if (allowed) arc[w][j] = flow.add_arc(w, workers + j, 1, cost[w][j]);
      }
    }
    flow.add_supply(sink, -static_cast<int64_t>(workers));
    Result<int64_t> solved = flow.solve();
    ASSERT_TRUE(solved.ok()) << solved.error();
    std::vector<bool> taken(jobs, false);
    ASSERT_EQ(*solved, brute_force_assignment(cost, jobs, 0, taken)) << "instance " << instance;
    // The reported flows add up to the reported cost and respect the job capacities.
    int64_t recomputed = 0;
    std::vector<int64_t> load(jobs, 0);
    for (size_t w = 0; w < workers; ++w) {
      int64_t used = 0;
      for (size_t j = 0; j < jobs; ++j) {
        if (cost[w][j] < 0) continue;
        used += flow.flow(arc[w][j]);
        load[j] += flow.flow(arc[w][j]);
        recomputed += flow.flow(arc[w][j]) * cost[w][j];
      }
      if (used == 0) recomputed += cost[w][jobs];
      EXPECT_LE(used, 1);
    }
    for (int64_t l : load) EXPECT_LE(l, 1);
    EXPECT_EQ(recomputed, *solved);
  }
}

// ---- the strategy ---------------------------------------------------------------------------

using testing::Row;


Plan plan_with_flow(const Trace& trace) {
  PlanOptions options;
  options.strategy = "mincost_flow";
  Result<Plan> plan = plan_trace(trace, options);
  EXPECT_TRUE(plan.ok()) << plan.error();
  return plan.ok() ? *plan : Plan{};
}

uint64_t shared_lower_bound(const Trace& trace) {
  Result<planner::Problem> problem = planner::make_problem(trace);
  EXPECT_TRUE(problem.ok());
  return problem.ok() ? planner::shared_objects_lower_bound(*problem) : 0;
}

TEST(MincostFlowStrategy, ValidAndAboveTheSharedObjectsBoundOnRandomTraces) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 2, 40, 300, 2000}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        const Trace trace = testing::random_trace(shape, n, seed);
        const Plan plan = plan_with_flow(trace);
        const ValidationReport report = validate_plan(trace, plan);
        ASSERT_TRUE(report.valid) << trace.meta.name << " seed " << seed << ": "
                                  << (report.messages.empty() ? "" : report.messages[0]);
        // A shared-objects plan is a sum of object sizes, so the stronger bound applies.
        EXPECT_GE(plan.slab_bytes, shared_lower_bound(trace)) << trace.meta.name;
        EXPECT_GE(plan.slab_bytes, plan.lower_bound_bytes);
      }
    }
  }
}

TEST(MincostFlowStrategy, SameSeedSamePlan) {
  const Trace trace = testing::random_trace(testing::TraceShape::kDnnLike, 1500, 11);
  EXPECT_EQ(plan_with_flow(trace).offsets, plan_with_flow(trace).offsets);
}

// In each hand-built trace below, every later block has exactly one block it may reuse, and
// reusing it saves a whole new object; so the minimum-cost flow must take every such reuse and
// the objects are exactly the ones written in the comment.

TEST(MincostFlowStrategy, AlternatingChainNeedsTwoObjects) {
  // A [0,2), B [1,3), C [2,4): C reuses A. Objects {A, C}, {B}.
  const Trace trace = testing::trace_from_rows({{4096, 0, 2}, {4096, 1, 3}, {4096, 2, 4}});
  const Plan plan = plan_with_flow(trace);
  EXPECT_EQ(plan.slab_bytes, 8192u);
  EXPECT_EQ(plan.slab_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
}

TEST(MincostFlowStrategy, DiamondJoinReusesTheInput) {
  // X [0,2) forks into L and R [1,3), which join into J [2,4): J reuses X.
  const Trace trace = testing::trace_from_rows({{4096, 0, 2}, {2048, 1, 3}, {2048, 1, 3}, {4096, 2, 4}});
  const Plan plan = plan_with_flow(trace);
  EXPECT_EQ(plan.slab_bytes, 8192u);
  EXPECT_EQ(plan.slab_bytes, shared_lower_bound(trace));
  EXPECT_EQ(plan.offsets[0], plan.offsets[3]);
}

TEST(MincostFlowStrategy, ResidualBlockOutputReusesTheFirstConv) {
  // Skip input I [0,4), conv A [1,3), conv B [2,4), sum O [3,5): O reuses A.
  const Trace trace = testing::trace_from_rows({{4096, 0, 4}, {4096, 1, 3}, {4096, 2, 4}, {4096, 3, 5}});
  const Plan plan = plan_with_flow(trace);
  EXPECT_EQ(plan.slab_bytes, 3 * 4096u);
  EXPECT_EQ(plan.slab_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
}

TEST(MincostFlowStrategy, GrowingIntoAnObjectBeatsANewOne) {
  // B (8 KiB) may take over A's 4 KiB object for a growth of 4 KiB instead of 8 KiB new.
  const Trace trace = testing::trace_from_rows({{4096, 0, 1}, {8192, 1, 2}});
  const Plan plan = plan_with_flow(trace);
  EXPECT_EQ(plan.slab_bytes, 8192u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
}

TEST(MincostFlowStrategy, LongAlternatingChainStillNeedsOnlyTwoObjects) {
  // Block i lives [i, i + 2): the optimum opens two objects and passes each down its half of the
  // chain. Two new objects cost 2 * size; any third would cost more, so the flow cannot open one.
  std::vector<Row> rows;
  for (uint64_t i = 0; i < 3000; ++i) rows.push_back({65536, i, i + 2});
  const Trace trace = testing::trace_from_rows(rows);
  const Plan plan = plan_with_flow(trace);
  EXPECT_EQ(plan.slab_bytes, 2 * 65536u);
  EXPECT_EQ(plan.status, SolveStatus::kOptimal);
}

}  // namespace
}  // namespace memoplan
