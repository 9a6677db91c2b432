// OccupancyTree places every block where OffsetPlacer does, in every order and with both fits:
// place_in_order switches between them by how many blocks are live at once, and a plan must not
// depend on which one ran.
#include "occupancy_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "memoplan/planner/planner.h"
#include "offset_placer.h"
#include "random_traces.h"

namespace memoplan::planner {
namespace {

using testing::TraceShape;

std::vector<uint64_t> by_list(const Problem& problem, const std::vector<size_t>& order, Fit fit) {
  OffsetPlacer placer(problem);
  for (size_t index : order) placer.place(index, fit);
  return placer.take_offsets();
}

TEST(OccupancyTree, PlacesEveryBlockWhereOffsetPlacerDoes) {
  for (TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 2, 17, 300, 800}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        const Trace trace = testing::random_trace(shape, n, seed);
        Result<Problem> problem = make_problem(trace);
        ASSERT_TRUE(problem.ok()) << problem.error();
        std::vector<size_t> shuffled = order_by_begin(*problem);
        std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(seed));
        for (const std::vector<size_t>& order :
             {order_by_size_desc(*problem), order_by_begin(*problem), shuffled}) {
          for (Fit fit : {Fit::kBest, Fit::kFirst}) {
            EXPECT_EQ(place_in_order_by_tree(*problem, order, fit), by_list(*problem, order, fit))
                << trace.meta.name << " seed " << seed << " fit " << static_cast<int>(fit);
          }
        }
      }
    }
  }
}

// Blocks that all live at once (the worst case for OffsetPlacer, and the one that switches
// place_in_order to the tree), many of one size (exact fits), lifetimes sharing ends.
TEST(OccupancyTree, CrowdedLifetimesAndRepeatedSizes) {
  std::mt19937_64 rng(5);
  Trace trace;
  for (uint64_t i = 0; i < 3000; ++i) {
    Allocation a;
    a.id = i;
    a.size = 64 * (1 + rng() % 4) * (rng() % 8 == 0 ? 1024 : 1);
    a.begin = rng() % 40;
    a.end = a.begin + 1 + (i % 3 == 0 ? 1000 : rng() % 30);
    trace.allocations.push_back(a);
  }
  Result<Problem> problem = make_problem(trace);
  ASSERT_TRUE(problem.ok()) << problem.error();
  const std::vector<size_t> order = order_by_size_desc(*problem);
  EXPECT_EQ(place_in_order_by_tree(*problem, order, Fit::kBest),
            by_list(*problem, order, Fit::kBest));
  // And through the planner, which takes the tree here: a valid plan.
  PlanOptions options;
  Result<Plan> plan = plan_trace(trace, options);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_GE(plan->slab_bytes, plan->lower_bound_bytes);
}

// A long pass shaped like IOPDDL's traces: most blocks live a few ticks, one in five a long
// stretch or the whole pass, over thousands of begins, so the tree is deep enough to keep `above`
// sets (from level 7) and blocks cover nodes up there.
TEST(OccupancyTree, LongPassesWithLongAndShortLifetimes) {
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    std::mt19937_64 rng(seed);
    Trace trace;
    const uint64_t ticks = 20000;
    for (uint64_t i = 0; i < 6000; ++i) {
      Allocation a;
      a.id = i;
      a.size = 64 * (1 + rng() % 16) * (rng() % 5 == 0 ? 4096 : 1);
      a.begin = rng() % ticks;
      const uint64_t kind = rng() % 10;
      const uint64_t length = kind < 7 ? 1 + rng() % 8 : kind < 9 ? 1 + rng() % 4000 : ticks;
      a.end = std::min(ticks + 1, a.begin + length);
      if (kind == 9) a.begin = rng() % 4;
      trace.allocations.push_back(a);
    }
    Result<Problem> problem = make_problem(trace);
    ASSERT_TRUE(problem.ok()) << problem.error();
    ASSERT_GE(most_live_at_once(*problem), 512u);  // place_in_order takes the tree
    std::vector<size_t> shuffled = order_by_begin(*problem);
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(seed));
    for (const std::vector<size_t>& order : {order_by_size_desc(*problem), shuffled}) {
      for (Fit fit : {Fit::kBest, Fit::kFirst}) {
        EXPECT_EQ(place_in_order_by_tree(*problem, order, fit), by_list(*problem, order, fit))
            << "seed " << seed << " fit " << static_cast<int>(fit);
      }
    }
  }
}

}  // namespace
}  // namespace memoplan::planner
