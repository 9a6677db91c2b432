// Planning under a budget (budget.h): the smallest feasible budget, slicing only where needed,
// pinning, load leads, and the resident profile kept under the budget on random problems.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "memoplan/planner/budget.h"

namespace memoplan::planner {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1 << 20;

WeightGroup group(uint64_t bytes, uint32_t first, uint32_t last, uint32_t max_slices = 1) {
  WeightGroup g;
  g.bytes = bytes;
  g.first_step = first;
  g.last_step = last;
  g.max_slices = max_slices;
  return g;
}

// A CNN-like pass: one group a step, growing toward the end (the last layers hold most bytes).
BudgetProblem cnn(uint64_t budget) {
  BudgetProblem p;
  p.budget_bytes = budget;
  p.activation_bytes = 10 * kMiB;
  p.steps = 8;
  for (uint32_t t = 0; t < 8; ++t) p.groups.push_back(group((t + 1) * kMiB, t, t));
  return p;
}

uint64_t peak(const std::vector<uint64_t>& profile) {
  return *std::max_element(profile.begin(), profile.end());
}

TEST(Budget, SmallestFeasibleIsActivationsPlusTheLargestStep) {
  BudgetProblem p = cnn(0);
  EXPECT_EQ(smallest_feasible_budget(p), 18 * kMiB);
  // A group read by steps 6..7 overlaps step 7's: both count there.
  p.groups.push_back(group(2 * kMiB, 6, 7));
  EXPECT_EQ(smallest_feasible_budget(p), 20 * kMiB);
}

TEST(Budget, BelowTheSmallestIsAnErrorThatNamesIt) {
  const BudgetProblem p = cnn(17 * kMiB);
  try {
    plan_budget(p);
    FAIL() << "expected BudgetInfeasible";
  } catch (const BudgetInfeasible& e) {
    EXPECT_EQ(e.smallest_bytes, 18 * kMiB);
    EXPECT_NE(std::string(e.what()).find("smallest feasible budget 18.0 MiB"), std::string::npos)
        << e.what();
  }
}

TEST(Budget, AmpleBudgetPinsEverything) {
  const BudgetProblem p = cnn(100 * kMiB);
  const BudgetPlan plan = plan_budget(p);
  EXPECT_EQ(plan.pinned_bytes, 36 * kMiB);
  EXPECT_EQ(plan.streamed_bytes, 0u);
  EXPECT_EQ(plan.peak_bytes, 46 * kMiB);
  for (uint8_t pinned : plan.pinned) EXPECT_TRUE(pinned);
}

TEST(Budget, TightBudgetStreamsAndStaysUnder) {
  const BudgetProblem p = cnn(25 * kMiB);  // 15 MiB for weights; 36 MiB of them
  const BudgetPlan plan = plan_budget(p);
  const std::vector<uint64_t> profile = resident_profile(p, plan);
  EXPECT_LE(peak(profile), p.budget_bytes);
  EXPECT_EQ(plan.peak_bytes, peak(profile));
  EXPECT_GT(plan.pinned_bytes, 0u);  // something still fits beside the largest step
  EXPECT_GT(plan.streamed_bytes, 0u);
  EXPECT_EQ(plan.pinned_bytes + plan.streamed_bytes, 36 * kMiB);
  for (uint32_t s : plan.slices) EXPECT_EQ(s, 1u);  // nothing needed slicing
}

TEST(Budget, LoadsAheadWhereTheBudgetLeavesRoom) {
  BudgetProblem p;
  p.activation_bytes = 0;
  p.steps = 6;
  p.max_lead = 2;
  p.groups = {group(1 * kMiB, 0, 0), group(1 * kMiB, 3, 3), group(1 * kMiB, 5, 5)};
  p.budget_bytes = 2 * kMiB;  // one group pinned, one streamed at a time with room to lead
  const BudgetPlan plan = plan_budget(p);
  EXPECT_EQ(plan.pinned_bytes, 1 * kMiB);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    if (plan.pinned[g]) continue;
    EXPECT_LE(plan.load_step[g], p.groups[g].first_step);
  }
  // Group 0 is pinned (the first of equal sizes); group 1 leads by 2 (steps 1 and 2 are free),
  // group 2 by 1 only: step 3 holds group 1, and two streamed groups beside the pinned one would
  // pass the budget.
  ASSERT_TRUE(plan.pinned[0]);
  EXPECT_EQ(plan.load_step[1], 1u);
  EXPECT_EQ(plan.load_step[2], 4u);
  EXPECT_LE(peak(resident_profile(p, plan)), p.budget_bytes);
}

TEST(Budget, SlicesOnlyTheGroupThatDoesNotFit) {
  BudgetProblem p;
  p.activation_bytes = 1 * kMiB;
  p.steps = 3;
  p.groups = {group(2 * kMiB, 0, 0, 16), group(64 * kMiB, 1, 1, 16), group(2 * kMiB, 2, 2, 16)};
  p.budget_bytes = 20 * kMiB;
  const BudgetPlan plan = plan_budget(p);
  EXPECT_EQ(plan.slices[0], 1u);
  EXPECT_EQ(plan.slices[2], 1u);
  EXPECT_GE(plan.slices[1], 8u);  // two slices of 64/8 MiB = 16 MiB resident
  EXPECT_LE(peak(resident_profile(p, plan)), p.budget_bytes);
  // The smallest: 1 MiB + two 4 MiB slices of the 64 MiB group.
  EXPECT_EQ(plan.smallest_budget_bytes, 9 * kMiB);
}

TEST(Budget, OnDemandGroupsAreNeverPinnedOrLoadedAhead) {
  BudgetProblem p;
  p.activation_bytes = 0;
  p.steps = 4;
  p.groups = {group(1 * kMiB, 0, 0), group(1 * kMiB, 3, 3), group(1 * kMiB, 3, 3)};
  p.groups[1].on_demand = true;
  p.budget_bytes = 100 * kMiB;  // room for everything
  const BudgetPlan plan = plan_budget(p);
  EXPECT_TRUE(plan.pinned[0]);
  EXPECT_TRUE(plan.pinned[2]);
  EXPECT_FALSE(plan.pinned[1]);
  EXPECT_EQ(plan.load_step[1], 3u);
  EXPECT_EQ(plan.streamed_bytes, 1 * kMiB);
  p.groups[1].max_slices = 2;
  EXPECT_THROW(plan_budget(p), std::invalid_argument);
}

TEST(Budget, MalformedProblemsAreRejected) {
  BudgetProblem p = cnn(100 * kMiB);
  p.groups.push_back(group(kMiB, 3, 2));
  EXPECT_THROW(plan_budget(p), std::invalid_argument);
  p = cnn(100 * kMiB);
  p.groups.push_back(group(kMiB, 0, 8));
  EXPECT_THROW(plan_budget(p), std::invalid_argument);
  p = cnn(100 * kMiB);
  p.groups.push_back(group(kMiB, 1, 2, 4));  // several steps: not sliceable
  EXPECT_THROW(plan_budget(p), std::invalid_argument);
}

// Working memory (a convolution's parts): one arena, as large as the most any group's step needs,
// resident the whole pass; it shrinks as that group is cut finer.
WeightGroup conv(uint64_t bytes, uint32_t step, uint32_t max_slices, std::vector<uint64_t> work) {
  WeightGroup g = group(bytes, step, step, max_slices);
  g.work_bytes = std::move(work);
  return g;
}

TEST(Budget, WorkArenaCountsInTheSmallestBudget) {
  BudgetProblem p;
  p.steps = 2;
  p.activation_bytes = kMiB;
  p.groups.push_back(conv(8 * kMiB, 0, 8, {8 * kMiB, 4 * kMiB, 2 * kMiB, kMiB}));
  p.groups.push_back(conv(kMiB, 1, 1, {3 * kMiB / 2}));
  // Activations + the arena at the finest cuts (the second group's 1.5 MiB) + two 1 MiB slices.
  EXPECT_EQ(smallest_feasible_budget(p), kMiB + 3 * kMiB / 2 + 2 * kMiB);
}

TEST(Budget, CutsTheGroupThatSizesTheArena) {
  BudgetProblem p;
  p.steps = 2;
  p.budget_bytes = 12 * kMiB;
  p.groups.push_back(conv(kMiB, 0, 4, {16 * kMiB, 8 * kMiB, 4 * kMiB}));
  p.groups.push_back(group(4 * kMiB, 1, 1));
  const BudgetPlan plan = plan_budget(p);
  // Whole, the first group's 16 MiB of work alone pass the budget; in two slices the arena is
  // 8 MiB and the second step holds 4 MiB more: 12 MiB, no need to cut further. Pinning either
  // group would pass the budget (the first one pinned is whole: 16 MiB of work again).
  EXPECT_EQ(plan.slices[0], 2u);
  EXPECT_EQ(plan.work_bytes, 8 * kMiB);
  EXPECT_FALSE(plan.pinned[0]);
  EXPECT_FALSE(plan.pinned[1]);
  EXPECT_EQ(plan.peak_bytes, 12 * kMiB);
  EXPECT_EQ(peak(resident_profile(p, plan)), 12 * kMiB);
}

TEST(Budget, APinnedGroupNeedsItsWholeWork) {
  BudgetProblem p;
  p.steps = 2;
  p.budget_bytes = 40 * kMiB;
  p.groups.push_back(conv(4 * kMiB, 0, 4, {6 * kMiB, 3 * kMiB, 2 * kMiB}));
  p.groups.push_back(group(4 * kMiB, 1, 1));
  const BudgetPlan plan = plan_budget(p);
  EXPECT_TRUE(plan.pinned[0]);
  EXPECT_EQ(plan.slices[0], 1u);
  EXPECT_EQ(plan.work_bytes, 6 * kMiB);
  EXPECT_EQ(plan.peak_bytes, 14 * kMiB);
}

// Random problems: every feasible budget gives a plan under it whose pinned and streamed bytes
// add up, and whose leads never pass max_lead.
TEST(Budget, RandomProblemsStayUnderTheBudget) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    BudgetProblem p;
    p.steps = 1 + rng() % 40;
    p.activation_bytes = (rng() % 64) * kPage;
    p.max_lead = rng() % 5;
    const size_t groups = rng() % 30;
    uint64_t total = 0;
    for (size_t g = 0; g < groups; ++g) {
      const uint32_t first = rng() % p.steps;
      const uint32_t last = rng() % 3 == 0 ? first + rng() % (p.steps - first) : first;
      const uint32_t slices = first == last && rng() % 2 ? 1 + rng() % 16 : 1;
      p.groups.push_back(group((1 + rng() % 512) * kPage, first, last, slices));
      p.groups.back().on_demand = slices == 1 && rng() % 5 == 0;
      if (!p.groups.back().on_demand && rng() % 3 == 0) {  // a convolution's working memory
        uint64_t work = (1 + rng() % 1024) * kPage;
        for (uint32_t s = 1; s <= slices; s *= 2, work = work / 2 + rng() % (work / 4 + 1)) {
          p.groups.back().work_bytes.push_back(work);
        }
      }
      total += p.groups.back().bytes;
    }
    const uint64_t smallest = smallest_feasible_budget(p);
    p.budget_bytes = smallest + rng() % (total + 1);
    const BudgetPlan plan = plan_budget(p);
    const std::vector<uint64_t> profile = resident_profile(p, plan);
    ASSERT_LE(peak(profile), p.budget_bytes) << "round " << round;
    EXPECT_EQ(plan.peak_bytes, peak(profile)) << "round " << round;
    EXPECT_EQ(plan.pinned_bytes + plan.streamed_bytes, total);
    for (size_t g = 0; g < groups; ++g) {
      EXPECT_LE(plan.load_step[g], p.groups[g].first_step);
      EXPECT_LE(p.groups[g].first_step - plan.load_step[g], p.max_lead);
      EXPECT_LE(plan.slices[g], p.groups[g].max_slices);
      if (p.groups[g].on_demand) {
        EXPECT_FALSE(plan.pinned[g]);
        EXPECT_EQ(plan.load_step[g], p.groups[g].first_step);
      }
    }
    if (p.budget_bytes > 0 && smallest > 0) {
      EXPECT_THROW(
          {
            BudgetProblem q = p;
            q.budget_bytes = smallest - 1;
            plan_budget(q);
          },
          BudgetInfeasible);
    }
  }
}

}  // namespace
}  // namespace memoplan::planner
