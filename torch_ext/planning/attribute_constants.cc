// Module attributes as constants (attribute_constants.h).
#include "attribute_constants.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace memoplan::torch_ext {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

bool sets_attributes(Block* block) {
  for (Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr) return true;
    for (Block* inner : node->blocks()) {
      if (sets_attributes(inner)) return true;
    }
  }
  return false;
}

void collect(Block* block, std::vector<Node*>& out) {
  for (Node* node : block->nodes()) {
    for (Block* inner : node->blocks()) collect(inner, out);
    if (node->kind() == c10::prim::GetAttr) out.push_back(node);
  }
}

// The names from the graph's `self` down to `node`'s attribute; nullopt when its object is not
// reached from `self` through attribute reads alone.
std::optional<std::vector<std::string>> path_of(const Node* node, const Value* self) {
  std::vector<std::string> path = {node->s(c10::attr::name)};
  const Value* object = node->input(0);
  while (object != self) {
    const Node* read = object->node();
    if (read->kind() != c10::prim::GetAttr) return std::nullopt;
    path.insert(path.begin(), read->s(c10::attr::name));
    object = read->input(0);
  }
  return path;
}

std::optional<c10::IValue> read(const torch::jit::Module& module,
                                const std::vector<std::string>& path) {
  c10::intrusive_ptr<c10::ivalue::Object> object = module._ivalue();
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!object->type()->hasAttribute(path[i])) return std::nullopt;
    const c10::IValue next = object->getAttr(path[i]);
    if (!next.isObject()) return std::nullopt;
    object = next.toObject();
  }
  if (!object->type()->hasAttribute(path.back())) return std::nullopt;
  return object->getAttr(path.back());
}

// A value folded into a constant, as text compared exactly; nullopt for one not folded.
std::optional<std::string> folded_text(const c10::IValue& v) {
  if (v.isBool()) return std::string(v.toBool() ? "b1" : "b0");
  if (v.isInt()) return "i" + std::to_string(v.toInt());
  if (v.isDouble()) {
    const double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    return "d" + std::to_string(bits);
  }
  if (v.isString()) return "s" + v.toStringRef();
  return std::nullopt;
}

// The attributes each rewritten graph took as constants, by module id.
std::mutex folded_mutex;
std::unordered_map<int64_t, std::vector<FoldedAttribute>>& folded_attributes() {
  static auto* table = new std::unordered_map<int64_t, std::vector<FoldedAttribute>>();
  return *table;  // never destroyed
}

}  // namespace

std::vector<FoldedAttribute> fold_attributes(const torch::jit::Module& module,
                                             torch::jit::Graph& graph) {
  std::vector<FoldedAttribute> folded;
  if (graph.inputs().empty() || sets_attributes(graph.block())) return folded;
  const Value* self = graph.inputs()[0];
  std::vector<Node*> reads;
  collect(graph.block(), reads);
  for (Node* node : reads) {
    const auto path = path_of(node, self);
    if (!path) continue;
    const auto value = read(module, *path);
    if (!value) continue;
    const auto text = folded_text(*value);
    if (!text || (path->back() == "training" && !value->isBool())) continue;
    torch::jit::WithInsertPoint point(node);
    Value* constant = graph.insertConstant(*value);
    node->output()->replaceAllUsesWith(constant);
    node->destroy();
    folded.push_back({*path, *text, path->back() == "training"});
  }
  return folded;
}

std::string first_difference(const torch::jit::Module& module,
                             const std::vector<FoldedAttribute>& folded) {
  for (const FoldedAttribute& f : folded) {
    if (f.guarded) continue;
    const auto value = read(module, f.path);
    const auto text = value ? folded_text(*value) : std::nullopt;
    if (!text || *text != f.value) {
      std::string name;
      for (const std::string& part : f.path) name += (name.empty() ? "" : ".") + part;
      return name;
    }
  }
  return "";
}

void keep_folded(int64_t id, std::vector<FoldedAttribute> folded) {
  // The guarded flags are checked at each call (settings_guard.h), never here: not kept.
  folded.erase(std::remove_if(folded.begin(), folded.end(),
                              [](const FoldedAttribute& f) { return f.guarded; }),
               folded.end());
  std::lock_guard<std::mutex> lock(folded_mutex);
  folded_attributes()[id] = std::move(folded);
}

void forget_folded(int64_t id) {
  std::lock_guard<std::mutex> lock(folded_mutex);
  folded_attributes().erase(id);
}

void refuse_other_settings(int64_t id, const torch::jit::Module& module) {
  std::lock_guard<std::mutex> lock(folded_mutex);
  const std::string differs = first_difference(module, folded_attributes()[id]);
  if (!differs.empty()) {
    throw std::runtime_error(
        "memoplan: a module of this type was planned with another value of "
        "its attribute '" +
        differs +
        "', which the planned graph holds as "
        "a constant; load or script this module anew to plan it");
  }
}

}  // namespace memoplan::torch_ext
