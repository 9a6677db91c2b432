// Finding the inference pass in a program that does not mark it: the allocation sequence of an
// inference thread repeats, pass after pass. Pure functions over recorded (key, begin, end)
// columns, so they are tested without the shim.
#pragma once

#include <cstdint>

namespace memoplan::shim {

struct PeriodResult {
  bool found = false;
  uint64_t period = 0;  // allocations per pass
  uint64_t start = 0;   // index of the first allocation of a complete, aligned pass
};

// keys/begins/ends: n records in allocation order (begins increasing; ends may be ~0 = alive).
// Candidate periods are the distances back to earlier occurrences of the newest key (at most
// max_period); the winner is the candidate whose periodic suffix is longest (a repeated layer
// inside a pass is periodic only within the pass; the pass period holds across passes), ties to the
// shorter. It must cover two whole periods (three passes seen). The pass boundary is placed where
// the fewest recorded blocks are alive (between passes, activations are dead), so few lifetimes
// cross it. A nonzero `required_key` (re-detection: a request the previous plan did not know)
// admits only periods whose newest period contains it. `scratch` holds 2 * period values.
PeriodResult find_period(const uint64_t* keys, const uint64_t* begins, const uint64_t* ends,
                         uint64_t n, uint64_t max_period, uint64_t required_key, uint64_t* scratch);

}  // namespace memoplan::shim
