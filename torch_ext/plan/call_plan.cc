#include "memoplan/torch/call_plan.h"

#include <ATen/core/ivalue.h>

#include <stdexcept>
#include <string>

#include "planning/pass_operators.h"
#include "planning/pass_runtime.h"

namespace memoplan::torch_ext {

PlannedCall::PlannedCall(const PlanOptions& options) : warmup_passes_(options.warmup_passes) {
  if (options.kernels != Kernels::kStock) {
    throw std::invalid_argument(
        "memoplan: a call without a graph runs kernels \"stock\" only (the tuned kernels rewrite "
        "a TorchScript graph)");
  }
  if (options.memory != Memory::kOffset) {
    throw std::invalid_argument(
        "memoplan: a call without a graph plans memory \"offset\" only (memory min rewrites a "
        "TorchScript graph)");
  }
  if (options.budget_bytes > 0) {
    throw std::invalid_argument(
        "memoplan: a memory budget needs a TorchScript graph (it streams weights between ops)");
  }
  id_ = runtime_pass::register_module(options, 0);
}

PlannedCall::~PlannedCall() { runtime_pass::forget_module(id_); }

c10::IValue PlannedCall::run(const std::vector<c10::IValue>& inputs,
                             const std::function<c10::IValue()>& call) {
  const PassInputs in{inputs.data(), inputs.size()};
  runtime_pass::allocate_slab(id_, pass_key(inputs.data(), inputs.size()), {&pass_family_key, &in});
  c10::IValue result;
  try {
    result = call();
  } catch (...) {
    runtime_pass::abandon_pass();
    throw;
  }
  runtime_pass::end_pass(id_);
  return result;
}

PlanSummary PlannedCall::plan(const std::vector<c10::IValue>& inputs,
                              const std::function<c10::IValue()>& call) {
  const std::string key = pass_key(inputs.data(), inputs.size());  // a copy: run() reuses it
  const PlanSummary summary =
      runtime_pass::run_until_planned(id_, key, warmup_passes_, [&] { run(inputs, call); });
  // A thread that planned and does not serve keeps no slab's pages (as plan()).
  runtime_pass::discard_thread_slabs(id_);
  release_free_memory();
  return summary;
}

ModuleMemory PlannedCall::memory() const {
  const runtime_pass::SlabBytes slabs = runtime_pass::slab_bytes(id_);
  ModuleMemory memory;
  memory.slab_bytes = slabs.held;
  memory.plan_slab_bytes = slabs.largest_plan;
  return memory;
}

}  // namespace memoplan::torch_ext
