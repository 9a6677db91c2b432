// The ops between a region's convolutions that the blocked layout's graph pass takes in besides
// activations and binary ops (blocked_rewriter.h): pooling, batch norms no convolution folds
// (memoplan::bnorm; of a concatenation, memoplan::bcat_norm), channel concatenations and
// ShuffleNet's shuffles of them (memoplan::bcat), chunks (memoplan::bchunk).
#include <torch/csrc/jit/ir/constants.h>

#include "blocked_match.h"
#include "blocked_operators.h"
#include "blocked_rewriter.h"
#include "shuffle_match.h"

namespace memoplan::torch_ext::blocked {

using torch::jit::Node;
using torch::jit::Value;

bool BlockedRewriter::pooling(Node* node) {
  if (node->inputs().empty() || !blocked(node->input(0)) || node->outputs().size() != 1) {
    return false;
  }
  if (node->kind() == symbol("aten::adaptive_avg_pool2d") && node->inputs().size() == 2) {
    op::Builder<BadaptiveAvgPoolOp> b(graph_);
    b.set(&BadaptiveAvgPoolOp::input, node->input(0));
    b.set(&BadaptiveAvgPoolOp::output_size, node->input(1));
    replace_simple(node, b);
    return true;
  }
  const bool max = node->kind() == symbol("aten::max_pool2d") && node->inputs().size() == 6;
  const bool avg = node->kind() == symbol("aten::avg_pool2d") && node->inputs().size() == 7 &&
                   node->input(6)->mustBeNone();
  if (!max && !avg) return false;
  op::Builder<BpoolOp> b(graph_);
  b.set(&BpoolOp::input, node->input(0)).set(&BpoolOp::kernel, node->input(1));
  b.set(&BpoolOp::stride, node->input(2)).set(&BpoolOp::padding, node->input(3));
  {
    torch::jit::WithInsertPoint point(node);
    b.constant(&BpoolOp::avg, avg);
    if (max) {
      b.set(&BpoolOp::dilation, node->input(4));
    } else {
      b.constant(&BpoolOp::dilation, std::vector<int64_t>{1, 1});
    }
    b.set(&BpoolOp::ceil_mode, node->input(max ? 5 : 4));
    if (avg) {
      b.set(&BpoolOp::count_include_pad, node->input(5));
    } else {
      b.constant(&BpoolOp::count_include_pad, true);
    }
  }
  replace_simple(node, b);
  return true;
}

namespace {

// The fused op takes the batch norm's place, after the concatenation's: its metadata readers
// between the two (a scripted nn.BatchNorm2d checks its input's dim() first) must read something
// made before. A dim() reads the first tensor concatenated (the same rank); any other reader there
// keeps the two ops apart.
bool read_before_by_dim_only(Node* cat, Node* node) {
  const Node* list = cat->input(0)->node();
  std::vector<Node*> dims;
  for (const torch::jit::Use& use : cat->output()->uses()) {
    if (use.user == node || !use.user->isBefore(node)) continue;
    if (use.user->kind() != c10::aten::dim || list->kind() != c10::prim::ListConstruct ||
        list->inputs().empty()) {
      return false;
    }
    dims.push_back(use.user);
  }
  for (Node* dim : dims) dim->replaceInput(0, list->input(0));
  return true;
}

}  // namespace

bool BlockedRewriter::batch_norm(Node* node) {
  if (node->kind() != c10::aten::batch_norm || node->inputs().size() != 9 ||
      !blocked(node->input(0))) {
    return false;
  }
  std::vector<PostOp> chain;
  Node* last = absorb_eltwise(node, chain);
  const int edge = edge_of(node->input(0));
  torch::jit::WithInsertPoint point(node);
  Node* cat = node->input(0)->node();
  if (cat->kind() == symbol(BcatOp::kName) && sole_reader(cat->output()) == node &&
      constant_equals_one(cat->input(1)) &&
      read_before_by_dim_only(cat, node)) {  // the concatenation's gather does it
    op::Builder<BcatNormOp> b(graph_);
    b.set(&BcatNormOp::tensors, cat->input(0)).set(&BcatNormOp::graph, cat->input(2));
    b.set(&BcatNormOp::conversion, cat->input(3));
    set_batch_norm_inputs(b, node);
    set_post_ops(b, chain, &BcatNormOp::post_kinds, &BcatNormOp::post_alpha,
                 &BcatNormOp::post_beta);
    Value* made = replace(node, last, b);
    cat->output()->replaceAllUsesWith(made);  // what is left reads its sizes
    removed_.insert(cat);
    cat->destroy();
    edges_[made] = edge;  // the concatenation's
    return true;
  }
  op::Builder<BnormOp> b(graph_);
  b.set(&BnormOp::input, node->input(0));
  set_batch_norm_inputs(b, node);
  set_post_ops(b, chain, &BnormOp::post_kinds, &BnormOp::post_alpha, &BnormOp::post_beta);
  edges_[replace(node, last, b)] = edge;  // the input's layout
  return true;
}

bool BlockedRewriter::concatenation(Node* list) {
  if (list->kind() != c10::prim::ListConstruct || list->inputs().empty() ||
      list->output()->uses().size() != 1 || memory_min_) {
    return false;
  }
  Node* cat = list->output()->uses()[0].user;
  if (cat->kind() != c10::aten::cat || cat->inputs().size() != 2 ||
      cat->input(0) != list->output() || cat->owningBlock() != list->owningBlock() ||
      !channel_dim(cat->input(1))) {
    return false;
  }
  for (const Value* v : list->inputs()) {
    if (!blocked(v)) return false;
  }
  const Shuffle shuffle = shuffle_of(cat->output());
  torch::jit::WithInsertPoint point(cat);
  Value* made = concatenate(list, shuffle.groups, shuffle.flat ? shuffle.flat : cat);
  if (shuffle.flat) remove_shuffle(shuffle, made, &removed_);
  // What is left reads the concatenation's sizes, which the result shares.
  cat->output()->replaceAllUsesWith(made);
  removed_.insert(cat);
  cat->destroy();
  return true;
}

bool BlockedRewriter::channel_shuffle(Node* view) {
  if (!is_kind(view, {"aten::view", "aten::reshape"}) || !blocked(view->input(0))) return false;
  const Shuffle shuffle = shuffle_of(view->input(0));
  if (shuffle.view != view) return false;
  torch::jit::WithInsertPoint point(view);
  Node* list = graph_.insertNode(graph_.createList(c10::TensorType::get(), {view->input(0)}));
  remove_shuffle(shuffle, concatenate(list, shuffle.groups, shuffle.flat), &removed_);
  return true;
}

Value* BlockedRewriter::concatenate(Node* list, int64_t groups, const Node* typed_like) {
  std::vector<int> inputs;
  for (const Value* v : list->inputs()) inputs.push_back(edge_of(v));
  const int output = new_edge(typed_like->output(), false);
  const int index =
      new_node(NodeKind::kJoin, inputs, output, groups > 1 ? "channel shuffle" : "aten::cat");
  const int conversion = new_conversion(index, 0, output);
  for (size_t i = 1; i < inputs.size(); ++i) new_conversion(index, static_cast<int>(i), output);
  op::Builder<BcatOp> b(graph_);
  b.set(&BcatOp::tensors, list->output()).constant(&BcatOp::groups, groups);
  b.constant(&BcatOp::graph, handle_);
  b.constant(&BcatOp::conversion, static_cast<int64_t>(conversion));
  Value* made = insert(b.create(), typed_like->output())->output();
  edges_[made] = output;
  return made;
}

bool BlockedRewriter::chunk(Node* node) {
  if (!is_kind(node, {"aten::chunk"}) || node->inputs().size() != 3 || !blocked(node->input(0)) ||
      !torch::jit::constant_as<int64_t>(node->input(1)) || !channel_dim(node->input(2)) ||
      node->output()->uses().size() != 1) {
    return false;
  }
  Node* unpack = node->output()->uses()[0].user;
  if (unpack->kind() != c10::prim::ListUnpack || unpack->owningBlock() != node->owningBlock()) {
    return false;
  }
  std::vector<const Value*> values = {node->input(0)};
  values.insert(values.end(), unpack->outputs().begin(), unpack->outputs().end());
  for (const Value* v : values) {
    for (const torch::jit::Use& use : v->uses()) {
      if (writes_input(use.user, use.offset)) return false;
    }
  }
  torch::jit::WithInsertPoint point(node);
  op::Builder<BchunkOp> b(graph_);
  b.set(&BchunkOp::self, node->input(0)).set(&BchunkOp::chunks, node->input(1));
  Node* made = insert(b.create(), node->output());
  node->output()->replaceAllUsesWith(made->output());
  removed_.insert(node);
  node->destroy();
  const int edge = edge_of(made->input(0));
  for (const Value* out : unpack->outputs()) edges_[out] = edge;
  return true;
}

}  // namespace memoplan::torch_ext::blocked
