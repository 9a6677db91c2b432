// Places blocks exactly as OffsetPlacer does (the same gaps, the same choice in each), in time that
// grows with the holes between the placed blocks a lifetime overlaps, not with their number.
//
// OffsetPlacer lists every placed block whose lifetime overlaps the new one and sorts their address
// ranges: on a trace of 60,000 allocations with 9,000 live at once (a large model's training step)
// that is thousands of ranges per block, seconds in all. Here the time axis (its distinct begin
// ticks) is a segment tree; a placed block is added to the O(log T) nodes its lifetime covers
// canonically (`covered`) and to those nodes and their ancestors (`below`: everything placed in a
// node's subtree). A node keeps the address ranges of its blocks coalesced: touching and
// overlapping ranges merge into one, so a set holds the holes between its blocks, not the blocks,
// and tightly packed addresses cost one range. The blocks whose lifetimes overlap a query are those
// in `below` of the query's canonical nodes and in `covered` of the nodes that straddle its ends:
// the union of about 2 log T sets gives the same occupied addresses as the overlapping blocks do.
// Most queries are of blocks that live a few ticks: nearly all they read is the `covered` sets
// along their leaf paths, and the big ones near the root are fragmented, each coalescing only its
// own blocks. So nodes at one level (kAboveLevel in the .cc) keep `above`, the union of the
// `covered` sets of their ancestors there and up, and a query reads two `above` sets instead of the
// covered sets from that level up; a block covering a node up there is added to the `above` set of
// each of its descendants at the level. On IOPDDL's Y_1 (62k allocations, 9,331 live at once) a
// query took about 230 merge steps from 14 sets without `above` sets and 120 with them, for 65
// gaps in the union. Three more cuts: a set is added to only if a later query reads it (the order
// is known up front); a set's ranges that start too close to the walk's free address for the
// block to fit before them are passed in a tight loop, not one merge step each; leaves are the
// distinct begins only. Y_1's placement: 289 ms before these, 147 ms after
// (bench/planner_scaling.cc; OffsetPlacer sorted 3,000 ranges a query and took 6.7 s).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <utility>
#include <vector>

#include "memoplan/planner/problem.h"
#include "offset_placer.h"  // Fit

namespace memoplan::planner {

class OccupancyTree {
 public:
  // `order`: the blocks in the order they will be placed, each once.
  OccupancyTree(const Problem& problem, const std::vector<size_t>& order);

  // Chooses an offset for the next block of the order by `fit` as OffsetPlacer::place would,
  // records it and returns it.
  uint64_t place_next(Fit fit);

  std::vector<uint64_t> take_offsets() { return std::move(offsets_); }

 private:
  struct Range {
    uint64_t lo, hi;
  };
  using RangeSet = std::pmr::vector<Range>;  // sorted, disjoint, never touching
  struct Node {
    uint32_t covered = 0;  // sets_ index (0: none): blocks whose lifetime covers the span
    uint32_t below = 0;    // blocks placed at the node or under it
    // Only at level above_level_: the blocks covering the node or one of its ancestors, which
    // stand for their `covered` sets in queries (see above_level_).
    uint32_t above = 0;
    // The last query that reads each set, as its place in the order plus one (0: none): a block
    // placed after that is not added to it (a block's own query comes before it is added).
    uint32_t last_below = 0;    // the node is canonical for the query
    uint32_t last_covered = 0;  // the query straddles the node
    uint32_t last_above = 0;
  };

  // A binary tree over leaves [0, first_leaf_), node 1 the root, node v's children 2v and 2v + 1,
  // leaf i node first_leaf_ + i. The canonical nodes of leaves [lo, hi): the fewest whose spans
  // make it up.
  // visit(node, level): leaves are level 0.
  template <typename Visit>
  void for_each_canonical(size_t lo, size_t hi, Visit visit) const {
    size_t level = 0;
    for (size_t l = lo + first_leaf_, r = hi + first_leaf_; l < r; l /= 2, r /= 2, ++level) {
      if (l & 1) visit(l++, level);
      if (r & 1) visit(--r, level);
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
  // proper ancestors, all on the two leaf paths. visit(node, level).
  template <typename Visit>
  void for_each_straddling(size_t lo, size_t hi, Visit visit) const {
    size_t level = 0;  // of l and r below: their spans are 2^level leaves
    for (size_t l = lo + first_leaf_, r = hi - 1 + first_leaf_;; l /= 2, r /= 2, ++level) {
      auto straddles = [&](size_t node) {
        const size_t span_lo = (node << level) - first_leaf_;
        return span_lo < lo || span_lo + (size_t{1} << level) > hi;
      };
      if (straddles(l)) visit(l, level);
      if (r != l && straddles(r)) visit(r, level);
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
  const std::vector<size_t>& order_;
  size_t placed_ = 0;  // blocks of order_ placed so far
  std::vector<uint64_t> offsets_;
  size_t first_leaf_ = 1;  // the leaves (tick intervals), rounded up to a power of two
  // Nodes at this level (leaves 0) keep `above`, the union of the `covered` sets of their
  // ancestors at this level or higher; a query reads the `above` set of the two nodes at this level
  // on its leaf paths instead of the many `covered` sets up there. kNoAbove: none kept (a small
  // tree), so every level reads `covered`.
  static constexpr size_t kNoAbove = SIZE_MAX;
  size_t above_level_ = kNoAbove;
  bool keeps_above() const { return above_level_ != kNoAbove; }
  std::vector<std::pair<uint32_t, uint32_t>> leaf_range_;  // per block: its leaves [first, second)
  std::vector<Node> nodes_;                                // nodes_[0] is the root
  // Every set's ranges come from one arena, freed at once with the tree: tens of thousands of
  // small growing arrays cost a tenth of the placement time in malloc and free otherwise.
  std::pmr::monotonic_buffer_resource arena_;
  std::vector<RangeSet> sets_;  // sets_[0] stays empty
  // Reused between calls so the hot loop does not allocate.
  std::vector<const RangeSet*> query_;
  std::vector<Cursor> cursors_;
};

// place_in_order with OccupancyTree: the same offsets, for traces where blocks overlap many others.
std::vector<uint64_t> place_in_order_by_tree(const Problem& problem,
                                             const std::vector<size_t>& order, Fit fit);

}  // namespace memoplan::planner
