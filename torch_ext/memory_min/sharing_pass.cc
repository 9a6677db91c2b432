// The graph side of sharing bytes (memory "min", sharing.h): which nodes get a
// memoplan::ShareInputs node before them, and what that node tells the runtime about its inputs.
// The JIT's headers stay in this file.
#include <ATen/core/ivalue.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "bn_relu_conv1x1_operators.h"
#include "concat_in_place.h"
#include "planning/op_descriptor.h"
#include "planning/pass_runtime.h"
#include "sharing_pass.h"

namespace memoplan::torch_ext {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kShareInputs = c10::Symbol::fromQualString("memoplan::ShareInputs");
const c10::Symbol kShareKind = c10::Symbol::attr("memoplan_share_kind");

// Ops whose output element i is computed from their inputs' element i (broadcast inputs aside),
// written in the input's layout: out-of-place into the bytes of an input that dies in them, they
// compute what they would in place. Batch and layer norm read their statistics (running ones, or
// a row's moments) before they write a row. Softmax and reductions are not here: they read an
// element again after writing others.
bool elementwise(c10::Symbol kind) {
  static const std::array kinds = {
      c10::aten::relu,        c10::aten::relu6,      c10::aten::hardtanh,   c10::aten::hardswish,
      c10::aten::hardsigmoid, c10::aten::sigmoid,    c10::aten::tanh,       c10::aten::gelu,
      c10::aten::silu,        c10::aten::elu,        c10::aten::leaky_relu, c10::aten::mish,
      c10::aten::batch_norm,  c10::aten::layer_norm, c10::aten::add,        c10::aten::sub,
      c10::aten::mul,         c10::aten::div,        c10::aten::neg,        c10::aten::exp,
      c10::aten::sqrt,        c10::aten::rsqrt,      c10::aten::clamp,      c10::aten::clamp_min,
      c10::aten::abs,
  };
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

bool is_tensor(const Value* v) {
  const c10::TypePtr& type = v->type();
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (type->kind() != c10::TypeKind::OptionalType) return false;
  return type->containedTypes()[0]->kind() == c10::TypeKind::TensorType;
}

// List ops change which tensors a list holds, never a tensor's bytes.
bool mutates_list_only(c10::Symbol kind) {
  static const std::array kinds = {
      c10::Symbol::fromQualString("aten::append"), c10::Symbol::fromQualString("aten::insert"),
      c10::Symbol::fromQualString("aten::extend"), c10::Symbol::fromQualString("aten::pop"),
      c10::Symbol::fromQualString("aten::clear"),  c10::Symbol::fromQualString("aten::_set_item"),
  };
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

void all_nodes(torch::jit::Block* block, std::vector<Node*>& out) {
  for (Node* node : block->nodes()) {
    out.push_back(node);
    for (torch::jit::Block* inner : node->blocks()) all_nodes(inner, out);
  }
}

bool in_loop(const Node* node) {
  for (const torch::jit::Block* b = node->owningBlock(); b->owningNode();
       b = b->owningNode()->owningBlock()) {
    if (b->owningNode()->kind() == c10::prim::Loop) return true;
  }
  return false;
}

// memoplan::cat_bn_relu_conv1x1 (memory min's dense-layer bottleneck, bn_relu_conv1x1.h)
// begins with a concatenation of its list input 0 along input 1: when it runs as aten's ops, its
// first tensor is that concatenation (concat_in_place), whose inputs may lie in it as in a
// concat's; in bands, its first tensor is a band, smaller, which no claim matches.
bool is_fused_concat(const Node* node) { return node->kind() == op::symbol<CatBnReluConv1x1Op>(); }

// A concat's list and dimension: aten::cat's (tensors, dim), or the fused op's.
Value* concat_list(Node* cat) {
  return is_fused_concat(cat) ? op::input(cat, &CatBnReluConv1x1Op::tensors) : cat->input(0);
}
Value* concat_dim(Node* cat) {
  return is_fused_concat(cat) ? op::input(cat, &CatBnReluConv1x1Op::dim) : cat->input(1);
}

// Module state: an attribute read, None, or either through an Optional refinement or an if
// (`running_mean if not self.training ... else None`).
bool module_state(const Value* v) {
  const Node* node = v->node();
  if (node->kind() == c10::prim::GetAttr || v->mustBeNone()) return true;
  if (node->kind() == c10::prim::unchecked_cast) return module_state(node->input(0));
  if (node->kind() != c10::prim::If) return false;
  for (const torch::jit::Block* branch : node->blocks()) {
    if (!module_state(branch->outputs()[v->offset()])) return false;
  }
  return true;
}

// An op that writes module state only: BatchNorm's `num_batches_tracked.add_(1)` and, in
// training, batch_norm's running statistics (inputs 3 and 4, as instance_norm's). The alias
// analysis counts such a write against every tensor held in a list (a list's elements may alias
// anything), but a concat's input that the plan lays inside the output is a tensor of the pass,
// never module state.
bool writes_module_state_only(const Node* node) {
  if (node->kind() == c10::aten::batch_norm || node->kind() == c10::aten::instance_norm) {
    return node->inputs().size() > 4 && module_state(node->input(3)) &&
           module_state(node->input(4));
  }
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return false;
  bool writes = false;
  for (size_t i = 0; i < schema->arguments().size() && i < node->inputs().size(); ++i) {
    const c10::AliasInfo* alias = schema->arguments()[i].alias_info();
    if (!alias || !alias->isWrite()) continue;
    if (!module_state(node->input(i))) return false;
    writes = true;
  }
  return writes;
}

// A concat whose inputs and output nothing writes after it: its inputs may lie inside its output.
// Not in a loop (its later iterations come before it in graph order); in an if's branch it may be
// (DenseNet's layers: `if self.memory_efficient ...`), the other branch counted as after it.
std::vector<Node*> concats_to_share(const std::shared_ptr<Graph>& graph) {
  std::vector<Node*> concats;
  std::vector<Node*> order;
  all_nodes(graph->block(), order);
  for (Node* node : order) {
    const bool cat = node->kind() == c10::aten::cat && node->inputs().size() == 2;
    if ((cat || is_fused_concat(node)) && !in_loop(node)) concats.push_back(node);
  }
  if (concats.empty()) return concats;
  torch::jit::AliasDb aliases(graph);
  std::vector<Node*> out;
  for (Node* cat : concats) {
    torch::jit::ValueSet values = {concat_list(cat)};
    if (cat->kind() == c10::aten::cat) values.insert(cat->output());
    auto it = std::find(order.begin(), order.end(), cat);
    bool written = false;
    for (++it; it != order.end() && !written; ++it) {
      if (!mutates_list_only((*it)->kind()) && (*it)->blocks().empty()) {
        written = !writes_module_state_only(*it) && aliases.writesToAlias(*it, values);
      }
    }
    if (!written) out.push_back(cat);
  }
  return out;
}

void elementwise_nodes(torch::jit::Block* block, std::vector<Node*>& out) {
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) elementwise_nodes(inner, out);
    if (elementwise(node->kind())) out.push_back(node);
  }
}

// ---- The node at run time. ----

bool whole_storage(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided && t.numel() > 0 &&
         t.is_contiguous() && t.has_storage() && t.storage().data() == t.data_ptr() &&
         t.storage().nbytes() == t.nbytes();
}

void describe_elementwise(const c10::IValue* first, size_t count, std::vector<ShareInput>& out) {
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& v = first[i];
    ShareInput in;
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor& t = v.toTensor();
      in.data = t.data_ptr();
      in.bytes = t.nbytes();
      in.candidate = whole_storage(t);
      // The output takes this input's layout only if every input as large has the same; and no
      // other input may read these bytes in another order.
      for (size_t j = 0; j < count && in.candidate; ++j) {
        if (j == i || !first[j].isTensor() || !first[j].toTensor().defined()) continue;
        const at::Tensor& o = first[j].toTensor();
        const bool same = o.data_ptr() == t.data_ptr() && o.sizes() == t.sizes() &&
                          o.strides() == t.strides() && o.dtype() == t.dtype();
        if (o.numel() == t.numel() && !same && o.strides() != t.strides()) in.candidate = false;
        if (o.has_storage() && o.storage().is_alias_of(t.storage()) && !same) in.candidate = false;
      }
    }
    out.push_back(in);
  }
}

void describe_concat(const c10::IValue& list, const c10::IValue& dim_value,
                     std::vector<ShareInput>& out) {
  if (!list.isTensorList() || !dim_value.isInt()) return;
  const c10::List<at::Tensor> tensors = list.toTensorList();
  if (tensors.empty()) return;
  const at::Tensor first = tensors.get(0);
  // Each input is one stretch of the output's bytes only when the sizes before the concatenated
  // dimension are all 1 (batch 1 along channels) and every input has the output's dtype.
  bool stretches = first.defined() && first.dim() > 0;
  if (stretches) {
    int64_t dim = dim_value.toInt();
    if (dim < 0) dim += first.dim();
    stretches = dim >= 0 && dim < first.dim();
    for (int64_t d = 0; stretches && d < dim; ++d) stretches = first.size(d) == 1;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor t = tensors.get(i);
    ShareInput in;
    if (t.defined()) {
      in.data = t.data_ptr();
      in.bytes = t.nbytes();
      in.candidate =
          stretches && whole_storage(t) && t.dtype() == first.dtype() && t.dim() == first.dim();
    }
    out.push_back(in);
  }
}

torch::jit::Operation share_inputs_op(const Node* node) {
  const auto kind = static_cast<ShareKind>(node->i(kShareKind));
  const size_t count = node->inputs().size();
  return [kind, count](torch::jit::Stack& stack) {
    if (runtime_pass::share_inputs_wanted()) {
      static thread_local std::vector<ShareInput> inputs;  // reused: no allocation per pass
      inputs.clear();
      const c10::IValue* first = &stack[stack.size() - count];
      if (kind == ShareKind::kConcat) {
        describe_concat(first[0], first[1], inputs);
      } else {
        describe_elementwise(first, count, inputs);
      }
      runtime_pass::share_inputs(kind, inputs.data(), static_cast<uint32_t>(inputs.size()));
    }
    torch::jit::drop(stack, count);
  };
}

// The memory format aten::cat gives its output (its meta function's rule): the inputs' common
// suggested format, contiguous when they differ.
c10::MemoryFormat cat_memory_format(const std::vector<at::Tensor>& tensors) {
  c10::optional<c10::MemoryFormat> format;
  for (const at::Tensor& t : tensors) {
    const c10::MemoryFormat f = t.suggest_memory_format();
    if (!format) {
      format = f;
    } else if (*format != f) {
      return c10::MemoryFormat::Contiguous;
    }
  }
  return format.value_or(c10::MemoryFormat::Contiguous);
}

}  // namespace

// aten::cat that copies an input only when it is not already where the output holds it: with
// memory "min" the plan lays the output over its inputs, which the producers then wrote in place
// (batch 1 along channels). The bytes are what aten::cat makes: inputs of one dtype, contiguous,
// sizes before `dim` all 1, a contiguous output; anything else is aten::cat itself.
at::Tensor concat_in_place(const c10::List<at::Tensor>& list, int64_t dim, bool* copied_all) {
  std::vector<at::Tensor> tensors = list.vec();
  if (copied_all) *copied_all = true;
  if (tensors.empty() || !tensors[0].defined()) return at::cat(tensors, dim);
  const at::Tensor& first = tensors[0];
  const int64_t rank = first.dim();
  const int64_t d = dim < 0 ? dim + rank : dim;
  bool bytes =
      rank > 0 && d >= 0 && d < rank && first.device().is_cpu() && first.layout() == c10::kStrided;
  for (int64_t k = 0; bytes && k < d; ++k) bytes = first.size(k) == 1;
  int64_t total = 0;
  for (size_t i = 0; bytes && i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    bytes = t.defined() && t.dim() == rank && t.numel() > 0 && t.dtype() == first.dtype() &&
            t.device() == first.device() && t.layout() == c10::kStrided && t.is_contiguous() &&
            !t.requires_grad() && !t.is_conj() && !t.is_neg();
    for (int64_t k = 0; bytes && k < rank; ++k) bytes = k == d || t.size(k) == first.size(k);
    if (bytes) total += t.size(d);
  }
  if (!bytes || cat_memory_format(tensors) != c10::MemoryFormat::Contiguous) {
    return at::cat(tensors, dim);
  }
  // The plan may lay the output over its inputs: whether it did differs between a profiled pass
  // and a replayed one, so the answer is no either way.
  if (copied_all) *copied_all = false;
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[static_cast<size_t>(d)] = total;
  at::Tensor out = at::empty(sizes, first.options());
  char* base = static_cast<char*>(out.data_ptr());
  size_t at = 0;
  for (const at::Tensor& t : tensors) {
    const size_t n = t.nbytes();
    const char* source = static_cast<const char*>(t.data_ptr());
    if (source != base + at) std::memcpy(base + at, source, n);  // not in place: elsewhere
    at += n;
  }
  return out;
}

namespace {

// aten::cat, copying only what the plan did not lay in place (concat_in_place).
struct CatOp {
  static constexpr const char* kName = "memoplan::cat";
  static constexpr const char* kReturns = "Tensor";
  c10::List<at::Tensor> tensors;
  int64_t dim = 0;
  static constexpr auto fields() {
    return std::make_tuple(op::field("tensors", &CatOp::tensors), op::field("dim", &CatOp::dim));
  }
};

at::Tensor cat_op(CatOp op) { return concat_in_place(op.tensors, op.dim, nullptr); }

// CONSERVATIVE like the other marks: never removed or moved by the JIT's optimizations. The
// concat returns a new tensor, as its schema says.
torch::jit::RegisterOperators share_operators({
    torch::jit::Operator("memoplan::ShareInputs(...) -> ()", share_inputs_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    op::make_operator<CatOp, &cat_op>(),
});

}  // namespace

int insert_share_nodes(const std::shared_ptr<Graph>& graph) {
  // Decided on the graph before any ShareInputs node is in it: they read their inputs, and as
  // CONSERVATIVE nodes the alias analysis would count them as writers.
  const std::vector<Node*> concats = concats_to_share(graph);
  std::vector<Node*> elementwise;
  elementwise_nodes(graph->block(), elementwise);
  int inserted = 0;
  for (Node* cat : concats) {
    graph->create(kShareInputs, {concat_list(cat), concat_dim(cat)}, 0)
        ->i_(kShareKind, static_cast<int64_t>(ShareKind::kConcat))
        ->insertBefore(cat);
    ++inserted;
    if (is_fused_concat(cat)) continue;  // concatenates in place itself
    // The concat itself skips the copies the plan made unnecessary.
    op::Builder<CatOp> b(*graph);
    b.set(&CatOp::tensors, cat->input(0)).set(&CatOp::dim, cat->input(1));
    Node* in_place = b.create();
    in_place->output()->setType(cat->output()->type());
    in_place->insertBefore(cat);
    cat->output()->replaceAllUsesWith(in_place->output());
    cat->destroy();
  }
  for (Node* node : elementwise) {
    std::vector<Value*> tensors;
    for (Value* input : node->inputs()) {
      if (is_tensor(input)) tensors.push_back(input);
    }
    if (tensors.empty()) continue;
    graph->create(kShareInputs, tensors, 0)
        ->i_(kShareKind, static_cast<int64_t>(ShareKind::kElementwise))
        ->insertBefore(node);
    ++inserted;
  }
  return inserted;
}

}  // namespace memoplan::torch_ext
