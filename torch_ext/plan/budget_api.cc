// The public memory-budget calls of memoplan/torch/budget.h on a planned module, and their Python
// operator (torch.ops.memoplan.set_budget): each finds the module's id and hands over to
// torch_ext/budget/.
#include "budget_api.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <stdexcept>

#include "budget/budget_runtime.h"
#include "planning/op_descriptor.h"

namespace memoplan::torch_ext {

torch::jit::Module module_argument(const c10::IValue& value, const char* op) {
  TORCH_CHECK(value.isObject(), op, ": expected a TorchScript module, got ", value.tagKind());
  return torch::jit::Module(value.toObject());
}

c10::Dict<std::string, int64_t> budget_dict(const BudgetSummary& summary) {
  c10::Dict<std::string, int64_t> out;
  out.insert("budget_bytes", static_cast<int64_t>(summary.budget_bytes));
  out.insert("weights_bytes", static_cast<int64_t>(summary.weights_bytes));
  out.insert("pinned_bytes", static_cast<int64_t>(summary.pinned_bytes));
  out.insert("streamed_bytes", static_cast<int64_t>(summary.streamed_bytes));
  out.insert("planned_peak_bytes", static_cast<int64_t>(summary.planned_peak_bytes));
  out.insert("work_bytes", static_cast<int64_t>(summary.work_bytes));
  out.insert("smallest_budget_bytes", static_cast<int64_t>(summary.smallest_budget_bytes));
  out.insert("sliced_groups", static_cast<int64_t>(summary.sliced_groups));
  return out;
}

namespace {

// The module id of a budgeted module; throws otherwise.
int64_t budgeted_id(const torch::jit::Module& module) {
  const int64_t id = module_id(module);
  if (id < 0 || !budget::budgeted(id)) {
    throw std::runtime_error("memoplan: the module has no memory budget (plan() it with one)");
  }
  return id;
}

struct SetBudgetOp {
  static constexpr const char* kName = "memoplan::set_budget";
  static constexpr const char* kReturns = "Dict(str, int)";
  c10::IValue module;
  int64_t budget = 0;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &SetBudgetOp::module),
                           op::field("budget", &SetBudgetOp::budget));
  }
};

c10::Dict<std::string, int64_t> set_budget_op(SetBudgetOp op) {
  const int64_t budget = op.budget;
  const torch::jit::Module module = module_argument(op.module, "memoplan.set_budget");
  TORCH_CHECK(budget > 0, "memoplan.set_budget: budget must be > 0, got ", budget);
  try {
    return budget_dict(set_budget(module, budget));
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

torch::jit::RegisterOperators budget_operators({
    op::make_api_operator<SetBudgetOp, &set_budget_op>(),
});

}  // namespace

BudgetSummary set_budget(const torch::jit::Module& module, uint64_t budget_bytes) {
  return budget::replan(budgeted_id(module), budget_bytes);
}

std::optional<BudgetSummary> budget_summary(const torch::jit::Module& module) {
  const int64_t id = module_id(module);
  if (id < 0 || !budget::budgeted(id)) return std::nullopt;
  return budget::summary(id);
}

void sample_resident_weights(const torch::jit::Module& module, bool on) {
  budget::set_sampling(budgeted_id(module), on);
}

uint64_t resident_weight_peak(const torch::jit::Module& module, bool reset) {
  return budget::resident_peak(budgeted_id(module), reset);
}

void drop_weight_page_cache(const torch::jit::Module& module) {
  budget::drop_page_cache(budgeted_id(module));
}

}  // namespace memoplan::torch_ext
