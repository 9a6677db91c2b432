// The coverage each module's latest plan() measured, kept for Python (coverage.h):
// torch.ops.memoplan.coverage(module).
#include <ATen/core/Dict.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>
#include <unordered_map>

#include "budget_api.h"  // module_id
#include "planning/coverage.h"
#include "planning/op_descriptor.h"

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

void forget_coverage(int64_t id) {
  std::lock_guard<std::mutex> lock(coverage_mutex);
  coverages().erase(id);
}

namespace {

// Python: torch.ops.memoplan.coverage(module) -> {"flops", "tuned_flops",
// "tuned_flops_fraction", "left: OP (REASON)": FLOPs}; empty before a tuned plan() measured it.
struct CoverageOp {
  static constexpr const char* kName = "memoplan::coverage";
  static constexpr const char* kReturns = "Dict(str, float)";
  c10::IValue module;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &CoverageOp::module));
  }
};

c10::Dict<std::string, double> coverage_op(CoverageOp op) {
  const int64_t id = module_id(module_argument(op.module, "memoplan.coverage"));
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
  return out;
}

torch::jit::RegisterOperators coverage_operators({
    op::make_api_operator<CoverageOp, &coverage_op>(),
});

}  // namespace
}  // namespace memoplan::torch_ext
