// The graph half of the layout plan (layout_plan.h): finds the 4-d activations of a forward graph
// that flow between convolutions and rewrites the graph so that each can take either layout.
//  - aten::conv2d becomes memoplan::conv2d (its node: input edge -> output edge).
//  - Ops that keep their input's layout and accept any strides (batch norm, activations, pooling,
//    dropout) pass an edge through: their output is the same edge.
//  - Arithmetic on two activations (a residual add) joins edges: memoplan::layout nodes in front
//    convert what differs from the layout chosen for the result (add_ keeps its first operand's).
//  - An If whose branches yield activations joins them the same way, at each branch's end.
//  - Every other use (a view, a list, a loop, the graph's output) is a sink: a memoplan::layout
//    node converts to NCHW in front of it, so nothing outside the plan ever sees NHWC.
#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "graph_match.h"
#include "layout_operators.h"
#include "layout_plan.h"
#include "tuned_ops.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

using layouts::GraphSpec;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;
using NodeKind = GraphSpec::Node::Kind;
using graph_match::contains;
using graph_match::is_attribute;
using graph_match::is_neutral;

const char* const kConvSchema =
    "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
    "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor";

bool is_pass_through(const Node* node) {
  static const std::unordered_set<std::string> kinds = {
      "aten::relu",       "aten::relu_",       "aten::hardtanh",    "aten::hardtanh_",
      "aten::relu6",      "aten::batch_norm",  "aten::dropout",     "aten::dropout_",
      "aten::hardswish",  "aten::hardswish_",  "aten::hardsigmoid", "aten::hardsigmoid_",
      "aten::sigmoid",    "aten::sigmoid_",    "aten::silu",        "aten::silu_",
      "aten::gelu",       "aten::max_pool2d",  "aten::avg_pool2d",  "aten::adaptive_avg_pool2d",
      "aten::leaky_relu", "aten::leaky_relu_", "aten::elu",         "aten::elu_"};
  return node->outputs().size() == 1 && kinds.count(node->kind().toQualString()) > 0;
}

bool is_join(const Node* node, bool* in_place) {
  static const std::unordered_set<std::string> out_of_place = {"aten::add", "aten::sub",
                                                               "aten::mul", "aten::div"};
  static const std::unordered_set<std::string> inplace = {"aten::add_", "aten::sub_", "aten::mul_",
                                                          "aten::div_"};
  const std::string kind = node->kind().toQualString();
  *in_place = inplace.count(kind) > 0;
  return node->outputs().size() == 1 && (*in_place || out_of_place.count(kind) > 0);
}

class LayoutRewriter {
 public:
  LayoutRewriter(torch::jit::Graph& graph, int64_t handle) : graph_(graph), handle_(handle) {}

  int rewrite() {
    has_set_attr_ = contains(graph_.block(), c10::prim::SetAttr);
    walk(graph_.block());
    Node* ret = graph_.block()->return_node();
    for (size_t i = 0; i < ret->inputs().size(); ++i) sink(ret, i);
    return convolutions_;
  }

  GraphSpec take_spec() { return std::move(spec_); }

 private:
  int new_edge(const Value* value, bool fixed) {
    spec_.edges.push_back({fixed, value->debugName()});
    return static_cast<int>(spec_.edges.size()) - 1;
  }
  int new_node(NodeKind kind, std::vector<int> inputs, int output, std::string name) {
    spec_.nodes.push_back({kind, std::move(inputs), output, std::move(name)});
    return static_cast<int>(spec_.nodes.size()) - 1;
  }
  int edge_of(const Value* value) const {
    const auto it = edges_.find(value);
    return it == edges_.end() ? -1 : it->second;
  }

  // Inserts memoplan::layout(input `position` of `user`) before `user`, converting to `edge`'s
  // layout (-1: NCHW), priced as input `input` of plan node `node`.
  void convert_input(Node* user, size_t position, int node, int input, int edge) {
    spec_.conversions.push_back({node, input, edge});
    torch::jit::WithInsertPoint point(user);
    Value* value = user->input(position);
    op::Builder<LayoutOp> b(graph_);
    b.set(&LayoutOp::self, value).constant(&LayoutOp::graph, handle_);
    b.constant(&LayoutOp::conversion, static_cast<int64_t>(spec_.conversions.size()) - 1);
    Node* layout = b.create();
    layout->output()->setType(value->type());
    graph_.insertNode(layout);
    user->replaceInput(position, layout->output());
  }

  // A use of an activation that must see NCHW.
  void sink(Node* user, size_t position) {
    const int edge = edge_of(user->input(position));
    if (edge < 0) return;
    const int node = new_node(NodeKind::kSink, {edge}, -1, user->kind().toQualString());
    convert_input(user, position, node, 0, -1);
  }

  void walk(Block* block) {
    std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
    for (Node* node : nodes) {
      if (!removed_.count(node)) visit(node);
    }
  }

  void visit(Node* node) {
    bool in_place = false;
    if (node->kind() == c10::prim::If) {
      for (Block* branch : node->blocks()) walk(branch);
      join_branches(node);
    } else if (node->kind() == c10::aten::conv2d && node->matches(kConvSchema)) {
      convolution(node);
    } else if (is_pass_through(node) && edge_of(node->input(0)) >= 0) {
      for (size_t i = 1; i < node->inputs().size(); ++i) sink(node, i);
      edges_[node->output()] = edge_of(node->input(0));
    } else if (is_join(node, &in_place) && node->inputs().size() >= 2 &&
               (edge_of(node->input(0)) >= 0 || edge_of(node->input(1)) >= 0)) {
      join(node, in_place);
    } else {
      for (Block* inner : node->blocks()) {
        walk(inner);
        for (size_t i = 0; i < inner->return_node()->inputs().size(); ++i) {
          sink(inner->return_node(), i);
        }
      }
      if (!is_neutral(node)) {
        for (size_t i = 0; i < node->inputs().size(); ++i) sink(node, i);
      }
    }
  }

  void convolution(Node* node) {
    int input = edge_of(node->input(0));
    if (input < 0) input = new_edge(node->input(0), true);
    const bool weight_is_attribute = is_attribute(node->input(1));
    Node* batch_norm =
        weight_is_attribute ? graph_match::following_batch_norm(node, has_set_attr_) : nullptr;
    Node* last = batch_norm ? batch_norm : node;
    const int output = new_edge(last->output(), false);
    const int index = new_node(NodeKind::kConv, {input}, output, last->output()->debugName());
    Node* conv = nullptr;
    {
      torch::jit::WithInsertPoint point(node);
      op::Builder<Conv2dOp> b(graph_);
      b.set(&Conv2dOp::input, node->input(0));
      conv::set_conv(b, node);
      b.constant(&Conv2dOp::graph, handle_).constant(&Conv2dOp::node, static_cast<int64_t>(index));
      b.constant(&Conv2dOp::site, tuned::new_site());
      conv::set_batch_norm(b, graph_, batch_norm);
      b.constant(&Conv2dOp::weight_is_attribute, weight_is_attribute);
      conv = b.create();
      conv->output()->setType(last->output()->type());
      graph_.insertNode(conv);
    }
    last->output()->replaceAllUsesWith(conv->output());
    node->output()->replaceAllUsesWith(conv->output());  // the size reads: same sizes
    if (batch_norm) {
      batch_norm->destroy();
      removed_.insert(batch_norm);
    }
    node->destroy();
    edges_[conv->output()] = output;
    ++convolutions_;
  }

  // a (+-*/) b with at least one activation operand: the result is a new edge; the operands are
  // converted to its layout (add_ writes into a: its result is a's layout, b converted to it).
  void join(Node* node, bool in_place) {
    const int a = edge_of(node->input(0)), b = edge_of(node->input(1));
    if (a < 0 || b < 0) {  // one activation and a parameter or scalar: passes its layout on
      for (size_t i = 2; i < node->inputs().size(); ++i) sink(node, i);
      edges_[node->output()] = a >= 0 ? a : b;
      return;
    }
    const int output = new_edge(node->output(), false);
    const int index = new_node(in_place ? NodeKind::kInPlaceJoin : NodeKind::kJoin, {a, b}, output,
                               node->kind().toQualString());
    if (!in_place) convert_input(node, 0, index, 0, output);
    convert_input(node, 1, index, 1, output);
    edges_[node->output()] = output;
  }

  // An If's outputs that are activations in some branch: each branch converts its value to the
  // layout chosen for the If's output.
  void join_branches(Node* node) {
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      std::vector<int> inputs;
      bool any = false;
      for (Block* branch : node->blocks()) {
        const int edge = edge_of(branch->outputs()[i]);
        any = any || edge >= 0;
        inputs.push_back(edge >= 0 ? edge : new_edge(branch->outputs()[i], true));
      }
      if (!any) continue;
      const int output = new_edge(node->outputs()[i], false);
      const int index =
          new_node(NodeKind::kJoin, inputs, output, "prim::If " + node->outputs()[i]->debugName());
      for (size_t b = 0; b < node->blocks().size(); ++b) {
        convert_input(node->blocks()[b]->return_node(), i, index, static_cast<int>(b), output);
      }
      edges_[node->outputs()[i]] = output;
    }
  }

  torch::jit::Graph& graph_;
  const int64_t handle_;
  GraphSpec spec_;
  std::unordered_map<const Value*, int> edges_;
  std::unordered_set<const Node*> removed_;
  bool has_set_attr_ = false;
  int convolutions_ = 0;
};

}  // namespace

int replace_convolutions(torch::jit::Graph& graph) {
  if (!contains(graph.block(), c10::aten::conv2d)) return 0;
  const int64_t handle = layouts::register_graph({});
  LayoutRewriter rewriter(graph, handle);
  const int replaced = rewriter.rewrite();
  layouts::set_graph_spec(handle, rewriter.take_spec());
  return replaced;
}

}  // namespace memoplan::torch_ext
