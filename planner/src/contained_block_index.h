// Finds, among the blocks not yet taken, the most preferred one whose lifetime lies inside a time
// window: from <= begin and end <= to. The skyline strip packer (Sekiyama et al. 2018) asks this
// once per step, with a different window each time, so a scan over all blocks would make it
// O(n^2).
//
// A two-sided range query with deletions, answered by a static range tree: an outer segment tree
// over the blocks sorted by begin (so `begin >= from` is a suffix of positions) whose every node
// keeps its blocks sorted by end (so `end <= to` is a prefix found by binary search) under an inner
// min-segment-tree of preference ranks. Query and take are O(log^2 n); memory O(n log n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

class ContainedBlockIndex {
 public:
  // `rank` is a permutation of 0..n-1: the block with the smaller rank is preferred.
  ContainedBlockIndex(const std::vector<Block>& blocks, const std::vector<uint32_t>& rank);

  // The untaken block of smallest rank with from <= begin and end <= to, or size() if none.
  size_t best_inside(uint64_t from, uint64_t to) const;

  // Removes the block from every later answer. Each block at most once.
  void take(size_t block);

  size_t size() const { return block_of_rank_.size(); }

 private:
  // Smallest rank among the first `count` blocks (in end order) of the chunk starting at `start`.
  uint32_t best_in_chunk_prefix(size_t level, size_t start, size_t count) const;
  // Smallest rank in chunk `chunk` of `level` among its blocks that end by `to`.
  uint32_t best_in_chunk(size_t level, size_t chunk, uint64_t to) const;
  size_t chunk_size(size_t level, size_t start) const;

  std::vector<size_t> block_of_rank_;
  std::vector<uint64_t> sorted_begins_;
  // Per level L: the blocks in chunks of 2^L consecutive begin positions, each chunk sorted by end.
  std::vector<std::vector<uint64_t>> chunk_ends_;      // [L][position] end of the block there
  std::vector<std::vector<uint32_t>> position_of_;     // [L][block] its position at level L
  std::vector<std::vector<uint32_t>> chunk_min_rank_;  // [L][2 * chunk start + node] inner trees
};

}  // namespace memoplan::planner
