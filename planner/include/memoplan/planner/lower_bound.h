// Exact lower bounds (Pisarchyk & Lee 2020, §4.1 and §5.1).
#pragma once

#include <cstdint>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

// Offset calculation: no slab can be smaller than the bytes live at once at any tick (the maximum
// operator breadth). Computed by a sweep, O(n log n).
uint64_t offset_lower_bound(const Problem& problem);

// Shared objects: the sum over k of the largest k-th biggest live block at any tick (the sum of
// positional maxima). Always >= offset_lower_bound. O(n log n + total profile size).
uint64_t shared_objects_lower_bound(const Problem& problem);

}  // namespace memoplan::planner
