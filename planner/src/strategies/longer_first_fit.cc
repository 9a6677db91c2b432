// Occamy's longer-first-fit: blocks in non-increasing lifetime length (ties: larger first), each at
// the lowest hole that holds it.
#include <algorithm>
#include <numeric>

#include "../offset_placer.h"
#include "strategies.h"

namespace memoplan::planner {

StrategyResult solve_longer_first_fit(const Problem& problem, const StrategyOptions&) {
  const auto& b = problem.blocks;
  std::vector<size_t> order(b.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const uint64_t lx = b[x].end - b[x].begin, ly = b[y].end - b[y].begin;
    if (lx != ly) return lx > ly;
    if (b[x].size != b[y].size) return b[x].size > b[y].size;
    if (b[x].begin != b[y].begin) return b[x].begin < b[y].begin;
    return x < y;
  });
  return {place_in_order(problem, order, Fit::kFirst)};
}

}  // namespace memoplan::planner
