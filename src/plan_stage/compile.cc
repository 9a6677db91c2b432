#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/replay/escaping.h"

namespace memoplan::plan_stage {

Result<PlannedPass> compile(const Trace& trace, const CompileOptions& options) {
  Result<Plan> plan = plan_trace(trace, options.planner);
  if (!plan) return Error{plan.error()};
  return lay_out(trace, std::move(*plan), options);
}

Result<PlannedPass> lay_out(const Trace& trace, Plan plan, const CompileOptions& options) {
  const std::vector<Allocation>& rows = trace.allocations;
  if (plan.offsets.size() != rows.size()) {
    return Error{"the plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                 std::to_string(rows.size()) + " trace rows"};
  }
  if (!options.row_keys.empty() && options.row_keys.size() != rows.size()) {
    return Error{"row_keys has " + std::to_string(options.row_keys.size()) + " keys for " +
                 std::to_string(rows.size()) + " trace rows"};
  }
  PlannedPass out;
  const size_t visit_count =
      options.order == SlotOrder::kVisit ? options.visit_nodes.size() : size_t{0};
  auto visit_of = [&](size_t row) {
    const int64_t v = rows[row].provenance.node;
    return v >= 0 && static_cast<size_t>(v) < visit_count ? static_cast<size_t>(v) : size_t{0};
  };
  out.rows.resize(rows.size());
  std::iota(out.rows.begin(), out.rows.end(), uint32_t{0});
  // Stable: rows already in allocation order (trace_of's, the extension's) keep it within a tick or
  // a visit.
  if (options.order == SlotOrder::kAllocation) {
    std::stable_sort(out.rows.begin(), out.rows.end(),
                     [&](uint32_t a, uint32_t b) { return rows[a].begin < rows[b].begin; });
  } else if (options.order == SlotOrder::kVisit) {
    std::stable_sort(out.rows.begin(), out.rows.end(),
                     [&](uint32_t a, uint32_t b) { return visit_of(a) < visit_of(b); });
  }
  out.visits.resize(visit_count);
  for (size_t v = 0; v < visit_count; ++v) out.visits[v].node = options.visit_nodes[v];
  out.slots.reserve(rows.size());
  for (const uint32_t row : out.rows) {
    const Allocation& a = rows[row];
    if (visit_count != 0) {
      replay::Visit& visit = out.visits[visit_of(row)];
      if (visit.slot_count == 0) visit.first_slot = static_cast<uint32_t>(out.slots.size());
      ++visit.slot_count;
    }
    const uint64_t key = !options.row_keys.empty()       ? options.row_keys[row]
                         : options.key == SlotKey::kSize ? a.size
                                                         : a.provenance.callsite;
    // A zero-byte row has no bytes in the slab: it is unplanned like an escaping one (and gets
    // places with them, as the shim's mode:replay always gave a trace file's zero-byte rows). The
    // shim never records one (its min_size is at least 16), so for its passes this is !escapes.
    out.slots.push_back({key, a.size, plan.offsets[row], a.size > 0 && !a.escapes});
  }
  out.slab_bytes = plan.slab_bytes;
  if (options.escaping_limit != 0) {
    out.slab_bytes =
        replay::place_escaping(out.slots.data(), static_cast<uint32_t>(out.slots.size()),
                               plan.slab_bytes, options.escaping_limit);
    out.escaping_bytes = out.slab_bytes - plan.slab_bytes;
  }
  out.plan = std::move(plan);
  return out;
}

}  // namespace memoplan::plan_stage
