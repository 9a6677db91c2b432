// Planning a call that is not a TorchScript graph: an AOTInductor package's run() (memoplan run
// MODEL.pt2), or any function of tensors. The whole call is one pass: its allocations through
// c10's CPU allocator are profiled once per input key (after warm-up) and replayed from the
// calling thread's slab by order and size, as a planned module's are; a request the plan does not
// have, or whose bytes are still taken, goes to the allocator behind, counted (plan_stats,
// last_pass). Shape families apply. Kernels stock and memory offset only: the tuned kernels,
// memory min and budgets rewrite a graph. No torch headers here.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {

class PlannedCall {
 public:
  // Throws std::invalid_argument for options only a graph can have (tuned, min, a budget).
  explicit PlannedCall(const PlanOptions& options = {});
  ~PlannedCall();  // its plans are forgotten
  PlannedCall(const PlannedCall&) = delete;
  PlannedCall& operator=(const PlannedCall&) = delete;

  // One pass: `call`, keyed by `inputs` (what the call's allocations depend on: its tensors and
  // scalars); returns what `call` returned. The result is released only after the pass ends, so
  // it escapes the pass as an output (in plan() too: one dropped inside the profiled pass would
  // be planned as a temporary). An exception from `call` ends the pass unplanned and is rethrown.
  c10::IValue run(const std::vector<c10::IValue>& inputs, const std::function<c10::IValue()>& call);
  // plan()'s counterpart: passes of `call` (warm-up, then the profiled one) until `inputs`' key
  // has a plan; returns its summary. Throws std::runtime_error when none was made.
  PlanSummary plan(const std::vector<c10::IValue>& inputs,
                   const std::function<c10::IValue()>& call);

  // Its slabs (slab_bytes, plan_slab_bytes); the weights of a call are not known here: 0.
  ModuleMemory memory() const;

  int64_t id() const { return id_; }

 private:
  int64_t id_ = -1;
  int warmup_passes_ = 0;
};

}  // namespace memoplan::torch_ext
