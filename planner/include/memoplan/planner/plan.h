// The plan: one slab and an offset per allocation. Offsets, not pointers (TFLite's arena idea), so
// the slab can live anywhere and the plan stays valid.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memoplan {

enum class SolveStatus {
  kHeuristic,  // a heuristic's answer: valid, no optimality claim
  kOptimal,    // proven optimal (mip finished, or the slab equals the lower bound)
  kFeasible,   // an exact method stopped at its time limit with a valid, unproven solution
  kTimedOut,   // an exact method found nothing in time; the offsets come from a fallback heuristic
};
const char* to_string(SolveStatus status);

struct Plan {
  std::string strategy;
  uint64_t slab_bytes = 0;  // bytes the slab must have
  uint64_t alignment = 64;  // alignment the slab base must have; every offset is aligned
  // The offset lower bound (the most bytes live at once) of the same problem: with the sharing
  // the plan took (PlanOptions::aliases; the bytes live members of a group share counted once),
  // and without any (today's bound, the only one when the plan shares nothing).
  uint64_t lower_bound_bytes = 0;
  uint64_t offset_lower_bound_bytes = 0;
  // Rows that share bytes with another row by the trace's claims (aliasing.h): coalesced into a
  // dying row, or laid inside a concat's output.
  uint64_t aliased_rows = 0;
  std::vector<uint64_t> offsets;  // one per trace row, in row order; 0 for zero-byte rows
  std::string trace_fingerprint;  // trace_fingerprint() of the trace it was made for
  double planning_ms = 0;         // wall time of the strategy, measured
  SolveStatus status = SolveStatus::kHeuristic;
  std::string note;  // what the strategy wants a reader to know (e.g. winner of best)

  double ratio_to_lower_bound() const {
    return lower_bound_bytes ? static_cast<double>(slab_bytes) / lower_bound_bytes : 1.0;
  }
};

}  // namespace memoplan
