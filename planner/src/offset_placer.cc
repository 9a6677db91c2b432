#include "offset_placer.h"

#include "occupancy_tree.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace memoplan::planner {
namespace {

// From this many blocks live at once, place_in_order places with OccupancyTree (the same offsets).
// Measured (bench/planner_scaling.cc, docs/results/PLANNER.md): on recorded and DNN-like traces,
// a few dozen live at once, OffsetPlacer is 4-10x faster; on random traces with every lifetime
// anywhere the two meet near 500 live; on the IOPDDL traces (thousands live) the tree is 10-80x
// faster.
constexpr size_t kTreeFromLive = 512;

// k is a few dozen for DNN traces: insertion sort beats introsort's set-up there.
void sort_ranges(std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  if (ranges.size() > 48) {
    std::sort(ranges.begin(), ranges.end());
    return;
  }
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto value = ranges[i];
    size_t j = i;
    for (; j > 0 && value < ranges[j - 1]; --j) ranges[j] = ranges[j - 1];
    ranges[j] = value;
  }
}

}  // namespace

OffsetPlacer::OffsetPlacer(const Problem& problem)
    : problem_(problem),
      index_(problem.blocks),
      offsets_(problem.blocks.size(), 0),
      placed_(problem.blocks.size(), false) {}

uint64_t OffsetPlacer::place(size_t index, Fit fit) {
  const Block& block = problem_.blocks[index];
  occupied_.clear();
  index_.overlapping_ranges(block.begin, block.end, occupied_);
  sort_ranges(occupied_);

  // Walk the occupied ranges in address order; `free_from` is the lowest free address so far.
  uint64_t chosen = std::numeric_limits<uint64_t>::max();
  uint64_t chosen_gap = std::numeric_limits<uint64_t>::max();
  uint64_t free_from = 0;
  for (const auto& [lo, hi] : occupied_) {
    if (lo > free_from) {
      const uint64_t gap = lo - free_from;
      if (gap >= block.size && gap < chosen_gap) {
        chosen = free_from;
        chosen_gap = gap;
        // The first fitting gap (kFirst), or one that fits exactly: nothing later can be better.
        if (fit == Fit::kFirst || gap == block.size) break;
      }
    }
    free_from = std::max(free_from, hi);
  }
  if (chosen == std::numeric_limits<uint64_t>::max()) chosen = free_from;

  offsets_[index] = chosen;
  placed_[index] = true;
  extent_ = std::max(extent_, chosen + block.size);
  index_.insert(index, chosen, chosen + block.size);
  return chosen;
}

size_t most_live_at_once(const Problem& problem) {
  // Begins and ends sorted apart (plain integers sort several times faster than pairs), then
  // walked together; an end at a tick comes before a begin there (lifetimes are half-open).
  std::vector<uint64_t> begins, ends;
  begins.reserve(problem.blocks.size());
  ends.reserve(problem.blocks.size());
  for (const Block& b : problem.blocks) {
    begins.push_back(b.begin);
    ends.push_back(b.end);
  }
  std::sort(begins.begin(), begins.end());
  std::sort(ends.begin(), ends.end());
  size_t live = 0, most = 0;
  for (size_t i = 0, j = 0; i < begins.size(); ++i) {
    while (ends[j] <= begins[i]) {
      ++j;
      --live;
    }
    most = std::max(most, ++live);
  }
  return most;
}

bool places_with_tree(const Problem& problem) {
  return most_live_at_once(problem) >= kTreeFromLive;
}

std::vector<uint64_t> place_in_order(const Problem& problem, const std::vector<size_t>& order,
                                     Fit fit) {
  if (places_with_tree(problem)) return place_in_order_by_tree(problem, order, fit);
  OffsetPlacer placer(problem);
  for (size_t index : order) placer.place(index, fit);
  return placer.take_offsets();
}

std::vector<size_t> order_by_size_desc(const Problem& problem) {
  // Sorted as (size, begin, index) keys laid out together, not indices that read the blocks.
  struct Key {
    uint64_t size, begin;
    size_t index;
  };
  std::vector<Key> keys;
  keys.reserve(problem.blocks.size());
  for (size_t i = 0; i < problem.blocks.size(); ++i) {
    keys.push_back({problem.blocks[i].size, problem.blocks[i].begin, i});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.size != y.size) return x.size > y.size;
    if (x.begin != y.begin) return x.begin < y.begin;
    return x.index < y.index;
  });
  std::vector<size_t> order;
  order.reserve(keys.size());
  for (const Key& k : keys) order.push_back(k.index);
  return order;
}

std::vector<size_t> order_by_begin(const Problem& problem) {
  std::vector<size_t> order(problem.blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto& b = problem.blocks;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (b[x].begin != b[y].begin) return b[x].begin < b[y].begin;
    return x < y;
  });
  return order;
}

}  // namespace memoplan::planner
