#include "occupancy_tree.h"

#include <algorithm>
#include <limits>

namespace memoplan::planner {

OccupancyTree::OccupancyTree(const Problem& problem)
    : problem_(problem), offsets_(problem.blocks.size(), 0), sets_(1) {
  ticks_.reserve(problem.blocks.size() * 2);
  for (const Block& b : problem.blocks) {
    ticks_.push_back(b.begin);
    ticks_.push_back(b.end);
  }
  std::sort(ticks_.begin(), ticks_.end());
  ticks_.erase(std::unique(ticks_.begin(), ticks_.end()), ticks_.end());
  const size_t leaves = ticks_.empty() ? 1 : ticks_.size() - 1;
  while (first_leaf_ < leaves) first_leaf_ *= 2;
  nodes_.resize(2 * first_leaf_);
  // Every lifetime is known: the sets each block's query will read are marked now, and a set no
  // query reads is never kept (the root's `below`, for one, unless a block spans the whole pass).
  leaf_range_.reserve(problem.blocks.size());
  for (const Block& b : problem.blocks) {
    const auto lo = std::lower_bound(ticks_.begin(), ticks_.end(), b.begin) - ticks_.begin();
    const auto hi = std::lower_bound(ticks_.begin(), ticks_.end(), b.end) - ticks_.begin();
    leaf_range_.emplace_back(static_cast<uint32_t>(lo), static_cast<uint32_t>(hi));
    for_each_canonical(static_cast<size_t>(lo), static_cast<size_t>(hi),
                       [&](size_t node) { nodes_[node].read_below = true; });
    for_each_straddling(static_cast<size_t>(lo), static_cast<size_t>(hi),
                        [&](size_t node) { nodes_[node].read_covered = true; });
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
    sets_.emplace_back();
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

uint64_t OccupancyTree::place(size_t index, Fit fit) {
  const Block& block = problem_.blocks[index];
  const size_t lo = leaf_range_[index].first, hi = leaf_range_[index].second;
  // The blocks whose lifetimes overlap this one: those placed at or under the range's canonical
  // nodes, and those covering the nodes that straddle its ends.
  query_.clear();
  for_each_canonical(lo, hi, [&](size_t node) {
    if (nodes_[node].below) query_.push_back(&sets_[nodes_[node].below]);
  });
  for_each_straddling(lo, hi, [&](size_t node) {
    if (nodes_[node].covered) query_.push_back(&sets_[nodes_[node].covered]);
  });
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
  for_each_canonical(lo, hi, [&](size_t node) {
    if (nodes_[node].read_covered) add(set_of(nodes_[node].covered), chosen, end);
    if (nodes_[node].read_below && !on_paths(lo, hi, node)) {
      add(set_of(nodes_[node].below), chosen, end);
    }
  });
  // `below` of the canonical nodes' ancestors: every node on the two leaf paths (with nodes inside
  // the range, harmlessly: the block overlaps them too).
  for_each_on_paths(lo, hi, [&](size_t node) {
    if (nodes_[node].read_below) add(set_of(nodes_[node].below), chosen, end);
  });
  return chosen;
}

std::vector<uint64_t> place_in_order_by_tree(const Problem& problem,
                                             const std::vector<size_t>& order, Fit fit) {
  OccupancyTree tree(problem);
  for (size_t index : order) tree.place(index, fit);
  return tree.take_offsets();
}

}  // namespace memoplan::planner
