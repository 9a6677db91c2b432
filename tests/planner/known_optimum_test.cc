// Hand-built traces whose optimal slab is known, and exact checks of the lower bounds and the
// validator.
#include <gtest/gtest.h>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "trace_rows.h"

namespace memoplan {
namespace {

using testing::KiB;

uint64_t planned_slab(const Trace& trace, const std::string& strategy) {
  PlanOptions options;
  options.strategy = strategy;
  Result<Plan> plan = plan_trace(trace, options);
  EXPECT_TRUE(plan.ok()) << plan.error();
  return plan.ok() ? plan->slab_bytes : 0;
}

// A chain: each layer's output is the next layer's input, then dies. Two buffers suffice.
Trace chain() {
  return testing::trace_from_rows(
      {{64 * KiB, 0, 2}, {32 * KiB, 1, 3}, {64 * KiB, 2, 4}, {32 * KiB, 3, 5}, {64 * KiB, 4, 6}});
}

// A diamond: one input feeds two branches that are joined.
Trace diamond() {
  return testing::trace_from_rows(
      {{16 * KiB, 0, 3}, {8 * KiB, 1, 4}, {8 * KiB, 2, 4}, {16 * KiB, 4, 5}});
}

// A residual block: the skip connection lives across the whole block.
Trace residual() {
  return testing::trace_from_rows(
      {{32 * KiB, 0, 5}, {32 * KiB, 1, 3}, {32 * KiB, 2, 4}, {32 * KiB, 4, 6}});
}

TEST(LowerBound, IsTheMostBytesLiveAtOnce) {
  Result<planner::Problem> p = planner::make_problem(chain());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(planner::offset_lower_bound(*p), 96 * KiB);
  p = planner::make_problem(diamond());
  EXPECT_EQ(planner::offset_lower_bound(*p), 32 * KiB);
  p = planner::make_problem(residual());
  EXPECT_EQ(planner::offset_lower_bound(*p), 96 * KiB);
}

TEST(LowerBound, HalfOpenLifetimesDoNotOverlapAtTheBoundary) {
  Result<planner::Problem> p =
      planner::make_problem(testing::trace_from_rows({{100, 0, 1}, {100, 1, 2}}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(planner::offset_lower_bound(*p), 128u);  // sizes round up to 64-byte alignment
}

TEST(LowerBound, SharedObjectsSumPositionalMaxima) {
  // Profiles {8,2} at tick 0 and {5,4} at tick 2: positional maxima 8 and 4 -> 12 units.
  Trace t =
      testing::trace_from_rows({{8 * 64, 0, 1}, {2 * 64, 0, 1}, {5 * 64, 2, 3}, {4 * 64, 2, 3}});
  Result<planner::Problem> p = planner::make_problem(t);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(planner::shared_objects_lower_bound(*p), 12u * 64);
  EXPECT_EQ(planner::offset_lower_bound(*p), 10u * 64);
}

TEST(KnownOptimum, GreedyBySizeReachesTheBoundOnChainDiamondResidual) {
  for (const Trace& t : {chain(), diamond(), residual()}) {
    Result<Plan> plan = plan_trace(t);
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->slab_bytes, plan->lower_bound_bytes);
    EXPECT_EQ(plan->status, SolveStatus::kOptimal);
  }
}

TEST(KnownOptimum, NaiveIsTheSumAndBumpReusesOnlyTheTop) {
  const Trace t = chain();
  EXPECT_EQ(planned_slab(t, "naive"), (3 * 64 + 2 * 32) * KiB);
  // Bump: the top block dies last in a chain, so nothing below is reclaimed until the end.
  EXPECT_GE(planned_slab(t, "bump"), planned_slab(t, "greedy_by_size"));
  // Stack-like lifetimes are bump's best case: it reaches the bound.
  Trace nested = testing::trace_from_rows(
      {{64 * KiB, 0, 10}, {32 * KiB, 1, 5}, {16 * KiB, 2, 3}, {32 * KiB, 6, 9}});
  EXPECT_EQ(planned_slab(nested, "bump"), 112 * KiB);
}

TEST(KnownOptimum, GreedyBySizePlacesLargestFirstIntoTheSmallestGap) {
  // Pisarchyk & Lee, Fig. 6 style: the big blocks define the gaps the small ones drop into.
  Trace t = testing::trace_from_rows({{32 * KiB, 0, 2},
                                      {28 * KiB, 1, 4},
                                      {36 * KiB, 3, 5},
                                      {16 * KiB, 5, 7},
                                      {8 * KiB, 6, 8},
                                      {64 * KiB, 7, 8}});
  Result<Plan> plan = plan_trace(t);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->offsets[5], 0u);  // the largest goes first, at 0
  EXPECT_TRUE(validate_plan(t, *plan).valid);
}

TEST(Validator, CatchesOverlapMisalignmentAndSlabOverrun) {
  Trace t = testing::trace_from_rows({{128, 0, 2}, {128, 1, 3}});
  Plan plan;
  plan.alignment = 64;
  plan.slab_bytes = 256;
  plan.offsets = {0, 64};  // overlap while both are live
  ValidationReport r = validate_plan(t, plan);
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.messages.at(0).find("overlap"), std::string::npos);

  plan.offsets = {0, 130};  // misaligned and past the slab
  r = validate_plan(t, plan);
  EXPECT_FALSE(r.valid);
  EXPECT_EQ(r.violations, 2u);

  plan.offsets = {0, 128};
  EXPECT_TRUE(validate_plan(t, plan).valid);

  plan.offsets = {0};
  EXPECT_NE(validate_plan(t, plan).messages.at(0).find("1 offsets"), std::string::npos);
}

TEST(Validator, DisjointLifetimesMayShareAddresses) {
  Trace t = testing::trace_from_rows({{128, 0, 2}, {128, 2, 4}, {0, 0, 4}});
  Plan plan;
  plan.slab_bytes = 128;
  plan.offsets = {0, 0, 4096};  // a zero-byte row is never checked
  EXPECT_TRUE(validate_plan(t, plan).valid);
}

TEST(Validator, InstantaneousAllocationsStillNeedSpace) {
  Trace t = testing::trace_from_rows({{128, 3, 3}, {128, 0, 5}});
  Plan plan;
  plan.slab_bytes = 256;
  plan.offsets = {0, 0};
  EXPECT_FALSE(validate_plan(t, plan).valid);
}

}  // namespace
}  // namespace memoplan
