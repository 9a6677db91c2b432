#include "mip_support.h"

#include <algorithm>
#include <numeric>

#include "live_interval_index.h"

namespace memoplan::planner::mip {

std::optional<std::vector<BlockPair>> lifetime_overlapping_pairs(const Problem& problem,
                                                                 size_t limit) {
  const std::vector<Block>& blocks = problem.blocks;
  LiveIntervalIndex index(blocks);
  std::vector<BlockPair> pairs;
  std::vector<size_t> found;
  // Querying each block against the ones inserted before it reports every pair exactly once.
  for (size_t i = 0; i < blocks.size(); ++i) {
    found.clear();
    index.overlapping(blocks[i].begin, blocks[i].end, found);
    if (pairs.size() + found.size() > limit) return std::nullopt;
    for (size_t j : found) pairs.emplace_back(std::min(i, j), std::max(i, j));
    index.insert(i);
  }
  return pairs;
}

std::vector<size_t> symmetry_fixes(const Problem& problem, const std::vector<BlockPair>& pairs) {
  const std::vector<Block>& blocks = problem.blocks;
  std::vector<size_t> fixes;
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Block& a = blocks[pairs[k].first];
    const Block& b = blocks[pairs[k].second];
    if (a.size == b.size && a.begin == b.begin && a.end == b.end) fixes.push_back(k);
  }
  return fixes;
}

std::vector<uint64_t> offsets_from_order(const Problem& problem,
                                         const std::vector<BlockPair>& pairs,
                                         const std::vector<bool>& first_below) {
  const size_t n = problem.blocks.size();
  // Edges lower -> upper in compressed rows, then Kahn's algorithm; offsets relax along the way.
  std::vector<size_t> in_degree(n, 0), start(n + 1, 0);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto [lower, upper] =
        first_below[k] ? pairs[k] : BlockPair{pairs[k].second, pairs[k].first};
    ++start[lower + 1];
    ++in_degree[upper];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<size_t> uppers(pairs.size()), fill(start.begin(), start.end() - 1);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto [lower, upper] =
        first_below[k] ? pairs[k] : BlockPair{pairs[k].second, pairs[k].first};
    uppers[fill[lower]++] = upper;
  }

  std::vector<uint64_t> offsets(n, 0);
  std::vector<size_t> ready;
  for (size_t i = 0; i < n; ++i) {
    if (in_degree[i] == 0) ready.push_back(i);
  }
  size_t done = 0;
  while (!ready.empty()) {
    const size_t lower = ready.back();
    ready.pop_back();
    ++done;
    const uint64_t top = offsets[lower] + problem.blocks[lower].size;
    for (size_t e = start[lower]; e < start[lower + 1]; ++e) {
      const size_t upper = uppers[e];
      offsets[upper] = std::max(offsets[upper], top);
      if (--in_degree[upper] == 0) ready.push_back(upper);
    }
  }
  if (done != n) return {};
  return offsets;
}

std::vector<bool> order_of(const std::vector<BlockPair>& pairs,
                           const std::vector<uint64_t>& offsets) {
  std::vector<bool> first_below(pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    first_below[k] = offsets[pairs[k].first] < offsets[pairs[k].second];
  }
  return first_below;
}

}  // namespace memoplan::planner::mip
