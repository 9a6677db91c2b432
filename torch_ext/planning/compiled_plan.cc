#include "compiled_plan.h"

#include <algorithm>

#include "memoplan/planner/planner.h"

namespace memoplan::torch_ext {

Result<CompiledPlan> compile_plan(const Trace& trace, const std::vector<int64_t>& visit_nodes,
                                  const std::string& strategy, const std::vector<size_t>& row_order,
                                  const std::vector<ShareClaim>* claims) {
  memoplan::PlanOptions options;  // the planner's, not torch_ext::PlanOptions
  options.strategy = strategy;
  options.row_order = row_order;
  options.aliases = claims != nullptr;
  Result<Plan> plan = plan_trace(trace, options);
  if (!plan) return Error{plan.error()};
  CompiledPlan out;
  out.slab_bytes = plan->slab_bytes;
  out.lower_bound_bytes = plan->lower_bound_bytes;
  out.offset_lower_bound_bytes = plan->offset_lower_bound_bytes;
  std::vector<bool> shares;
  if (claims) {
    out.share_checks = share_checks(trace, *claims, *plan, shares);
    if (!out.share_checks.empty()) {
      out.check_begin.assign(visit_nodes.size() + 1, 0);
      for (const ShareCheck& c : out.share_checks) {
        if (c.visit < visit_nodes.size()) ++out.check_begin[c.visit + 1];
      }
      for (size_t v = 0; v < visit_nodes.size(); ++v) out.check_begin[v + 1] += out.check_begin[v];
    }
  }
  out.strategy = plan->strategy;
  out.ordered = !row_order.empty();
  out.planning_ms = plan->planning_ms;
  out.visits.resize(visit_nodes.size());
  for (size_t v = 0; v < visit_nodes.size(); ++v) out.visits[v].node = visit_nodes[v];
  // Rows by visit, keeping allocation order inside each (rows are in allocation order).
  std::vector<size_t> rows(trace.allocations.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  auto visit_of = [&](size_t row) {
    const int64_t v = trace.allocations[row].provenance.node;
    return v >= 0 && static_cast<size_t>(v) < visit_nodes.size() ? static_cast<size_t>(v) : 0;
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](size_t a, size_t b) { return visit_of(a) < visit_of(b); });
  out.tensors.reserve(rows.size());
  for (size_t row : rows) {
    const Allocation& a = trace.allocations[row];
    replay::Visit& visit = out.visits[visit_of(row)];
    if (visit.slot_count == 0) visit.first_slot = static_cast<uint32_t>(out.tensors.size());
    ++visit.slot_count;
    const bool planned = a.size > 0 && !a.escapes;
    out.tensors.push_back({a.size, a.size, plan->offsets[row], planned});
    (planned ? out.planned_tensors : out.escaping_tensors) += 1;
    if (planned) out.planned_bytes += a.size;
    if (!shares.empty() && shares[row]) {
      out.tensors.back().shares = true;
      ++out.shared_tensors;
      out.shared_bytes += a.size;
    }
  }
  out.detail = std::make_shared<const PlanDetail>(PlanDetail{trace, std::move(*plan)});
  return out;
}

}  // namespace memoplan::torch_ext
