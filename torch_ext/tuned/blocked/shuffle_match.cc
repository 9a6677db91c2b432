// ShuffleNet's channel shuffle in the graph (shuffle_match.h).
#include "shuffle_match.h"

#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <vector>

#include "blocked_match.h"

namespace memoplan::torch_ext::blocked {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// The one node that uses `value` (in its block), or null.
Node* only_use(const Value* value) {
  if (value->uses().size() != 1) return nullptr;
  Node* user = value->uses()[0].user;
  return user->owningBlock() == value->node()->owningBlock() ? user : nullptr;
}

// Whether `v` is x.size(dim): aten::size(x, dim) or element `dim` of aten::size(x) unpacked.
bool dim_of(const Value* v, const Value* x, int64_t dim) {
  const Node* n = v->node();
  if (n->kind() == c10::aten::size && n->inputs().size() == 2 && n->input(0) == x) {
    const auto d = torch::jit::constant_as<int64_t>(n->input(1));
    return d && (*d == dim || *d == dim - 4);
  }
  if (n->kind() == c10::prim::ListUnpack && n->outputs().size() == 4 &&
      static_cast<int64_t>(v->offset()) == dim) {
    const Node* size = n->input(0)->node();
    return size->kind() == c10::aten::size && size->inputs().size() == 1 && size->input(0) == x;
  }
  return false;
}

// A constant int, or a one-element tensor constant, equal to `value`.
bool constant_equals(const Value* v, int64_t value) {
  const c10::optional<c10::IValue> c = torch::jit::toIValue(v);
  if (!c) return false;
  if (c->isInt()) return c->toInt() == value;
  return c->isTensor() && c->toTensor().numel() == 1 && c->toTensor().item<double>() == value;
}

// Whether `v` is x.size(1) // groups: aten::floordiv of ints (scripted), or the traced
// aten::Int(aten::floor_divide(prim::NumToTensor(x.size(1)), groups)).
bool per_group(const Value* v, const Value* x, int64_t groups) {
  const Node* n = v->node();
  if (n->kind() == c10::aten::Int && n->inputs().size() == 1) {
    n = n->input(0)->node();
    if (!is_kind(n, {"aten::floor_divide"}) || n->inputs().size() != 2 ||
        n->input(0)->node()->kind() != c10::prim::NumToTensor) {
      return false;
    }
    return dim_of(n->input(0)->node()->input(0), x, 1) && constant_equals(n->input(1), groups);
  }
  return n->kind() == c10::aten::floordiv && n->inputs().size() == 2 && dim_of(n->input(0), x, 1) &&
         constant_equals(n->input(1), groups);
}

// x.view(N, g, C // g, H, W) with g a constant, or null; its `groups`.
bool split_view(const Node* view, const Value* x, int64_t* groups) {
  if (!is_kind(view, {"aten::view", "aten::reshape"}) || view->inputs().size() != 2 ||
      view->input(0) != x) {
    return false;
  }
  const Node* sizes = view->input(1)->node();
  if (sizes->kind() != c10::prim::ListConstruct || sizes->inputs().size() != 5) return false;
  const auto g = torch::jit::constant_as<int64_t>(sizes->input(1));
  if (!g || *g < 1 || !dim_of(sizes->input(0), x, 0) || !per_group(sizes->input(2), x, *g) ||
      !dim_of(sizes->input(3), x, 2) || !dim_of(sizes->input(4), x, 3)) {
    return false;
  }
  *groups = *g;
  return true;
}

// transpose(1, 2) or transpose(2, 1).
bool swaps_groups(const Node* transpose) {
  if (!transpose || !is_kind(transpose, {"aten::transpose"})) return false;
  const auto d0 = torch::jit::constant_as<int64_t>(transpose->input(1));
  const auto d1 = torch::jit::constant_as<int64_t>(transpose->input(2));
  return d0 && d1 && std::min(*d0, *d1) == 1 && std::max(*d0, *d1) == 2;
}

// contiguous() in the contiguous memory format.
bool contiguous_call(const Node* contiguous) {
  const auto format = contiguous && is_kind(contiguous, {"aten::contiguous"})
                          ? torch::jit::constant_as<int64_t>(contiguous->input(1))
                          : c10::nullopt;
  return format && *format == static_cast<int64_t>(c10::MemoryFormat::Contiguous);
}

// view(N, -1, H, W) or view(N, C, H, W) of x's sizes.
bool flat_view(const Node* flat, const Value* x) {
  if (!flat || !is_kind(flat, {"aten::view", "aten::reshape"}) || flat->inputs().size() != 2) {
    return false;
  }
  const Node* back = flat->input(1)->node();
  if (back->kind() != c10::prim::ListConstruct || back->inputs().size() != 4) return false;
  const auto minus_one = torch::jit::constant_as<int64_t>(back->input(1));
  return (minus_one ? *minus_one == -1 : dim_of(back->input(1), x, 1)) &&
         dim_of(back->input(0), x, 0) && dim_of(back->input(2), x, 2) &&
         dim_of(back->input(3), x, 3);
}

// `v`'s node, where nothing reads it and it is size arithmetic, and then the nodes of its
// inputs likewise (nodes, never values, kept: a node's values go with it).
void drop_if_unused(Value* v, std::unordered_set<const Node*>* removed) {
  std::vector<Node*> work = {v->node()};
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (removed->count(n) ||
        !is_kind(n, {"prim::ListConstruct", "prim::ListUnpack", "aten::size", "aten::Int",
                     "aten::floor_divide", "aten::floordiv", "prim::NumToTensor"})) {
      continue;
    }
    bool used = false;
    for (const Value* out : n->outputs()) used = used || out->hasUses();
    if (used) continue;
    for (Value* in : n->inputs()) work.push_back(in->node());
    removed->insert(n);
    n->destroy();
  }
}

}  // namespace

Shuffle shuffle_of(Value* x) {
  Shuffle s;
  s.view = sole_reader(x);
  if (!s.view || !split_view(s.view, x, &s.groups)) return {};
  s.transpose = only_use(s.view->output());
  if (!swaps_groups(s.transpose)) return {};
  s.contiguous = only_use(s.transpose->output());
  if (!contiguous_call(s.contiguous)) return {};
  s.flat = only_use(s.contiguous->output());
  if (!flat_view(s.flat, x)) return {};
  return s;
}

void remove_shuffle(const Shuffle& s, Value* result, std::unordered_set<const Node*>* removed) {
  s.flat->output()->replaceAllUsesWith(result);
  std::vector<Value*> lists = {s.view->input(1), s.flat->input(1)};
  for (Node* n : {s.flat, s.contiguous, s.transpose, s.view}) {
    removed->insert(n);
    n->destroy();
  }
  for (Value* v : lists) drop_if_unused(v, removed);
}

bool channel_dim(const Value* v) {
  const auto dim = torch::jit::constant_as<int64_t>(v);
  return dim && (*dim == 1 || *dim == -3);
}

}  // namespace memoplan::torch_ext::blocked
