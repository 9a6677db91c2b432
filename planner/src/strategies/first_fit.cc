// Occamy's first-fit: blocks in allocation order (what an online allocator sees), each at the
// lowest hole that holds it.
#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_first_fit(const Problem& problem, const StrategyOptions&) {
  return {place_in_order(problem, order_by_begin(problem), Fit::kFirst)};
}

}  // namespace memoplan::planner
