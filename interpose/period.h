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
// A nonzero `not_multiple_of` admits no whole multiple of it (a re-detection without its missed
// key: the old plan was a layer, and two or more layers are not the pass either).
// `scratch` holds 2 * period values.
struct PeriodQuery {
  uint64_t max_period = 1 << 16;
  uint64_t required_key = 0;
  uint64_t min_period = 1;
  uint64_t min_run = 0;
  uint64_t not_multiple_of = 0;
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

// The search again when work between passes repeats irregularly: requests of a few recurring
// sizes made a varying number of times between passes (a response string grown by doubling) are
// not made once, yet break the period of every pass around them. Takes the last `intervals`
// stretches between consecutive occurrences of `anchor` (a key the pass makes once) and keeps,
// in [first occurrence, n), the records whose key occurs the same nonzero number of times in
// every stretch: the pass's requests; the irregular ones are dropped. Compacts keys, begins,
// ends and kept (original indices) in place and returns how many were kept (0 when the anchor
// has fewer than intervals + 1 occurrences). Up to `max_dropped` of the dropped keys that
// occurred in the stretches go to `dropped` (*dropped_count of them). `table` holds 4 *
// table_slots values; table_slots is a power of two of at least 2 * n.
uint64_t keep_regular(uint64_t* keys, uint64_t* begins, uint64_t* ends, uint64_t* kept, uint64_t n,
                      uint64_t anchor, uint64_t intervals, uint64_t* table, uint64_t table_slots,
                      uint64_t* dropped, int max_dropped, int* dropped_count);

// Whether counts[0, n) (a key's misses in each of n consecutive replayed passes) repeats with
// some period q of at most n / 2 passes (counts[j] == counts[j - q] for every j >= q) in which
// exactly one pass misses it. A pass's head under a plan of one of its L layers repeats so with
// q = L, a key missed the same number of times every pass with q = 1. A key missed once never
// repeats (q <= n / 2 compares it with a zero); a response's sizes drawn from request to request
// do not repeat; sizes that drift slowly (runs of passes that miss a key, then runs that do not)
// may repeat by chance, but with more than one missing pass per period.
bool counts_repeat(const uint8_t* counts, uint32_t n);

}  // namespace memoplan::shim
