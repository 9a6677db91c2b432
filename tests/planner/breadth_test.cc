// Operator profiles, breadths, positional maxima and the profile drain (Pisarchyk & Lee 2020, §3),
// and Greedy by Breadth for offsets (§5.3).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "offset_placer.h"
#include "operator_profiles.h"
#include "random_traces.h"
#include "strategies/strategies.h"
#include "trace_rows.h"

namespace memoplan::planner {
namespace {

// Sizes in bytes with alignment 1, so hand-computed offsets read as written.
PlanOptions with_strategy(const std::string& strategy) {
  PlanOptions options;
  options.strategy = strategy;
  return options;
}

Problem problem_of(const std::vector<Block>& blocks) {
  Problem problem;
  problem.alignment = 1;
  problem.blocks = blocks;
  for (size_t i = 0; i < blocks.size(); ++i) problem.row.push_back(i);
  return problem;
}

// A small network in the spirit of the paper's Figure 2, lifetimes half-open:
//   tick:  0  1  2  3  4  5  6  7  8
//   b0 32  [-----)
//   b1 28     [-----------)
//   b2 36        [-----------)
//   b3 16           [--------)
//   b4  8              [-----)
//   b5 64                 [--------)
//   b6 10                    [--------)
//   b7 40                       [-----)
Problem figure_like() {
  return problem_of({{32, 0, 2},
                     {28, 1, 5},
                     {36, 2, 6},
                     {16, 3, 6},
                     {8, 4, 6},
                     {64, 5, 8},
                     {10, 6, 9},
                     {40, 7, 9}});
}

std::vector<size_t> profile(const OperatorProfiles& profiles, size_t k) {
  return {profiles.profile_begin(k), profiles.profile_end(k)};
}

TEST(OperatorProfiles, HandBuiltTraceHasOneProfilePerBeginTickSortedBySize) {
  const Problem problem = figure_like();
  const OperatorProfiles profiles = operator_profiles(problem);
  ASSERT_EQ(profiles.operators.size(), 8u);
  const std::vector<std::vector<size_t>> expected = {{0},          {0, 1},       {2, 1}, {2, 1, 3},
                                                     {2, 1, 3, 4}, {5, 2, 3, 4}, {5, 6}, {5, 7, 6}};
  const std::vector<uint64_t> breadths = {32, 60, 64, 80, 88, 124, 74, 114};
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(profiles.operators[k].tick, k);
    EXPECT_EQ(profiles.operators[k].breadth, breadths[k]) << "operator " << k;
    EXPECT_EQ(profile(profiles, k), expected[k]) << "operator " << k;
  }
}

TEST(OperatorProfiles, BlocksEndingAtATickAreNotInItsProfile) {
  // Half-open lifetimes: b0 = [0, 4) is gone when b1 arrives at 4; b2 = [0, 1) ends before any
  // later begin. Ticks with no allocation (1..3) are not operators.
  const Problem problem = problem_of({{8, 0, 4}, {16, 4, 6}, {4, 0, 1}});
  const OperatorProfiles profiles = operator_profiles(problem);
  ASSERT_EQ(profiles.operators.size(), 2u);
  EXPECT_EQ(profile(profiles, 0), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(profile(profiles, 1), (std::vector<size_t>{1}));
  EXPECT_EQ(profiles.operators[1].breadth, 16u);
}

TEST(OperatorProfiles, BreadthOrderIsNonIncreasingWithEarlierTicksFirstOnTies) {
  const Problem problem = figure_like();
  std::vector<uint64_t> ticks;
  for (const Operator& op : operators_by_breadth(problem)) ticks.push_back(op.tick);
  EXPECT_EQ(ticks, (std::vector<uint64_t>{5, 7, 4, 3, 6, 2, 1, 0}));

  const Problem tied = problem_of({{8, 0, 1}, {8, 3, 4}, {4, 6, 7}});
  std::vector<uint64_t> tied_ticks;
  for (const Operator& op : operators_by_breadth(tied)) tied_ticks.push_back(op.tick);
  EXPECT_EQ(tied_ticks, (std::vector<uint64_t>{0, 3, 6}));
}

TEST(PositionalMaxima, HandBuiltTrace) {
  const Problem problem = figure_like();
  EXPECT_EQ(positional_maxima(problem), (std::vector<uint64_t>{64, 40, 16, 8}));
  EXPECT_EQ(shared_objects_lower_bound(problem), 128u);
  EXPECT_EQ(offset_lower_bound(problem), 124u);
}

TEST(PositionalMaxima, EmptyProblemHasNone) {
  EXPECT_TRUE(positional_maxima(problem_of({})).empty());
  EXPECT_TRUE(operator_profiles(problem_of({})).operators.empty());
}

TEST(ProfileDrain, TakesEachBlockOnceInSizeOrder) {
  const Problem problem = figure_like();
  ProfileDrain drain(problem);
  auto take = [&](uint64_t tick) {
    std::vector<size_t> out;
    drain.take(tick, out);
    return out;
  };
  EXPECT_EQ(take(5), (std::vector<size_t>{5, 2, 3, 4}));
  EXPECT_EQ(take(7), (std::vector<size_t>{7, 6}));
  EXPECT_EQ(take(4), (std::vector<size_t>{1}));
  EXPECT_EQ(take(3), (std::vector<size_t>{}));
  EXPECT_EQ(take(1), (std::vector<size_t>{0}));
  EXPECT_EQ(take(0), (std::vector<size_t>{}));
}

// The fast paths against the literal definitions, computed from the full profiles.
TEST(OperatorProfiles, FastPathsAgreeWithFullProfilesOnRandomTraces) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 7, 60, 400}) {
      for (uint64_t seed : {1, 2, 3}) {
        SCOPED_TRACE(testing::to_string(shape) + " n=" + std::to_string(n) +
                     " seed=" + std::to_string(seed));
        Result<Problem> made = make_problem(testing::random_trace(shape, n, seed));
        ASSERT_TRUE(made.ok()) << made.error();
        const Problem& problem = *made;
        const OperatorProfiles profiles = operator_profiles(problem);

        std::vector<uint64_t> maxima;
        uint64_t widest = 0;
        for (size_t k = 0; k < profiles.operators.size(); ++k) {
          uint64_t breadth = 0, previous = UINT64_MAX;
          for (size_t i : profile(profiles, k)) {
            const Block& b = problem.blocks[i];
            EXPECT_TRUE(b.begin <= profiles.operators[k].tick &&
                        profiles.operators[k].tick < b.end);
            EXPECT_LE(b.size, previous);
            previous = b.size;
            breadth += b.size;
          }
          EXPECT_EQ(breadth, profiles.operators[k].breadth);
          widest = std::max(widest, breadth);
          const size_t count = profiles.profile_size(k);
          if (maxima.size() < count) maxima.resize(count, 0);
          for (size_t p = 0; p < count; ++p) {
            maxima[p] = std::max(maxima[p], problem.blocks[profile(profiles, k)[p]].size);
          }
        }
        EXPECT_EQ(widest, offset_lower_bound(problem));
        EXPECT_EQ(positional_maxima(problem), maxima);
        uint64_t sum = 0;
        for (uint64_t m : maxima) sum += m;
        EXPECT_EQ(sum, shared_objects_lower_bound(problem));

        // Draining in breadth order yields each profile minus what earlier operators took.
        ProfileDrain drain(problem);
        std::set<size_t> taken;
        for (const Operator& op : operators_by_breadth(problem)) {
          const size_t k =
              std::lower_bound(profiles.operators.begin(), profiles.operators.end(), op.tick,
                               [](const Operator& o, uint64_t t) { return o.tick < t; }) -
              profiles.operators.begin();
          std::vector<size_t> expected;
          for (size_t i : profile(profiles, k)) {
            if (!taken.count(i)) expected.push_back(i);
          }
          std::vector<size_t> got;
          drain.take(op.tick, got);
          std::sort(expected.begin(), expected.end(),
                    [&](size_t a, size_t b) { return larger_block_first(problem, a, b); });
          EXPECT_EQ(got, expected);
          taken.insert(got.begin(), got.end());
        }
        EXPECT_EQ(taken.size(), problem.blocks.size());
      }
    }
  }
}

TEST(GreedyByBreadth, HandBuiltTraceByHand) {
  // Operators by breadth: t5 places b5 0, b2 64, b3 100, b4 116; t7 places b7 64 (only b5 is
  // live with it), b6 104; t4 places b1 into the 64-byte gap at 0; t1 places b0 above b1, at 28.
  const Problem problem = figure_like();
  const StrategyResult result = solve_greedy_by_breadth(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{28, 0, 64, 100, 116, 0, 104, 64}));
  EXPECT_EQ(slab_size(problem, result.offsets), offset_lower_bound(problem));
}

TEST(GreedyByBreadth, WidestOperatorIsPackedBeforeTheLargestBlock) {
  // big = [6, 9) overlaps only p; the widest operator is tick 10 {r, p, q} = 160. Breadth order
  // packs r 0, p 60, q 110, and then big no longer fits under p: 110, slab 210. Size order puts
  // big first at 0 and ends at 200: the two orders really differ here.
  const Problem problem = problem_of({{100, 6, 9}, {50, 5, 12}, {50, 10, 12}, {60, 10, 12}});
  const StrategyResult result = solve_greedy_by_breadth(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{110, 60, 110, 0}));
  EXPECT_EQ(slab_size(problem, result.offsets), 210u);
  EXPECT_EQ(slab_size(problem, solve_greedy_by_size(problem, {}).offsets), 200u);
}

TEST(GreedyByBreadth, ChainOfEqualSizesReachesTheLowerBound) {
  // Each block overlaps only its successor: two slots alternate, the optimum is 2 * size.
  std::vector<Block> chain;
  for (uint64_t i = 0; i < 50; ++i) chain.push_back({4096, 2 * i, 2 * i + 3});
  Result<Plan> plan = plan_trace(testing::trace_from(chain), with_strategy("greedy_by_breadth"));
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->slab_bytes, 2u * 4096);
  EXPECT_EQ(plan->status, SolveStatus::kOptimal);
}

TEST(GreedyByBreadth, DisjointLifetimesShareOneRange) {
  std::vector<Block> disjoint;
  for (uint64_t i = 0; i < 10; ++i) disjoint.push_back({64 * (i + 1), i, i + 1});
  Result<Plan> plan = plan_trace(testing::trace_from(disjoint), with_strategy("greedy_by_breadth"));
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->slab_bytes, 640u);
}

// §5.3 read literally: every distinct begin tick's live set, by brute force, visited widest first
// (earlier tick on ties), each visit's unplaced blocks largest first, placed by Algorithm 3's rule.
std::vector<uint64_t> reference_greedy_by_breadth(const Problem& problem) {
  std::vector<std::pair<uint64_t, uint64_t>> by_breadth;  // (breadth, tick)
  std::set<uint64_t> ticks;
  for (const Block& b : problem.blocks) ticks.insert(b.begin);
  for (uint64_t t : ticks) {
    uint64_t breadth = 0;
    for (const Block& b : problem.blocks) breadth += (b.begin <= t && t < b.end) ? b.size : 0;
    by_breadth.push_back({breadth, t});
  }
  std::stable_sort(by_breadth.begin(), by_breadth.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<size_t> order;
  std::vector<bool> queued(problem.blocks.size(), false);
  for (const auto& [breadth, t] : by_breadth) {
    std::vector<size_t> live;
    for (size_t i = 0; i < problem.blocks.size(); ++i) {
      const Block& b = problem.blocks[i];
      if (b.begin <= t && t < b.end && !queued[i]) live.push_back(i);
    }
    std::sort(live.begin(), live.end(), [&](size_t a, size_t b) {
      const Block &x = problem.blocks[a], &y = problem.blocks[b];
      return std::make_tuple(~x.size, x.begin, a) < std::make_tuple(~y.size, y.begin, b);
    });
    for (size_t i : live) queued[i] = true;
    order.insert(order.end(), live.begin(), live.end());
  }
  return place_in_order(problem, order, Fit::kBest);
}

TEST(GreedyByBreadth, MatchesALiteralReadingOfThePaper) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {5, 40, 200}) {
      for (uint64_t seed : {1, 2, 3, 4}) {
        SCOPED_TRACE(testing::to_string(shape) + " n=" + std::to_string(n) +
                     " seed=" + std::to_string(seed));
        Result<Problem> problem = make_problem(testing::random_trace(shape, n, seed));
        ASSERT_TRUE(problem.ok()) << problem.error();
        EXPECT_EQ(solve_greedy_by_breadth(*problem, {}).offsets,
                  reference_greedy_by_breadth(*problem));
      }
    }
  }
}

TEST(GreedyByBreadth, ValidOnRandomTracesOfEveryShape) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 10, 100, 1000}) {
      for (uint64_t seed : {1, 2, 3}) {
        SCOPED_TRACE(testing::to_string(shape) + " n=" + std::to_string(n) +
                     " seed=" + std::to_string(seed));
        const Trace trace = testing::random_trace(shape, n, seed);
        Result<Plan> plan = plan_trace(trace, with_strategy("greedy_by_breadth"));
        ASSERT_TRUE(plan.ok()) << plan.error();
        EXPECT_TRUE(validate_plan(trace, *plan).valid);
        EXPECT_GE(plan->slab_bytes, plan->lower_bound_bytes);
        Result<Plan> again = plan_trace(trace, with_strategy("greedy_by_breadth"));
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->offsets, plan->offsets);
      }
    }
  }
}

}  // namespace
}  // namespace memoplan::planner
