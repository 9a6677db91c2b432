// The guard of folded `training` flags (settings_guard.h).
#include "settings_guard.h"

#include "flat_executor.h"
#include "graph_branch.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace memoplan::torch_ext {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kSettingsHold = c10::Symbol::fromQualString("memoplan::SettingsHold");
const c10::Symbol kRunUnfolded = c10::Symbol::fromQualString("memoplan::RunUnfolded");

// A folded flag: the attribute slot at each level from the module down (empty where a level's
// type is an interface: then its names, looked up at each call), and its value as folded.
struct Flag {
  std::vector<size_t> slots;
  std::vector<std::string> names;
  bool folded = false;
};

struct Guard {
  std::vector<Flag> flags;
  std::unique_ptr<torch::jit::GraphFunction> unfolded;
};

// By module id; never erased: an executor may make its operators again long after plan() (a new
// input shape's fallback, even after forget_module()), and must find the guard. Some KiB a planned
// type (each flag's slots and names: 53 flags in scripted mobilenet_v2; the unfolded forward's
// graph, a few calls).
std::mutex guards_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Guard>>& guards() {
  static auto* table = new std::unordered_map<int64_t, std::shared_ptr<const Guard>>();
  return *table;  // never destroyed
}

std::shared_ptr<const Guard> guard_of(int64_t id) {
  std::lock_guard<std::mutex> lock(guards_mutex);
  const auto it = guards().find(id);
  return it == guards().end() ? nullptr : it->second;
}

// The slots of `path` in `type`'s objects; empty where a level is not a class.
std::vector<size_t> slots_of(c10::ClassTypePtr type, const std::vector<std::string>& path) {
  std::vector<size_t> slots;
  for (size_t i = 0; i < path.size(); ++i) {
    const auto slot = type->findAttributeSlot(path[i]);
    if (!slot) return {};
    slots.push_back(*slot);
    if (i + 1 == path.size()) break;
    type = type->getAttribute(*slot)->cast<c10::ClassType>();
    if (!type) return {};
  }
  return slots;
}

// The flag's value in `self`'s modules, or nullptr.
const c10::IValue* flag_in(const Flag& flag, const c10::ivalue::Object& self) {
  const c10::ivalue::Object* object = &self;
  const size_t levels = flag.names.size();
  for (size_t level = 0;; ++level) {
    const c10::IValue* value;
    if (!flag.slots.empty()) {
      value = &object->getSlot(flag.slots[level]);
    } else {
      const auto slot = object->type()->findAttributeSlot(flag.names[level]);
      if (!slot) return nullptr;
      value = &object->getSlot(*slot);
    }
    if (level + 1 == levels) return value;
    if (!value->isObject()) return nullptr;
    object = &value->toObjectRef();
  }
}

// The first flag of `guard` that `self` does not hold as folded, or nullptr.
const Flag* differing(const Guard& guard, const c10::ivalue::Object& self) {
  for (const Flag& flag : guard.flags) {
    const c10::IValue* value = flag_in(flag, self);
    if (value == nullptr || !value->isBool() || value->toBool() != flag.folded) return &flag;
  }
  return nullptr;
}

std::shared_ptr<const Guard> guard_at(const Node* node) {
  std::shared_ptr<const Guard> guard = guard_of(branch_module(node));
  if (guard == nullptr) throw std::logic_error("memoplan: a settings guard with no module");
  return guard;
}

torch::jit::Operation settings_hold_op(const Node* node) {
  std::shared_ptr<const Guard> guard = guard_at(node);
  return [guard](torch::jit::Stack& stack) {
    const bool hold = differing(*guard, stack.back().toObjectRef()) == nullptr;
    stack.back() = hold;
  };
}

torch::jit::Operation run_unfolded_op(const Node* node) {
  std::shared_ptr<const Guard> guard = guard_at(node);
  const size_t inputs = node->inputs().size();
  return [guard, inputs](torch::jit::Stack& stack) {
    torch::jit::Stack call(stack.end() - static_cast<std::ptrdiff_t>(inputs), stack.end());
    torch::jit::drop(stack, inputs);
    guard->unfolded->run(call);
    for (c10::IValue& output : call) stack.push_back(std::move(output));
  };
}

// CONSERVATIVE: side effects to the JIT, never removed, merged or moved.
torch::jit::RegisterOperators guard_operators({
    torch::jit::Operator("memoplan::SettingsHold(...) -> bool", settings_hold_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::RunUnfolded(...) -> ...", run_unfolded_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace

bool guard_folded_settings(Graph& planned, int64_t id, const torch::jit::Module& module,
                           std::shared_ptr<Graph> unfolded,
                           const std::vector<FoldedAttribute>& folded) {
  auto guard = std::make_unique<Guard>();
  std::set<std::vector<std::string>> seen;  // a batch norm reads its flag 4 times
  for (const FoldedAttribute& f : folded) {
    if (!f.guarded || !seen.insert(f.path).second) continue;
    guard->flags.push_back({slots_of(module.type(), f.path), f.path, f.value == "b1"});
  }
  if (guard->flags.empty()) return false;
  guard->unfolded = std::make_unique<torch::jit::GraphFunction>(
      module.type()->name()->qualifiedName() + ".forward_unfolded", std::move(unfolded), nullptr);
  {
    std::lock_guard<std::mutex> lock(guards_mutex);
    guards()[id] = std::move(guard);
  }

  branch_body(planned, kSettingsHold, kRunUnfolded, id, /*body_first=*/true);
  return true;
}

const torch::jit::Block* planned_block(const Graph& graph) {
  const torch::jit::Block* body = flat::body(graph);
  for (const Node* node : body->nodes()) {
    if (node->kind() == c10::prim::If && node->input(0)->node()->kind() == kSettingsHold) {
      return node->blocks()[0];
    }
  }
  return body;
}

std::string differing_flag(int64_t id, const torch::jit::Module& module) {
  const std::shared_ptr<const Guard> guard = guard_of(id);
  const Flag* flag = guard == nullptr ? nullptr : differing(*guard, *module._ivalue());
  std::string name;
  if (flag != nullptr) {
    for (const std::string& part : flag->names) name += (name.empty() ? "" : ".") + part;
  }
  return name;
}

}  // namespace memoplan::torch_ext
