// See brute_force.h.
#include "brute_force.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace memoplan::testing {

uint64_t brute_force_optimum(const planner::Problem& problem) {
  const std::vector<planner::Block>& blocks = problem.blocks;
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  uint64_t best = UINT64_MAX;
  do {
    std::vector<uint64_t> offset(blocks.size(), 0);
    std::vector<bool> placed(blocks.size(), false);
    uint64_t slab = 0;
    for (size_t i : order) {
      std::vector<size_t> neighbours;
      std::vector<uint64_t> candidates = {0};  // the lowest clear offset is 0 or some block's end
      for (size_t j = 0; j < blocks.size(); ++j) {
        if (placed[j] && planner::lifetimes_overlap(blocks[i], blocks[j])) {
          neighbours.push_back(j);
          candidates.push_back(offset[j] + blocks[j].size);
        }
      }
      std::sort(candidates.begin(), candidates.end());
      for (uint64_t c : candidates) {
        const bool clear = std::none_of(neighbours.begin(), neighbours.end(), [&](size_t j) {
          return c < offset[j] + blocks[j].size && offset[j] < c + blocks[i].size;
        });
        if (clear) {
          offset[i] = c;
          break;
        }
      }
      placed[i] = true;
      slab = std::max(slab, offset[i] + blocks[i].size);
    }
    best = std::min(best, slab);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

}  // namespace memoplan::testing
