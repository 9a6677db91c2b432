// No reuse: every block gets its own range, in allocation order. The "eager" baseline the papers
// compare against (sum of all sizes).
#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_naive(const Problem& problem, const StrategyOptions&) {
  StrategyResult result;
  result.offsets.resize(problem.blocks.size());
  uint64_t next = 0;
  for (size_t index : order_by_begin(problem)) {
    result.offsets[index] = next;
    next += problem.blocks[index].size;
  }
  return result;
}

}  // namespace memoplan::planner
