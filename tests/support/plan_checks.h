// Planning helpers shared by the exact strategies' tests (mip_test.cc, exact_test.cc): plan a
// trace with one strategy, and check a plan independently of plan_trace's own validation.
// Header-only: it uses GoogleTest's assertions, which the support library does not link.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/problem.h"
#include "memoplan/planner/validator.h"

namespace memoplan::testing {

inline Result<Plan> plan_with(const Trace& trace, const std::string& strategy, double time_limit_s,
                              uint64_t capacity = 0) {
  PlanOptions options;
  options.strategy = strategy;
  options.strategy_options.time_limit_s = time_limit_s;
  options.strategy_options.capacity = capacity;
  return plan_trace(trace, options);
}

// Checks the plan independently of plan_trace's own validation and returns its slab.
inline uint64_t valid_slab(const Trace& trace, const Result<Plan>& plan, const std::string& name) {
  EXPECT_TRUE(plan.ok()) << name << ": " << plan.error();
  if (!plan.ok()) return 0;
  const ValidationReport report = validate_plan(trace, *plan);
  EXPECT_TRUE(report.valid) << name << ": " << report.messages.front();
  return plan->slab_bytes;
}

inline planner::Problem problem_of(const Trace& trace) {
  Result<planner::Problem> problem = planner::make_problem(trace);
  EXPECT_TRUE(problem.ok()) << problem.error();
  return problem.ok() ? std::move(*problem) : planner::Problem{};
}

}  // namespace memoplan::testing
