// Node queries of the blocked layout's graph pass (blocked_match.h).
#include "blocked_match.h"

#include "tuned/graph_match.h"

namespace memoplan::torch_ext::blocked {

using onednn::PostOp;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

namespace {

bool constant_number(const Value* v, double* out) {
  const auto c = torch::jit::toIValue(const_cast<Value*>(v));
  if (!c || !(c->isDouble() || c->isInt())) return false;
  *out = c->isDouble() ? c->toDouble() : static_cast<double>(c->toInt());
  return true;
}

bool constant_string(const Value* v, std::string* out) {
  const auto c = torch::jit::toIValue(const_cast<Value*>(v));
  if (!c || !c->isString()) return false;
  *out = c->toStringRef();
  return true;
}

// The node of `block` that is or encloses `n`; null when `n` is outside `block`.
Node* ancestor_in(Node* n, const Block* block) {
  while (n != nullptr && n->owningBlock() != block) n = n->owningBlock()->owningNode();
  return n;
}

// Whether `user` may run after `node`: later in the same block or in a block entered later; not
// in another branch of an If that holds both. Inside a loop, anything may.
bool may_run_after(Node* user, Node* node) {
  for (Node* n = node->owningBlock()->owningNode(); n != nullptr;
       n = n->owningBlock()->owningNode()) {
    if (n->kind() == c10::prim::Loop) return true;
  }
  for (const Block* b = node->owningBlock(); b != nullptr;
       b = b->owningNode() ? b->owningNode()->owningBlock() : nullptr) {
    Node* u = ancestor_in(user, b);
    if (u == nullptr) continue;
    Node* v = ancestor_in(node, b);
    if (u == v) return u == node;  // inside `node` itself, or two branches of one If
    return u->isAfter(v);
  }
  return true;
}

}  // namespace

c10::Symbol symbol(const char* name) { return c10::Symbol::fromQualString(name); }

bool is_kind(const Node* node, std::initializer_list<const char*> kinds) {
  for (const char* k : kinds) {
    if (node->kind() == symbol(k)) return true;
  }
  return false;
}

bool in_place(const Node* node) {
  const std::string name = node->kind().toUnqualString();
  return !name.empty() && name.back() == '_';
}

bool writable(Node* node) { return !in_place(node) || !read_after(node->input(0), node); }

bool constant_bool(const Value* v, bool* out) {
  const auto c = torch::jit::toIValue(const_cast<Value*>(v));
  if (!c || !c->isBool()) return false;
  *out = c->toBool();
  return true;
}

bool eltwise_of(const Node* node, PostOp* op) {
  using E = onednn::Eltwise;
  const size_t n = node->inputs().size();
  auto set = [&](E kind, double alpha = 0, double beta = 0) {
    *op = {static_cast<int>(kind), static_cast<float>(alpha), static_cast<float>(beta)};
    return true;
  };
  if (node->outputs().size() != 1) return false;
  if (is_kind(node, {"aten::relu", "aten::relu_"}) && n == 1) return set(E::kRelu);
  if (is_kind(node, {"aten::relu6", "aten::relu6_"}) && n == 1) return set(E::kClip, 0, 6);
  if (is_kind(node, {"aten::hardswish", "aten::hardswish_"}) && n == 1) return set(E::kHardswish);
  if (is_kind(node, {"aten::hardsigmoid", "aten::hardsigmoid_"}) && n == 1) {
    return set(E::kHardsigmoid);
  }
  if (is_kind(node, {"aten::sigmoid", "aten::sigmoid_"}) && n == 1) return set(E::kSigmoid);
  if (is_kind(node, {"aten::silu", "aten::silu_"}) && n == 1) return set(E::kSilu);
  if (is_kind(node, {"aten::tanh", "aten::tanh_"}) && n == 1) return set(E::kTanh);
  double a = 0, b = 0;
  if (is_kind(node, {"aten::hardtanh", "aten::hardtanh_"}) && n == 3 &&
      constant_number(node->input(1), &a) && constant_number(node->input(2), &b)) {
    return set(E::kClip, a, b);
  }
  if (is_kind(node, {"aten::leaky_relu", "aten::leaky_relu_"}) && n == 2 &&
      constant_number(node->input(1), &a)) {
    return set(E::kRelu, a);
  }
  std::string approximate;
  if (node->kind() == symbol("aten::gelu") && n == 2 &&
      constant_string(node->input(1), &approximate) && approximate == "none") {
    return set(E::kGelu);
  }
  return false;
}

bool binary_of(const Node* node, onednn::BinaryKind* kind) {
  if (node->outputs().size() != 1) return false;
  if (is_kind(node, {"aten::add", "aten::add_"}) && node->inputs().size() == 3) {
    double alpha = 0;
    *kind = onednn::BinaryKind::kAdd;
    return constant_number(node->input(2), &alpha) && alpha == 1.0;
  }
  *kind = onednn::BinaryKind::kMul;
  return is_kind(node, {"aten::mul", "aten::mul_"}) && node->inputs().size() == 2;
}

bool read_after(const Value* value, Node* node) {
  for (const torch::jit::Use& use : value->uses()) {
    if (use.user != node && may_run_after(use.user, node)) return true;
  }
  return false;
}

Node* sole_reader(const Value* value) {
  Node* reader = nullptr;
  for (const torch::jit::Use& use : value->uses()) {
    if (graph_match::reads_metadata_only(use.user)) continue;
    if (reader != nullptr || use.user->owningBlock() != value->node()->owningBlock()) {
      return nullptr;
    }
    reader = use.user;
  }
  return reader;
}

}  // namespace memoplan::torch_ext::blocked
