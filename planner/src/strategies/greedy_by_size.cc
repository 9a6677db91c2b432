// Pisarchyk & Lee 2020, Algorithm 3: blocks in non-increasing size; each goes into the smallest gap
// between lifetime-overlapping placed blocks that holds it, else above the highest of them.
#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_greedy_by_size(const Problem& problem, const StrategyOptions&) {
  return {place_in_order(problem, order_by_size_desc(problem), Fit::kBest)};
}

}  // namespace memoplan::planner
