// Placement orders learned on one trace and replayed on another of the same rows
// (PlanOptions::row_order, placement_order()): how a shape family plans an unseen shape as well as
// the slow `best` strategy planned a profiled one, in the time of a fast strategy.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "random_traces.h"

namespace memoplan {
namespace {

using testing::TraceShape;

Trace scaled(Trace trace, uint64_t factor) {
  for (Allocation& a : trace.allocations) a.size *= factor;
  return trace;
}

Plan plan_or_die(const Trace& trace, const PlanOptions& options) {
  Result<Plan> plan = plan_trace(trace, options);
  EXPECT_TRUE(plan.ok()) << plan.error();
  if (!plan) return {};
  EXPECT_TRUE(validate_plan(trace, *plan).valid);
  return *plan;
}

// The smallest of several fast strategies' plans other than the default: a good plan to learn an
// order from, the same in every build (`best` would depend on how fast the build runs).
Plan smallest_fast_plan(const Trace& trace) {
  Plan smallest;
  for (const char* strategy : {"greedy_by_breadth", "best_fit", "first_fit", "bigger_first_fit",
                               "longer_first_fit", "strip_packing_best_fit"}) {
    PlanOptions options;
    options.strategy = strategy;
    options.min_alignment = 64;
    Plan plan = plan_or_die(trace, options);
    if (smallest.offsets.empty() || plan.slab_bytes < smallest.slab_bytes) smallest = plan;
  }
  return smallest;
}

// Sizes multiplied by a whole number leave every placement decision as it was, so an order
// learned on the small trace must give exactly the scaled slab on the large one: the order, not
// the sizes, carries the plan's quality.
TEST(LearnedOrder, AnOrderLearnedOnOneScalePlansAnotherAsWell) {
  int greedy_worse = 0;
  for (TraceShape shape : testing::all_shapes()) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      // Sizes of whole alignment units, so scaling them scales the rounded sizes too.
      const Trace small = scaled(testing::random_trace(shape, 120, seed), 64);
      const Plan learned_on = smallest_fast_plan(small);
      const std::vector<size_t> order = placement_order(small, learned_on);

      const Trace large = scaled(small, 5);
      PlanOptions replay;  // the default strategy, with the learned order beside it
      replay.min_alignment = 64;
      replay.row_order = order;
      const Plan replayed = plan_or_die(large, replay);
      PlanOptions greedy_options;
      greedy_options.min_alignment = 64;
      const Plan greedy = plan_or_die(large, greedy_options);
      EXPECT_EQ(replayed.slab_bytes, 5 * learned_on.slab_bytes)
          << testing::to_string(shape) << " seed " << seed;
      EXPECT_LE(replayed.slab_bytes, greedy.slab_bytes);
      greedy_worse += greedy.slab_bytes > replayed.slab_bytes;
    }
  }
  EXPECT_GT(greedy_worse, 0) << "no trace where the learned order beat greedy_by_size";
}

TEST(LearnedOrder, ReplayingAPlansOwnOrderReproducesIt) {
  const Trace trace = testing::random_trace(TraceShape::kResidual, 200, 7);
  const Plan best = smallest_fast_plan(trace);
  PlanOptions replay;
  replay.row_order = placement_order(trace, best);
  const Plan replayed = plan_or_die(trace, replay);
  EXPECT_LE(replayed.slab_bytes, best.slab_bytes);
  EXPECT_EQ(replayed.strategy, "greedy_by_size");
  EXPECT_NE(replayed.note.find("learned order"), std::string::npos) << replayed.note;
}

// A bad order (rows out of range, repeated, missing, rows the trace does not plan) is never an
// error: the rows it names are placed in its order, the others after, and the plan stays valid
// and never worse than the strategy's.
TEST(LearnedOrder, BadOrdersStillGiveValidPlansNoWorseThanTheStrategy) {
  const Trace trace = testing::random_trace(TraceShape::kChain, 150, 3);
  const Plan greedy = plan_or_die(trace, PlanOptions{});
  const std::vector<std::vector<size_t>> orders = {
      {999999, 5, 5, 5, 1, 0},         // out of range, repeated, most rows missing
      {trace.allocations.size()},      // one past the end
      {0},                             // a single row
      placement_order(trace, Plan{}),  // a plan of no rows: an empty order
  };
  for (const std::vector<size_t>& order : orders) {
    PlanOptions options;
    options.row_order = order;
    const Plan plan = plan_or_die(trace, options);
    EXPECT_LE(plan.slab_bytes, greedy.slab_bytes);
  }
}

TEST(LearnedOrder, PlacementOrderListsPlannedRowsByOffset) {
  Trace trace = testing::random_trace(TraceShape::kUniform, 60, 11);
  trace.allocations[3].size = 0;
  trace.allocations[4].escapes = true;
  const Plan plan = plan_or_die(trace, PlanOptions{});
  const std::vector<size_t> order = placement_order(trace, plan);
  size_t planned = 0;
  for (const Allocation& a : trace.allocations) planned += a.size != 0 && !a.escapes;
  ASSERT_EQ(order.size(), planned);
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_NE(order[i], 3u);
    EXPECT_NE(order[i], 4u);
    if (i > 0) {
      EXPECT_LE(plan.offsets[order[i - 1]], plan.offsets[order[i]]);
    }
  }
}

}  // namespace
}  // namespace memoplan
