// The optimal slab of a tiny problem by exhaustion, the reference the exact strategies (mip, exact)
// are checked against.
#pragma once

#include <cstdint>

#include "memoplan/planner/problem.h"

namespace memoplan::testing {

// Tries every placement order (n! of them: keep n at 8 or below). Placing blocks one by one at the
// lowest offset clear of the already placed lifetime-overlapping blocks, in the order of an optimal
// plan's offsets, never puts a block above where that plan has it; so the best such placement over
// all orders is optimal.
uint64_t brute_force_optimum(const planner::Problem& problem);

}  // namespace memoplan::testing
