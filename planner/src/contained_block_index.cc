#include "contained_block_index.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace memoplan::planner {
namespace {

constexpr uint32_t kTaken = std::numeric_limits<uint32_t>::max();

}  // namespace

ContainedBlockIndex::ContainedBlockIndex(const std::vector<Block>& blocks,
                                         const std::vector<uint32_t>& rank)
    : block_of_rank_(blocks.size()) {
  const size_t n = blocks.size();
  for (size_t i = 0; i < n; ++i) block_of_rank_[rank[i]] = i;

  std::vector<size_t> at(n);  // block at each position of the current level
  std::iota(at.begin(), at.end(), size_t{0});
  std::stable_sort(at.begin(), at.end(),
                   [&](size_t a, size_t b) { return blocks[a].begin < blocks[b].begin; });
  sorted_begins_.resize(n);
  for (size_t p = 0; p < n; ++p) sorted_begins_[p] = blocks[at[p]].begin;

  const auto by_end = [&](size_t a, size_t b) { return blocks[a].end < blocks[b].end; };
  std::vector<size_t> merged(n);
  for (size_t level = 0;; ++level) {
    const size_t width = size_t{1} << level;
    if (level > 0) {  // merge pairs of the previous level's chunks
      for (size_t start = 0; start < n; start += width) {
        const size_t mid = std::min(start + width / 2, n), stop = std::min(start + width, n);
        std::merge(at.begin() + start, at.begin() + mid, at.begin() + mid, at.begin() + stop,
                   merged.begin() + start, by_end);
      }
      at.swap(merged);
    }
    std::vector<uint64_t>& ends = chunk_ends_.emplace_back(n);
    std::vector<uint32_t>& position = position_of_.emplace_back(n);
    std::vector<uint32_t>& tree = chunk_min_rank_.emplace_back(2 * n, kTaken);
    for (size_t start = 0; start < n; start += width) {
      const size_t m = chunk_size(level, start);
      uint32_t* node = tree.data() + 2 * start;
      for (size_t k = 0; k < m; ++k) {
        const size_t block = at[start + k];
        ends[start + k] = blocks[block].end;
        position[block] = static_cast<uint32_t>(start + k);
        node[m + k] = rank[block];
      }
      for (size_t k = m - 1; k >= 1; --k) node[k] = std::min(node[2 * k], node[2 * k + 1]);
    }
    if (width >= n) break;
  }
}

size_t ContainedBlockIndex::chunk_size(size_t level, size_t start) const {
  return std::min(size_t{1} << level, size() - start);
}

uint32_t ContainedBlockIndex::best_in_chunk_prefix(size_t level, size_t start, size_t count) const {
  const size_t m = chunk_size(level, start);
  const uint32_t* node = chunk_min_rank_[level].data() + 2 * start;
  uint32_t best = kTaken;
  for (size_t lo = m, hi = m + count; lo < hi; lo >>= 1, hi >>= 1) {
    if (lo & 1) best = std::min(best, node[lo++]);
    if (hi & 1) best = std::min(best, node[--hi]);
  }
  return best;
}

uint32_t ContainedBlockIndex::best_in_chunk(size_t level, size_t chunk, uint64_t to) const {
  const size_t start = chunk << level;
  const uint64_t* ends = chunk_ends_[level].data() + start;
  const size_t count = std::upper_bound(ends, ends + chunk_size(level, start), to) - ends;
  return best_in_chunk_prefix(level, start, count);
}

size_t ContainedBlockIndex::best_inside(uint64_t from, uint64_t to) const {
  // Blocks with from <= begin < to, as a range of begin positions; end <= to implies begin < to.
  const auto begins = sorted_begins_.begin();
  size_t lo = std::lower_bound(begins, sorted_begins_.end(), from) - begins;
  size_t hi = std::lower_bound(begins, sorted_begins_.end(), to) - begins;
  // Bottom-up decomposition of [lo, hi) into whole chunks (chunk c of level L holds positions
  // [c * 2^L, (c + 1) * 2^L)), as in an iterative segment tree.
  uint32_t best = kTaken;
  for (size_t level = 0; lo < hi; ++level, lo >>= 1, hi >>= 1) {
    if (lo & 1) best = std::min(best, best_in_chunk(level, lo++, to));
    if (hi & 1) best = std::min(best, best_in_chunk(level, --hi, to));
  }
  return best == kTaken ? size() : block_of_rank_[best];
}

void ContainedBlockIndex::take(size_t block) {
  for (size_t level = 0; level < chunk_min_rank_.size(); ++level) {
    const size_t position = position_of_[level][block];
    const size_t start = (position >> level) << level;
    uint32_t* node = chunk_min_rank_[level].data() + 2 * start;
    size_t k = chunk_size(level, start) + (position - start);
    node[k] = kTaken;
    for (k >>= 1; k >= 1; k >>= 1) node[k] = std::min(node[2 * k], node[2 * k + 1]);
  }
}

}  // namespace memoplan::planner
