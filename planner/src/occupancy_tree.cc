#include "occupancy_tree.h"

#include <algorithm>
#include <limits>

namespace memoplan::planner {
namespace {

// The level of the nodes that keep `above` sets: spans of 128 leaves. Lower, a block covering a
// high node is added to more `above` sets (2^(level - kAboveLevel) for a node at `level`); higher,
// queries merge more `covered` sets. Measured on IOPDDL's Y_1 and S_1 (bench/planner_scaling.cc,
// placement of 64k and 1M allocations): 7 the fastest on both, 6 and 8 within 6%, 5 and 9 10-20%
// slower.
constexpr size_t kAboveLevel = 7;

}  // namespace

OccupancyTree::OccupancyTree(const Problem& problem, const std::vector<size_t>& order)
    : problem_(problem), order_(order), offsets_(problem.blocks.size(), 0) {
  sets_.emplace_back(&arena_);
  // Leaf i stands for the ticks from the i-th distinct begin to the next. Two lifetimes overlap
  // when each begins before the other ends, so a block takes the leaves from its begin's up to the
  // first begin at or after its end: ends need no leaves of their own (on IOPDDL's Y_1, 52,854
  // leaves instead of 74,896: a level less).
  std::vector<uint64_t> begins;
  begins.reserve(problem.blocks.size());
  for (const Block& b : problem.blocks) begins.push_back(b.begin);
  std::sort(begins.begin(), begins.end());
  begins.erase(std::unique(begins.begin(), begins.end()), begins.end());
  const size_t leaves = std::max<size_t>(begins.size(), 1);
  size_t levels = 0;  // the root's level
  while (first_leaf_ < leaves) {
    first_leaf_ *= 2;
    ++levels;
  }
  if (levels > kAboveLevel) above_level_ = kAboveLevel;
  nodes_.resize(2 * first_leaf_);
  // Every lifetime and the order are known: each set records the last query that reads it, and a
  // block is added only to sets some later query reads (the root's `below` is never kept unless
  // a block spans the whole pass; in greedy_by_size, sets that only large blocks read stop growing
  // once they are placed).
  leaf_range_.resize(problem.blocks.size());
  for (size_t i = 0; i < problem.blocks.size(); ++i) {
    const Block& b = problem.blocks[i];
    const auto lo = std::lower_bound(begins.begin(), begins.end(), b.begin) - begins.begin();
    const auto hi = std::lower_bound(begins.begin(), begins.end(), b.end) - begins.begin();
    leaf_range_[i] = {static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)};
  }
  for (size_t position = 0; position < order.size(); ++position) {
    const uint32_t reader = static_cast<uint32_t>(position + 1);
    const size_t lo = leaf_range_[order[position]].first, hi = leaf_range_[order[position]].second;
    for_each_canonical(lo, hi, [&](size_t node, size_t) { nodes_[node].last_below = reader; });
    for_each_straddling(lo, hi, [&](size_t node, size_t level) {
      if (level < above_level_) nodes_[node].last_covered = reader;
    });
    if (keeps_above()) {
      nodes_[(lo + first_leaf_) >> above_level_].last_above = reader;
      nodes_[(hi - 1 + first_leaf_) >> above_level_].last_above = reader;
    }
  }
}

void OccupancyTree::add(RangeSet& set, uint64_t lo, uint64_t hi) {
  // The first range that ends at or after lo: it and the ones after it that start at or before hi
  // touch [lo, hi) and merge with it.
  auto first = std::lower_bound(set.begin(), set.end(), lo,
                                [](const Range& r, uint64_t value) { return r.hi < value; });
  auto last = first;
  while (last != set.end() && last->lo <= hi) {
    lo = std::min(lo, last->lo);
    hi = std::max(hi, last->hi);
    ++last;
  }
  if (first == last) {
    set.insert(first, Range{lo, hi});
    return;
  }
  *first = Range{lo, hi};
  set.erase(first + 1, last);
}

OccupancyTree::RangeSet& OccupancyTree::set_of(uint32_t& slot) {
  if (slot == 0) {
    slot = static_cast<uint32_t>(sets_.size());
    sets_.emplace_back(&arena_);
  }
  return sets_[slot];
}

// Moves the cursor to its set's first range that ends above `address`: galloping, so a jump over
// many ranges costs their logarithm.
void OccupancyTree::skip_below(Cursor& c, uint64_t address) {
  if (c.at == c.end || c.at->hi > address) return;
  size_t step = 1;
  const Range* below = c.at;  // ends at or below address
  while (static_cast<size_t>(c.end - below) > step && below[step].hi <= address) {
    below += step;
    step *= 2;
  }
  const Range* limit = static_cast<size_t>(c.end - below) > step ? below + step + 1 : c.end;
  c.at = std::lower_bound(below + 1, limit, address,
                          [](const Range& r, uint64_t value) { return r.hi <= value; });
}

uint64_t OccupancyTree::place_next(Fit fit) {
  const size_t index = order_[placed_++];
  // A set is added to if a query after this one reads it: its last reader's number is above ours.
  const uint32_t reader = static_cast<uint32_t>(placed_);
  const Block& block = problem_.blocks[index];
  const size_t lo = leaf_range_[index].first, hi = leaf_range_[index].second;
  // The blocks whose lifetimes overlap this one: those placed at or under the range's canonical
  // nodes, and those covering the nodes that straddle its ends.
  query_.clear();
  for_each_canonical(lo, hi, [&](size_t node, size_t) {
    if (nodes_[node].below) query_.push_back(&sets_[nodes_[node].below]);
  });
  for_each_straddling(lo, hi, [&](size_t node, size_t level) {
    if (level < above_level_ && nodes_[node].covered)
      query_.push_back(&sets_[nodes_[node].covered]);
  });
  if (keeps_above()) {
    // The `covered` sets of the straddling nodes from above_level_ up, as two `above` sets (with
    // the blocks covering the path nodes inside the lifetime: they overlap it too).
    const size_t left = (lo + first_leaf_) >> above_level_;
    const size_t right = (hi - 1 + first_leaf_) >> above_level_;
    if (nodes_[left].above) query_.push_back(&sets_[nodes_[left].above]);
    if (right != left && nodes_[right].above) query_.push_back(&sets_[nodes_[right].above]);
  }
  // The walk OffsetPlacer::place makes over the sorted occupied ranges, here over the union of
  // the sets, each read once from low to high addresses: `free_from` is the lowest address no
  // range holds; a set's cursor skips the ranges that end at or below it.
  // A k-way merge of the sets by range start: `cursors_` is kept sorted by the start of each
  // set's next range (k is about 2 log T, a few dozen at most: insertion keeps it sorted).
  // Each cursor carries a copy of its current range, so keeping them sorted reads one array.
  cursors_.clear();
  for (const RangeSet* set : query_) {
    const Range* at = set->data();
    const Cursor c{at->lo, at->hi, at, at + set->size()};
    size_t j = cursors_.size();
    cursors_.push_back(c);
    for (; j > 0 && cursors_[j - 1].lo > c.lo; --j) cursors_[j] = cursors_[j - 1];
    cursors_[j] = c;
  }
  uint64_t chosen = std::numeric_limits<uint64_t>::max();
  uint64_t chosen_gap = std::numeric_limits<uint64_t>::max();
  uint64_t free_from = 0;
  size_t live = cursors_.size();  // cursors_[0, live) have ranges left, sorted by lo
  while (live > 0) {
    Cursor& first = cursors_[0];
    if (first.lo > free_from) {
      const uint64_t gap = first.lo - free_from;
      if (gap >= block.size && gap < chosen_gap) {
        chosen = free_from;
        chosen_gap = gap;
        // The first fitting gap (kFirst), or one that fits exactly: nothing later can be better.
        if (fit == Fit::kFirst || gap == block.size) break;
      }
    }
    free_from = std::max(free_from, first.hi);
    // Advance the set past the ranges now below free_from, and sink it to its place: usually its
    // next range is still the lowest start, or the next one or two sets' are.
    ++first.at;
    if (first.at != first.end && first.at->hi <= free_from) skip_below(first, free_from);
    // And past the ranges that start too close to free_from for the block to fit before them:
    // whatever union gap lies there ends at such a range, so it is too small (this set's own
    // packed ranges are read in this tight loop, not one merge step each).
    while (first.at != first.end && first.at->lo < free_from + block.size) {
      free_from = std::max(free_from, first.at->hi);
      ++first.at;
    }
    if (first.at == first.end) {
      std::copy(cursors_.begin() + 1, cursors_.begin() + live, cursors_.begin());
      --live;
      continue;
    }
    first.lo = first.at->lo;
    first.hi = first.at->hi;
    if (live == 1 || first.lo <= cursors_[1].lo) continue;
    const Cursor moved = first;
    size_t j = 0;
    for (; j + 1 < live && cursors_[j + 1].lo < moved.lo; ++j) cursors_[j] = cursors_[j + 1];
    cursors_[j] = moved;
  }
  if (chosen == std::numeric_limits<uint64_t>::max()) chosen = free_from;

  offsets_[index] = chosen;
  const uint64_t end = chosen + block.size;
  for_each_canonical(lo, hi, [&](size_t node, size_t level) {
    if (level >= above_level_) {
      // Into `above` of the node's descendants at above_level_ that some query reads.
      const size_t shift = level - above_level_;
      for (size_t v = node << shift, last = (node + 1) << shift; v < last; ++v) {
        if (nodes_[v].last_above > reader) add(set_of(nodes_[v].above), chosen, end);
      }
    } else if (nodes_[node].last_covered > reader) {
      add(set_of(nodes_[node].covered), chosen, end);
    }
    if (nodes_[node].last_below > reader && !on_paths(lo, hi, node)) {
      add(set_of(nodes_[node].below), chosen, end);
    }
  });
  // `below` of the canonical nodes' ancestors: every node on the two leaf paths (with nodes inside
  // the range, harmlessly: the block overlaps them too).
  for_each_on_paths(lo, hi, [&](size_t node) {
    if (nodes_[node].last_below > reader) add(set_of(nodes_[node].below), chosen, end);
  });
  return chosen;
}

std::vector<uint64_t> place_in_order_by_tree(const Problem& problem,
                                             const std::vector<size_t>& order, Fit fit) {
  OccupancyTree tree(problem, order);
  for (size_t i = 0; i < order.size(); ++i) tree.place_next(fit);
  return tree.take_offsets();
}

}  // namespace memoplan::planner
