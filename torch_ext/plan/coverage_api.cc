// The coverage each module's latest plan() measured, kept for Python (coverage.h):
// torch.ops.memoplan.coverage(module).
#include <ATen/core/Dict.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>
#include <unordered_map>

#include "budget_api.h"  // module_id
#include "planning/coverage.h"

namespace memoplan::torch_ext {
namespace {

// The coverage each module's latest plan() measured, for torch.ops.memoplan.coverage.
std::mutex coverage_mutex;
std::unordered_map<int64_t, Coverage>& coverages() {
  static auto* table = new std::unordered_map<int64_t, Coverage>();  // never destroyed
  return *table;
}
}  // namespace

void remember_coverage(int64_t id, const Coverage& coverage) {
  std::lock_guard<std::mutex> lock(coverage_mutex);
  coverages()[id] = coverage;
}

namespace {

// Python: torch.ops.memoplan.coverage(module) -> {"flops", "tuned_flops",
// "tuned_flops_fraction", "left: OP (REASON)": FLOPs}; empty before a tuned plan() measured it.
void coverage_op(torch::jit::Stack& stack) {
  const c10::IValue module_value = stack.back();
  torch::jit::drop(stack, 1);
  TORCH_CHECK(module_value.isObject(), "memoplan.coverage: expected a TorchScript module, got ",
              module_value.tagKind());
  const int64_t id = module_id(torch::jit::Module(module_value.toObject()));
  c10::Dict<std::string, double> out;
  std::lock_guard<std::mutex> lock(coverage_mutex);
  if (const auto it = coverages().find(id); it != coverages().end()) {
    const Coverage& c = it->second;
    out.insert("flops", c.flops);
    out.insert("tuned_flops", c.tuned_flops);
    out.insert("tuned_flops_fraction", c.tuned_flops_fraction());
    for (const Coverage::Left& l : c.left) {
      out.insert_or_assign("left: " + l.op + " (" + l.reason + ")", l.flops);
    }
  }
  stack.emplace_back(out);
}

torch::jit::RegisterOperators coverage_operators({
    torch::jit::Operator("memoplan::coverage(Any module) -> Dict(str, float)", coverage_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace
}  // namespace memoplan::torch_ext
