#include "memoplan/planner/planner.h"

#include <chrono>

#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/validator.h"

namespace memoplan {

Result<Plan> plan_trace(const Trace& trace, const PlanOptions& options) {
  const planner::StrategyInfo* strategy = planner::find_strategy(options.strategy);
  if (!strategy) {
    return Error{"unknown strategy '" + options.strategy +
                 "' (known: " + planner::strategy_names() + ")"};
  }
  Result<planner::Problem> problem = planner::make_problem(trace, options.min_alignment);
  if (!problem) return Error{problem.error()};

  const auto start = std::chrono::steady_clock::now();
  planner::StrategyResult solved = strategy->solve(*problem, options.strategy_options);
  const auto stop = std::chrono::steady_clock::now();
  if (solved.offsets.size() != problem->blocks.size()) {
    return Error{std::string("strategy ") + strategy->name + " returned " +
                 std::to_string(solved.offsets.size()) + " offsets for " +
                 std::to_string(problem->blocks.size()) + " blocks"};
  }

  Plan plan;
  plan.strategy = strategy->name;
  plan.alignment = problem->alignment;
  plan.slab_bytes = planner::slab_size(*problem, solved.offsets);
  plan.lower_bound_bytes = planner::offset_lower_bound(*problem);
  plan.offsets.assign(trace.allocations.size(), 0);
  for (size_t i = 0; i < problem->blocks.size(); ++i) {
    plan.offsets[problem->row[i]] = solved.offsets[i];
  }
  plan.trace_fingerprint = trace_fingerprint(trace);
  plan.planning_ms = std::chrono::duration<double, std::milli>(stop - start).count();
  plan.status = solved.status;
  if (plan.status == SolveStatus::kHeuristic && plan.slab_bytes == plan.lower_bound_bytes) {
    plan.status = SolveStatus::kOptimal;  // meeting the lower bound proves optimality
  }
  plan.note = std::move(solved.note);

  ValidationReport report = validate_plan(trace, plan, 3);
  if (!report.valid) {
    std::string message = std::string("strategy ") + strategy->name +
                          " produced an invalid plan (a planner bug; please report it): ";
    for (const std::string& m : report.messages) message += m + "; ";
    return Error{message};
  }
  return plan;
}

}  // namespace memoplan
