// The flat executor (flat_executor.h).
#include "flat_executor.h"

#include "graph_branch.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memoplan::torch_ext::flat {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;
using torch::jit::Value;

const c10::Symbol kFlatReady = c10::Symbol::fromQualString("memoplan::FlatReady");
const c10::Symbol kRunFlat = c10::Symbol::fromQualString("memoplan::RunFlat");

// Where a step reads a value: a register (>= 0) or a constant (-1 - its index).
using Operand = int32_t;

struct Body;

struct Step {
  enum class Kind : uint8_t { kOperation, kGetAttr, kIf };
  Kind kind = Kind::kOperation;
  // kOperation; mutable: LibTorch's Operation is called through a non-const operator()
  mutable torch::jit::Operation operation = nullptr;
  size_t slot = 0;  // kGetAttr: the attribute's slot in its object
  std::vector<Operand> inputs;
  std::vector<uint8_t> moved;    // input i is its value's last read: moved out of its register
  std::vector<int32_t> outputs;  // registers
  std::vector<int32_t> drops;    // cleared after the step: last reads not moved, unread outputs
  std::unique_ptr<Body> then_body, else_body;  // kIf
};

// A block: its steps, then its outputs (an If's results).
struct Body {
  std::vector<Step> steps;
  std::vector<Operand> outputs;
  std::vector<uint8_t> moved;
};

struct Program {
  Body body;
  std::vector<c10::IValue> constants;
  std::vector<int32_t> inputs;  // the forward's arguments' registers, self first
  int32_t registers = 0;
};

// ---- Running ------------------------------------------------------------------------------------

struct Frame {
  const std::vector<c10::IValue>& constants;
  std::vector<c10::IValue> registers;
  Stack stack;
  const c10::IValue& at(Operand o) const { return o < 0 ? constants[-1 - o] : registers[o]; }
  c10::IValue take(Operand o, bool move) {
    if (o < 0) return constants[-1 - o];
    return move ? std::move(registers[o]) : registers[o];
  }
};

void run(const Body& body, Frame& f) {
  for (const Step& s : body.steps) {
    switch (s.kind) {
      case Step::Kind::kOperation:
        f.stack.clear();
        for (size_t i = 0; i < s.inputs.size(); ++i) {
          f.stack.push_back(f.take(s.inputs[i], s.moved[i] != 0));
        }
        s.operation(f.stack);
        for (size_t i = 0; i < s.outputs.size(); ++i) {
          f.registers[s.outputs[i]] = std::move(f.stack[i]);
        }
        break;
      case Step::Kind::kGetAttr:
        f.registers[s.outputs[0]] = f.at(s.inputs[0]).toObjectRef().getSlot(s.slot);
        break;
      case Step::Kind::kIf: {
        const Body& branch = f.at(s.inputs[0]).toBool() ? *s.then_body : *s.else_body;
        run(branch, f);
        for (size_t i = 0; i < s.outputs.size(); ++i) {
          f.registers[s.outputs[i]] = f.take(branch.outputs[i], branch.moved[i] != 0);
        }
        break;
      }
    }
    for (const int32_t r : s.drops) f.registers[r] = c10::IValue();
  }
}

// ---- Programs by module id ----------------------------------------------------------------------

std::mutex programs_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Program>>& programs() {
  static auto* table = new std::unordered_map<int64_t, std::shared_ptr<const Program>>();
  return *table;  // never destroyed: a call may run during static destruction
}

std::shared_ptr<const Program> program_of(int64_t id) {
  std::lock_guard<std::mutex> lock(programs_mutex);
  const auto it = programs().find(id);
  return it == programs().end() ? nullptr : it->second;
}

// FlatReady hands the program it found to the RunFlat of the same call (nothing runs between
// the two on this thread): one lookup a call, and a program forgotten in between still runs.
thread_local std::shared_ptr<const Program> handed;

torch::jit::Operation flat_ready_op(const Node* node) {
  const int64_t id = branch_module(node);
  const size_t inputs = node->inputs().size();
  return [id, inputs](Stack& stack) {
    handed = program_of(id);
    torch::jit::drop(stack, inputs);
    stack.emplace_back(handed != nullptr);
  };
}

torch::jit::Operation run_flat_op(const Node* node) {
  const int64_t id = branch_module(node);
  return [id](Stack& stack) {
    std::shared_ptr<const Program> p = std::move(handed);
    if (p == nullptr) p = program_of(id);
    if (p == nullptr) throw std::logic_error("memoplan: a flat call of a module with no program");
    Frame f{p->constants, std::vector<c10::IValue>(static_cast<size_t>(p->registers)), {}};
    f.stack.reserve(32);
    const size_t n = p->inputs.size();
    for (size_t i = 0; i < n; ++i) {
      f.registers[p->inputs[i]] = std::move(stack[stack.size() - n + i]);
    }
    torch::jit::drop(stack, n);
    run(p->body, f);
    for (size_t i = 0; i < p->body.outputs.size(); ++i) {
      stack.push_back(f.take(p->body.outputs[i], p->body.moved[i] != 0));
    }
  };
}

// CONSERVATIVE: side effects to the JIT, never folded, merged or moved. FlatReady reads self so
// that no pass takes it for a constant.
torch::jit::RegisterOperators flat_operators({
    torch::jit::Operator("memoplan::FlatReady(...) -> bool", flat_ready_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::RunFlat(...) -> ...", run_flat_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
});

// ---- Building -----------------------------------------------------------------------------------

struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The interpreter's own instructions (LibTorch's interpreter/code_impl.h, emitNode) this program
// does not take: their operators, where they have one, are not what the interpreter runs
// (asynchronous calls, objects made or written, the executor's guards and profiling).
bool interpreter_only(c10::Symbol kind) {
  static const std::vector<c10::Symbol> kinds = {
      c10::prim::fork,           c10::aten::wait,           c10::prim::Enter,
      c10::prim::Exit,           c10::prim::SetAttr,        c10::prim::isinstance,
      c10::prim::CreateObject,   c10::prim::TypeCheck,      c10::prim::RequiresGradCheck,
      c10::prim::BailOut,        c10::prim::Guard,          c10::prim::profile,
      c10::prim::profile_ivalue, c10::prim::CallMethod,     c10::prim::CallFunction,
      c10::prim::DictConstruct,  c10::prim::Closure,        c10::prim::TupleSlice,
      c10::prim::Drop,           c10::prim::BailoutTemplate};
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// Whether every reader of list `v` takes it as an argument it does not write or alias (so one
// list made at build can serve every call): a schema's plain argument, or memoplan's own
// operators' (varargs, never writing a list).
bool never_written(const Value* v) {
  static const c10::Symbol memoplan_ns = c10::Symbol::fromQualString("namespaces::memoplan");
  for (const torch::jit::Use& u : v->uses()) {
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (schema == nullptr) return false;
    if (u.offset < schema->arguments().size()) {
      if (schema->arguments()[u.offset].alias_info() != nullptr) return false;
    } else if (!schema->is_vararg() || u.user->kind().ns() != memoplan_ns) {
      return false;
    }
  }
  return true;
}

torch::jit::Operation list_construct(const c10::TypePtr& element, size_t arity) {
  return [element, arity](Stack& stack) {
    c10::impl::GenericList list(element);
    list.reserve(arity);
    for (size_t i = stack.size() - arity; i < stack.size(); ++i)
      list.push_back(std::move(stack[i]));
    torch::jit::drop(stack, arity);
    stack.emplace_back(std::move(list));
  };
}

// A named tuple (GoogLeNet's outputs) keeps its type, as the interpreter's.
torch::jit::Operation tuple_construct(const c10::TypePtr& type, size_t arity) {
  const c10::TupleTypePtr named = type->expectRef<c10::TupleType>().name().has_value()
                                      ? type->expect<c10::TupleType>()
                                      : nullptr;
  return [named, arity](Stack& stack) {
    std::vector<c10::IValue> items(std::make_move_iterator(stack.end() - static_cast<long>(arity)),
                                   std::make_move_iterator(stack.end()));
    torch::jit::drop(stack, arity);
    stack.emplace_back(named ? c10::ivalue::Tuple::createNamed(std::move(items), named)
                             : c10::ivalue::Tuple::create(std::move(items)));
  };
}

// aten::warn (message, stacklevel): the interpreter's WARN warns once per node that has a
// warn_id, else at every call.
torch::jit::Operation warn(const Node* n) {
  const bool once = n->hasAttribute(c10::attr::warn_id);
  auto warned = std::make_shared<std::atomic<bool>>(false);
  const size_t arity = n->inputs().size();
  return [once, warned, arity](Stack& stack) {
    const std::string message = stack[stack.size() - arity].toStringRef();
    torch::jit::drop(stack, arity);
    if (once && warned->exchange(true)) return;
    TORCH_WARN(message);
  };
}

torch::jit::Operation unpack(bool tuple, size_t outputs) {
  return [tuple, outputs](Stack& stack) {
    const c10::IValue v = std::move(stack.back());
    stack.pop_back();
    if (tuple) {
      for (const c10::IValue& item : v.toTupleRef().elements()) stack.push_back(item);
      return;
    }
    const c10::ArrayRef<c10::IValue> items = v.toListRef();
    if (items.size() != outputs) {
      throw std::runtime_error("Expected " + std::to_string(outputs) +
                               " elements in a list but found " + std::to_string(items.size()));
    }
    for (const c10::IValue& item : items) stack.push_back(item);
  };
}

class Builder {
 public:
  Builder(Program& p, const Block* body) : p_(p), body_(body) { number(body); }

  int32_t input(const Value* v) { return fresh(v); }

  void emit(const Block* b, Body& out) {
    // Each value made here (the body's own: the forward's arguments too) ends at its last reader.
    std::unordered_map<const Node*, std::vector<const Value*>> ends;
    if (b == body_) {
      for (const Value* v : b->owningGraph()->inputs()) ends[last_reader(v, b)].push_back(v);
    }
    for (const Node* n : b->nodes()) {
      for (const Value* v : n->outputs()) ends[last_reader(v, b)].push_back(v);
    }
    for (const Node* n : b->nodes()) {
      Step s;
      if (!step_of(n, s)) continue;  // a constant
      for (const Value* v : n->inputs()) s.inputs.push_back(operand(v));
      s.moved.assign(s.inputs.size(), 0);
      for (const Value* v : ends[n]) {
        const Operand r = where_.at(v);
        if (r < 0) continue;
        bool moved = false;
        if (s.kind == Step::Kind::kOperation) {
          for (size_t i = s.inputs.size(); i-- > 0;) {
            if (n->input(i) == v) {
              s.moved[i] = 1;  // the last of its reads here; the ones before copy it
              moved = true;
              break;
            }
          }
        }
        if (!moved) s.drops.push_back(r);
      }
      for (const Value* v : n->outputs()) {
        s.outputs.push_back(fresh(v));
        if (!v->hasUses()) s.drops.push_back(s.outputs.back());
      }
      out.steps.push_back(std::move(s));
    }
    const Node* ret = b->return_node();
    for (size_t i = 0; i < ret->inputs().size(); ++i) {
      const Value* v = ret->input(i);
      const Operand r = operand(v);
      bool last = r >= 0 && home(v) == b && last_reader(v, b) == ret;
      for (size_t j = i + 1; j < ret->inputs().size(); ++j) last = last && ret->input(j) != v;
      out.outputs.push_back(r);
      out.moved.push_back(last ? 1 : 0);
    }
  }

 private:
  // Each node's index in its block, a block's return after its nodes.
  void number(const Block* b) {
    size_t i = 0;
    for (const Node* n : b->nodes()) {
      position_[n] = i++;
      for (const Block* inner : n->blocks()) number(inner);
    }
    position_[b->return_node()] = i;
  }

  int32_t fresh(const Value* v) {
    const int32_t r = p_.registers++;
    where_[v] = r;
    return r;
  }

  Operand constant(const Value* v, c10::IValue value) {
    p_.constants.push_back(std::move(value));
    const Operand o = -static_cast<Operand>(p_.constants.size());
    where_[v] = o;
    return o;
  }

  Operand operand(const Value* v) const {
    const auto it = where_.find(v);
    if (it == where_.end()) throw Refused("%" + v->debugName() + " is read before it is made");
    return it->second;
  }

  // The block whose registers own `v`: the body for the forward's arguments.
  const Block* home(const Value* v) const {
    return v->node() == body_->owningGraph()->param_node() ? body_ : v->node()->owningBlock();
  }

  // The node of `b` that reads `v` last, itself or through the blocks it holds; null when none
  // does. Reads outside `b` (the wrapper's) do not count.
  const Node* last_reader(const Value* v, const Block* b) const {
    const Node* last = nullptr;
    for (const torch::jit::Use& u : v->uses()) {
      const Node* a = u.user;
      while (a != nullptr && a->owningBlock() != b) {
        a = a->owningBlock() == nullptr ? nullptr : a->owningBlock()->owningNode();
      }
      if (a == nullptr) continue;
      if (last == nullptr || position_.at(a) > position_.at(last)) last = a;
    }
    return last;
  }

  // Fills `s` for `n` (kind, operation, branches); false where `n` became a constant.
  bool step_of(const Node* n, Step& s) {
    const c10::Symbol kind = n->kind();
    const size_t arity = n->inputs().size();
    const bool all_constant =
        std::all_of(n->inputs().begin(), n->inputs().end(), [&](const Value* v) {
          const auto it = where_.find(v);
          return it != where_.end() && it->second < 0;
        });
    if (kind == c10::prim::Constant) {
      const c10::optional<c10::IValue> value = torch::jit::toIValue(n->output());
      if (!value) throw Refused("a constant of no value");
      constant(n->output(), *value);
      return false;
    }
    if (kind == c10::prim::GetAttr) {
      const auto type = n->input()->type()->cast<c10::ClassType>();
      if (!type) throw Refused("an attribute of a value that is not an object");
      s.kind = Step::Kind::kGetAttr;
      s.slot = type->getAttributeSlot(n->s(c10::attr::name));
      return true;
    }
    if (kind == c10::prim::If) {
      s.kind = Step::Kind::kIf;
      s.then_body = std::make_unique<Body>();
      s.else_body = std::make_unique<Body>();
      emit(n->blocks()[0], *s.then_body);
      emit(n->blocks()[1], *s.else_body);
      return true;
    }
    if (kind == c10::prim::Loop) throw Refused("a loop (prim::Loop)");
    if (!n->blocks().empty() || n->hasAttribute(c10::attr::Subgraph) || interpreter_only(kind)) {
      throw Refused(std::string("an interpreter instruction (") + kind.toQualString() + ")");
    }
    if (kind == c10::prim::ListConstruct) {
      s.operation = list_construct(n->output()->type()->containedType(0), arity);
    } else if (kind == c10::prim::TupleConstruct) {
      s.operation = tuple_construct(n->output()->type(), arity);
    } else if (kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack) {
      s.operation = unpack(kind == c10::prim::TupleUnpack, n->outputs().size());
    } else if (kind == c10::aten::warn) {
      s.operation = warn(n);
    } else if (const torch::jit::Operator* op = n->maybeOperator()) {
      s.operation = n->getOperation();
      // A vararg operator registered as one Operation (aten::format, ...) reads its count of
      // inputs off the stack: the interpreter's OPN pushes it.
      if (op->hasOperation() && op->schema().is_vararg()) {
        s.operation = [inner = std::move(s.operation), arity](Stack& stack) mutable {
          stack.emplace_back(static_cast<int64_t>(arity));
          inner(stack);
        };
      }
    } else {
      throw Refused(std::string("an instruction with no operator (") + kind.toQualString() + ")");
    }
    // A tuple of constants, or a list of them that nothing writes, is made once.
    const bool construct = kind == c10::prim::TupleConstruct ||
                           (kind == c10::prim::ListConstruct && never_written(n->output()));
    if (construct && all_constant) {
      Stack stack;
      for (const Value* v : n->inputs()) stack.push_back(p_.constants[-1 - where_.at(v)]);
      s.operation(stack);
      constant(n->output(), std::move(stack.at(0)));
      return false;
    }
    return true;
  }

  Program& p_;
  const Block* body_;
  std::unordered_map<const Value*, Operand> where_;
  std::unordered_map<const Node*, size_t> position_;
};

}  // namespace

void wrap(Graph& graph, int64_t id) {
  branch_body(graph, kFlatReady, kRunFlat, id, /*body_first=*/false);
}

const Block* body(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::If && node->input(0)->node()->kind() == kFlatReady) {
      return node->blocks()[1];
    }
  }
  return graph.block();
}

bool enabled() {
  const char* executor = std::getenv("MEMOPLAN_EXECUTOR");
  return executor != nullptr && std::string(executor) == "flat";
}

std::string build(int64_t id, const Graph& graph) {
  const Block* b = body(graph);
  if (b == graph.block())
    return "interpreter: the default (MEMOPLAN_EXECUTOR=flat for the flat executor)";
  auto p = std::make_shared<Program>();
  try {
    Builder builder(*p, b);
    for (const Value* v : graph.inputs()) p->inputs.push_back(builder.input(v));
    builder.emit(b, p->body);
  } catch (const Refused& e) {
    return std::string("interpreter: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(programs_mutex);
  programs()[id] = std::move(p);
  return "flat";
}

void forget(int64_t id) {
  std::lock_guard<std::mutex> lock(programs_mutex);
  programs().erase(id);
}

}  // namespace memoplan::torch_ext::flat
