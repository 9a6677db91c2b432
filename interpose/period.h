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
  uint64_t run = 0;     // the periodic suffix: the last `run` records repeat with the period
};

// keys/begins/ends: n records in allocation order (begins increasing; ends may be ~0 = alive).
// Candidate periods are the distances back to earlier occurrences of the newest key (at most
// max_period); the winner is the candidate whose periodic suffix is longest (a repeated layer
// inside a pass is periodic only within the pass; the pass period holds across passes), ties to the
// shorter. It must cover two whole periods (three passes seen). The pass boundary is placed where
// the fewest recorded blocks are alive (between passes, activations are dead), so few lifetimes
// cross it. A period none of whose blocks is freed two periods later is not a pass (a table
// filled at start-up: equal requests kept for good) and is not returned. A nonzero `required_key`
// (re-detection: a request the previous plan did not know) admits only periods whose newest period
// contains it and that are at least `min_period` long (a plan of min_period - 1 allocations missed
// it). `min_run`: the periodic suffix must also be at least this many allocations: a pass made of
// identical layers is periodic with the layer inside one pass, and only a run longer than such a
// pass tells the pass from a program whose whole pass is one layer (kMinPeriodicRun in the shim).
// `scratch` holds 2 * period values.
struct PeriodQuery {
  uint64_t max_period = 1 << 16;
  uint64_t required_key = 0;
  uint64_t min_period = 1;
  uint64_t min_run = 0;
};
PeriodResult find_period(const uint64_t* keys, const uint64_t* begins, const uint64_t* ends,
                         uint64_t n, const PeriodQuery& query, uint64_t* scratch);

// Keeps the records whose key occurs at least twice among the n, in order: a request made once
// (start-up, work between passes whose sizes vary from pass to pass) would break the period of
// everything around it. Compacts keys, begins and ends in place, writes each kept record's
// original index to `kept` and returns how many were kept. `table` holds 2 * table_slots values;
// table_slots is a power of two of at least 2 * n.
uint64_t keep_recurring(uint64_t* keys, uint64_t* begins, uint64_t* ends, uint64_t n,
                        uint64_t* kept, uint64_t* table, uint64_t table_slots);

}  // namespace memoplan::shim
