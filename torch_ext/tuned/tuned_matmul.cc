// memoplan::addmm, memoplan::matmul, memoplan::bmm and memoplan::baddbmm: the matrix products other
// than aten::linear. A product whose right operand is a module attribute (a weight, seen in the
// graph as prim::GetAttr, possibly transposed) is a linear in disguise and runs as memoplan::linear
// on the packed weight; a product of two activations (attention's q k^T and p v) runs on memoplan's
// GEMM with the right operand packed on every call, one GEMM per batch entry spread over the
// intra-op threads. Like the linear, each batched shape is measured against aten's op on first
// use (during plan()'s warm-up) and the faster one serves it. A weight product whose only use adds
// a weight vector (x @ w.t() + b, written out by hand or traced from old code) is that linear with
// its bias: memoplan::matmul_add, the bias added in the GEMM's epilogue.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <sstream>
#include <tuple>

#include "memoplan/kernels/gemm.h"
#include "planning/choice_cache.h"
#include "planning/op_descriptor.h"
#include "reports.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

using kernels::Activation;
using kernels::MatrixView;

// batch, M, K, N, A's last stride is 1, B's last stride is 1, an addend, intra-op threads.
using BatchedKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, bool, int>;
struct BatchedChoice {
  tuned::Measured measured;
  kernels::GemmConfig config;
};
ChoiceCache<BatchedKey, BatchedChoice>& batched_shapes() {
  static auto* table = new ChoiceCache<BatchedKey, BatchedChoice>();
  return *table;
}

// a [batch, M, K] x b [batch, K, N] -> [batch, M, N], any strides, float, non-empty.
bool batched_supported(const at::Tensor& a, const at::Tensor& b) {
  for (const at::Tensor* t : {&a, &b}) {
    if (t->scalar_type() != at::kFloat || !t->device().is_cpu() || t->dim() != 3 ||
        t->numel() == 0 || (at::GradMode::is_enabled() && t->requires_grad())) {
      return false;
    }
  }
  return a.size(0) == b.size(0) && a.size(2) == b.size(1);
}

// out = a x b, per batch entry; with `accumulate`, added to what out holds.
void memoplan_bmm_into(const at::Tensor& a, const at::Tensor& b, float* out,
                       const kernels::GemmConfig& config, bool accumulate = false) {
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const MatrixView av{pa + i * a.stride(0), m, k, a.stride(1), a.stride(2)};
      const MatrixView bv{pb + i * b.stride(0), k, n, b.stride(1), b.stride(2)};
      kernels::Epilogue epilogue;
      epilogue.accumulate = accumulate;
      kernels::gemm(av, bv, out + i * m * n, n, epilogue, config);
    }
  };
  if (at::get_num_threads() > 1) {
    at::parallel_for(0, a.size(0), 1, body);
  } else {
    body(0, a.size(0));
  }
}

BatchedChoice measure_batched(const at::Tensor& a, const at::Tensor& b,
                              const c10::optional<at::Tensor>& addend) {
  BatchedChoice choice;
  choice.config =
      tuned::best_config(a.size(1), a.size(2), b.size(2), Activation::kNone, false, false);
  const std::vector<int64_t> sizes{a.size(0), a.size(1), b.size(2)};
  at::Tensor out = at::empty(sizes, a.options());
  choice.measured = tuned::measure_both(
      [&] {
        if (addend) out.copy_(addend->expand(sizes));
        memoplan_bmm_into(a, b, out.data_ptr<float>(), choice.config, addend.has_value());
      },
      [&] { addend ? at::baddbmm(*addend, a, b) : at::bmm(a, b); }, 5);
  return choice;
}

// The batched product (plus `addend`, broadcast to the result, when given: baddbmm with
// beta = alpha = 1) on whichever side measured faster for its shape.
at::Tensor batched(const at::Tensor& a, const at::Tensor& b,
                   const c10::optional<at::Tensor>& addend = c10::nullopt) {
  auto stock = [&] { return addend ? at::baddbmm(*addend, a, b) : at::bmm(a, b); };
  if (!batched_supported(a, b) || tuned::choice() == KernelChoice::kAlwaysAten ||
      (addend &&
       (addend->scalar_type() != at::kFloat || addend->dim() > 3 || !addend->device().is_cpu()))) {
    tuned::count(false);
    return stock();
  }
  BatchedChoice choice;
  if (tuned::choice() == KernelChoice::kAlwaysMemoplan) {
    choice.measured.use_memoplan = true;
    choice.config = kernels::default_config();
  } else {
    const BatchedKey key{
        a.size(0),        a.size(1),        a.size(2),          b.size(2),
        a.stride(2) == 1, b.stride(2) == 1, addend.has_value(), at::get_num_threads()};
    choice = batched_shapes().decide(key, [&] { return measure_batched(a, b, addend); });
  }
  if (!choice.measured.use_memoplan) {
    tuned::count(false);
    return stock();
  }
  const std::vector<int64_t> sizes{a.size(0), a.size(1), b.size(2)};
  at::Tensor out = at::empty(sizes, a.options());
  if (addend) out.copy_(addend->expand(sizes));
  memoplan_bmm_into(a, b, out.data_ptr<float>(), choice.config, addend.has_value());
  tuned::count(true);
  return out;
}

// aten::matmul's cases that are products memoplan computes: N-d x weight matrix (a linear without
// bias), and two equal-rank batched operands (3-d, or 4-d such as [batch, heads, tokens, d]).
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, int64_t site, bool b_is_weight) {
  if (b_is_weight && b.dim() == 2 && a.dim() >= 2) {
    return tuned::linear(a, b.t(), c10::nullopt, site, Activation::kNone);
  }
  if (a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0)) return batched(a, b);
  if (a.dim() == 4 && b.dim() == 4 && a.size(0) == b.size(0) && a.size(1) == b.size(1) &&
      a.numel() > 0 && b.numel() > 0) {
    const at::Tensor out =
        batched(a.reshape({-1, a.size(2), a.size(3)}), b.reshape({-1, b.size(2), b.size(3)}));
    return out.view({a.size(0), a.size(1), a.size(2), b.size(3)});
  }
  tuned::count(false);
  return at::matmul(a, b);
}

// aten::add(aten::matmul(a, b), bias) with b a weight matrix: the linear a b + bias when bias is
// the vector of b's columns (checked here: the graph knows no shapes); else both ops as written.
at::Tensor matmul_add(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
                      int64_t site) {
  if (b.dim() == 2 && a.dim() >= 2 && bias.dim() == 1 && bias.size(0) == b.size(1) &&
      bias.scalar_type() == a.scalar_type() && b.scalar_type() == a.scalar_type()) {
    return tuned::linear(a, b.t(), bias, site, Activation::kNone);
  }
  return at::add(matmul(a, b, site, true), bias);
}

// aten::addmm(bias, x, w) with beta = alpha = 1 (checked when the graph is rewritten): x w + bias,
// a linear with the weight w^T when bias is a vector.
at::Tensor addmm(const at::Tensor& bias, const at::Tensor& x, const at::Tensor& w, int64_t site) {
  if (bias.dim() == 1 && x.dim() == 2 && w.dim() == 2) {
    return tuned::linear(x, w.t(), bias, site, Activation::kNone);
  }
  tuned::count(false);
  return at::addmm(bias, x, w);
}

// The products' operators, each defined once (planning/op_descriptor.h); `site` is where a weight
// operand's packing lives (tuned::new_site).
struct BmmOp {
  static constexpr const char* kName = "memoplan::bmm";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self, mat2;
  static constexpr auto fields() {
    return std::make_tuple(op::field("self", &BmmOp::self), op::field("mat2", &BmmOp::mat2));
  }
};
struct BaddbmmOp {  // beta = alpha = 1
  static constexpr const char* kName = "memoplan::baddbmm";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self, batch1, batch2;
  static constexpr auto fields() {
    using O = BaddbmmOp;
    return std::make_tuple(op::field("self", &O::self), op::field("batch1", &O::batch1),
                           op::field("batch2", &O::batch2));
  }
};
struct MatmulOp {
  static constexpr const char* kName = "memoplan::matmul";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self, other;
  int64_t site = -1;
  bool other_is_weight = false;
  static constexpr auto fields() {
    using O = MatmulOp;
    return std::make_tuple(op::field("self", &O::self), op::field("other", &O::other),
                           op::field("site", &O::site),
                           op::field("other_is_weight", &O::other_is_weight));
  }
};
struct MatmulAddOp {  // self x other + bias, other a weight
  static constexpr const char* kName = "memoplan::matmul_add";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self, other, bias;
  int64_t site = -1;
  static constexpr auto fields() {
    using O = MatmulAddOp;
    return std::make_tuple(op::field("self", &O::self), op::field("other", &O::other),
                           op::field("bias", &O::bias), op::field("site", &O::site));
  }
};
struct AddmmOp {  // beta = alpha = 1
  static constexpr const char* kName = "memoplan::addmm";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self, mat1, mat2;
  int64_t site = -1;
  static constexpr auto fields() {
    using O = AddmmOp;
    return std::make_tuple(op::field("self", &O::self), op::field("mat1", &O::mat1),
                           op::field("mat2", &O::mat2), op::field("site", &O::site));
  }
};

at::Tensor bmm_op(BmmOp op) { return batched(op.self, op.mat2); }
at::Tensor baddbmm_op(BaddbmmOp op) { return batched(op.batch1, op.batch2, op.self); }
at::Tensor matmul_op(MatmulOp op) { return matmul(op.self, op.other, op.site, op.other_is_weight); }
at::Tensor matmul_add_op(MatmulAddOp op) { return matmul_add(op.self, op.other, op.bias, op.site); }
at::Tensor addmm_op(AddmmOp op) { return addmm(op.self, op.mat1, op.mat2, op.site); }

torch::jit::RegisterOperators matmul_operators({
    op::make_operator<BmmOp, &bmm_op>(),
    op::make_operator<BaddbmmOp, &baddbmm_op>(),
    op::make_operator<MatmulOp, &matmul_op>(),
    op::make_operator<MatmulAddOp, &matmul_add_op>(),
    op::make_operator<AddmmOp, &addmm_op>(),
});

using torch::jit::Node;
using torch::jit::Value;

// A module attribute (parameter or buffer) or a frozen module's tensor constant, directly or
// through a transpose: what keeps its storage from pass to pass and is worth packing once.
bool is_weight(const Value* value) {
  const Node* node = value->node();
  if (node->kind() == c10::prim::GetAttr) return true;
  if (node->kind() == c10::prim::Constant && value->type()->cast<c10::TensorType>()) return true;
  if (node->kind() == c10::aten::t || node->kind() == c10::aten::transpose ||
      node->kind() == c10::aten::permute) {
    return is_weight(node->input(0));
  }
  return false;
}

bool is_one(const Value* value) {
  const auto number = torch::jit::toIValue(value);
  return number && ((number->isInt() && number->toInt() == 1) ||
                    (number->isDouble() && number->toDouble() == 1.0));
}

// Inserts the node `b` makes before `node` (the insertion point) and moves node's uses to it.
template <class Op>
void replace(torch::jit::Graph& graph, Node* node, const op::Builder<Op>& b) {
  Node* tuned = b.create();
  tuned->output()->setType(node->output()->type());
  graph.insertNode(tuned);
  node->output()->replaceAllUsesWith(tuned->output());
}

// The aten::add(product, bias, 1) or add(bias, product, 1) that is the only use of a weight
// product, with a weight for bias; else nullptr.
Node* bias_add(Node* matmul) {
  if (!is_weight(matmul->input(1)) || matmul->output()->uses().size() != 1) return nullptr;
  Node* add = matmul->output()->uses()[0].user;
  if (add->kind() != c10::aten::add || add->inputs().size() != 3 || !is_one(add->input(2)) ||
      add->owningBlock() != matmul->owningBlock()) {
    return nullptr;
  }
  Value* bias = add->input(0) == matmul->output() ? add->input(1) : add->input(0);
  if (bias == matmul->output() || !is_weight(bias)) return nullptr;
  return add;
}

void replace_matmul_in_block(torch::jit::Graph& graph, torch::jit::Block* block, int& replaced) {
  std::vector<Node*> found;
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) replace_matmul_in_block(graph, inner, replaced);
    const bool bmm = node->kind() == c10::aten::bmm && node->inputs().size() == 2;
    const bool matmul = node->kind() == c10::aten::matmul && node->inputs().size() == 2;
    const bool addmm = node->kind() == c10::aten::addmm && node->inputs().size() == 5 &&
                       is_one(node->input(3)) && is_one(node->input(4));
    const bool baddbmm = node->kind() == c10::aten::baddbmm && node->inputs().size() == 5 &&
                         is_one(node->input(3)) && is_one(node->input(4));
    if (bmm || matmul || addmm || baddbmm) found.push_back(node);
  }
  for (Node* node : found) {
    Node* add = node->kind() == c10::aten::matmul ? bias_add(node) : nullptr;
    {
      // At the add, when there is one: the bias may be read between the product and the add.
      torch::jit::WithInsertPoint point(add ? add : node);
      if (add) {
        op::Builder<MatmulAddOp> b(graph);
        b.set(&MatmulAddOp::self, node->input(0)).set(&MatmulAddOp::other, node->input(1));
        b.set(&MatmulAddOp::bias, add->input(0) == node->output() ? add->input(1) : add->input(0));
        replace(graph, add, b.constant(&MatmulAddOp::site, tuned::new_site()));
      } else if (node->kind() == c10::aten::bmm) {
        op::Builder<BmmOp> b(graph);
        b.set(&BmmOp::self, node->input(0)).set(&BmmOp::mat2, node->input(1));
        replace(graph, node, b);
      } else if (node->kind() == c10::aten::baddbmm) {
        op::Builder<BaddbmmOp> b(graph);
        b.set(&BaddbmmOp::self, node->input(0)).set(&BaddbmmOp::batch1, node->input(1));
        replace(graph, node, b.set(&BaddbmmOp::batch2, node->input(2)));
      } else if (node->kind() == c10::aten::matmul) {
        op::Builder<MatmulOp> b(graph);
        b.set(&MatmulOp::self, node->input(0)).set(&MatmulOp::other, node->input(1));
        b.constant(&MatmulOp::site, tuned::new_site());
        replace(graph, node, b.constant(&MatmulOp::other_is_weight, is_weight(node->input(1))));
      } else {
        op::Builder<AddmmOp> b(graph);
        b.set(&AddmmOp::self, node->input(0)).set(&AddmmOp::mat1, node->input(1));
        b.set(&AddmmOp::mat2, node->input(2));
        replace(graph, node, b.constant(&AddmmOp::site, tuned::new_site()));
      }
    }
    if (add) add->destroy();  // after the insertion point moved off it
    node->destroy();
    ++replaced;
  }
}

}  // namespace

int replace_matmul_ops(torch::jit::Graph& graph) {
  int replaced = 0;
  replace_matmul_in_block(graph, graph.block(), replaced);
  return replaced;
}

std::string matmul_report() {
  std::ostringstream out;
  batched_shapes().for_each([&](const BatchedKey& key, const BatchedChoice& choice) {
    const auto& [batch, m, k, n, a_rows, b_rows, addend, threads] = key;
    out << (addend ? "baddbmm " : "bmm ") << batch << "x" << m << "x" << k << "x" << n
        << (a_rows ? "" : " A^T") << (b_rows ? "" : " B^T") << " threads " << threads << ": aten "
        << choice.measured.aten_ms << " ms, memoplan " << choice.measured.memoplan_ms << " ms ("
        << choice.config.to_string() << ") -> "
        << (choice.measured.use_memoplan ? "memoplan" : "aten") << "\n";
  });
  return out.str();
}

namespace {
const bool matmul_report_registered =
    tuned::add_report(50, &matmul_report);  // kernel_report()'s order
}  // namespace

}  // namespace memoplan::torch_ext
