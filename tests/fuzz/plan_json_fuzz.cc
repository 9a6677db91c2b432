// Fuzz target: memoplan-plan JSON (parse_plan_json: `memoplan validate`, the shim's mode:replay
// plan file). An accepted plan must survive its JSON round trip, and the validator, run on it
// against a trace made to fit, must agree with a brute-force overlap check done in 128-bit
// arithmetic (offsets near 2^64 are exactly what a hostile plan file would carry).
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "memoplan/planner/validator.h"
#include "memoplan/trace_io.h"

namespace {

using memoplan::Plan;
using memoplan::Trace;
using u128 = unsigned __int128;

// One row per offset; sizes and lifetimes follow from the row index (some rows overlap in time,
// some are empty or escape, alignments vary), so the validator sees every case.
Trace trace_for(const Plan& plan) {
  Trace trace;
  for (size_t row = 0; row < plan.offsets.size(); ++row) {
    memoplan::Allocation a;
    a.id = row;
    a.size = row % 7 == 6 ? 0 : uint64_t{1} << (row % 13);
    a.align = row % 3 == 0 ? 0 : uint64_t{16} << (row % 5);
    a.begin = row / 2;
    a.end = a.begin + row % 4;
    a.escapes = row % 11 == 10;
    trace.allocations.push_back(a);
  }
  return trace;
}

bool brute_force_valid(const Trace& trace, const Plan& plan) {
  const auto& rows = trace.allocations;
  auto planned = [&](size_t i) { return rows[i].size != 0 && !rows[i].escapes; };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!planned(i)) continue;
    const uint64_t align = rows[i].align ? rows[i].align : trace.default_align;
    if (plan.offsets[i] % align || plan.alignment % align) return false;
    if (u128{plan.offsets[i]} + rows[i].size > plan.slab_bytes) return false;
    for (size_t j = 0; j < i; ++j) {
      if (!planned(j)) continue;
      const bool together = rows[i].begin < memoplan::effective_end(rows[j]) &&
                            rows[j].begin < memoplan::effective_end(rows[i]);
      const bool apart = u128{plan.offsets[i]} + rows[i].size <= plan.offsets[j] ||
                         u128{plan.offsets[j]} + rows[j].size <= plan.offsets[i];
      if (together && !apart) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const memoplan::Result<Plan> plan = memoplan::parse_plan_json(text, "fuzz.plan.json");
  if (!plan) {
    FUZZ_CHECK(plan.error().rfind("fuzz.plan.json", 0) == 0, "error without the origin: %s",
               plan.error().c_str());
    return 0;
  }
  FUZZ_CHECK(plan->alignment && !(plan->alignment & (plan->alignment - 1)),
             "accepted alignment %llu", static_cast<unsigned long long>(plan->alignment));
  const memoplan::Result<Plan> reread =
      memoplan::parse_plan_json(memoplan::plan_to_json(*plan), "round trip");
  FUZZ_CHECK(reread.ok(), "%s", reread.error().c_str());
  FUZZ_CHECK(reread->offsets == plan->offsets && reread->slab_bytes == plan->slab_bytes &&
                 reread->alignment == plan->alignment && reread->strategy == plan->strategy &&
                 reread->note == plan->note && reread->status == plan->status,
             "the plan changed in its JSON round trip");

  if (plan->offsets.size() > 256) return 0;  // the brute force is quadratic
  const Trace trace = trace_for(*plan);
  const bool valid = memoplan::validate_plan(trace, *plan).valid;
  FUZZ_CHECK(valid == brute_force_valid(trace, *plan), "validate_plan says %s, brute force %s",
             valid ? "valid" : "invalid", valid ? "invalid" : "valid");
  return 0;
}
