// The parts of the `mip` strategy that need no solver: which block pairs the model must order,
// which orders symmetry lets it fix, and turning an address order back into exact offsets. Kept
// apart from mip.cc so they build, and can be tested, without CBC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner::mip {

using BlockPair = std::pair<size_t, size_t>;  // first < second

// Every pair of blocks whose lifetimes overlap, each once with first < second, found with a
// LiveIntervalIndex in O(n log n + pairs). nullopt as soon as there are more than `limit`: the
// model would be too big to build, let alone solve.
std::optional<std::vector<BlockPair>> lifetime_overlapping_pairs(const Problem& problem,
                                                                 size_t limit);

// Pairs whose order may be fixed (pairs[k].first below .second) without losing every optimum:
// blocks of equal size and lifetime are interchangeable, so in some optimal plan the lower index
// lies below. Returns those k. (Fixing one more pair because a mirrored plan is valid too would
// also be sound; it made CBC find improvements less often, so it is not done.)
std::vector<size_t> symmetry_fixes(const Problem& problem, const std::vector<BlockPair>& pairs);

// Offsets for an address order: `first_below[k]` says pairs[k].first lies below pairs[k].second.
// Each block goes at the highest end of the blocks ordered below it (a longest path in the order
// DAG), so the result is the lowest placement that respects the order and offsets are sums of
// sizes, hence aligned. Empty when the order has a cycle.
std::vector<uint64_t> offsets_from_order(const Problem& problem,
                                         const std::vector<BlockPair>& pairs,
                                         const std::vector<bool>& first_below);

// The order a valid placement implies: first_below[k] = offsets[first] < offsets[second].
std::vector<bool> order_of(const std::vector<BlockPair>& pairs,
                           const std::vector<uint64_t>& offsets);

}  // namespace memoplan::planner::mip
