// The exact strategy's two questions, answered with ExactSearch (exact_search.h) under a time
// limit: does the problem fit a capacity, and what is the smallest capacity it fits?
//
// One search's running time depends enormously on the order that breaks ties among equal floors:
// an order that solves a problem in a thousand nodes may need millions on its neighbour. So, as
// MiniMalloc does, every question is asked of several orders in turn with a node cap that doubles
// each round: the total work is within a constant factor of the best order's, whichever it is.
// Node caps, not the clock, bound each round, so a run that ends before the deadline is
// reproducible.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "exact_search.h"
#include "memoplan/planner/problem.h"
#include "time_sections.h"

namespace memoplan::planner {

// Past this many lifetime-overlapping pairs the search's tables alone outweigh any time limit
// worth setting (a search that large would not finish anyway): make_time_sections' cap.
inline constexpr size_t kExactMaxPairs = 2'000'000;
// The search recurses once per block placed, a few hundred bytes of stack each (up to 1 KB in an
// unoptimized sanitizer build): past this many blocks, far beyond what it can settle anyway, it is
// not started, so that it stays within a thread's default 8 MB stack.
inline constexpr size_t kExactMaxBlocks = 4096;

struct ExactLimits {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  uint64_t max_nodes = 0;  // over the whole question; 0: none
};

struct FitResult {
  ExactOutcome outcome = ExactOutcome::kStopped;
  std::vector<uint64_t> offsets;  // when kFound
  uint64_t nodes = 0;
};

// A plan within `capacity` bytes, a proof there is none, or kStopped at a limit.
FitResult fit_within(const Problem& problem, const TimeSections& sections, uint64_t capacity,
                     const ExactLimits& limits);

struct MinimizeResult {
  std::vector<uint64_t> offsets;  // the smallest plan found: the incumbent unless one beat it
  uint64_t slab = 0;
  uint64_t proven_lower = 0;  // no plan is smaller than this; == slab when optimal
  uint64_t nodes = 0;
  std::string note;  // what was tried and proven
};

// About as many nodes as an ordinary core searches for `problem` in `seconds`, from its size, never
// from a clock: a cap that makes a run reproducible when it binds before the deadline.
uint64_t exact_search_nodes(const Problem& problem, double seconds);

// Shrinks the slab of `incumbent` (a valid plan) towards `lower_bound` (no plan is smaller):
// first asks whether the lower bound fits, then bisects between what is proven and what is found.
MinimizeResult minimize_slab(const Problem& problem, const TimeSections& sections,
                             std::vector<uint64_t> incumbent, uint64_t lower_bound,
                             const ExactLimits& limits);

}  // namespace memoplan::planner
