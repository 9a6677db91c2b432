// The graph half of the blocked layout (blocked.h). One walk over the forward graph, in order:
//  - aten::conv2d with a module attribute for its weight becomes memoplan::bconv; its input is
//    read as it comes (at a region's start: the graph's NCHW / NHWC tensor). Fused
//    into it, each when it is the only op reading the value before it: the batch norm (folded), an
//    activation, a residual addition of another blocked activation computed before the
//    convolution, and an activation after that (ResNet's relu(bn(conv(x)) + identity)).
//  - Activations (relu, ReLU6 / hardtanh, hardswish, hardsigmoid, sigmoid, SiLU, GELU, tanh,
//    leaky relu), max / average / adaptive average pooling, and add / mul of two blocked
//    activations (residuals, squeeze-excitation scales, broadcast per channel) on a blocked input
//    stay blocked, on oneDNN; dropout with a constant false `train` is dropped.
//  - An If whose branches yield a blocked activation yields one: the other branches convert at
//    their end (EfficientNet's stochastic depth keeps the region whole in eval mode).
//  - Every other use of a region's value (a view, flatten, a list, the graph's output, an op with
//    a scalar operand) gets memoplan::blayout to NCHW in front of it; reads of sizes need nothing.
// In-place ops (relu_, add_) are taken only when nothing reads the value they write after them.
// Alongside, the region's layout graph for the layout plan (layout_plan.h): an edge per value the
// region makes (the ops that keep their input's layout pass it on), a node per convolution (its
// residual a second input), binary op, If and use outside; a conversion for each operand that may
// have to change layout. While the first pass measures, every edge is blocked.
#include <torch/csrc/jit/ir/ir.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "blocked.h"
#include "blocked_match.h"
#include "memoplan/torch/kernels.h"
#include "tuned/graph_match.h"
#include "tuned/layout_plan.h"
#include "tuned/tuned_support.h"

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
std::vector<std::string>& report_lines() {
  static auto* lines = new std::vector<std::string>();  // never destroyed: read at exit
  return *lines;
}

class BlockedRewriter {
 public:
  BlockedRewriter(torch::jit::Graph& graph, int64_t handle) : graph_(graph), handle_(handle) {
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
  Value* constant(Node* point, int64_t v) {
    torch::jit::WithInsertPoint insert(point);
    return graph_.insertConstant(v);
  }
  // memoplan::blayout(value) before `point`, priced as `conversion`.
  Node* insert_conversion(Node* point, Value* value, int conversion) {
    return insert_before(point, "memoplan::blayout",
                         {value, constant(point, handle_), constant(point, conversion)}, value);
  }

  Node* insert_before(Node* point, const char* kind, std::vector<Value*> inputs,
                      const Value* typed_like) {
    torch::jit::WithInsertPoint insert(point);
    Node* node = graph_.create(symbol(kind), inputs, 1);
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
      Node* back = graph_.create(symbol("memoplan::blayout_back_"), {value, convert->output()}, 1);
      back->output()->setType(value->type());
      graph_.insertNode(back);
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
      Node* made = replace(node, last, "memoplan::beltwise", {node->input(0)}, chain, {});
      edges_[made->output()] = edge;  // the input's layout
      ++others_;
    } else if (is_kind(node, {"aten::dropout", "aten::dropout_", "aten::feature_dropout"}) &&
               blocked(node->input(0)) && !train(node)) {
      node->output()->replaceAllUsesWith(node->input(0));
      node->destroy();
    } else if (pooling(node)) {
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
      Node* made =
          replace(node, last, "memoplan::bbinary",
                  {node->input(0), node->input(1), constant(node, static_cast<int64_t>(kind))},
                  chain, {constant(node, handle_), constant(node, conversion)});
      edges_[made->output()] = output;
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

  // An in-place op may run out of place when nothing reads what it overwrites afterwards.
  static bool writable(Node* node) { return !in_place(node) || !read_after(node->input(0), node); }

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

  // The post-op list as the ops take it: constants (kinds, alpha, beta) made before `point`.
  void append_post_ops(Node* point, const std::vector<PostOp>& chain, std::vector<Value*>& inputs) {
    torch::jit::WithInsertPoint insert(point);
    std::vector<int64_t> kinds;
    std::vector<double> alpha, beta;
    for (const PostOp& op : chain) {
      kinds.push_back(op.kind);
      alpha.push_back(op.alpha);
      beta.push_back(op.beta);
    }
    inputs.push_back(graph_.insertConstant(kinds));
    inputs.push_back(graph_.insertConstant(alpha));
    inputs.push_back(graph_.insertConstant(beta));
  }

  // Replaces the nodes `first`..`last` (a chain: each the only reader of the one before) by one
  // `kind` node at `first` with `inputs`, then the post-op lists (kinds, alpha, beta), then
  // `trailing`.
  Node* replace(Node* first, Node* last, const char* kind, std::vector<Value*> inputs,
                const std::vector<PostOp>& chain, const std::vector<Value*>& trailing) {
    append_post_ops(first, chain, inputs);
    inputs.insert(inputs.end(), trailing.begin(), trailing.end());
    Node* made = insert_before(first, kind, inputs, last->output());
    retire(first, last, made->output());
    return made;
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
    Node* batch_norm = graph_match::following_batch_norm(node, has_set_attr_);
    Node* last = batch_norm ? batch_norm : node;
    std::vector<PostOp> post;
    Value* residual = nullptr;
    PostOp op;
    onednn::BinaryKind kind{};
    for (Node* next = sole_reader(last->output()); next != nullptr;
         next = sole_reader(last->output())) {
      if (eltwise_of(next, &op) && next->input(0) == last->output() && writable(next)) {
        post.push_back(op);
      } else if (!residual && binary_of(next, &kind) && kind == onednn::BinaryKind::kAdd &&
                 writable(next)) {
        Value* other = next->input(next->input(0) == last->output() ? 1 : 0);
        // The residual must exist when the convolution runs, and (add_ into it) not be read later.
        if (!blocked(other) || other == last->output() ||
            !graph_match::defined_before(other, node) ||
            (in_place(next) && next->input(0) == other && read_after(other, next))) {
          break;
        }
        residual = other;
        post.push_back({onednn::kResidualAdd, 0.f, 0.f});
      } else {
        break;
      }
      last = next;
      ++fused_;
    }
    int input = edge_of(node->input(0));
    if (input < 0) input = new_edge(node->input(0), true);  // the region starts: NCHW
    const int output = new_edge(last->output(), false);
    std::vector<int> plan_inputs = {input};
    if (residual) plan_inputs.push_back(edge_of(residual));
    const int index = new_node(NodeKind::kConv, plan_inputs, output, last->output()->debugName());
    const int residual_conversion = residual ? new_conversion(index, 1, output) : -1;
    std::vector<Value*> inputs(node->inputs().begin(), node->inputs().end());
    {
      torch::jit::WithInsertPoint point(node);
      inputs.push_back(graph_.insertConstant(tuned::new_site()));
      if (batch_norm) {  // weight, bias, running mean and variance, training, momentum, eps
        for (size_t i : {1, 2, 3, 4, 5, 6, 7}) inputs.push_back(batch_norm->input(i));
        ++fused_;
      } else {
        Value* none = graph_.insertConstant(c10::IValue());
        inputs.insert(inputs.end(), {none, none, none, none, graph_.insertConstant(false),
                                     graph_.insertConstant(0.0), graph_.insertConstant(0.0)});
      }
      inputs.push_back(graph_.insertConstant(batch_norm != nullptr));
      inputs.push_back(graph_.insertConstant(handle_));
    }
    append_post_ops(node, post, inputs);
    {
      torch::jit::WithInsertPoint point(node);
      inputs.push_back(residual ? residual : graph_.insertConstant(c10::IValue()));
      inputs.push_back(graph_.insertConstant(static_cast<int64_t>(index)));
      inputs.push_back(graph_.insertConstant(static_cast<int64_t>(residual_conversion)));
    }
    Node* made = insert_before(node, "memoplan::bconv", inputs, last->output());
    // The chain node -> [batch norm] -> ops: each the only reader of the one before, through its
    // first input except a residual add's (either operand).
    std::vector<Node*> chain;
    for (Node* n = last; n != node;) {
      chain.push_back(n);
      Value* from = n->input(0);
      if (residual && (n->kind() == symbol("aten::add") || n->kind() == symbol("aten::add_")) &&
          n->input(0) == residual) {
        from = n->input(1);
      }
      n = from->node();
    }
    chain.push_back(node);
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
      replace_simple(node, "memoplan::badaptive_avg_pool", {node->input(0), node->input(1)});
      return true;
    }
    const bool max = node->kind() == symbol("aten::max_pool2d") && node->inputs().size() == 6;
    const bool avg = node->kind() == symbol("aten::avg_pool2d") && node->inputs().size() == 7 &&
                     node->input(6)->mustBeNone();
    if (!max && !avg) return false;
    Value* t = nullptr;
    Value* dilation = nullptr;
    Value* ceil = nullptr;
    Value* include_pad = nullptr;
    {
      torch::jit::WithInsertPoint point(node);
      t = graph_.insertConstant(avg);
      dilation = max ? node->input(4) : graph_.insertConstant(std::vector<int64_t>{1, 1});
      ceil = node->input(max ? 5 : 4);
      include_pad = avg ? node->input(5) : graph_.insertConstant(true);
    }
    replace_simple(node, "memoplan::bpool",
                   {node->input(0), t, node->input(1), node->input(2), node->input(3), dilation,
                    ceil, include_pad});
    return true;
  }

  void replace_simple(Node* node, const char* kind, std::vector<Value*> inputs) {
    const int edge = edge_of(node->input(0));
    Node* made = insert_before(node, kind, std::move(inputs), node->output());
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
  GraphSpec spec_;
  std::unordered_map<const Value*, int> edges_;  // the region's values: their layout graph edge
  std::unordered_set<const Node*> removed_;
  bool has_set_attr_ = false;
  int convolutions_ = 0, fused_ = 0, others_ = 0, to_plain_ = 0, to_blocked_ = 0;
};

std::atomic<bool> enabled{true};

}  // namespace

int replace_regions(torch::jit::Graph& graph) {
  if (!enabled.load() || onednn::block_size() == 0 ||
      !graph_match::contains(graph.block(), c10::aten::conv2d)) {
    return 0;
  }
  const int64_t handle = layouts::register_graph({});
  BlockedRewriter rewriter(graph, handle);
  const int convolutions = rewriter.rewrite();
  layouts::set_graph_spec(handle, rewriter.take_spec());
  if (convolutions > 0) {
    std::lock_guard<std::mutex> lock(report_mutex);
    report_lines().push_back(rewriter.summary());
  }
  return convolutions;
}

std::string report() {
  std::lock_guard<std::mutex> lock(report_mutex);
  std::string out;
  for (const std::string& line : report_lines()) out += line + "\n";
  return out;
}

}  // namespace memoplan::torch_ext::blocked

namespace memoplan::torch_ext {

bool set_blocked_layout(bool on) { return blocked::enabled.exchange(on); }

}  // namespace memoplan::torch_ext
