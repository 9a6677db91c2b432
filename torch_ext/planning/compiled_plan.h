// A profiled pass of a rewritten TorchScript graph, planned and laid out for replay: the pass is a
// sequence of visits (one per executed memoplan::AllocateTensor node, in order; visit 0 is the
// stretch before the first one), each with the planned slots of the allocations made during it, in
// allocation order. No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"
#include "memoplan/replay/matcher.h"
#include "memoplan/torch/plan.h"  // PlanDetail
#include "sharing.h"

namespace memoplan::torch_ext {

struct CompiledPlan {
  std::string key;  // input shapes, dtypes, thread count, grad mode (see docs/TORCH_EXT.md)
  // The shape family of its key (empty: none): its threads replay it in the family's one arena.
  std::string family;
  bool predicted = false;  // made from the family's formulas, not profiled
  bool ordered = false;    // planned with the family's learned placement order too
  // The runtime's slot table (replay::Slot; the key is the size: the extension matches a request
  // by size within its visit) and the visits that cut it.
  std::vector<replay::Visit> visits;
  std::vector<replay::Slot> tensors;  // grouped by visit
  uint64_t slab_bytes = 0;
  uint64_t lower_bound_bytes = 0;         // with the sharing the plan took (memory "min")
  uint64_t offset_lower_bound_bytes = 0;  // without any
  uint64_t shared_tensors = 0;            // planned over live tensors they share bytes with
  uint64_t shared_bytes = 0;              // their bytes
  uint64_t planned_bytes = 0;             // every planned tensor's bytes
  // What a pass checks before it lays a tensor over live ones (sharing.h), by visit: visit v's
  // are share_checks[check_begin[v] .. check_begin[v + 1]); both empty when nothing shares.
  std::vector<ShareCheck> share_checks;
  std::vector<uint32_t> check_begin;
  uint64_t planned_tensors = 0;
  uint64_t escaping_tensors = 0;
  std::string strategy;
  double planning_ms = 0;
  // The profiled pass and its plan as the planner made them (plan_detail(): heap maps; null for a
  // plan predicted from a shape family). Shared:
  // copies of a plan and the threads replaying it never copy the rows.
  std::shared_ptr<const PlanDetail> detail;
};

// Plans `trace` (rows in allocation order; provenance.node is the visit index each row was made
// in) with `strategy` and lays it out by visit through the plan stage (plan_stage::compile, shared
// with the shim), then adds what only the extension has: the sharing checks and the counts.
// visit_nodes[v] is the graph node of visit v.
// `row_order`: a placement order learned on another shape of the same family (the planner's
// PlanOptions::row_order), or empty.
// `claims` (memory "min"): what the pass's ShareInputs nodes recorded, already resolved into the
// trace's alias_of / slice_of (resolve_claims); the planner takes them (PlanOptions::aliases).
Result<CompiledPlan> compile_plan(const Trace& trace, const std::vector<int64_t>& visit_nodes,
                                  const std::string& strategy,
                                  const std::vector<size_t>& row_order = {},
                                  const std::vector<ShareClaim>* claims = nullptr);

}  // namespace memoplan::torch_ext
