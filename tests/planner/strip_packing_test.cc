// The `strip_packing_best_fit` strategy (Sekiyama et al. 2018) and the two structures it stands on:
// the skyline and the index of blocks contained in a time window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "contained_block_index.h"
#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "random_traces.h"
#include "skyline.h"
#include "trace_rows.h"

namespace memoplan {
namespace {

using planner::Block;
using planner::ContainedBlockIndex;
using planner::Skyline;

TEST(StripPackingContainedBlockIndex, MatchesAScanOnRandomWindowsAndTakes) {
  std::mt19937_64 rng(3);
  for (int instance = 0; instance < 40; ++instance) {
    const size_t n = 1 + rng() % 300;
    const uint64_t horizon = 5 + rng() % 200;
    std::vector<Block> blocks(n);
    for (Block& b : blocks) {
      b.begin = rng() % horizon;
      b.end = b.begin + 1 + rng() % (instance % 2 ? 5 : horizon);  // short and long lifetimes
      b.size = 64;
    }
    std::vector<uint32_t> rank(n);
    for (size_t i = 0; i < n; ++i) rank[i] = static_cast<uint32_t>(i);
    std::shuffle(rank.begin(), rank.end(), rng);
    ContainedBlockIndex index(blocks, rank);
    std::vector<bool> taken(n, false);
    for (int step = 0; step < 400; ++step) {
      uint64_t from = rng() % (horizon + 5), to = rng() % (horizon + 5);
      if (from > to) std::swap(from, to);
      size_t expected = n;
      for (size_t i = 0; i < n; ++i) {
        if (taken[i] || blocks[i].begin < from || blocks[i].end > to) continue;
        if (expected == n || rank[i] < rank[expected]) expected = i;
      }
      const size_t found = index.best_inside(from, to);
      ASSERT_EQ(found, expected) << "window [" << from << ", " << to << ") instance " << instance;
      if (found != n && rng() % 2) {
        index.take(found);
        taken[found] = true;
      }
    }
  }
}

TEST(StripPackingSkyline, LowestIsLeftmostAmongEqualAndRaisingMerges) {
  Skyline skyline(5);  // points 0..4, one segment [0, 4) at 0
  Skyline::Segment s = skyline.lowest();
  EXPECT_EQ(s.from, 0u);
  EXPECT_EQ(s.to, 4u);
  skyline.raise_part(s, 1, 2, 10);  // [0,1) 0, [1,2) 10, [2,4) 0
  s = skyline.lowest();
  EXPECT_EQ(s.from, 0u);  // leftmost of the two at height 0
  EXPECT_EQ(s.to, 1u);
  ASSERT_TRUE(skyline.raise_to_lower_neighbour(s));  // only neighbour: [1,2) at 10
  s = skyline.lowest();
  EXPECT_EQ(s.from, 2u);
  EXPECT_EQ(s.to, 4u);
  EXPECT_EQ(s.height, 0u);
  skyline.raise_part(s, 2, 4, 10);  // now flat at 10: one segment again
  s = skyline.lowest();
  EXPECT_EQ(s.from, 0u);
  EXPECT_EQ(s.to, 4u);
  EXPECT_EQ(s.height, 10u);
  EXPECT_FALSE(skyline.raise_to_lower_neighbour(s));  // spans everything
}

// ---- the strategy ---------------------------------------------------------------------------

using testing::Row;


Plan plan_with_strip_packing(const Trace& trace) {
  PlanOptions options;
  options.strategy = "strip_packing_best_fit";
  Result<Plan> plan = plan_trace(trace, options);
  EXPECT_TRUE(plan.ok()) << plan.error();
  return plan.ok() ? *plan : Plan{};
}

TEST(StripPackingStrategy, ValidOnRandomTracesOfEveryShape) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 2, 40, 300, 3000}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        const Trace trace = testing::random_trace(shape, n, seed);
        const Plan plan = plan_with_strip_packing(trace);
        const ValidationReport report = validate_plan(trace, plan);
        ASSERT_TRUE(report.valid) << trace.meta.name << " seed " << seed << ": "
                                  << (report.messages.empty() ? "" : report.messages[0]);
        EXPECT_GE(plan.slab_bytes, plan.lower_bound_bytes);
      }
    }
  }
}

TEST(StripPackingStrategy, SameTraceSamePlan) {
  const Trace trace = testing::random_trace(testing::TraceShape::kUniform, 2000, 5);
  EXPECT_EQ(plan_with_strip_packing(trace).offsets, plan_with_strip_packing(trace).offsets);
}

// Hand-built traces, worked through by hand with the documented rules (lowest segment, leftmost
// on ties; longest lifetime inside it, then largest, then earliest). Each reaches the lower bound.

TEST(StripPackingStrategy, AlternatingChainReachesTheLowerBound) {
  // A [0,2), B [1,3), C [2,4): A at 0, then C fits the empty [2,4) at 0, then B on top.
  const Trace trace = testing::trace_from_rows({{4096, 0, 2}, {4096, 1, 3}, {4096, 2, 4}});
  const Plan plan = plan_with_strip_packing(trace);
  EXPECT_EQ(plan.slab_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.offsets, (std::vector<uint64_t>{0, 4096, 0}));
}

TEST(StripPackingStrategy, DiamondRaisesWastedSegmentsAndReachesTheLowerBound) {
  // X [0,2) 4K forks into L, R [1,3) 2K each, which join into J [2,4) 4K. X and J fill the floor;
  // L goes on top; the gaps [0,1) and [3,4) beside it fit nothing and are raised; R lands on L.
  const Trace trace = testing::trace_from_rows({{4096, 0, 2}, {2048, 1, 3}, {2048, 1, 3}, {4096, 2, 4}});
  const Plan plan = plan_with_strip_packing(trace);
  EXPECT_EQ(plan.slab_bytes, 8192u);
  EXPECT_EQ(plan.slab_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.offsets, (std::vector<uint64_t>{0, 4096, 6144, 0}));
}

TEST(StripPackingStrategy, ResidualBlockReachesTheLowerBound) {
  // Skip input I [0,4) is the longest and goes first; the sum O [3,5) lands where conv A ended.
  const Trace trace = testing::trace_from_rows({{4096, 0, 4}, {4096, 1, 3}, {4096, 2, 4}, {4096, 3, 5}});
  const Plan plan = plan_with_strip_packing(trace);
  EXPECT_EQ(plan.slab_bytes, 3 * 4096u);
  EXPECT_EQ(plan.slab_bytes, plan.lower_bound_bytes);
  EXPECT_EQ(plan.offsets, (std::vector<uint64_t>{0, 4096, 8192, 4096}));
}

TEST(StripPackingStrategy, LongerLifetimeWinsTheLowestSegment) {
  // Both fit the empty strip; the longer-lived small block goes to the floor first, so the big
  // short one sits on it: best fit fills the segment's span, not its height.
  const Trace trace = testing::trace_from_rows({{65536, 1, 2}, {4096, 0, 3}});
  const Plan plan = plan_with_strip_packing(trace);
  EXPECT_EQ(plan.offsets, (std::vector<uint64_t>{4096, 0}));
}

}  // namespace
}  // namespace memoplan
