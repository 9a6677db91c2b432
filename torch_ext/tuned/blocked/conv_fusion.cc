// What a region convolution takes in with it (conv_fusion.h).
#include "conv_fusion.h"

#include "blocked_match.h"
#include "tuned/graph_match.h"

namespace memoplan::torch_ext::blocked {

using onednn::PostOp;
using torch::jit::Node;
using torch::jit::Value;

ConvFusion fuse_after(Node* conv, bool graph_sets_attributes,
                      const std::function<bool(const Value*)>& in_region) {
  ConvFusion f;
  f.batch_norm = graph_match::following_batch_norm(conv, graph_sets_attributes);
  f.last = f.batch_norm ? f.batch_norm : conv;
  PostOp op;
  onednn::BinaryKind kind{};
  for (Node* next = sole_reader(f.last->output()); next != nullptr;
       next = sole_reader(f.last->output())) {
    if (eltwise_of(next, &op) && next->input(0) == f.last->output() && writable(next)) {
      f.post.push_back(op);
    } else if (!f.residual && binary_of(next, &kind) && kind == onednn::BinaryKind::kAdd &&
               writable(next)) {
      Value* other = next->input(next->input(0) == f.last->output() ? 1 : 0);
      // The residual must exist when the convolution runs, and (add_ into it) not be read later.
      if (!in_region(other) || other == f.last->output() ||
          !graph_match::defined_before(other, conv) ||
          (in_place(next) && next->input(0) == other && read_after(other, next))) {
        break;
      }
      f.residual = other;
      f.post.push_back({onednn::kResidualAdd, 0.f, 0.f});
    } else {
      break;
    }
    f.last = next;
  }
  return f;
}

std::vector<Node*> fused_chain(Node* conv, const ConvFusion& fusion) {
  std::vector<Node*> chain;
  for (Node* n = fusion.last; n != conv;) {
    chain.push_back(n);
    Value* from = n->input(0);
    if (fusion.residual &&
        (n->kind() == symbol("aten::add") || n->kind() == symbol("aten::add_")) &&
        n->input(0) == fusion.residual) {
      from = n->input(1);
    }
    n = from->node();
  }
  chain.push_back(conv);
  return chain;
}

}  // namespace memoplan::torch_ext::blocked
