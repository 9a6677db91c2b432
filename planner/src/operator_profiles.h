// Operator profiles, breadths and positional maxima (Pisarchyk & Lee 2020, §3) for traces that have
// no explicit operators.
//
// An operator's profile is the set of tensors it needs in memory. Here the only "operators" are the
// ticks at which allocations happen: the live set just after the allocations at a distinct begin
// tick is maximal, and every other live set is a subset of one of those. So an operator is a
// distinct begin tick, its profile the blocks live there (begin <= tick < end), and its breadth the
// profile's total size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dominance_tree.h"
#include "memoplan/planner/problem.h"

namespace memoplan::planner {

struct Operator {
  uint64_t tick = 0;
  uint64_t breadth = 0;  // bytes live at `tick`
};

// Every operator in tick order. A sweep, O(n log n).
std::vector<Operator> operators(const Problem& problem);

// The order the greedy-by-breadth strategies visit operators in: non-increasing breadth, ties by
// the earlier tick.
std::vector<Operator> operators_by_breadth(const Problem& problem);

// Every operator's whole profile, flattened. Costs the sum of the profile sizes, which is quadratic
// when many blocks live long (pass-long blocks in a long trace): strategies that only need the
// not-yet-assigned part of each profile use ProfileDrain instead.
struct OperatorProfiles {
  std::vector<Operator> operators;  // tick order
  std::vector<size_t> first;        // profile k is members[first[k] .. first[k + 1])
  std::vector<size_t> members;      // block indices, each profile in non-increasing size

  size_t profile_size(size_t k) const { return first[k + 1] - first[k]; }
  const size_t* profile_begin(size_t k) const { return members.data() + first[k]; }
  const size_t* profile_end(size_t k) const { return members.data() + first[k + 1]; }
};
OperatorProfiles operator_profiles(const Problem& problem);

// positional_maxima[k] is the largest (k+1)-th biggest block of any profile; non-increasing, one
// entry per block of the largest profile. Their sum is the shared-objects lower bound (§4.1).
// O(n log n): blocks are added largest first to a range-add/max tree over the operators, and the
// k-th maximum is the size of the block that first makes some operator hold k + 1 blocks.
std::vector<uint64_t> positional_maxima(const Problem& problem);

// Hands each block out exactly once: take(tick) yields the blocks live at `tick` that no earlier
// take() yielded. Visiting operators in any order and taking each one's profile this way costs
// O(n log n) in all, however long the blocks live, instead of the sum of the profile sizes.
class ProfileDrain {
 public:
  explicit ProfileDrain(const Problem& problem);

  // Appends those blocks to `out` in non-increasing size (ties: earlier begin, lower index).
  void take(uint64_t tick, std::vector<size_t>& out);

 private:
  const Problem& problem_;
  std::vector<size_t> by_begin_;  // slot -> block index, sorted by begin
  std::vector<uint64_t> begins_;  // begins_[slot], for mapping a tick to a slot limit
  std::vector<uint64_t> ends_;    // distinct ends, sorted; a block's value is its end's rank here
  DominanceTree untaken_;
};

// Non-increasing size, ties by the earlier begin then the lower index: the order every
// size-ordered loop here uses, so plans are deterministic.
inline bool larger_block_first(const Problem& problem, size_t a, size_t b) {
  const Block& x = problem.blocks[a];
  const Block& y = problem.blocks[b];
  if (x.size != y.size) return x.size > y.size;
  if (x.begin != y.begin) return x.begin < y.begin;
  return a < b;
}

}  // namespace memoplan::planner
