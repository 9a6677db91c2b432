// plan() and the module-level calls of the public API (memoplan/torch/plan.h), and their Python
// operators (torch.ops.memoplan.plan, .stats, .forget_plans).
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <stdexcept>

#include "budget/budget_runtime.h"
#include "budget/released_weights.h"
#include "budget_api.h"
#include "graph_pass.h"
#include "kernel_library.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/plan.h"
#include "planning/coverage.h"
#include "planning/flat_executor.h"
#include "planning/op_descriptor.h"
#include "planning/pass_operators.h"
#include "planning/pass_runtime.h"
#include "planning/planning.h"

namespace memoplan::torch_ext {
namespace {

// Python: torch.ops.load_library("libmemoplan_torch.so"), then
// torch.ops.memoplan.plan(scripted_module, [inputs...]) and torch.ops.memoplan.stats().
struct PlanOp {
  static constexpr const char* kName = "memoplan::plan";
  static constexpr const char* kReturns = "Dict(str, int)";
  c10::IValue module, inputs;
  std::string strategy;
  int64_t warmup_passes = 3;
  bool plan_new_keys = true;
  std::string kernels, memory;
  int64_t budget = 0;
  bool release_weights = false;
  static constexpr auto fields() {
    using O = PlanOp;
    return std::make_tuple(op::field("module", &O::module),
                           op::field("inputs", &O::inputs, "Any[]"),
                           op::field("strategy", &O::strategy, nullptr, "\"greedy_by_size\""),
                           op::field("warmup_passes", &O::warmup_passes, nullptr, "3"),
                           op::field("plan_new_keys", &O::plan_new_keys, nullptr, "True"),
                           op::field("kernels", &O::kernels, nullptr, "\"stock\""),
                           op::field("memory", &O::memory, nullptr, "\"offset\""),
                           op::field("budget", &O::budget, nullptr, "0"),
                           op::field("release_weights", &O::release_weights, nullptr, "False"));
  }
};
c10::Dict<std::string, int64_t> plan_op(PlanOp op);

struct StatsOp {
  static constexpr const char* kName = "memoplan::stats";
  static constexpr const char* kReturns = "str";
  static constexpr auto fields() { return std::tuple<>(); }
};
std::string stats_op(StatsOp) { return to_string(plan_stats()); }

struct ForgetPlansOp {
  static constexpr const char* kName = "memoplan::forget_plans";
  static constexpr const char* kReturns = "()";
  c10::IValue module;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &ForgetPlansOp::module));
  }
};
// torch.ops.memoplan.kernel_report(): the measured choice of every tuned shape (empty until
// libmemoplan_tuned.so is loaded).
struct KernelReportOp {
  static constexpr const char* kName = "memoplan::kernel_report";
  static constexpr const char* kReturns = "str";
  static constexpr auto fields() { return std::tuple<>(); }
};
std::string kernel_report_op(KernelReportOp) { return kernel_report(); }

void forget_plans_op(ForgetPlansOp op) {
  forget_plans(module_argument(op.module, "memoplan.forget_plans"));
}

torch::jit::RegisterOperators memoplan_python_operators({
    op::make_api_operator<PlanOp, &plan_op>(),
    op::make_api_operator<StatsOp, &stats_op>(),
    op::make_api_operator<ForgetPlansOp, &forget_plans_op>(),
    op::make_api_operator<KernelReportOp, &kernel_report_op>(),
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
  PlanSummary summary = runtime_pass::run_until_planned(id, key, options.warmup_passes, [&] {
    begin_packed_census(
        id);  // a pass's new packings replace its sites' older ones (weight_cache.h)
    module.forward(inputs);
  });
  // The tuned kernels' coverage: one more pass, on the plan, watched (coverage.h).
  // Its census keeps only the packed weights that pass used (weight_cache.h).
  if (options.kernels != Kernels::kStock) {
    begin_packed_census(id);
    summary.coverage = measure_coverage(
        [&] { module.forward(inputs); },
        *torch::jit::toGraphFunction(module.get_method("forward").function()).graph());
    remember_coverage(id, summary.coverage);
    summary.packed_weight_bytes = end_packed_census(id);
  }
  // From here its calls run the flat program (after the passes above, which the interpreter ran).
  summary.executor = flat::build(
      id, *torch::jit::toGraphFunction(module.get_method("forward").function()).graph());
  drop_optimized_graph_cache(torch::jit::toGraphFunction(module.get_method("forward").function()));
  // What a planned pass read of the plain weights is resident now; the rest goes (packed by now:
  // released_weights.h), and would fault back in only for a path that reads it.
  const budget::ReleasedWeights released = budget::released_weights(id);
  summary.released_weight_bytes = released.mapped_bytes;
  summary.released_weight_resident_bytes = released.resident_bytes;
  budget::drop_released(id);
  // The coverage pass replayed on this thread: its slab's pages go back until this thread runs
  // the module again (a server plans on one thread and serves on others).
  runtime_pass::discard_thread_slabs(id);
  release_free_memory();
  release_openmp_threads();
  if (budget::budgeted(id)) {
    budget::arm(id, summary.slab_bytes);
    if (options.budget_bytes > 0 && options.budget_bytes != budget::summary(id).budget_bytes) {
      budget::replan(id, options.budget_bytes);
    }
  }
  return summary;
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

c10::Dict<std::string, int64_t> plan_op(PlanOp op) {
  const int64_t budget = op.budget;
  const std::string& memory = op.memory;
  const std::string& kernels = op.kernels;
  TORCH_CHECK(budget >= 0, "memoplan.plan: budget must be >= 0, got ", budget);
  torch::jit::Module module = module_argument(op.module, "memoplan.plan");
  PlanOptions options;
  options.strategy = op.strategy;
  options.warmup_passes = static_cast<int>(op.warmup_passes);
  options.plan_new_keys = op.plan_new_keys;
  const std::optional<Kernels> kernels_named = parse_kernels(kernels);
  const std::optional<Memory> memory_named = parse_memory(memory);
  TORCH_CHECK(kernels_named, "memoplan.plan: unknown kernels '", kernels, "' (stock or tuned)");
  TORCH_CHECK(memory_named, "memoplan.plan: unknown memory '", memory, "' (offset or min)");
  options.kernels = *kernels_named;
  options.memory = *memory_named;
  options.budget_bytes = static_cast<uint64_t>(budget);
  options.release_weights = op.release_weights;
  const c10::ArrayRef<c10::IValue> list = op.inputs.toListRef();
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
  out.insert("packed_weight_bytes", static_cast<int64_t>(summary.packed_weight_bytes));
  out.insert("released_weight_bytes", static_cast<int64_t>(summary.released_weight_bytes));
  out.insert("released_weight_resident_bytes",
             static_cast<int64_t>(summary.released_weight_resident_bytes));
  out.insert("coalesced_bytes", static_cast<int64_t>(summary.coalesced_bytes));
  if (summary.coverage.measured) {
    out.insert("flops", static_cast<int64_t>(summary.coverage.flops));
    out.insert("tuned_flops", static_cast<int64_t>(summary.coverage.tuned_flops));
  }
  if (const std::optional<BudgetSummary> budget = budget_summary(module)) {
    for (const auto& entry : budget_dict(*budget)) out.insert(entry.key(), entry.value());
  }
  return out;
}

}  // namespace
}  // namespace memoplan::torch_ext
