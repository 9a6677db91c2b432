// Sekiyama et al. 2018 ("Profile-guided memory optimization for deep neural networks"): offset
// calculation as 2-D strip packing where every item's x position (its lifetime) is fixed and only
// its height (the offset) is free, solved by the best-fit skyline heuristic of Burke, Kendall &
// Whitwell 2004 adapted to fixed x.
//
// Repeatedly take the lowest skyline segment (ties: the leftmost) and place on it, at its height,
// the unplaced block whose lifetime lies inside the segment's time span and fills that span best:
// the longest lifetime; ties go to the larger block, then the earlier begin, then the lower index,
// so the plan is deterministic. When no block fits, the segment is wasted space: raise it to its
// lower neighbour and merge. Everything placed later lies on the skyline, so it never overlaps a
// block placed earlier whose lifetime it shares.
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "../contained_block_index.h"
#include "../skyline.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

// rank[i] = how strongly block i is preferred when several fit a segment (0 = first choice).
std::vector<uint32_t> best_fit_ranks(const std::vector<Block>& blocks) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const uint64_t length_a = blocks[a].end - blocks[a].begin;
    const uint64_t length_b = blocks[b].end - blocks[b].begin;
    if (length_a != length_b) return length_a > length_b;
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    if (blocks[a].begin != blocks[b].begin) return blocks[a].begin < blocks[b].begin;
    return a < b;
  });
  std::vector<uint32_t> rank(blocks.size());
  for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<uint32_t>(r);
  return rank;
}

}  // namespace

StrategyResult solve_strip_packing_best_fit(const Problem& problem, const StrategyOptions&) {
  const std::vector<Block>& blocks = problem.blocks;
  const size_t n = blocks.size();
  std::vector<uint64_t> offsets(n, 0);
  if (n == 0) return {offsets};

  // The skyline works on indices into the sorted distinct ticks: segment boundaries are always
  // some block's begin or end, so nothing finer is ever needed.
  std::vector<uint64_t> ticks;
  ticks.reserve(2 * n);
  for (const Block& b : blocks) {
    ticks.push_back(b.begin);
    ticks.push_back(b.end);
  }
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  const auto point_of = [&](uint64_t tick) {
    return static_cast<size_t>(std::lower_bound(ticks.begin(), ticks.end(), tick) - ticks.begin());
  };

  ContainedBlockIndex unplaced(blocks, best_fit_ranks(blocks));
  Skyline skyline(ticks.size());  // >= 2 points: every block has begin < end
  for (size_t remaining = n; remaining > 0;) {
    const Skyline::Segment lowest = skyline.lowest();
    const size_t block = unplaced.best_inside(ticks[lowest.from], ticks[lowest.to]);
    if (block == unplaced.size()) {
      // Wasted space. A segment without neighbours spans every lifetime, so it always holds a
      // block; stopping there anyway turns an index bug into an invalid plan, which plan_trace
      // reports, instead of an endless loop.
      if (!skyline.raise_to_lower_neighbour(lowest)) break;
      continue;
    }
    offsets[block] = lowest.height;
    unplaced.take(block);
    --remaining;
    skyline.raise_part(lowest, point_of(blocks[block].begin), point_of(blocks[block].end),
                       lowest.height + blocks[block].size);
  }
  return {offsets};
}

}  // namespace memoplan::planner
