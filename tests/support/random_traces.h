// Seeded trace generators for property tests and benchmarks. Same seed, same trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/planner/trace.h"

namespace memoplan::testing {

enum class TraceShape {
  kUniform,   // random lifetimes anywhere in the pass
  kChain,     // each allocation lives until the next one or two are made (a layer chain)
  kResidual,  // a chain plus skip connections that live across several layers
  kTies,      // few distinct sizes and many equal begin/end ticks
  kDnnLike,   // activations, workspaces, skip connections and a handful of pass-long blocks
};

const std::vector<TraceShape>& all_shapes();
std::string to_string(TraceShape shape);

// `allocations` rows; sizes log-uniform over 64 B .. 64 MiB (six orders of magnitude) unless the
// shape says otherwise; about 5% zero-byte rows mixed in.
Trace random_trace(TraceShape shape, size_t allocations, uint64_t seed);

}  // namespace memoplan::testing
