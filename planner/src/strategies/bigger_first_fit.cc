// Occamy's bigger-first-fit (Algorithm 2): blocks in non-increasing size, each at the lowest hole
// that holds it.
#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_bigger_first_fit(const Problem& problem, const StrategyOptions&) {
  return {place_in_order(problem, order_by_size_desc(problem), Fit::kFirst)};
}

}  // namespace memoplan::planner
