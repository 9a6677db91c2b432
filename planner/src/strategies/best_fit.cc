// Occamy's best-fit: blocks in allocation order, each in the smallest hole that holds it.
#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_best_fit(const Problem& problem, const StrategyOptions&) {
  return {place_in_order(problem, order_by_begin(problem), Fit::kBest)};
}

}  // namespace memoplan::planner
