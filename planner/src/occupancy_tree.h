// Places blocks exactly as OffsetPlacer does (the same gaps, the same choice in each), in time that
// grows with the holes between the placed blocks a lifetime overlaps, not with their number.
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
// On IOPDDL's Y_1 (62k allocations, 9,331 live at once) a query reads about 380 ranges from 15 sets
// where OffsetPlacer sorted 3,000 (bench/planner_scaling.cc). Every lifetime is known up front, so
// sets no query will read are never kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
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
    uint32_t covered = 0;       // sets_ index (0: none): blocks whose lifetime covers the span
    uint32_t below = 0;         // blocks placed at the node or under it
    bool read_below = false;    // some block's query takes `below` (the node is canonical for it)
    bool read_covered = false;  // some block's query takes `covered` (it straddles the node)
  };

  // A binary tree over leaves [0, first_leaf_), node 1 the root, node v's children 2v and 2v + 1,
  // leaf i node first_leaf_ + i. The canonical nodes of leaves [lo, hi): the fewest whose spans
  // make it up.
  template <typename Visit>
  void for_each_canonical(size_t lo, size_t hi, Visit visit) const {
    for (size_t l = lo + first_leaf_, r = hi + first_leaf_; l < r; l /= 2, r /= 2) {
      if (l & 1) visit(l++);
      if (r & 1) visit(--r);
    }
  }
  // The nodes on the paths from leaves lo and hi - 1 up to the root, each once.
  template <typename Visit>
  void for_each_on_paths(size_t lo, size_t hi, Visit visit) const {
    for (size_t l = lo + first_leaf_, r = hi - 1 + first_leaf_;; l /= 2, r /= 2) {
      visit(l);
      if (r != l) visit(r);
      if (l == 1) break;
    }
  }
  // Whether `node` is on the path from leaf lo or leaf hi - 1 to the root.
  bool on_paths(size_t lo, size_t hi, size_t node) const {
    size_t shift = 0;
    while ((node << shift) < first_leaf_) ++shift;
    return ((lo + first_leaf_) >> shift) == node || ((hi - 1 + first_leaf_) >> shift) == node;
  }
  // The nodes whose spans hold part of leaves [lo, hi) but not all of them: the canonical nodes'
  // proper ancestors, all on the two leaf paths.
  template <typename Visit>
  void for_each_straddling(size_t lo, size_t hi, Visit visit) const {
    size_t level = 0;  // of l and r below: their spans are 2^level leaves
    for (size_t l = lo + first_leaf_, r = hi - 1 + first_leaf_;; l /= 2, r /= 2, ++level) {
      auto straddles = [&](size_t node) {
        const size_t span_lo = (node << level) - first_leaf_;
        return span_lo < lo || span_lo + (size_t{1} << level) > hi;
      };
      if (straddles(l)) visit(l);
      if (r != l && straddles(r)) visit(r);
      if (l == 1) break;
    }
  }

  struct Cursor {
    uint64_t lo, hi;  // the range at `at`
    const Range* at;
    const Range* end;
  };

  static void add(RangeSet& set, uint64_t lo, uint64_t hi);
  static void skip_below(Cursor& c, uint64_t address);
  RangeSet& set_of(uint32_t& slot);

  const Problem& problem_;
  std::vector<uint64_t> offsets_;
  std::vector<uint64_t> ticks_;  // the distinct begin and end ticks, sorted: leaf i is
                                 // [ticks_[i], ticks_[i + 1])
  size_t first_leaf_ = 1;        // the leaves (tick intervals), rounded up to a power of two
  std::vector<std::pair<uint32_t, uint32_t>> leaf_range_;  // per block: its leaves [first, second)
  std::vector<Node> nodes_;                                // nodes_[0] is the root
  std::vector<RangeSet> sets_;                             // sets_[0] stays empty
  // Reused between calls so the hot loop does not allocate.
  std::vector<const RangeSet*> query_;
  std::vector<Cursor> cursors_;
};

// place_in_order with OccupancyTree: the same offsets, for traces where blocks overlap many others.
std::vector<uint64_t> place_in_order_by_tree(const Problem& problem,
                                             const std::vector<size_t>& order, Fit fit);

}  // namespace memoplan::planner
