// Places blocks exactly as OffsetPlacer does (the same gaps, the same choice in each), in time that
// grows with the logarithm of the pass's length instead of with the number of placed blocks a
// lifetime overlaps.
//
// OffsetPlacer lists every placed block whose lifetime overlaps the new one and sorts their address
// ranges: on a trace of 60,000 allocations with 9,000 live at once (a large model's training step)
// that is thousands of ranges per block, seconds in all. Here the time axis (its distinct begin and
// end ticks) is a segment tree; a placed block is added to the O(log T) nodes its lifetime covers
// canonically (`covered`) and to those nodes and their ancestors (`below`: everything placed in a
// node's subtree). A node keeps the address ranges of its blocks coalesced: touching and
// overlapping ranges merge into one, so a set holds the holes between its blocks, not the blocks,
// and tightly packed addresses cost one range. The blocks whose lifetimes overlap a query are those
// in `below` of the query's canonical nodes and in `covered` of the nodes that straddle its ends:
// the union of about 2 log T sets gives the same occupied addresses as the overlapping blocks do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/problem.h"
#include "offset_placer.h"  // Fit

namespace memoplan::planner {

class OccupancyTree {
 public:
  explicit OccupancyTree(const Problem& problem);

  // Chooses an offset for block `index` by `fit` as OffsetPlacer::place would, records it and
  // returns it. Each block once.
  uint64_t place(size_t index, Fit fit);

  std::vector<uint64_t> take_offsets() { return std::move(offsets_); }

 private:
  struct Range {
    uint64_t lo, hi;
  };
  using RangeSet = std::vector<Range>;  // sorted, disjoint, never touching
  struct Node {
    uint32_t covered = 0;   // sets_ index (0: none): blocks whose lifetime covers the node's span
    uint32_t below = 0;     // blocks placed in the node or any node under it
    uint32_t children = 0;  // nodes_ index of the first of its kFanOut children (0: none yet)
  };
  static constexpr size_t kFanOut = 4;
  // The first leaf of child i of a node spanning leaves [lo, hi).
  static size_t split(size_t lo, size_t hi, size_t i) { return lo + (hi - lo) * i / kFanOut; }

  struct Cursor {
    const Range* at;
    const Range* end;
  };

  static void add(RangeSet& set, uint64_t lo, uint64_t hi);
  static void skip_below(Cursor& c, uint64_t address);
  RangeSet& set_of(uint32_t& slot);
  void insert(size_t node, size_t node_lo, size_t node_hi, size_t lo, size_t hi,
              uint64_t address_lo, uint64_t address_hi);
  void collect(size_t node, size_t node_lo, size_t node_hi, size_t lo, size_t hi);

  const Problem& problem_;
  std::vector<uint64_t> offsets_;
  std::vector<uint64_t> ticks_;  // the distinct begin and end ticks, sorted: leaf i is
                                 // [ticks_[i], ticks_[i + 1])
  size_t leaves_ = 0;
  std::vector<Node> nodes_;     // nodes_[0] is the root
  std::vector<RangeSet> sets_;  // sets_[0] stays empty
  // Reused between calls so the hot loop does not allocate.
  std::vector<const RangeSet*> query_;
  std::vector<Cursor> cursors_;
};

// place_in_order with OccupancyTree: the same offsets, for traces where blocks overlap many others.
std::vector<uint64_t> place_in_order_by_tree(const Problem& problem,
                                             const std::vector<size_t>& order, Fit fit);

}  // namespace memoplan::planner
