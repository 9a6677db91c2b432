// Plans a three-tensor trace with the installed planner, checks the plan and writes it as JSON
// with the installed core; asks the shim for its statistics when it runs under it. Built both
// through find_package(memoplan) and through pkg-config (tests/install/install_test.sh).
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

#include "memoplan/pass.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "memoplan/stats.h"
#include "memoplan/trace_io.h"

int main() {
  memoplan::Trace trace;
  trace.meta.name = "consumer";
  for (const auto& [id, size, begin, end] :
       {std::array<uint64_t, 4>{1, 1024, 0, 2}, std::array<uint64_t, 4>{2, 2048, 1, 3},
        std::array<uint64_t, 4>{3, 1024, 2, 4}}) {
    memoplan::Allocation a;
    a.id = id;
    a.size = size;
    a.begin = begin;
    a.end = end;
    trace.allocations.push_back(a);
  }
  const memoplan::Result<memoplan::Plan> plan = memoplan::plan_trace(trace);
  if (!plan) {
    std::fprintf(stderr, "plan_trace: %s\n", plan.error().c_str());
    return 1;
  }
  const memoplan::ValidationReport report = memoplan::validate_plan(trace, plan.value());
  if (!report.valid) {
    std::fprintf(stderr, "the plan is not valid\n");
    return 2;
  }
  // Blocks 1 and 2 overlap in time, 2 and 3 too: 3 KiB at least, at most all three.
  const std::string json = memoplan::plan_to_json(plan.value());
  if (plan.value().slab_bytes < 3072 || plan.value().slab_bytes > 4096 || json.empty()) {
    std::fprintf(stderr, "unexpected plan: %s\n", json.c_str());
    return 3;
  }
  if (memoplan_pass_begin) memoplan_pass_begin();
  if (memoplan_pass_end) memoplan_pass_end();
  char stats[4096];
  const int n = memoplan_stats_json ? memoplan_stats_json(stats, sizeof stats) : -1;
  std::printf("consumer: slab %llu bytes; shim stats %s\n",
              static_cast<unsigned long long>(plan.value().slab_bytes), n > 0 ? stats : "(none)");
  return 0;
}
