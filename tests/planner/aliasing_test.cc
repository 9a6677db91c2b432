// Aliasing (aliasing.h): the claims a trace makes (alias_of: coalescing into a dying input;
// slice_of: a concat's inputs inside its output), the groups the planner takes from them, the
// bound with sharing, and the validator's own reading of the same claims.
#include <gtest/gtest.h>

#include <random>

#include "memoplan/planner/aliasing.h"
#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"

namespace memoplan {
namespace {

Allocation row(uint64_t id, uint64_t size, uint64_t begin, uint64_t end) {
  Allocation a;
  a.id = id;
  a.size = size;
  a.begin = begin;
  a.end = end;
  return a;
}

Plan plan_with(const Trace& trace, const std::string& strategy = "greedy_by_size") {
  PlanOptions options;
  options.strategy = strategy;
  options.aliases = true;
  options.strategy_options.time_limit_s = 0.05;
  Result<Plan> plan = plan_trace(trace, options);
  EXPECT_TRUE(plan.ok()) << plan.error();
  return plan.ok() ? *plan : Plan{};
}

// conv -> batch norm -> activation: each output may take its dying input's bytes, while a
// residual input (row 0) stays alive throughout.
Trace coalescing_chain() {
  Trace t;
  t.allocations = {row(0, 4096, 0, 20), row(1, 4096, 1, 4), row(2, 4096, 3, 6), row(3, 4096, 5, 8)};
  t.allocations[2].alias_of = 1;
  t.allocations[3].alias_of = 2;
  return t;
}

TEST(Aliasing, CoalescedChainGoesBelowTheOffsetBound) {
  const Trace trace = coalescing_chain();
  const Plan plan = plan_with(trace);
  EXPECT_EQ(plan.offset_lower_bound_bytes, 3 * 4096u);  // row 0 and two of the chain at once
  EXPECT_EQ(plan.lower_bound_bytes, 2 * 4096u);         // the chain's rows share their bytes
  EXPECT_EQ(plan.slab_bytes, 2 * 4096u);
  EXPECT_EQ(plan.aliased_rows, 2u);
  EXPECT_EQ(plan.offsets[1], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[2], plan.offsets[3]);
  EXPECT_EQ(plan.status, SolveStatus::kOptimal);
  EXPECT_TRUE(validate_plan(trace, plan).valid);

  // Without --memory min the claims are ignored: today's plan.
  Result<Plan> plain = plan_trace(trace);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->slab_bytes, 3 * 4096u);
  EXPECT_EQ(plain->lower_bound_bytes, plain->offset_lower_bound_bytes);
  EXPECT_EQ(plain->aliased_rows, 0u);
}

// Three branch outputs, each made only for the concat (row 3) that copies them; the concat's
// output lives on.
Trace concat_of_branches() {
  Trace t;
  t.allocations = {row(0, 1024, 0, 7), row(1, 2048, 2, 7), row(2, 1024, 4, 7), row(3, 4096, 6, 12)};
  uint64_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    t.allocations[i].slice_of = 3;
    t.allocations[i].slice_offset = at;
    at += t.allocations[i].size;
  }
  return t;
}

TEST(Aliasing, ConcatInputsLieInsideTheOutput) {
  const Trace trace = concat_of_branches();
  const Plan plan = plan_with(trace);
  EXPECT_EQ(plan.offset_lower_bound_bytes, 8192u);
  EXPECT_EQ(plan.lower_bound_bytes, 4096u);
  EXPECT_EQ(plan.slab_bytes, 4096u);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3] + 1024);
  EXPECT_EQ(plan.offsets[2], plan.offsets[3] + 3072);
  EXPECT_TRUE(validate_plan(trace, plan).valid);
}

// DenseNet: layer k concatenates every feature so far; each feature (rows 0..3) is read by every
// later concat, and concat k is a prefix of concat k + 1.
TEST(Aliasing, DenseBlockPrefixConcatsShareOneRegion) {
  Trace t;
  const uint64_t f = 1024;
  // features x0..x3 at ticks 0, 10, 20, 30, alive to the end; concats c1..c3 made from them.
  for (uint64_t k = 0; k < 4; ++k) t.allocations.push_back(row(k, f, 10 * k, 45));
  for (uint64_t k = 1; k < 4; ++k) {
    t.allocations.push_back(row(10 + k, (k + 1) * f, 10 * k + 5, 10 * k + 7));
  }
  // x_i is a slice of the first concat that holds it; each concat of the next.
  for (uint64_t i = 0; i < 4; ++i) {
    t.allocations[i].slice_of = 10 + std::max<uint64_t>(i, 1);
    t.allocations[i].slice_offset = i * f;
  }
  t.allocations[4].slice_of = 12;
  t.allocations[5].slice_of = 13;
  const Plan plan = plan_with(t);
  EXPECT_EQ(plan.lower_bound_bytes, 4 * f);
  EXPECT_EQ(plan.slab_bytes, 4 * f);
  EXPECT_LT(plan.slab_bytes, plan.offset_lower_bound_bytes);
  EXPECT_TRUE(validate_plan(t, plan).valid);
}

// Batch norm over a concat's output while the concat's inputs are still alive (DenseNet's
// norm1): its output must not take the concat's bytes, which the live inputs share.
TEST(Aliasing, CoalescingOverBytesAConcatStillHoldsIsLeft) {
  Trace t = concat_of_branches();
  for (Allocation& a : t.allocations) a.end = std::max<uint64_t>(a.end, 9);  // inputs live on
  t.allocations.push_back(row(4, 4096, 8, 12));
  t.allocations[4].alias_of = 3;
  const planner::AliasGroups groups = planner::accept_aliases(t, 64);
  EXPECT_EQ(groups.slices_taken, 3u);
  EXPECT_EQ(groups.aliases_taken, 0u);
  EXPECT_EQ(groups.aliases_left, 1u);
  const Plan plan = plan_with(t);
  EXPECT_NE(plan.offsets[4], plan.offsets[3]);
  EXPECT_TRUE(validate_plan(t, plan).valid);
}

TEST(Aliasing, MisalignedSliceIsLeft) {
  Trace t = concat_of_branches();
  t.allocations[0].size = 1000;  // the next input would start at byte 1000
  t.allocations[1].slice_offset = 1000;
  t.allocations[2].slice_offset = 3048;
  const planner::AliasGroups groups = planner::accept_aliases(t, 64);
  EXPECT_EQ(groups.slices_taken, 1u);
  EXPECT_EQ(groups.slices_left, 2u);
  const Plan plan = plan_with(t);
  EXPECT_TRUE(validate_plan(t, plan).valid);
  for (size_t r = 0; r < t.allocations.size(); ++r) EXPECT_EQ(plan.offsets[r] % 64, 0u) << r;
}

TEST(Aliasing, ClaimsOnRowsThatAreNotPlannedAreSkipped) {
  Trace t = concat_of_branches();
  t.allocations[3].escapes = true;  // the concat is the pass's output
  const planner::AliasGroups groups = planner::accept_aliases(t, 64);
  EXPECT_EQ(groups.slices_taken + groups.slices_left, 0u);
  const Plan plan = plan_with(t);
  EXPECT_EQ(plan.slab_bytes, 4096u);  // the three inputs, apart
  EXPECT_TRUE(validate_plan(t, plan).valid);
}

TEST(Aliasing, TheBoundWithoutClaimsIsTheOffsetBound) {
  Trace t = coalescing_chain();
  for (Allocation& a : t.allocations) a.alias_of = kNoRow;
  const planner::AliasGroups groups = planner::accept_aliases(t, 64);
  EXPECT_TRUE(groups.span.empty());
  const Result<planner::Problem> problem = planner::make_problem(t);
  ASSERT_TRUE(problem.ok());
  EXPECT_EQ(planner::aliased_lower_bound(t, groups), planner::offset_lower_bound(*problem));
}

// The validator, from the trace alone.
Plan hand_plan(const Trace& trace, std::vector<uint64_t> offsets) {
  Plan plan;
  plan.offsets = std::move(offsets);
  for (size_t r = 0; r < trace.allocations.size(); ++r) {
    plan.slab_bytes = std::max(plan.slab_bytes, plan.offsets[r] + trace.allocations[r].size);
  }
  return plan;
}

TEST(AliasingValidator, AcceptsTheClaimedSharing) {
  EXPECT_TRUE(
      validate_plan(coalescing_chain(), hand_plan(coalescing_chain(), {0, 4096, 4096, 4096}))
          .valid);
  EXPECT_TRUE(
      validate_plan(concat_of_branches(), hand_plan(concat_of_branches(), {1024, 2048, 4096, 1024}))
          .valid);
}

TEST(AliasingValidator, RejectsAnAliasNotAtItsRowsStart) {
  Trace t = coalescing_chain();
  t.allocations[2].size = 2048;  // a prefix alias is fine at the start, not in the middle
  t.allocations[3].size = 2048;
  EXPECT_TRUE(validate_plan(t, hand_plan(t, {0, 4096, 4096, 4096})).valid);
  const ValidationReport report = validate_plan(t, hand_plan(t, {0, 4096, 6144, 4096}));
  EXPECT_FALSE(report.valid);
  ASSERT_FALSE(report.messages.empty());
  EXPECT_NE(report.messages[0].find("only at its start"), std::string::npos) << report.messages[0];
}

TEST(AliasingValidator, RejectsSharingTheTraceDoesNotClaim) {
  Trace t = coalescing_chain();
  t.allocations[3].alias_of = kNoRow;  // the activation no longer claims the batch norm's bytes
  const ValidationReport report = validate_plan(t, hand_plan(t, {0, 4096, 4096, 4096}));
  EXPECT_FALSE(report.valid);
  ASSERT_FALSE(report.messages.empty());
  EXPECT_NE(report.messages[0].find("lets neither share"), std::string::npos) << report.messages[0];
  // Nor may an alias share with a third row that lives on its dying row's bytes.
  EXPECT_FALSE(
      validate_plan(coalescing_chain(), hand_plan(coalescing_chain(), {0, 0, 0, 0})).valid);
}

TEST(AliasingValidator, RejectsASliceAtAnotherPlace) {
  const Trace t = concat_of_branches();
  const ValidationReport report = validate_plan(t, hand_plan(t, {0, 2048, 1024, 0}));
  EXPECT_FALSE(report.valid);
  ASSERT_FALSE(report.messages.empty());
  EXPECT_NE(report.messages[0].find("is a slice of row 3 at byte"), std::string::npos)
      << report.messages[0];
}

// Two concats that share their first input: x1 (in c) and y (in d) sit at the same place of
// trees joined only through x0; their bytes differ, so they may not overlap while both live.
TEST(AliasingValidator, RejectsSiblingSlicesOfDifferentConcats) {
  Trace t;
  t.allocations = {row(0, 1024, 0, 20), row(1, 1024, 1, 20), row(2, 1024, 2, 20),
                   row(3, 2048, 3, 5), row(4, 2048, 6, 8)};
  t.allocations[0].slice_of = 3;
  t.allocations[1].slice_of = 3;
  t.allocations[1].slice_offset = 1024;
  t.allocations[2].slice_of = 4;
  t.allocations[2].slice_offset = 1024;
  // x0 inside c at 0, x1 inside c at 1024; y inside d at 1024; d over c: y over x1.
  EXPECT_FALSE(validate_plan(t, hand_plan(t, {0, 1024, 1024, 0, 0})).valid);
  // The planner keeps them apart.
  const Plan plan = plan_with(t);
  EXPECT_TRUE(validate_plan(t, plan).valid);
  EXPECT_NE(plan.offsets[1], plan.offsets[2]);
}

TEST(AliasingTrace, MalformedClaimsAreErrors) {
  Trace t = coalescing_chain();
  t.allocations[2].alias_of = 99;
  EXPECT_NE(check_trace(t).find("names no other row"), std::string::npos) << check_trace(t);
  t = coalescing_chain();
  t.allocations[2].size = 8192;
  EXPECT_NE(check_trace(t).find("is larger"), std::string::npos) << check_trace(t);
  t = coalescing_chain();
  t.allocations[2].begin = 0;
  EXPECT_NE(check_trace(t).find("no later than"), std::string::npos) << check_trace(t);
  t = concat_of_branches();
  t.allocations[2].slice_offset = 3500;
  EXPECT_NE(check_trace(t).find("not inside"), std::string::npos) << check_trace(t);
  t = concat_of_branches();
  t.allocations[3].slice_of = 2;
  t.allocations[3].size = 1024;
  t.allocations[2].slice_offset = 0;
  t.allocations[0].slice_offset = t.allocations[1].slice_offset = 0;
  t.allocations[0].slice_of = t.allocations[1].slice_of = kNoRow;
  EXPECT_NE(check_trace(t).find("cycle"), std::string::npos) << check_trace(t);
  EXPECT_FALSE(plan_trace(t, PlanOptions{}).ok());
}

// Random traces with random claims, most of which cannot all be honoured: every strategy's
// aliased plan is valid by the independent validator, never below the bound with sharing, and
// never above the plan without claims by more than the groups' rounding.
TEST(AliasingProperty, EveryStrategyMakesValidAliasedPlans) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    Trace t;
    const size_t n = 30 + trial;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t begin = 2 * i + rng() % 3;
      t.allocations.push_back(row(i, 64 * (1 + rng() % 16), begin, begin + 1 + rng() % 12));
    }
    for (size_t i = 1; i < n; ++i) {
      Allocation& a = t.allocations[i];
      const size_t j = rng() % i;
      const Allocation& b = t.allocations[j];
      if (rng() % 3 == 0 && a.size <= b.size && b.begin < a.begin) a.alias_of = b.id;
      if (rng() % 3 == 0 && a.size <= b.size) {
        a.slice_of = b.id;
        a.slice_offset = 64 * (rng() % ((b.size - a.size) / 64 + 1));
      }
    }
    ASSERT_EQ(check_trace(t), "");
    for (const char* strategy : {"greedy_by_size", "greedy_by_breadth", "first_fit", "best_fit",
                                 "naive", "strip_packing_best_fit", "bump"}) {
      const Plan plan = plan_with(t, strategy);
      const ValidationReport report = validate_plan(t, plan);
      ASSERT_TRUE(report.valid) << strategy << " trial " << trial << ": "
                                << (report.messages.empty() ? "" : report.messages[0]);
      EXPECT_GE(plan.slab_bytes, plan.lower_bound_bytes) << strategy;
      EXPECT_LE(plan.lower_bound_bytes, plan.offset_lower_bound_bytes) << strategy;
    }
  }
}

}  // namespace
}  // namespace memoplan
