// The graph half of the blocked layout (blocked.h): BlockedRewriter (blocked_rewriter.h), its walk
// here and the ops between convolutions in op_rewrites.cc. One walk over the forward graph,
// in order:
//  - aten::conv2d with a module attribute for its weight becomes memoplan::bconv; its input is
//    read as it comes (at a region's start: the graph's NCHW / NHWC tensor), what follows it
//    fused as conv_fusion.h says.
//  - Activations (relu, ReLU6 / hardtanh, hardswish, hardsigmoid, sigmoid, SiLU, GELU, tanh,
//    leaky relu), max / average / adaptive average pooling, and add / mul of two blocked
//    activations (residuals, squeeze-excitation scales, broadcast per channel) on a blocked input
//    stay blocked, on oneDNN; dropout with a constant false `train` is dropped. A batch norm no
//    convolution took (DenseNet's pre-activation) is a scale and shift, with its ReLU; of a
//    concatenation, in the concatenation's gather.
//  - Concatenations along the channels of region values (aten::cat of a list made for it), channel
//    shuffles (ShuffleNet's, as shuffle_match.h finds them) and chunks along the channels stay in
//    the region, on channel_ops.cc's gathers (copies where aten's chunks are views: taken only
//    where nothing writes into the value or its chunks).
//  - An If whose branches yield a blocked activation yields one: the other branches convert at
//    their end (EfficientNet's stochastic depth keeps the region whole in eval mode).
//  - Every other use of a region's value (a view, flatten, a list, the graph's output, an op with
//    a scalar operand) gets memoplan::blayout to NCHW in front of it; reads of sizes need nothing.
// In-place ops (relu_, add_) are taken only when nothing reads the value they write after them.
// Alongside, the region's layout graph for the layout plan (layout_plan.h): an edge per value the
// region makes (the ops that keep their input's layout pass it on), a node per convolution (its
// residual a second input), binary op, If and use outside; a conversion for each operand that may
// have to change layout. While the first pass measures, every edge is blocked.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "blocked.h"
#include "blocked_match.h"
#include "blocked_operators.h"
#include "blocked_rewriter.h"
#include "conv_fusion.h"
#include "memoplan/torch/kernels.h"
#include "planning/planning.h"  // module_options
#include "tuned/graph_match.h"
#include "tuned/layout_plan.h"
#include "tuned/reports.h"
#include "tuned/tuned_support.h"
#include "tuned/weight_cache.h"  // tuned::rewrite_owner

namespace memoplan::torch_ext::blocked {

using layouts::GraphSpec;
using onednn::PostOp;
using NodeKind = GraphSpec::Node::Kind;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

namespace {

const char* const kConvSchema =
    "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
    "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor";

std::mutex report_mutex;
// By the module whose graph it describes.
std::vector<std::pair<int64_t, std::string>>& report_lines() {
  static auto* lines = new std::vector<std::pair<int64_t, std::string>>();  // never destroyed
  return *lines;
}

}  // namespace

int BlockedRewriter::rewrite() {
  has_set_attr_ = graph_match::contains(graph_.block(), c10::prim::SetAttr);
  walk(graph_.block());
  Node* ret = graph_.block()->return_node();
  for (size_t i = 0; i < ret->inputs().size(); ++i) sink(ret, i);
  return convolutions_;
}

std::string BlockedRewriter::summary() const {
  std::ostringstream out;
  out << "blocked layout (" << onednn::describe() << "): " << convolutions_ << " convolutions ("
      << fused_ << " batch norms / activations / residual additions fused), " << others_
      << " other ops, " << to_plain_ << " uses outside the region (made NCHW), " << to_blocked_
      << " branch ends joined";
  return out.str();
}

void BlockedRewriter::sink(Node* user, size_t position) {
  Value* value = user->input(position);
  const int edge = edge_of(value);
  if (edge < 0) return;
  const int node = new_node(NodeKind::kSink, {edge}, -1, user->kind().toQualString());
  Node* convert = insert_conversion(user, value, new_conversion(node, 0, -1));
  user->replaceInput(position, convert->output());
  ++to_plain_;
  if (writes_input(user, position)) {
    torch::jit::WithInsertPoint after(user->next());
    op::Builder<BlayoutBackOp> b(graph_);
    b.set(&BlayoutBackOp::self, value).set(&BlayoutBackOp::values, convert->output());
    insert(b.create(), value);
  }
}

bool BlockedRewriter::writes_input(const Node* node, size_t position) {
  if (node->kind() == c10::prim::Return) return false;
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr) return !graph_match::is_neutral(node) && node->kind().is_aten();
  if (position >= schema->arguments().size()) return schema->is_vararg();
  const c10::AliasInfo* alias = schema->arguments()[position].alias_info();
  return alias != nullptr && alias->isWrite();
}

void BlockedRewriter::walk(Block* block) {
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
  for (Node* node : nodes) {
    if (!removed_.count(node)) visit(node);
  }
}

void BlockedRewriter::visit(Node* node) {
  PostOp op;
  onednn::BinaryKind kind{};
  if (node->kind() == c10::prim::If) {
    for (Block* branch : node->blocks()) walk(branch);
    join_branches(node);
  } else if (node->kind() == c10::aten::conv2d && node->matches(kConvSchema) &&
             graph_match::is_attribute(node->input(1))) {
    convolution(node);
  } else if (eltwise_of(node, &op) && blocked(node->input(0)) && writable(node)) {
    std::vector<PostOp> chain = {op};
    Node* last = absorb_eltwise(node, chain);
    const int edge = edge_of(node->input(0));
    torch::jit::WithInsertPoint point(node);
    op::Builder<BeltwiseOp> b(graph_);
    b.set(&BeltwiseOp::input, node->input(0));
    set_post_ops(b, chain, &BeltwiseOp::kinds, &BeltwiseOp::alpha, &BeltwiseOp::beta);
    edges_[replace(node, last, b)] = edge;  // the input's layout
    ++others_;
  } else if (is_kind(node, {"aten::dropout", "aten::dropout_", "aten::feature_dropout"}) &&
             blocked(node->input(0)) && !train(node)) {
    node->output()->replaceAllUsesWith(node->input(0));
    node->destroy();
  } else if (pooling(node) || batch_norm(node) || concatenation(node) || channel_shuffle(node) ||
             chunk(node)) {
    ++others_;
  } else if (binary_of(node, &kind) && blocked(node->input(0)) && blocked(node->input(1)) &&
             writable(node)) {
    std::vector<PostOp> chain;
    Node* last = absorb_eltwise(node, chain);
    const int output = new_edge(last->output(), false);
    const int index = new_node(NodeKind::kJoin, {edge_of(node->input(0)), edge_of(node->input(1))},
                               output, node->kind().toQualString());
    const int conversion = new_conversion(index, 0, output);
    new_conversion(index, 1, output);
    torch::jit::WithInsertPoint point(node);
    op::Builder<BbinaryOp> b(graph_);
    b.set(&BbinaryOp::a, node->input(0)).set(&BbinaryOp::b, node->input(1));
    b.constant(&BbinaryOp::graph, handle_);
    b.constant(&BbinaryOp::conversion, static_cast<int64_t>(conversion));
    b.constant(&BbinaryOp::kind, static_cast<int64_t>(kind));
    set_post_ops(b, chain, &BbinaryOp::post_kinds, &BbinaryOp::post_alpha, &BbinaryOp::post_beta);
    edges_[replace(node, last, b)] = output;
    ++others_;
  } else {
    for (Block* inner : node->blocks()) {
      walk(inner);
      for (size_t i = 0; i < inner->return_node()->inputs().size(); ++i) {
        sink(inner->return_node(), i);
      }
    }
    if (!graph_match::reads_metadata_only(node)) {
      for (size_t i = 0; i < node->inputs().size(); ++i) sink(node, i);
    }
  }
}

bool BlockedRewriter::train(const Node* node) {
  bool t = true;
  return !constant_bool(node->input(2), &t) || t;
}

Node* BlockedRewriter::absorb_eltwise(Node* from, std::vector<PostOp>& chain) {
  Node* last = from;
  PostOp op;
  for (Node* next = sole_reader(last->output()); next != nullptr && eltwise_of(next, &op) &&
                                                 next->input(0) == last->output() && writable(next);
       next = sole_reader(last->output())) {
    chain.push_back(op);
    last = next;
    ++fused_;
  }
  return last;
}

void BlockedRewriter::retire(Node* first, Node* last, Value* result) {
  std::vector<Node*> chain;
  for (Node* n = last;; n = n->input(0)->node()) {
    chain.push_back(n);
    if (n == first) break;
  }
  for (Node* n : chain) n->output()->replaceAllUsesWith(result);
  for (Node* n : chain) {
    removed_.insert(n);
    n->destroy();
  }
}

void BlockedRewriter::convolution(Node* node) {
  const ConvFusion f =
      fuse_after(node, has_set_attr_, [this](const Value* v) { return blocked(v); });
  fused_ += f.taken();
  int input = edge_of(node->input(0));
  if (input < 0) input = new_edge(node->input(0), true);  // the region starts: NCHW
  const int output = new_edge(f.last->output(), false);
  std::vector<int> plan_inputs = {input};
  if (f.residual) plan_inputs.push_back(edge_of(f.residual));
  const int index = new_node(NodeKind::kConv, plan_inputs, output, f.last->output()->debugName());
  const int residual_conversion = f.residual ? new_conversion(index, 1, output) : -1;
  torch::jit::WithInsertPoint point(node);
  op::Builder<BconvOp> b(graph_);
  b.set(&BconvOp::input, node->input(0));
  conv::set_conv(b, node);
  b.constant(&BconvOp::site, tuned::new_site());
  conv::set_batch_norm(b, graph_, f.batch_norm);
  b.constant(&BconvOp::graph, handle_);
  set_post_ops(b, f.post, &BconvOp::post_kinds, &BconvOp::post_alpha, &BconvOp::post_beta);
  if (f.residual) {
    b.set(&BconvOp::residual, f.residual);
  } else {
    b.constant(&BconvOp::residual, c10::IValue());
  }
  b.constant(&BconvOp::node, static_cast<int64_t>(index));
  b.constant(&BconvOp::residual_conversion, static_cast<int64_t>(residual_conversion));
  Node* made = insert(b.create(), f.last->output());
  const std::vector<Node*> chain = fused_chain(node, f);
  for (Node* n : chain) n->output()->replaceAllUsesWith(made->output());
  for (Node* n : chain) {
    removed_.insert(n);
    n->destroy();
  }
  edges_[made->output()] = output;
  ++convolutions_;
}

void BlockedRewriter::join_branches(Node* node) {
  for (size_t i = 0; i < node->outputs().size(); ++i) {
    bool any = false, all_tensors = true;
    for (Block* branch : node->blocks()) {
      any = any || blocked(branch->outputs()[i]);
      all_tensors =
          all_tensors && branch->outputs()[i]->type()->kind() == c10::TypeKind::TensorType;
    }
    if (!any) continue;
    if (!all_tensors) {  // an Optional or a list: plain everywhere
      for (Block* branch : node->blocks()) sink(branch->return_node(), i);
      continue;
    }
    std::vector<int> inputs;
    for (Block* branch : node->blocks()) {
      const int edge = edge_of(branch->outputs()[i]);
      inputs.push_back(edge >= 0 ? edge : new_edge(branch->outputs()[i], true));
    }
    const int output = new_edge(node->outputs()[i], false);
    const int index =
        new_node(NodeKind::kJoin, inputs, output, "prim::If " + node->outputs()[i]->debugName());
    for (size_t b = 0; b < node->blocks().size(); ++b) {
      Node* ret = node->blocks()[b]->return_node();
      Node* convert =
          insert_conversion(ret, ret->input(i), new_conversion(index, static_cast<int>(b), output));
      ret->replaceInput(i, convert->output());
      ++to_blocked_;
    }
    edges_[node->outputs()[i]] = output;
  }
}

int replace_regions(torch::jit::Graph& graph) {
  if (!kernel_options().blocked_layout || onednn::block_size() == 0 ||
      !graph_match::contains(graph.block(), c10::aten::conv2d)) {
    return 0;
  }
  const int64_t handle = layouts::register_graph({});
  const PlanOptions* options = runtime_pass::module_options(tuned::rewrite_owner());
  BlockedRewriter rewriter(graph, handle, options != nullptr && options->memory == Memory::kMin);
  const int convolutions = rewriter.rewrite();
  layouts::set_graph_spec(handle, rewriter.take_spec());
  if (convolutions > 0) {
    std::lock_guard<std::mutex> lock(report_mutex);
    report_lines().emplace_back(tuned::rewrite_owner(), rewriter.summary());
  }
  return convolutions;
}

std::string report() {
  std::lock_guard<std::mutex> lock(report_mutex);
  std::string out;
  for (const auto& [module, line] : report_lines()) out += line + "\n";
  return out;
}

void forget_reports(int64_t module) {
  std::lock_guard<std::mutex> lock(report_mutex);
  auto& lines = report_lines();
  lines.erase(std::remove_if(lines.begin(), lines.end(),
                             [&](const auto& line) { return line.first == module; }),
              lines.end());
}

namespace {
const bool blocked_report_registered = tuned::add_report(70, &report);  // kernel_report()'s order
}  // namespace

}  // namespace memoplan::torch_ext::blocked
