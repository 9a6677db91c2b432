// The graph half of the blocked layout (blocked.h). One walk over the forward graph, in order:
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

#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "blocked.h"
#include "blocked_match.h"
#include "blocked_operators.h"
#include "conv_fusion.h"
#include "memoplan/torch/kernels.h"
#include "planning/planning.h"  // module_options
#include "shuffle_match.h"
#include "tuned/graph_match.h"
#include "tuned/layout_plan.h"
#include "tuned/reports.h"
#include "tuned/tuned_support.h"
#include "tuned/weight_cache.h"  // tuned::rewrite_owner

namespace memoplan::torch_ext::blocked {
namespace {

using layouts::GraphSpec;
using onednn::PostOp;
using NodeKind = GraphSpec::Node::Kind;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const char* const kConvSchema =
    "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
    "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor";

std::mutex report_mutex;
// By the module whose graph it describes.
std::vector<std::pair<int64_t, std::string>>& report_lines() {
  static auto* lines = new std::vector<std::pair<int64_t, std::string>>();  // never destroyed
  return *lines;
}

class BlockedRewriter {
 public:
  BlockedRewriter(torch::jit::Graph& graph, int64_t handle, bool memory_min)
      : graph_(graph), handle_(handle), memory_min_(memory_min) {
    spec_.layouts = layouts::kLayouts;
    spec_.default_layout = layouts::kBlocked;
  }

  GraphSpec take_spec() { return std::move(spec_); }

  int rewrite() {
    has_set_attr_ = graph_match::contains(graph_.block(), c10::prim::SetAttr);
    walk(graph_.block());
    Node* ret = graph_.block()->return_node();
    for (size_t i = 0; i < ret->inputs().size(); ++i) sink(ret, i);
    return convolutions_;
  }

  std::string summary() const {
    std::ostringstream out;
    out << "blocked layout (" << onednn::describe() << "): " << convolutions_ << " convolutions ("
        << fused_ << " batch norms / activations / residual additions fused), " << others_
        << " other ops, " << to_plain_ << " uses outside the region (made NCHW), " << to_blocked_
        << " branch ends joined";
    return out.str();
  }

 private:
  bool blocked(const Value* v) const { return edges_.count(v) > 0; }
  int edge_of(const Value* v) const {
    const auto it = edges_.find(v);
    return it == edges_.end() ? -1 : it->second;
  }
  int new_edge(const Value* v, bool fixed) {
    spec_.edges.push_back({fixed, v->debugName()});
    return static_cast<int>(spec_.edges.size()) - 1;
  }
  int new_node(NodeKind kind, std::vector<int> inputs, int output, std::string name) {
    spec_.nodes.push_back({kind, std::move(inputs), output, std::move(name)});
    return static_cast<int>(spec_.nodes.size()) - 1;
  }
  int new_conversion(int node, int input, int edge) {
    spec_.conversions.push_back({node, input, edge});
    return static_cast<int>(spec_.conversions.size()) - 1;
  }
  // memoplan::blayout(value) before `point`, priced as `conversion`.
  Node* insert_conversion(Node* point, Value* value, int conversion) {
    torch::jit::WithInsertPoint here(point);
    op::Builder<BlayoutOp> b(graph_);
    b.set(&BlayoutOp::self, value).constant(&BlayoutOp::graph, handle_);
    b.constant(&BlayoutOp::conversion, static_cast<int64_t>(conversion));
    return insert(b.create(), value);
  }

  // `node` (made at the insertion point) inserted there, typed as `typed_like`.
  Node* insert(Node* node, const Value* typed_like) {
    node->output()->setType(typed_like->type());
    graph_.insertNode(node);
    return node;
  }

  // A use that needs a plain tensor. One that writes into it (an in-place op the region does not
  // take) gets its result copied back into the region's tensor, which later uses read.
  void sink(Node* user, size_t position) {
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

  // Whether `node` may write into its input `position` (per its schema; unknown: yes).
  static bool writes_input(const Node* node, size_t position) {
    if (node->kind() == c10::prim::Return) return false;
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr) return !graph_match::is_neutral(node) && node->kind().is_aten();
    if (position >= schema->arguments().size()) return schema->is_vararg();
    const c10::AliasInfo* alias = schema->arguments()[position].alias_info();
    return alias != nullptr && alias->isWrite();
  }

  void walk(Block* block) {
    std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());
    for (Node* node : nodes) {
      if (!removed_.count(node)) visit(node);
    }
  }

  void visit(Node* node) {
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
      const int index =
          new_node(NodeKind::kJoin, {edge_of(node->input(0)), edge_of(node->input(1))}, output,
                   node->kind().toQualString());
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

  static bool train(const Node* node) {
    bool t = true;
    return !constant_bool(node->input(2), &t) || t;
  }

  // Follows `from`'s output through activations that are its only reader, appending them to
  // `chain`; returns the last node taken (`from` when none).
  Node* absorb_eltwise(Node* from, std::vector<PostOp>& chain) {
    Node* last = from;
    PostOp op;
    for (Node* next = sole_reader(last->output());
         next != nullptr && eltwise_of(next, &op) && next->input(0) == last->output() &&
         writable(next);
         next = sole_reader(last->output())) {
      chain.push_back(op);
      last = next;
      ++fused_;
    }
    return last;
  }

  // The post-op chain as the ops take it: constants (kinds, alpha, beta) made at the graph's
  // insertion point.
  template <class Op>
  void set_post_ops(op::Builder<Op>& b, const std::vector<PostOp>& chain,
                    std::vector<int64_t> Op::*kinds, std::vector<double> Op::*alpha,
                    std::vector<double> Op::*beta) {
    std::vector<int64_t> k;
    std::vector<double> al, be;
    for (const PostOp& op : chain) {
      k.push_back(op.kind);
      al.push_back(op.alpha);
      be.push_back(op.beta);
    }
    b.constant(kinds, k).constant(alpha, al).constant(beta, be);
  }

  // Replaces the nodes `first`..`last` (a chain: each the only reader of the one before) by the
  // node `b` makes, inserted at the graph's insertion point; returns its output.
  template <class Op>
  Value* replace(Node* first, Node* last, const op::Builder<Op>& b) {
    Node* made = insert(b.create(), last->output());
    retire(first, last, made->output());
    return made->output();
  }

  // Points every use of the chain first..last at `result` (the uses left on the inner values
  // read sizes only, which the result shares) and removes the chain.
  void retire(Node* first, Node* last, Value* result) {
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

  void convolution(Node* node) {
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

  // max_pool2d / avg_pool2d (no divisor override) / adaptive_avg_pool2d on a blocked input.
  bool pooling(Node* node) {
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

  // aten::batch_norm of a region value that no convolution's epilogue took (DenseNet's, after a
  // concatenation), with the activations that follow it: memoplan::bnorm, on its input's layout.
  bool batch_norm(Node* node) {
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
        constant_equals_one(cat->input(1))) {  // the concatenation's gather does it
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
  // aten::batch_norm's operands after its input, as the ops take them.
  template <class Op>
  static void set_batch_norm_inputs(op::Builder<Op>& b, Node* bn) {
    b.set(&Op::weight, bn->input(1)).set(&Op::bias, bn->input(2));
    b.set(&Op::running_mean, bn->input(3)).set(&Op::running_var, bn->input(4));
    b.set(&Op::training, bn->input(5)).set(&Op::momentum, bn->input(6));
    b.set(&Op::eps, bn->input(7));
  }
  static bool constant_equals_one(const Value* v) {
    const auto c = torch::jit::constant_as<int64_t>(v);
    return c && *c == 1;
  }

  // A prim::ListConstruct read only by aten::cat(list, 1), of region values
  // (float: another operand's dtype would promote): memoplan::bcat, a join the plan prices; with
  // the channel shuffle that reads the result (shuffle_of), one op. Not under memory "min", whose
  // sharing pass lays a concatenation's inputs in its output instead (DenseNet, Inception).
  bool concatenation(Node* list) {
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

  // A channel shuffle of a region value that is no concatenation taken here (an If's output):
  // memoplan::bcat of it alone.
  bool channel_shuffle(Node* view) {
    if (!is_kind(view, {"aten::view", "aten::reshape"}) || !blocked(view->input(0))) return false;
    const Shuffle shuffle = shuffle_of(view->input(0));
    if (shuffle.view != view) return false;
    torch::jit::WithInsertPoint point(view);
    Node* list = graph_.insertNode(graph_.createList(c10::TensorType::get(), {view->input(0)}));
    remove_shuffle(shuffle, concatenate(list, shuffle.groups, shuffle.flat), &removed_);
    return true;
  }

  // memoplan::bcat of `list`'s tensors (region values), then shuffled in `groups` (1: not), made
  // at the insertion point, typed as `typed_like`'s output: a join of the list's edges.
  Value* concatenate(Node* list, int64_t groups, const Node* typed_like) {
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

  // aten::chunk(x, chunks, 1) of a region value, read by one prim::ListUnpack: memoplan::bchunk,
  // the chunks on x's layout. They are copies where aten's are views of x: taken only where no
  // use writes into x or a chunk.
  bool chunk(Node* node) {
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

  template <class Op>
  void replace_simple(Node* node, const op::Builder<Op>& b) {
    const int edge = edge_of(node->input(0));
    torch::jit::WithInsertPoint point(node);
    Node* made = insert(b.create(), node->output());
    node->output()->replaceAllUsesWith(made->output());
    removed_.insert(node);
    node->destroy();
    edges_[made->output()] = edge;  // the input's layout
  }

  // An If's outputs that some branch yields from the region: in the region, each branch's value
  // converted at its end to the layout the plan gives the If's output.
  void join_branches(Node* node) {
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
        Node* convert = insert_conversion(ret, ret->input(i),
                                          new_conversion(index, static_cast<int>(b), output));
        ret->replaceInput(i, convert->output());
        ++to_blocked_;
      }
      edges_[node->outputs()[i]] = output;
    }
  }

  torch::jit::Graph& graph_;
  const int64_t handle_;
  const bool memory_min_;
  GraphSpec spec_;
  std::unordered_map<const Value*, int> edges_;  // the region's values: their layout graph edge
  std::unordered_set<const Node*> removed_;
  bool has_set_attr_ = false;
  int convolutions_ = 0, fused_ = 0, others_ = 0, to_plain_ = 0, to_blocked_ = 0;
};

}  // namespace

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
