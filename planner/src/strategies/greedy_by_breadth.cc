// Pisarchyk & Lee 2020, §5.3: Greedy by Breadth for offset calculation. Operators in non-increasing
// breadth; for each, its not-yet-placed blocks in non-increasing size, each into the smallest gap
// between lifetime-overlapping placed blocks that holds it (Algorithm 3's rule), else above them.
#include "../offset_placer.h"
#include "../operator_profiles.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_greedy_by_breadth(const Problem& problem, const StrategyOptions&) {
  OffsetPlacer placer(problem);
  ProfileDrain unplaced_of(problem);
  std::vector<size_t> unplaced;
  // Every block is live at its own begin tick, which is an operator, so this places them all.
  for (const Operator& op : operators_by_breadth(problem)) {
    unplaced.clear();
    unplaced_of.take(op.tick, unplaced);
    for (size_t block : unplaced) placer.place(block, Fit::kBest);
  }
  return {placer.take_offsets()};
}

}  // namespace memoplan::planner
