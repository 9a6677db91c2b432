#include "fuzz_check.h"

#include <string>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/strategy.h"
#include "memoplan/planner/validator.h"
#include "memoplan/trace_io.h"

namespace memoplan::fuzz {
namespace {

// Rows beyond which planning is skipped or limited to one strategy: the fuzzer finds more per
// second with small traces, and the readers are what these targets are about.
constexpr size_t kAnyStrategyRows = 64;
constexpr size_t kDefaultStrategyRows = 512;

const planner::StrategyInfo& pick_strategy(const Trace& trace) {
  std::vector<const planner::StrategyInfo*> fast;
  for (const planner::StrategyInfo& s : planner::all_strategies()) {
    if (s.fast) fast.push_back(&s);
  }
  uint64_t h = trace.allocations.size();
  for (const Allocation& a : trace.allocations) h = h * 31 + a.size + a.begin;
  return *fast[h % fast.size()];
}

void check_plan(const Trace& trace, const std::string& strategy, bool aliases = false) {
  PlanOptions options;
  options.strategy = strategy;
  options.aliases = aliases;
  const Result<Plan> plan = plan_trace(trace, options);
  // plan_trace refuses only a malformed trace (ruled out) or a plan its validator rejects.
  FUZZ_CHECK(plan.ok(), "%s: %s", strategy.c_str(), plan.error().c_str());
  FUZZ_CHECK(validate_plan(trace, *plan).valid, "plan_trace returned an invalid plan");

  const Result<Plan> reread = parse_plan_json(plan_to_json(*plan), "round trip");
  FUZZ_CHECK(reread.ok(), "%s", reread.error().c_str());
  FUZZ_CHECK(reread->offsets == plan->offsets && reread->slab_bytes == plan->slab_bytes &&
                 reread->alignment == plan->alignment && reread->strategy == plan->strategy &&
                 reread->status == plan->status &&
                 reread->trace_fingerprint == plan->trace_fingerprint,
             "the plan changed in its JSON round trip");
}

}  // namespace

void check_accepted_trace(const Trace& trace) {
  FUZZ_CHECK(check_trace(trace).empty(), "a reader accepted a trace check_trace refuses");
  if (trace.allocations.size() > kDefaultStrategyRows) return;
  const std::string default_strategy(planner::kDefaultStrategy);
  check_plan(trace, default_strategy);  // what `memoplan plan` does with it
  for (const Allocation& a : trace.allocations) {
    if (a.alias_of != kNoRow || a.slice_of != kNoRow) {
      check_plan(trace, default_strategy, /*aliases=*/true);  // `memoplan plan --memory min`
      break;
    }
  }
  if (trace.allocations.size() > kAnyStrategyRows) return;
  const std::string other = pick_strategy(trace).name;
  if (other != default_strategy) check_plan(trace, other);
}

}  // namespace memoplan::fuzz
