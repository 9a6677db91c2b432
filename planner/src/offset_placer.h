// Places blocks one at a time into a single address space, against the blocks already placed whose
// lifetimes overlap. Shared by every "order + fit rule" strategy (greedy_by_size, the Occamy fits,
// greedy_by_breadth, best's order search): they differ only in the order they feed blocks in and in
// the fit rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "live_interval_index.h"
#include "memoplan/planner/problem.h"

namespace memoplan::planner {

enum class Fit {
  kBest,   // the smallest gap the block fits in (ties: lowest); else above the highest neighbour
  kFirst,  // the lowest gap the block fits in; else above the highest neighbour
};

class OffsetPlacer {
 public:
  explicit OffsetPlacer(const Problem& problem);

  // Chooses an offset for block `index` by `fit`, records it and returns it. Each block once.
  uint64_t place(size_t index, Fit fit);

  bool placed(size_t index) const { return placed_[index]; }
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  std::vector<uint64_t> take_offsets() { return std::move(offsets_); }
  // Highest end address placed so far.
  uint64_t extent() const { return extent_; }

 private:
  const Problem& problem_;
  LiveIntervalIndex index_;
  std::vector<uint64_t> offsets_;
  std::vector<bool> placed_;
  uint64_t extent_ = 0;
  // Reused between calls so the hot loop does not allocate.
  std::vector<std::pair<uint64_t, uint64_t>> occupied_;
};

// The largest number of blocks live at one tick: what a placement by OffsetPlacer reads and sorts
// at worst.
size_t most_live_at_once(const Problem& problem);

// Whether place_in_order places `problem`'s blocks with OccupancyTree: from 512 live at once.
bool places_with_tree(const Problem& problem);

// Places every block in `order` with `fit`; the offsets of a complete plan. Where many blocks are
// live at once it places them with OccupancyTree (occupancy_tree.h): the same offsets, in time
// that does not grow with the number of blocks a lifetime overlaps.
std::vector<uint64_t> place_in_order(const Problem& problem, const std::vector<size_t>& order,
                                     Fit fit);

// Block indices sorted by a key, descending, ties broken by the earlier begin then the index, so
// every strategy's order is deterministic.
std::vector<size_t> order_by_size_desc(const Problem& problem);
std::vector<size_t> order_by_begin(const Problem& problem);

}  // namespace memoplan::planner
