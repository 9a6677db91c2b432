// What the plan/ files share: the module id of a rewritten module, the module a Python operator
// was given, and a budget plan as Python sees it. The memory budget itself lives in torch_ext/budget/ (docs/BUDGET.md).
#pragma once

#include <ATen/core/Dict.h>

#include <cstdint>
#include <string>

#include "memoplan/torch/budget.h"

namespace torch::jit {
struct Module;
}

namespace memoplan::torch_ext {

// The id graph_pass.cc gave `module`'s rewritten forward; -1 when it was never rewritten.
int64_t module_id(const torch::jit::Module& module);
// The TorchScript module a Python operator was given (`value`); otherwise fails, naming the
// operator (`op`, e.g. "memoplan.plan").
torch::jit::Module module_argument(const c10::IValue& value, const char* op);

// BudgetSummary's fields for Python (torch.ops.memoplan.plan's and set_budget's dicts).
c10::Dict<std::string, int64_t> budget_dict(const BudgetSummary& summary);

}  // namespace memoplan::torch_ext
