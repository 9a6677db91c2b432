#include "compiled_plan.h"

#include <utility>

#include "memoplan/plan_stage/planned_pass.h"

namespace memoplan::torch_ext {
namespace {

constexpr double kBestSeconds = 0.05;  // as long as a shape family's order search

}  // namespace

Result<CompiledPlan> compile_plan(const Trace& trace, const std::vector<int64_t>& visit_nodes,
                                  const std::string& strategy, const std::vector<size_t>& row_order,
                                  const std::vector<ShareClaim>* claims) {
  // The extension's table: keyed by size, grouped by visit, escaping tensors left unplanned (a
  // graph's outputs leave the pass; nothing repeats them into the slab).
  plan_stage::CompileOptions options;
  options.planner.strategy = strategy;
  options.planner.row_order = row_order;
  options.planner.aliases = claims != nullptr;
  options.key = plan_stage::SlotKey::kSize;
  options.order = plan_stage::SlotOrder::kVisit;
  options.visit_nodes = visit_nodes;
  Result<plan_stage::PlannedPass> pass = plan_stage::compile(trace, options);
  if (!pass) return Error{pass.error()};
  // Memory min exists for the smallest slab: where a fast strategy left it above its lower bound
  // (greedy_by_size's packing: LibTorch 2.6's frozen mnasnet1_0 at 128x128 planned 1.25x the bound,
  // one sliced convolution's parts changing the order), the planner's bounded best-of search
  // (kBestSeconds) may reach it; the smaller plan is kept.
  if (claims && row_order.empty() && strategy != "best" && strategy != "exact" &&
      strategy != "mip" && pass->slab_bytes > pass->plan.lower_bound_bytes) {
    options.planner.strategy = "best";
    options.planner.strategy_options.time_limit_s = kBestSeconds;
    Result<plan_stage::PlannedPass> best = plan_stage::compile(trace, options);
    if (best && best->slab_bytes < pass->slab_bytes) pass = std::move(best);
  }
  const Plan& plan = pass->plan;
  CompiledPlan out;
  out.slab_bytes = pass->slab_bytes;
  out.lower_bound_bytes = plan.lower_bound_bytes;
  out.offset_lower_bound_bytes = plan.offset_lower_bound_bytes;
  std::vector<bool> shares;
  if (claims) {
    out.share_checks = share_checks(trace, *claims, plan, shares);
    if (!out.share_checks.empty()) {
      out.check_begin.assign(visit_nodes.size() + 1, 0);
      for (const ShareCheck& c : out.share_checks) {
        if (c.visit < visit_nodes.size()) ++out.check_begin[c.visit + 1];
      }
      for (size_t v = 0; v < visit_nodes.size(); ++v) out.check_begin[v + 1] += out.check_begin[v];
    }
  }
  out.strategy = plan.strategy;
  out.ordered = !row_order.empty();
  out.planning_ms = plan.planning_ms;
  // The sharing the plan took, on the slots of the rows laid over live blocks.
  for (size_t i = 0; i < pass->slots.size(); ++i) {
    replay::Slot& slot = pass->slots[i];
    (slot.planned ? out.planned_tensors : out.escaping_tensors) += 1;
    if (slot.planned) out.planned_bytes += slot.size;
    if (!shares.empty() && shares[pass->rows[i]]) {
      slot.shares = true;
      ++out.shared_tensors;
      out.shared_bytes += slot.size;
    }
  }
  out.visits = std::move(pass->visits);
  out.tensors = std::move(pass->slots);
  out.detail = std::make_shared<const PlanDetail>(PlanDetail{trace, std::move(pass->plan)});
  return out;
}

}  // namespace memoplan::torch_ext
