// The canonical-forms pass (canonical_forms.h). Hand-written rather than LibTorch's
// graph_rewrite_helper::replaceConvolutionWithAtenConv: that one leaves every convolution traced
// with cudnn.deterministic or benchmark set (flags that do nothing on the CPU), knows no 3-d or
// transposed-3-d form, and runs constant propagation over the whole graph first.
#include "canonical_forms.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/normalize_ops.h>

#include <optional>
#include <vector>

namespace memoplan::torch_ext {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// A list of ints known when the graph is built: a constant, or a list made of constants.
std::optional<std::vector<int64_t>> constant_ints(Value* v) {
  if (auto c = torch::jit::toIValue(v); c && c->isIntList()) return c->toIntVector();
  Node* node = v->node();
  if (node->kind() != c10::prim::ListConstruct) return std::nullopt;
  std::vector<int64_t> out;
  for (Value* element : node->inputs()) {
    const auto c = torch::jit::toIValue(element);
    if (!c || !c->isInt()) return std::nullopt;
    out.push_back(c->toInt());
  }
  return out;
}

std::optional<bool> constant_bool(Value* v) {
  const auto c = torch::jit::toIValue(v);
  if (!c || !c->isBool()) return std::nullopt;
  return c->toBool();
}

// aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
// groups, benchmark, deterministic, cudnn_enabled[, allow_tf32]) as the public op it stands for,
// or false when a flag or list it decides by is not a constant.
bool convolution(torch::jit::Graph& graph, Node* node) {
  if (node->inputs().size() != 12 && node->inputs().size() != 13) return false;
  if (node->outputs().size() != 1) return false;
  const auto stride = constant_ints(node->input(3));
  const auto padding = constant_ints(node->input(4));
  const auto dilation = constant_ints(node->input(5));
  const auto transposed = constant_bool(node->input(6));
  const auto output_padding = constant_ints(node->input(7));
  if (!stride || !padding || !dilation || !transposed || !output_padding) return false;
  const size_t dims = stride->size();
  if (dims < 1 || dims > 3) return false;
  for (const auto* list : {&*padding, &*dilation, &*output_padding}) {
    if (list->size() != dims) return false;
  }
  static const char* const kForward[] = {"aten::conv1d", "aten::conv2d", "aten::conv3d"};
  static const char* const kTransposed[] = {"aten::conv_transpose1d", "aten::conv_transpose2d",
                                            "aten::conv_transpose3d"};
  Value* input = node->input(0);
  Value* weight = node->input(1);
  Value* bias = node->input(2);
  Value* groups = node->input(8);
  std::vector<Value*> inputs;
  const char* kind;
  if (*transposed) {
    // conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)
    inputs = {input,          weight,         bias,   node->input(3),
              node->input(4), node->input(7), groups, node->input(5)};
    kind = kTransposed[dims - 1];
  } else {
    for (int64_t p : *output_padding) {
      if (p != 0) return false;
    }
    inputs = {input, weight, bias, node->input(3), node->input(4), node->input(5), groups};
    kind = kForward[dims - 1];
  }
  Node* made = graph.create(c10::Symbol::fromQualString(kind), inputs, 1);
  made->copyMetadata(node);
  made->output()->setType(node->output()->type());
  made->insertBefore(node);
  node->output()->replaceAllUsesWith(made->output());
  node->destroy();
  return true;
}

// A reader that takes a list of tensors and makes a new tensor of them, keeping neither the list
// nor an alias of an element: it reads the list as it is at that point.
bool reads_list_into_new_tensor(const torch::jit::Use& use) {
  const Node* n = use.user;
  return use.offset == 0 && n->inputs().size() == 2 &&
         (n->kind() == c10::aten::cat || n->kind() == c10::aten::stack);
}

// A list of tensors made by prim::ListConstruct and grown by aten::append, read only by
// concatenations in the same block (a scripted DenseNet's `features`): each reader gets a list
// made of the elements the list holds at that point, and the appends go. Then every concatenation
// reads a list of its own, the form torch.jit.trace records. A list used in any other way (an
// inner block, a loop, another op, a graph output) is left as it is.
bool list_snapshots(torch::jit::Graph& graph, Node* list) {
  const auto type = list->output()->type()->cast<c10::ListType>();
  if (!type || type->getElementType()->kind() != c10::TypeKind::TensorType) return false;
  Block* block = list->owningBlock();
  bool appended = false;
  for (const torch::jit::Use& use : list->output()->uses()) {
    if (use.user->owningBlock() != block) return false;
    if (use.user->kind() == c10::aten::append) {
      if (use.offset != 0 || !use.user->output()->uses().empty()) return false;
      appended = true;
    } else if (!reads_list_into_new_tensor(use)) {
      return false;
    }
  }
  if (!appended) return false;
  std::vector<Value*> elements(list->inputs().begin(), list->inputs().end());
  std::vector<Node*> appends;
  for (Node* n = list->next(); n != block->return_node(); n = n->next()) {
    if (n->inputs().empty() || n->input(0) != list->output()) continue;
    if (n->kind() == c10::aten::append) {
      elements.push_back(n->input(1));
      appends.push_back(n);
    } else if (!appends.empty()) {  // a reader after an append: a list of its own
      Node* snapshot = graph.createList(c10::TensorType::get(), elements);
      snapshot->insertBefore(n);
      n->replaceInput(0, snapshot->output());
    }
  }
  for (Node* n : appends) n->destroy();
  if (!list->output()->hasUses()) list->destroy();
  return true;
}

// Every list construction, inner blocks' too, gathered first: list_snapshots destroys nodes
// after the one it is given.
void lists(Block* block, std::vector<Node*>& out) {
  for (Node* node : block->nodes()) {
    for (Block* inner : node->blocks()) lists(inner, out);
    if (node->kind() == c10::prim::ListConstruct) out.push_back(node);
  }
}

void walk(torch::jit::Graph& graph, Block* block, CanonicalForms& done) {
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* node : nodes) {
    for (Block* inner : node->blocks()) walk(graph, inner, done);
    if (node->kind() != c10::aten::_convolution) continue;
    if (convolution(graph, node)) {
      ++done.convolutions;
    } else {
      ++done.left_as_is;
    }
  }
}

}  // namespace

CanonicalForms canonicalize(const std::shared_ptr<torch::jit::Graph>& graph) {
  torch::jit::NormalizeOps(graph);
  CanonicalForms done;
  std::vector<Node*> constructions;
  lists(graph->block(), constructions);
  for (Node* list : constructions) done.appended_lists += list_snapshots(*graph, list);
  walk(*graph, graph->block(), done);
  return done;
}

}  // namespace memoplan::torch_ext
