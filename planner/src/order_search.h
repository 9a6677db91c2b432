// Improves a valid plan by searching over placement orders.
//
// Any order of the blocks, decoded by placing each one into the lowest (or best-fitting) gap among
// the already-placed blocks whose lifetimes overlap (OffsetPlacer), is a valid plan; and every
// plan, an optimal one included, is matched or beaten by decoding its blocks in the order of their
// offsets with the lowest fit. So a local search over orders loses no optimum and never has to
// repair an invalid plan. It starts from the order of the given plan's offsets and perturbs the
// order where the slab's peak is made (order_moves.h), accepting by simulated annealing, and
// decodes only from the first position a move changed (order_decoder.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

struct OrderSearchOptions {
  // Wall-clock instant the search must return by; checked before every decode and inside it.
  std::chrono::steady_clock::time_point deadline;
  uint64_t seed = 1;
  // Orders decoded at most (0: no cap). With a cap the deadline does not reach, the result
  // depends on the seed alone; order_search_iterations() picks one that fits a time budget.
  uint64_t max_iterations = 0;
  // Stops as soon as the slab reaches this (a lower bound, so the plan is then optimal). Among
  // plans of equal slab the search prefers those with fewer bytes above it.
  uint64_t target_slab = 0;
};

struct OrderSearchResult {
  std::vector<uint64_t> offsets;  // the best plan seen: never worse than the starting plan
  uint64_t slab = 0;
  uint64_t iterations = 0;  // orders decoded, aborted decodes included
  bool hit_deadline = false;
};

// About as many orders as an ordinary core decodes for `problem` in `seconds`, from a cost model
// of the problem (its size and how densely lifetimes overlap), never from a clock: the same
// problem and budget give the same cap on every run.
uint64_t order_search_iterations(const Problem& problem, double seconds);

// Block indices sorted by offset (ties: larger first, then index). Decoding this order with the
// lowest fit places every block at or below its offset in `offsets`, if those are a valid plan:
// each block's already-placed neighbours then all end at or below its old offset.
std::vector<size_t> order_by_offset(const Problem& problem, const std::vector<uint64_t>& offsets);

// Searches placement orders starting from `start` (a valid plan for `problem`).
OrderSearchResult search_placement_orders(const Problem& problem,
                                          const std::vector<uint64_t>& start,
                                          const OrderSearchOptions& options);

}  // namespace memoplan::planner
