// The blocked layout's graph pass as one object (blocked_pass.cc's walk): the region's values and
// their layout-graph edges, the layout graph it builds (layouts::GraphSpec), the nodes it made and
// removed. blocked_pass.cc defines the walk, the convolutions, the If joins and the uses outside;
// op_rewrites.cc the other ops it takes in (pooling, batch norms, concatenations, channel
// shuffles, chunks). Torch's IR types; for blocked/ only.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "blocked_operators.h"
#include "memoplan/onednn/onednn.h"
#include "tuned/layout_plan.h"

namespace memoplan::torch_ext::blocked {

class BlockedRewriter {
 public:
  using Block = torch::jit::Block;
  using Node = torch::jit::Node;
  using Value = torch::jit::Value;
  using GraphSpec = layouts::GraphSpec;
  using NodeKind = GraphSpec::Node::Kind;
  using PostOp = onednn::PostOp;

  BlockedRewriter(torch::jit::Graph& graph, int64_t handle, bool memory_min)
      : graph_(graph), handle_(handle), memory_min_(memory_min) {
    spec_.layouts = layouts::kLayouts;
    spec_.default_layout = layouts::kBlocked;
  }

  GraphSpec take_spec() { return std::move(spec_); }

  int rewrite();

  std::string summary() const;

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
  void sink(Node* user, size_t position);

  // Whether `node` may write into its input `position` (per its schema; unknown: yes).
  static bool writes_input(const Node* node, size_t position);

  void walk(Block* block);

  void visit(Node* node);

  static bool train(const Node* node);

  // Follows `from`'s output through activations that are its only reader, appending them to
  // `chain`; returns the last node taken (`from` when none).
  Node* absorb_eltwise(Node* from, std::vector<PostOp>& chain);

  // The post-op chain as the ops take it: constants (kinds, alpha, beta) made at the graph's
  // insertion point.
  template <class Op>
  void set_post_ops(op::Builder<Op>& b, const std::vector<PostOp>& chain, op::Ints Op::*kinds,
                    op::Floats Op::*alpha, op::Floats Op::*beta) {
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
  void retire(Node* first, Node* last, Value* result);

  void convolution(Node* node);

  // max_pool2d / avg_pool2d (no divisor override) / adaptive_avg_pool2d on a blocked input.
  bool pooling(Node* node);

  // aten::batch_norm of a region value that no convolution's epilogue took (DenseNet's, after a
  // concatenation), with the activations that follow it: memoplan::bnorm, on its input's layout.
  bool batch_norm(Node* node);
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
  bool concatenation(Node* list);

  // A channel shuffle of a region value that is no concatenation taken here (an If's output):
  // memoplan::bcat of it alone.
  bool channel_shuffle(Node* view);

  // memoplan::bcat of `list`'s tensors (region values), then shuffled in `groups` (1: not), made
  // at the insertion point, typed as `typed_like`'s output: a join of the list's edges.
  Value* concatenate(Node* list, int64_t groups, const Node* typed_like);

  // aten::chunk(x, chunks, 1) of a region value, read by one prim::ListUnpack: memoplan::bchunk,
  // the chunks on x's layout. They are copies where aten's are views of x: taken only where no
  // use writes into x or a chunk.
  bool chunk(Node* node);

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
  void join_branches(Node* node);

  torch::jit::Graph& graph_;
  const int64_t handle_;
  const bool memory_min_;
  GraphSpec spec_;
  std::unordered_map<const Value*, int> edges_;  // the region's values: their layout graph edge
  std::unordered_set<const Node*> removed_;
  bool has_set_attr_ = false;
  int convolutions_ = 0, fused_ = 0, others_ = 0, to_plain_ = 0, to_blocked_ = 0;
};

}  // namespace memoplan::torch_ext::blocked
