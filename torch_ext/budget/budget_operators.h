// memoplan::budget_linear, defined once (planning/op_descriptor.h): aten::linear's arguments, then
// the module whose budget plan slices it; and memoplan::BudgetStep's two attributes.
// budget_graph.cc makes them, budget_ops.cc runs them. The budget's convolutions are
// memory_min/sliced_operators.h's (memory min rewrites them). Torch's IR and ATen types; for
// budget/ only.
#pragma once

#include <cstdint>
#include <tuple>

#include "memory_min/sliced_operators.h"
#include "planning/op_descriptor.h"

namespace memoplan::torch_ext::budget {

// memoplan::BudgetStep's attributes: the module whose budget plan it belongs to, and the step.
inline const c10::Symbol kModuleAttribute = c10::Symbol::attr("memoplan_module");
inline const c10::Symbol kStepAttribute = c10::Symbol::attr("memoplan_step");

struct BudgetLinearOp {
  static constexpr const char* kName = "memoplan::budget_linear";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input, weight;
  c10::optional<at::Tensor> bias;
  int64_t module = -1;
  static constexpr auto fields() {
    using O = BudgetLinearOp;
    return std::make_tuple(op::field("input", &O::input), op::field("weight", &O::weight),
                           op::field("bias", &O::bias), op::field("module", &O::module));
  }
};

}  // namespace memoplan::torch_ext::budget
