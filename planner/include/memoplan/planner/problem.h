// The planning problem every strategy solves: the trace's non-empty allocations reduced to sizes
// and lifetimes. Strategies see only this, never provenance, pointers or torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"

namespace memoplan::planner {

// One block to place. Invariants (make_problem guarantees them): size > 0 and a multiple of
// Problem::alignment; begin < end (half-open lifetime).
struct Block {
  uint64_t size = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};

inline bool lifetimes_overlap(const Block& a, const Block& b) {
  return a.begin < b.end && b.begin < a.end;
}

struct Problem {
  // Every offset a strategy returns must be a multiple of this; sizes are rounded up to it, so a
  // strategy that places blocks at 0 or at other blocks' ends is aligned without thinking about it.
  uint64_t alignment = 64;
  std::vector<Block> blocks;
  std::vector<size_t> row;  // blocks[i] is trace row row[i]
};

// Rows that take slab space: not zero-byte, and not escaping (a block still alive when the pass
// ends would still be alive when the next pass reuses the slab, so it can never live there).
inline bool is_planned(const Allocation& a) { return a.size != 0 && !a.escapes; }

// Drops rows that are not planned (is_planned), rounds sizes up to the plan alignment (the largest
// alignment any row asks for, at least `min_alignment`), normalizes instantaneous lifetimes. Fails
// on a malformed trace.
Result<Problem> make_problem(const Trace& trace, uint64_t min_alignment = 0);

// Highest end address of the blocks given these offsets: the slab size they need.
uint64_t slab_size(const Problem& problem, const std::vector<uint64_t>& offsets);

}  // namespace memoplan::planner
