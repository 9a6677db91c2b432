// Graph queries shared by the tuned rewrites (graph_match.h).
#include "graph_match.h"

#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_set>

namespace memoplan::torch_ext::graph_match {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

bool has_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (has_tensor(contained)) return true;
  }
  return false;
}

bool encloses(const Block* outer, const Node* point) {
  for (const Block* b = point->owningBlock(); b != nullptr;) {
    if (b == outer) return true;
    const Node* owner = b->owningNode();
    b = owner ? owner->owningBlock() : nullptr;
  }
  return false;
}

}  // namespace

bool contains(Block* block, c10::Symbol kind) {
  for (Node* node : block->nodes()) {
    if (node->kind() == kind) return true;
    for (Block* inner : node->blocks()) {
      if (contains(inner, kind)) return true;
    }
  }
  return false;
}

bool is_neutral(const Node* node) {
  if (!node->blocks().empty() || node->kind() == c10::prim::Return) return false;
  for (const Value* output : node->outputs()) {
    if (has_tensor(output->type())) return false;
  }
  return true;
}

bool reads_metadata_only(const Node* node) {
  static const std::unordered_set<std::string> kinds = {
      "aten::size",   "aten::dim",       "aten::numel",   "prim::dtype",  "prim::device",
      "aten::__is__", "aten::__isnot__", "prim::is_cuda", "prim::layout", "aten::len"};
  return is_neutral(node) && kinds.count(node->kind().toQualString()) > 0;
}

bool is_attribute(const Value* value) {
  const Node* node = value->node();
  if (node->kind() == c10::prim::GetAttr || value->mustBeNone()) return true;
  // A frozen module's weights (torch.jit.freeze): tensors held by the graph itself.
  if (node->kind() == c10::prim::Constant && value->type()->cast<c10::TensorType>()) return true;
  if (node->kind() != c10::prim::If) return false;
  const size_t index = value->offset();
  for (const Block* branch : node->blocks()) {
    if (!is_attribute(branch->outputs()[index])) return false;
  }
  return true;
}

bool defined_before(Value* value, Node* point) {
  Node* def = value->node();
  if (def->kind() == c10::prim::Param) return encloses(def->owningBlock(), point);
  if (def->owningBlock() != point->owningBlock()) return encloses(def->owningBlock(), point);
  if (def->isBefore(point)) return true;
  if (def->kind() != c10::prim::GetAttr && def->kind() != c10::prim::Constant) return false;
  for (Value* input : def->inputs()) {
    if (!defined_before(input, point)) return false;
  }
  def->moveBefore(point);
  return true;
}

Node* following_batch_norm(Node* conv, bool graph_sets_attributes) {
  if (graph_sets_attributes) return nullptr;
  Node* batch_norm = nullptr;
  for (const torch::jit::Use& use : conv->output()->uses()) {
    Node* user = use.user;
    if (user->kind() == c10::aten::batch_norm && user->inputs().size() == 9 && use.offset == 0 &&
        user->owningBlock() == conv->owningBlock() && !batch_norm) {
      batch_norm = user;
    } else if (!is_neutral(user)) {
      return nullptr;
    }
  }
  if (!batch_norm) return nullptr;
  for (size_t i : {1, 2, 3, 4}) {
    if (!is_attribute(batch_norm->input(i))) return nullptr;
  }
  for (size_t i = 1; i < batch_norm->inputs().size(); ++i) {
    if (!defined_before(batch_norm->input(i), conv)) return nullptr;
  }
  return batch_norm;
}

}  // namespace memoplan::torch_ext::graph_match
