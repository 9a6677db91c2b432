// The graph half of the blocked layout (blocked.h). One walk over the forward graph, in order:
//  - aten::conv2d with a module attribute for its weight becomes memoplan::bconv, its output
//    blocked; its input is read as it comes (blocked, or NCHW / NHWC at a region's start). Fused
//    into it, each when it is the only op reading the value before it: the batch norm (folded), an
//    activation, a residual addition of another blocked activation computed before the
//    convolution, and an activation after that (ResNet's relu(bn(conv(x)) + identity)).
//  - Activations (relu, ReLU6 / hardtanh, hardswish, hardsigmoid, sigmoid, SiLU, GELU, tanh,
//    leaky relu), max / average / adaptive average pooling, and add / mul of two blocked
//    activations (residuals, squeeze-excitation scales, broadcast per channel) on a blocked input
//    stay blocked, on oneDNN; dropout with a constant false `train` is dropped.
//  - An If whose branches yield a blocked activation yields one: the other branches convert at
//    their end (EfficientNet's stochastic depth keeps the region whole in eval mode).
//  - Every other use of a blocked value (a view, flatten, a list, the graph's output, an op with
//    a scalar operand) gets memoplan::to_plain in front of it; reads of sizes need nothing.
// In-place ops (relu_, add_) are taken only when nothing reads the value they write after them.
#include <torch/csrc/jit/ir/ir.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_set>

#include "blocked.h"
#include "blocked_match.h"
#include "memoplan/torch/kernels.h"
#include "tuned/graph_match.h"
#include "tuned/tuned_support.h"

namespace memoplan::torch_ext::blocked {
namespace {

using onednn::PostOp;
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
  explicit BlockedRewriter(torch::jit::Graph& graph) : graph_(graph) {}

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
        << " other ops blocked, " << to_plain_ << " conversions to NCHW, " << to_blocked_
        << " to blocked";
    return out.str();
  }

 private:
  bool blocked(const Value* v) const { return blocked_.count(v) > 0; }

  Node* insert_before(Node* point, const char* kind, std::vector<Value*> inputs,
                      const Value* typed_like) {
    torch::jit::WithInsertPoint insert(point);
    Node* node = graph_.create(symbol(kind), inputs, 1);
    node->output()->setType(typed_like->type());
    graph_.insertNode(node);
    return node;
  }

  // A use that needs a plain tensor. One that writes into it (an in-place op the region does not
  // take) gets its result copied back into the blocked tensor, which later uses read.
  void sink(Node* user, size_t position) {
    Value* value = user->input(position);
    if (!blocked(value)) return;
    Node* convert = insert_before(user, "memoplan::to_plain", {value}, value);
    user->replaceInput(position, convert->output());
    ++to_plain_;
    if (writes_input(user, position)) {
      torch::jit::WithInsertPoint after(user->next());
      Node* back = graph_.create(symbol("memoplan::to_blocked_"), {value, convert->output()}, 1);
      back->output()->setType(value->type());
      graph_.insertNode(back);
      ++to_blocked_;
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
      replace(node, last, "memoplan::beltwise", {node->input(0)}, chain);
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
      Value* kind_value = nullptr;
      {
        torch::jit::WithInsertPoint point(node);
        kind_value = graph_.insertConstant(static_cast<int64_t>(kind));
      }
      replace(node, last, "memoplan::bbinary", {node->input(0), node->input(1), kind_value}, chain);
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
  // `kind` node at `first` with `inputs`, then the post-op lists (kinds, alpha, beta).
  Node* replace(Node* first, Node* last, const char* kind, std::vector<Value*> inputs,
                const std::vector<PostOp>& chain) {
    append_post_ops(first, chain, inputs);
    Node* made = insert_before(first, kind, inputs, last->output());
    retire(first, last, made->output());
    blocked_.insert(made->output());
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
      inputs.push_back(graph_.insertConstant(blocked(node->input(0))));
    }
    append_post_ops(node, post, inputs);
    {
      torch::jit::WithInsertPoint point(node);
      inputs.push_back(residual ? residual : graph_.insertConstant(c10::IValue()));
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
    blocked_.insert(made->output());
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
    Node* made = insert_before(node, kind, std::move(inputs), node->output());
    node->output()->replaceAllUsesWith(made->output());
    removed_.insert(node);
    node->destroy();
    blocked_.insert(made->output());
  }

  // An If's outputs that some branch yields blocked: blocked, the other branches converting.
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
      for (Block* branch : node->blocks()) {
        Value* v = branch->outputs()[i];
        if (blocked(v)) continue;
        Node* convert = insert_before(branch->return_node(), "memoplan::to_blocked", {v}, v);
        branch->return_node()->replaceInput(i, convert->output());
        ++to_blocked_;
      }
      blocked_.insert(node->outputs()[i]);
    }
  }

  torch::jit::Graph& graph_;
  std::unordered_set<const Value*> blocked_;
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
  BlockedRewriter rewriter(graph);
  const int convolutions = rewriter.rewrite();
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
