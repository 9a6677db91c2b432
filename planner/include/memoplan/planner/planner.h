// The planner's front door: trace in, validated plan out.
#pragma once

#include <string>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/result.h"
#include "memoplan/planner/strategy.h"
#include "memoplan/planner/trace.h"

namespace memoplan {

struct PlanOptions {
  std::string strategy{planner::kDefaultStrategy};
  uint64_t min_alignment = 0;  // 0: the trace's largest alignment
  planner::StrategyOptions strategy_options;
};

// Plans the trace with the named strategy and fills every Plan field. Fails on an unknown strategy,
// a malformed trace, or a strategy that returned an invalid plan (a bug, reported, never returned).
Result<Plan> plan_trace(const Trace& trace, const PlanOptions& options = {});

}  // namespace memoplan
