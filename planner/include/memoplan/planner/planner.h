// The planner's front door: trace in, validated plan out.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/result.h"
#include "memoplan/planner/strategy.h"
#include "memoplan/planner/trace.h"

namespace memoplan {

struct PlanOptions {
  std::string strategy{planner::kDefaultStrategy};
  uint64_t min_alignment = 0;  // 0: the trace's largest alignment
  planner::StrategyOptions strategy_options;
  // Trace rows in a placement order learned on another trace of the same rows: a shape family's
  // member, with the same allocations and lifetimes and other sizes (placement_order()). When set,
  // the rows are also placed in this order, each at the lowest offset that fits, and the plan is
  // the smaller of that and the strategy's. Rows it lacks go after it, largest first; rows the
  // trace does not plan (zero bytes, escaping) or does not have are skipped.
  std::vector<size_t> row_order;
  // Take the trace's claims that rows may share bytes (Allocation::alias_of, ::slice_of;
  // aliasing.h): each group of rows they tie is planned as one block, and the plan can go below
  // the offset lower bound (`memoplan plan --memory min`). Off: every row gets bytes of its own.
  bool aliases = false;
};

// Plans the trace with the named strategy and fills every Plan field. Fails on an unknown strategy,
// a malformed trace, or a strategy that returned an invalid plan (a bug, reported, never returned).
Result<Plan> plan_trace(const Trace& trace, const PlanOptions& options = {});

// The planned rows of `plan` (made for `trace`) by offset, ties larger first then by row. Placing
// them in this order at the lowest offset that fits reproduces the plan or betters it; and the
// order carries to a trace of the same rows with other sizes, where a good plan of one shape (the
// slow `best` strategy's) makes a good plan of another in the time of a fast strategy.
std::vector<size_t> placement_order(const Trace& trace, const Plan& plan);

}  // namespace memoplan
