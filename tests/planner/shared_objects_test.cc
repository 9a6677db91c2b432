// The shared-objects strategies of Pisarchyk & Lee 2020: Greedy by Breadth (§4.2, Algorithm 1) and
// Greedy by Size Improved (§4.4), laid out contiguously.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "random_traces.h"
#include "shared_objects.h"
#include "strategies/strategies.h"
#include "trace_rows.h"

namespace memoplan::planner {
namespace {

const char* const kSharedStrategies[] = {"shared_greedy_by_breadth",
                                         "shared_greedy_by_size_improved"};

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

// Same network as breadth_test.cc's figure_like(): shared lower bound 64 + 40 + 16 + 8 = 128.
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

// A shared-objects plan: blocks at one offset form an object (lifetimes pairwise disjoint), and the
// objects sit back to back, so the slab is the sum of the objects' sizes.
void expect_shared_object_layout(const Problem& problem, const std::vector<uint64_t>& offsets) {
  ASSERT_EQ(offsets.size(), problem.blocks.size());
  std::map<uint64_t, std::vector<size_t>> objects;
  for (size_t i = 0; i < offsets.size(); ++i) objects[offsets[i]].push_back(i);
  uint64_t total = 0;
  for (auto& [offset, members] : objects) {
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      return problem.blocks[a].begin < problem.blocks[b].begin;
    });
    uint64_t size = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      size = std::max(size, problem.blocks[members[k]].size);
      if (k > 0) {
        EXPECT_LE(problem.blocks[members[k - 1]].end, problem.blocks[members[k]].begin)
            << "blocks " << members[k - 1] << " and " << members[k] << " share object @" << offset;
      }
    }
    total += size;
  }
  EXPECT_EQ(total, slab_size(problem, offsets));
}

TEST(SharedGreedyByBreadth, HandBuiltTraceByHand) {
  // Operator t5 opens objects for b5 (64), b2 (36), b3 (16), b4 (8): all overlap. t7: b7 (40)
  // finds only smaller free objects and grows the largest, b2's, to 40 (rule 2); b6 (10) takes the
  // smallest free object that holds it, b3's 16 (rule 1). t4: b1 fits before b5. t1: b0 takes the
  // 40-byte object (b2's), the smallest free one holding 32. Laid out 64 | 40 | 16 | 8.
  const Problem problem = figure_like();
  const StrategyResult result = solve_shared_greedy_by_breadth(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{64, 0, 64, 104, 120, 0, 104, 64}));
  EXPECT_EQ(slab_size(problem, result.offsets), shared_objects_lower_bound(problem));
}

TEST(SharedGreedyByBreadth, TakesTheSmallestSuitableObjectThatHoldsTheBlock) {
  // Objects 100, 50, 30 from the first operator; s = 40 fits in all of them and takes the 50.
  const Problem problem = problem_of({{100, 0, 2}, {50, 0, 2}, {30, 0, 2}, {40, 3, 4}});
  const StrategyResult result = solve_shared_greedy_by_breadth(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{0, 100, 150, 100}));
  EXPECT_EQ(slab_size(problem, result.offsets), 180u);
}

TEST(SharedGreedyByBreadth, GrowsTheLargestSuitableObjectWhenNoneHoldsTheBlock) {
  // s = 120 is bigger than every free object: the 100 grows to 120 (not a new object, not the 30).
  const Problem problem = problem_of({{100, 0, 2}, {50, 0, 2}, {30, 0, 2}, {120, 3, 4}});
  const StrategyResult result = solve_shared_greedy_by_breadth(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{0, 120, 170, 0}));
  EXPECT_EQ(slab_size(problem, result.offsets), 200u);
}

TEST(SharedGreedyBySizeImproved, HandBuiltTraceByHand) {
  // Positional maxima 64, 40, 16, 8. Stage "= 64": b5 opens an object; "= 40": b7 opens one.
  // Stage (16, 40) = {b2, b0, b1}: b1 fits right before b5 (gap 0), then b2 before b7 (gap 1), then
  // b0 right before b2 (gap 0). "= 16": b3 fits nowhere, opens one; (8, 16): b6 follows b3 (gap 0);
  // "= 8": b4 opens the last. Objects 64 {b1 b5}, 40 {b0 b2 b7}, 16 {b3 b6}, 8 {b4}.
  const Problem problem = figure_like();
  const StrategyResult result = solve_shared_greedy_by_size_improved(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{64, 0, 64, 104, 120, 0, 104, 64}));
  EXPECT_EQ(slab_size(problem, result.offsets), shared_objects_lower_bound(problem));
}

TEST(SharedGreedyBySizeImproved, PrefersThePairWithTheSmallestTimeGap) {
  // a = [0, 2) and b = [0, 6) open two objects. c = [7, 9) fits after either: gap 5 after a, 1
  // after b, so it joins b. d = [3, 5) overlaps b and joins a.
  const Problem problem = problem_of({{100, 0, 2}, {100, 0, 6}, {50, 7, 9}, {50, 3, 5}});
  const StrategyResult result = solve_shared_greedy_by_size_improved(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{0, 100, 100, 0}));
}

TEST(SharedGreedyBySizeImproved, CountsTheGapAfterTheBlockToo) {
  // x = [0, 2) and y = [10, 12) share an object; u = [0, 5) has another. z = [7, 9) fits after u
  // with gap 2, or between x and y: 5 after x but only 1 before y, so it goes between x and y.
  const Problem problem = problem_of({{100, 0, 2}, {100, 10, 12}, {100, 0, 5}, {60, 7, 9}});
  const StrategyResult result = solve_shared_greedy_by_size_improved(problem, {});
  EXPECT_EQ(result.offsets, (std::vector<uint64_t>{0, 0, 100, 0}));
}

TEST(SharedObjects, ChainOfEqualSizesReachesTheLowerBound) {
  // Each block overlaps only its successor: two objects alternate.
  std::vector<Block> chain;
  for (uint64_t i = 0; i < 40; ++i) chain.push_back({4096, 2 * i, 2 * i + 3});
  for (const char* strategy : kSharedStrategies) {
    Result<Plan> plan = plan_trace(testing::trace_from(chain), with_strategy(strategy));
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->slab_bytes, 2u * 4096) << strategy;
    EXPECT_EQ(plan->status, SolveStatus::kOptimal) << strategy;
  }
}

TEST(SharedObjects, AllLiveTogetherNeedTheirSum) {
  const std::vector<Block> together = {{64, 0, 9}, {640, 1, 5}, {128, 2, 3}, {192, 2, 4}};
  for (const char* strategy : kSharedStrategies) {
    Result<Plan> plan = plan_trace(testing::trace_from(together), with_strategy(strategy));
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->slab_bytes, 64u + 640 + 128 + 192) << strategy;
  }
}

TEST(SharedObjects, DisjointLifetimesShareOneObject) {
  std::vector<Block> disjoint;
  for (uint64_t i = 0; i < 12; ++i) disjoint.push_back({64 * ((i * 7) % 12 + 1), i, i + 1});
  for (const char* strategy : kSharedStrategies) {
    Result<Plan> plan = plan_trace(testing::trace_from(disjoint), with_strategy(strategy));
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(plan->slab_bytes, 64u * 12) << strategy;
  }
}

TEST(SharedObjects, EmptyProblem) {
  EXPECT_TRUE(solve_shared_greedy_by_breadth(problem_of({}), {}).offsets.empty());
  EXPECT_TRUE(solve_shared_greedy_by_size_improved(problem_of({}), {}).offsets.empty());
}

// Objects as plain member lists, checked by scanning: the naive form of §4.2 and §4.4.
struct ReferenceObjects {
  explicit ReferenceObjects(const Problem& p) : problem(p), object_of(p.blocks.size()) {}

  bool free(size_t object, size_t block) const {
    for (size_t m : members[object]) {
      if (lifetimes_overlap(problem.blocks[m], problem.blocks[block])) return false;
    }
    return true;
  }
  void assign(size_t object, size_t block) {
    members[object].push_back(block);
    size[object] = std::max(size[object], problem.blocks[block].size);
    object_of[block] = object;
  }
  void open(size_t block) {
    members.emplace_back();
    size.push_back(0);
    assign(members.size() - 1, block);
  }

  const Problem& problem;
  std::vector<std::vector<size_t>> members;
  std::vector<uint64_t> size;
  std::vector<size_t> object_of;
};

bool larger_first(const Problem& problem, size_t a, size_t b) {
  const Block &x = problem.blocks[a], &y = problem.blocks[b];
  return std::make_tuple(~x.size, x.begin, a) < std::make_tuple(~y.size, y.begin, b);
}

std::vector<uint64_t> reference_shared_greedy_by_breadth(const Problem& problem) {
  std::set<uint64_t> ticks;
  for (const Block& b : problem.blocks) ticks.insert(b.begin);
  std::vector<std::pair<uint64_t, uint64_t>> by_breadth;  // (breadth, tick)
  for (uint64_t t : ticks) {
    uint64_t breadth = 0;
    for (const Block& b : problem.blocks) breadth += (b.begin <= t && t < b.end) ? b.size : 0;
    by_breadth.push_back({breadth, t});
  }
  std::stable_sort(by_breadth.begin(), by_breadth.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  ReferenceObjects objects(problem);
  std::vector<bool> done(problem.blocks.size(), false);
  for (const auto& [breadth, t] : by_breadth) {
    std::vector<size_t> live;
    for (size_t i = 0; i < problem.blocks.size(); ++i) {
      const Block& b = problem.blocks[i];
      if (b.begin <= t && t < b.end && !done[i]) live.push_back(i);
    }
    std::sort(live.begin(), live.end(),
              [&](size_t a, size_t b) { return larger_first(problem, a, b); });
    for (size_t i : live) {
      done[i] = true;
      const uint64_t size = problem.blocks[i].size;
      size_t best = SIZE_MAX;  // rule 1: the smallest that holds it (ties: lowest id)
      for (size_t o = 0; o < objects.size.size(); ++o) {
        if (objects.free(o, i) && objects.size[o] >= size &&
            (best == SIZE_MAX || objects.size[o] < objects.size[best])) {
          best = o;
        }
      }
      if (best == SIZE_MAX) {  // rule 2: the largest (ties: highest id)
        size_t largest = SIZE_MAX;
        for (size_t o = 0; o < objects.size.size(); ++o) {
          if (objects.free(o, i) &&
              (largest == SIZE_MAX || objects.size[o] >= objects.size[largest])) {
            largest = o;
          }
        }
        best = largest;
      }
      if (best == SIZE_MAX) {
        objects.open(i);
      } else {
        objects.assign(best, i);
      }
    }
  }
  return lay_out_shared_objects(problem, objects.object_of);
}

std::vector<uint64_t> reference_shared_greedy_by_size_improved(const Problem& problem) {
  std::set<uint64_t> ticks;
  for (const Block& b : problem.blocks) ticks.insert(b.begin);
  std::vector<uint64_t> maxima;
  for (uint64_t t : ticks) {
    std::vector<uint64_t> sizes;
    for (const Block& b : problem.blocks) {
      if (b.begin <= t && t < b.end) sizes.push_back(b.size);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    maxima.resize(std::max(maxima.size(), sizes.size()), 0);
    for (size_t k = 0; k < sizes.size(); ++k) maxima[k] = std::max(maxima[k], sizes[k]);
  }
  maxima.erase(std::unique(maxima.begin(), maxima.end()), maxima.end());
  maxima.push_back(0);
  std::vector<std::vector<size_t>> stages(2 * maxima.size());
  for (size_t i = 0; i < problem.blocks.size(); ++i) {
    const uint64_t size = problem.blocks[i].size;
    for (size_t j = 0; j + 1 < maxima.size(); ++j) {
      if (size == maxima[j]) stages[2 * j].push_back(i);
      if (maxima[j] > size && size > maxima[j + 1]) stages[2 * j + 1].push_back(i);
    }
  }
  ReferenceObjects objects(problem);
  for (std::vector<size_t>& stage : stages) {
    std::sort(stage.begin(), stage.end(),
              [&](size_t a, size_t b) { return larger_first(problem, a, b); });
    std::vector<size_t> left = stage;
    while (!left.empty()) {
      uint64_t best_gap = UINT64_MAX;
      size_t best_block = 0, best_object = SIZE_MAX;
      for (size_t k = 0; k < left.size(); ++k) {
        for (size_t o = 0; o < objects.size.size(); ++o) {
          if (!objects.free(o, left[k])) continue;
          const Block& x = problem.blocks[left[k]];
          for (size_t m : objects.members[o]) {
            const Block& y = problem.blocks[m];
            const uint64_t gap = y.end <= x.begin ? x.begin - y.end : y.begin - x.end;
            if (gap < best_gap) std::tie(best_gap, best_block, best_object) = std::tie(gap, k, o);
          }
        }
      }
      if (best_object == SIZE_MAX) {
        objects.open(left[0]);
        best_block = 0;
      } else {
        objects.assign(best_object, left[best_block]);
      }
      left.erase(left.begin() + best_block);
    }
  }
  return lay_out_shared_objects(problem, objects.object_of);
}

// Every begin and end a distinct power of two: no two (block, object) pairs leave the same gap, so
// the pair §4.4 picks is unique whatever the tie-breaking.
Problem without_gap_ties(size_t blocks, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ticks(2 * blocks);
  for (size_t k = 0; k < ticks.size(); ++k) ticks[k] = uint64_t{1} << k;
  std::shuffle(ticks.begin(), ticks.end(), rng);
  std::vector<Block> out;
  for (size_t i = 0; i < blocks; ++i) {
    const uint64_t size = 64 * std::uniform_int_distribution<uint64_t>(1, 4)(rng);
    out.push_back(
        {size, std::min(ticks[2 * i], ticks[2 * i + 1]), std::max(ticks[2 * i], ticks[2 * i + 1])});
  }
  return problem_of(out);
}

TEST(SharedGreedyBySizeImproved, MatchesALiteralReadingOfThePaper) {
  for (size_t n : {3, 8, 16, 31}) {
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      const Problem problem = without_gap_ties(n, seed);
      EXPECT_EQ(solve_shared_greedy_by_size_improved(problem, {}).offsets,
                reference_shared_greedy_by_size_improved(problem))
          << "n=" << n << " seed=" << seed;
    }
  }
}

TEST(SharedGreedyByBreadth, MatchesALiteralReadingOfThePaper) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {5, 40, 200}) {
      for (uint64_t seed : {1, 2, 3, 4}) {
        Result<Problem> problem = make_problem(testing::random_trace(shape, n, seed));
        ASSERT_TRUE(problem.ok()) << problem.error();
        EXPECT_EQ(solve_shared_greedy_by_breadth(*problem, {}).offsets,
                  reference_shared_greedy_by_breadth(*problem))
            << testing::to_string(shape) << " n=" << n << " seed=" << seed;
      }
    }
  }
}

TEST(SharedObjects, ValidAndAboveBothLowerBoundsOnRandomTraces) {
  for (testing::TraceShape shape : testing::all_shapes()) {
    for (size_t n : {1, 10, 100, 1000}) {
      for (uint64_t seed : {1, 2, 3}) {
        const Trace trace = testing::random_trace(shape, n, seed);
        Result<Problem> problem = make_problem(trace);
        ASSERT_TRUE(problem.ok()) << problem.error();
        const uint64_t shared_bound = shared_objects_lower_bound(*problem);
        const uint64_t offset_bound = offset_lower_bound(*problem);
        EXPECT_GE(shared_bound, offset_bound);
        for (const char* strategy : kSharedStrategies) {
          SCOPED_TRACE(std::string(strategy) + " " + testing::to_string(shape) +
                       " n=" + std::to_string(n) + " seed=" + std::to_string(seed));
          Result<Plan> plan = plan_trace(trace, with_strategy(strategy));
          ASSERT_TRUE(plan.ok()) << plan.error();
          EXPECT_TRUE(validate_plan(trace, *plan).valid);
          EXPECT_GE(plan->slab_bytes, shared_bound);
          EXPECT_EQ(plan->lower_bound_bytes, offset_bound);

          const StrategyResult direct = find_strategy(strategy)->solve(*problem, {});
          expect_shared_object_layout(*problem, direct.offsets);
          EXPECT_EQ(find_strategy(strategy)->solve(*problem, {}).offsets, direct.offsets);
        }
      }
    }
  }
}

}  // namespace
}  // namespace memoplan::planner
