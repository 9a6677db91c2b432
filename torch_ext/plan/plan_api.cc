// plan() and the module-level calls of the public API (memoplan/torch/plan.h), and their Python
// operators (torch.ops.memoplan.plan, .stats, .forget_plans).
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <stdexcept>

#include "budget/budget_runtime.h"
#include "budget_api.h"
#include "graph_pass.h"
#include "kernel_library.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/plan.h"
#include "planning/coverage.h"
#include "planning/pass_operators.h"
#include "planning/pass_runtime.h"
#include "planning/planning.h"

namespace memoplan::torch_ext {
namespace {

// Python: torch.ops.load_library("libmemoplan_torch.so"), then
// torch.ops.memoplan.plan(scripted_module, [inputs...]) and torch.ops.memoplan.stats().
void plan_op(torch::jit::Stack& stack);
void stats_op(torch::jit::Stack& stack) { stack.emplace_back(to_string(plan_stats())); }
void forget_plans_op(torch::jit::Stack& stack) {
  const c10::IValue module_value = stack.back();
  torch::jit::drop(stack, 1);
  TORCH_CHECK(module_value.isObject(), "memoplan.forget_plans: expected a TorchScript module, got ",
              module_value.tagKind());
  forget_plans(torch::jit::Module(module_value.toObject()));
}

torch::jit::RegisterOperators memoplan_python_operators({
    torch::jit::Operator(
        "memoplan::plan(Any module, Any[] inputs, str strategy=\"greedy_by_size\", "
        "int warmup_passes=3, bool plan_new_keys=True, str kernels=\"stock\", "
        "str memory=\"offset\", int budget=0) -> Dict(str, int)",
        plan_op, c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::stats() -> str", stats_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::forget_plans(Any module) -> ()", forget_plans_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    // torch.ops.memoplan.kernel_report(): the measured choice of every tuned shape.
    torch::jit::Operator(
        "memoplan::kernel_report() -> str",
        [](torch::jit::Stack& stack) { stack.emplace_back(kernel_report()); },
        c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace

PlanSummary plan(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                 const PlanOptions& options) {
  if (!module.find_method("forward"))
    throw std::runtime_error("memoplan: the module has no forward");
  if (std::string why = load_kernels(options.kernels); !why.empty()) {
    throw std::runtime_error(why);
  }
  if (options.budget_bytes > 0 && options.kernels != Kernels::kStock) {
    throw std::runtime_error(
        "memoplan: a memory budget needs kernels \"stock\" (the tuned "
        "kernels keep packed copies of the weights resident)");
  }
  const int64_t id = rewrite_forward(module, options);
  if (options.budget_bytes > 0 && !budget::budgeted(id)) {
    throw std::runtime_error(
        "memoplan: the module was planned without a memory budget; only "
        "its first plan() decides (load it anew to budget it)");
  }
  // The graph sees every argument, defaults filled in (TransformerEncoder's mask=None, ...): so
  // must the key.
  std::vector<c10::IValue> arguments = inputs;
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  for (size_t i = inputs.size() + 1; i < schema.arguments().size(); ++i) {
    const c10::optional<c10::IValue>& fallback = schema.arguments()[i].default_value();
    if (!fallback) break;
    arguments.push_back(*fallback);
  }
  const std::string key = pass_key(arguments.data(), arguments.size());
  runtime_pass::request_key(id, key);
  PlanSummary summary;
  // Warm-up passes, then the profiled one; a few more in case another thread profiles this key.
  bool planned = runtime_pass::has_plan(id, key, &summary);
  for (int pass = 0; !planned && pass < options.warmup_passes + 8; ++pass) {
    module.forward(inputs);
    planned = runtime_pass::has_plan(id, key, &summary);
  }
  if (planned) {
    // The tuned kernels' coverage: one more pass, on the plan, watched (coverage.h).
    if (options.kernels != Kernels::kStock) {
      summary.coverage = measure_coverage(
          [&] { module.forward(inputs); },
          *torch::jit::toGraphFunction(module.get_method("forward").function()).graph());
      remember_coverage(id, summary.coverage);
    }
    drop_optimized_graph_cache(
        torch::jit::toGraphFunction(module.get_method("forward").function()));
    release_free_memory();
    if (budget::budgeted(id)) {
      budget::arm(id, summary.slab_bytes);
      if (options.budget_bytes > 0 && options.budget_bytes != budget::summary(id).budget_bytes) {
        budget::replan(id, options.budget_bytes);
      }
    }
    return summary;
  }
  throw std::runtime_error("memoplan: no plan was made for the inputs " + key +
                           " (planning failed; see the warning above)");
}

int64_t module_id(const torch::jit::Module& module) {
  const auto forward = module.find_method("forward");  // c10::optional<Method>
  return forward ? rewritten_id(*torch::jit::toGraphFunction(forward->function()).graph()) : -1;
}

void forget_plans(const torch::jit::Module& module) {
  if (const int64_t id = module_id(module); id >= 0) runtime_pass::forget_plans(id);
}

std::optional<PlanDetail> plan_detail(const torch::jit::Module& module, const std::string& key) {
  const int64_t id = module_id(module);
  if (id < 0) return std::nullopt;
  std::shared_ptr<const PlanDetail> detail = runtime_pass::plan_detail(id, key);
  if (!detail) return std::nullopt;
  return *detail;
}

namespace {

void plan_op(torch::jit::Stack& stack) {
  const int64_t budget = stack.back().toInt();
  const std::string memory = stack[stack.size() - 2].toStringRef();
  const std::string kernels = stack[stack.size() - 3].toStringRef();
  const bool plan_new_keys = stack[stack.size() - 4].toBool();
  const int64_t warmup = stack[stack.size() - 5].toInt();
  const std::string strategy = stack[stack.size() - 6].toStringRef();
  const c10::IValue inputs = stack[stack.size() - 7];
  const c10::IValue module_value = stack[stack.size() - 8];
  torch::jit::drop(stack, 8);
  TORCH_CHECK(budget >= 0, "memoplan.plan: budget must be >= 0, got ", budget);
  TORCH_CHECK(module_value.isObject(), "memoplan.plan: expected a TorchScript module, got ",
              module_value.tagKind());
  torch::jit::Module module(module_value.toObject());
  PlanOptions options;
  options.strategy = strategy;
  options.warmup_passes = static_cast<int>(warmup);
  options.plan_new_keys = plan_new_keys;
  const std::optional<Kernels> kernels_named = parse_kernels(kernels);
  const std::optional<Memory> memory_named = parse_memory(memory);
  TORCH_CHECK(kernels_named, "memoplan.plan: unknown kernels '", kernels, "' (stock or tuned)");
  TORCH_CHECK(memory_named, "memoplan.plan: unknown memory '", memory, "' (offset or min)");
  options.kernels = *kernels_named;
  options.memory = *memory_named;
  options.budget_bytes = static_cast<uint64_t>(budget);
  const c10::ArrayRef<c10::IValue> list = inputs.toListRef();
  PlanSummary summary;
  try {
    summary = plan(module, std::vector<c10::IValue>(list.begin(), list.end()), options);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  c10::Dict<std::string, int64_t> out;
  out.insert("slab_bytes", static_cast<int64_t>(summary.slab_bytes));
  out.insert("lower_bound_bytes", static_cast<int64_t>(summary.lower_bound_bytes));
  out.insert("offset_lower_bound_bytes", static_cast<int64_t>(summary.offset_lower_bound_bytes));
  out.insert("shared_tensors", static_cast<int64_t>(summary.shared_tensors));
  out.insert("planned_tensors", static_cast<int64_t>(summary.planned_tensors));
  out.insert("escaping_tensors", static_cast<int64_t>(summary.escaping_tensors));
  out.insert("visits", static_cast<int64_t>(summary.visits));
  out.insert("planned_bytes", static_cast<int64_t>(summary.planned_bytes));
  out.insert("coalesced_bytes", static_cast<int64_t>(summary.coalesced_bytes));
  if (summary.coverage.measured) {
    out.insert("flops", static_cast<int64_t>(summary.coverage.flops));
    out.insert("tuned_flops", static_cast<int64_t>(summary.coverage.tuned_flops));
  }
  if (const std::optional<BudgetSummary> budget = budget_summary(module)) {
    for (const auto& entry : budget_dict(*budget)) out.insert(entry.key(), entry.value());
  }
  stack.emplace_back(out);
}

}  // namespace
}  // namespace memoplan::torch_ext
