#include "memoplan/planner/problem.h"

#include <algorithm>

namespace memoplan::planner {

Result<Problem> make_problem(const Trace& trace, uint64_t min_alignment) {
  if (std::string problem = check_trace(trace); !problem.empty()) return Error{problem};
  if (min_alignment & (min_alignment - 1)) {
    return Error{"alignment " + std::to_string(min_alignment) + " is not a power of two"};
  }
  Problem out;
  out.alignment = std::max<uint64_t>(min_alignment, 1);
  for (const Allocation& a : trace.allocations) {
    if (is_planned(a)) out.alignment = std::max(out.alignment, effective_align(trace, a));
  }
  const uint64_t mask = out.alignment - 1;
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    const Allocation& a = trace.allocations[row];
    if (!is_planned(a)) continue;
    out.blocks.push_back({(a.size + mask) & ~mask, a.begin, effective_end(a)});
    out.row.push_back(row);
  }
  return out;
}

uint64_t slab_size(const Problem& problem, const std::vector<uint64_t>& offsets) {
  uint64_t extent = 0;
  for (size_t i = 0; i < problem.blocks.size(); ++i) {
    extent = std::max(extent, offsets[i] + problem.blocks[i].size);
  }
  return extent;
}

}  // namespace memoplan::planner
