// A module's memory, planned or not (module_memory), and forgetting a module that will not run
// again (forget_module): memoplan/torch/plan.h. Each part of the extension that keeps state per
// module is asked here.
#include <c10/core/StorageImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "budget/budget_runtime.h"
#include "budget/module_weights.h"
#include "budget/released_weights.h"
#include "budget_api.h"  // module_id
#include "memoplan/process_status.h"
#include "memoplan/torch/plan.h"
#include "planning/attribute_constants.h"
#include "planning/coverage.h"
#include "planning/op_descriptor.h"
#include "planning/pass_runtime.h"
#include "planning/planning.h"

namespace memoplan::torch_ext {
ModuleMemory module_memory(const torch::jit::Module& module) {
  ModuleMemory memory;
  const torch::jit::Graph* graph = nullptr;
  if (const auto forward = module.find_method("forward")) {
    if (auto* function = torch::jit::tryToGraphFunction(forward->function())) {
      graph = function->graph().get();
    }
  }
  for (const c10::StorageImpl* storage : budget::module_weights(module, graph)) {
    memory.weight_bytes += storage->nbytes();
    memory.weight_resident_bytes += memoplan::resident_bytes(storage->data(), storage->nbytes());
  }
  if (const int64_t id = module_id(module); id >= 0) {
    memory.packed_weight_bytes = packed_weight_bytes(id);
    const runtime_pass::SlabBytes slabs = runtime_pass::slab_bytes(id);
    memory.slab_bytes = slabs.held;
    memory.plan_slab_bytes = slabs.largest_plan;
  }
  return memory;
}

void forget_module(const torch::jit::Module& module) {
  const int64_t id = module_id(module);
  if (id < 0) return;
  runtime_pass::forget_module(id);
  forget_packed_weights(id);
  forget_coverage(id);
  budget::forget(id);
  budget::forget_released(id);
  forget_folded(id);  // the guard of its `training` flags stays (settings_guard.cc)
}

namespace {

struct ForgetModuleOp {
  static constexpr const char* kName = "memoplan::forget_module";
  static constexpr const char* kReturns = "()";
  c10::IValue module;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &ForgetModuleOp::module));
  }
};
void forget_module_op(ForgetModuleOp op) {
  forget_module(module_argument(op.module, "memoplan.forget_module"));
}

struct ModuleMemoryOp {
  static constexpr const char* kName = "memoplan::module_memory";
  static constexpr const char* kReturns = "Dict(str, int)";
  c10::IValue module;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &ModuleMemoryOp::module));
  }
};
c10::Dict<std::string, int64_t> module_memory_op(ModuleMemoryOp op) {
  const ModuleMemory m = module_memory(module_argument(op.module, "memoplan.module_memory"));
  c10::Dict<std::string, int64_t> out;
  out.insert("weight_bytes", static_cast<int64_t>(m.weight_bytes));
  out.insert("weight_resident_bytes", static_cast<int64_t>(m.weight_resident_bytes));
  out.insert("packed_weight_bytes", static_cast<int64_t>(m.packed_weight_bytes));
  out.insert("slab_bytes", static_cast<int64_t>(m.slab_bytes));
  out.insert("plan_slab_bytes", static_cast<int64_t>(m.plan_slab_bytes));
  out.insert("resident_bytes", static_cast<int64_t>(m.resident_bytes()));
  return out;
}

torch::jit::RegisterOperators module_memory_operators({
    op::make_api_operator<ForgetModuleOp, &forget_module_op>(),
    op::make_api_operator<ModuleMemoryOp, &module_memory_op>(),
});

}  // namespace
}  // namespace memoplan::torch_ext
