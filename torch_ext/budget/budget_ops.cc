// The budget's graph operators: memoplan::BudgetStep (a step of the budget plan begins: drop what
// the steps before were the last to read, ask the loader for what is due) and
// memoplan::budget_linear (aten::linear, computed a slice of its weight's rows at a time when the
// budget plan slices it: each slice's output columns written in place, its pages dropped after).
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mm.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "budget_operators.h"
#include "budget_runtime.h"

namespace memoplan::torch_ext::budget {
namespace {

torch::jit::Operation budget_step_op(const torch::jit::Node* node) {
  const int64_t module = node->i(kModuleAttribute);
  const int64_t step = node->i(kStepAttribute);
  return [module, step](torch::jit::Stack&) { budget::step(module, step); };
}

// The slices make exactly the tensor aten::linear makes (one [rows, out] output: addmm for a 2-D
// input, or a contiguous 3-D one with a bias; mm for a 2-D one without), so the memory plan of
// the pass is the same for any slicing. Only a single row is sliced: OpenBLAS computes it as a
// matrix-vector product, each output a dot product whatever the slice; with more rows its GEMM
// picks kernels by the output width, and sliced results differed from whole ones in the last
// bits (5e-6 at 2 rows, measured). Other inputs run whole (counted: the budget may be passed).
at::Tensor budget_linear(const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias, int64_t module) {
  const bool has_bias = bias && bias->defined();
  const bool fits = weight.dim() == 2 && input.scalar_type() == at::kFloat &&
                    weight.scalar_type() == at::kFloat && weight.is_contiguous() &&
                    (input.dim() == 2 || (input.dim() == 3 && has_bias && input.is_contiguous()));
  const Slicer slicer = budget::slicer(module, weight.data_ptr(), weight.nbytes());
  if (slicer.slices <= 1) return at::linear(input, weight, bias);
  const at::Tensor rows = !fits              ? input
                          : input.dim() == 2 ? input
                                             : input.view({-1, input.size(2)});
  if (!fits || rows.size(0) != 1) {
    slicer.refused();
    return at::linear(input, weight, bias);
  }
  const int64_t out_features = weight.size(0);
  at::Tensor out = at::empty({rows.size(0), out_features}, input.options());
  const int64_t per = out_features / slicer.slices;
  for (int s = 0; s < slicer.slices; ++s) {
    slicer.load(s + 1);  // overlapped with this slice's product
    const at::Tensor w = weight.narrow(0, s * per, per);
    at::Tensor o = out.narrow(1, s * per, per);
    if (has_bias) {
      at::addmm_out(o, bias->narrow(0, s * per, per), rows, w.t());
    } else {
      at::mm_out(o, rows, w.t());
    }
    slicer.done(s);
  }
  return input.dim() == 2 ? out : out.view({input.size(0), input.size(1), out_features});
}

at::Tensor budget_linear_op(BudgetLinearOp op) {
  return budget_linear(op.input, op.weight, op.bias, op.module);
}

torch::jit::RegisterOperators budget_operators({
    // CONSERVATIVE: a side effect to the JIT, never removed or moved.
    torch::jit::Operator("memoplan::BudgetStep(...) -> ()", budget_step_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    op::make_operator<BudgetLinearOp, &budget_linear_op>(),
});

}  // namespace
}  // namespace memoplan::torch_ext::budget
