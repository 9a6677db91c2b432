// The shared-objects approach (Pisarchyk & Lee 2020, §4): every block is assigned to a buffer
// ("shared object") that blocks with disjoint lifetimes take turns in; a buffer is as big as its
// largest block. Turned into offsets by laying the buffers out contiguously, largest first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

// `object_of_block[i]` is the shared object block i is assigned to (any ids; dense is cheapest).
// Precondition: blocks sharing an object have pairwise disjoint lifetimes.
std::vector<uint64_t> lay_out_shared_objects(const Problem& problem,
                                             const std::vector<size_t>& object_of_block);

}  // namespace memoplan::planner
