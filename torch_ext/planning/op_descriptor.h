// Typed descriptors of memoplan's TorchScript operators: one struct per operator whose members
// are its arguments, listed once, in order, by its static `fields()`. From that list come
//  - its schema (op::schema: "memoplan::name(Tensor input, int[] stride, ...) -> Tensor"),
//  - the reader its kernel takes the interpreter's stack through (op::pop: the struct, its
//    members moved off the stack, the arguments dropped),
//  - the builder a graph pass makes its node with (op::Builder: each input set by member, in any
//    order; the node's inputs in the schema's order), and the reader of a node already in a graph
//    (op::input),
//  - its registration (op::make_operator: the schema, the reader and the kernel, recorded as
//    op_record.h says).
// Nothing reads or writes an operator's inputs by position outside its descriptor.
//
// An operator, e.g.:
//   struct MatmulOp {
//     static constexpr const char* kName = "memoplan::matmul";
//     static constexpr const char* kReturns = "Tensor";
//     at::Tensor self, other;
//     int64_t site = -1;
//     bool other_is_weight = false;
//     static constexpr auto fields() {
//       return std::make_tuple(op::field("self", &MatmulOp::self),
//                              op::field("other", &MatmulOp::other),
//                              op::field("site", &MatmulOp::site),
//                              op::field("other_is_weight", &MatmulOp::other_is_weight));
//     }
//   };
//   at::Tensor matmul_kernel(MatmulOp op);
//   torch::jit::RegisterOperators ops({op::make_operator<MatmulOp, &matmul_kernel>()});
// Member types and their schema types: at::Tensor Tensor, c10::optional<at::Tensor> Tensor?,
// c10::List<at::Tensor> Tensor[], int64_t int, c10::optional<int64_t> int?,
// std::vector<int64_t> and op::Ints int[], double float, std::vector<double> and op::Floats
// float[], bool bool, std::string str, c10::IValue Any. A field may state its own schema type (an
// alias annotation, "Any[]", a default value).
//
// The reader costs what reading by position did: the members are filled at compile-time
// positions, tensors moved (no reference count taken), lists converted as before. op::Ints and
// op::Floats hold a few elements inline: an operator run on every node of a pass (a convolution's
// strides, its post-ops) reads them with no heap allocation.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "op_record.h"

namespace memoplan::torch_ext::op {

// One argument: its name in the schema, the member it fills, its schema type when not the
// member's own (nullptr: the member's), its default value in schema syntax (nullptr: none).
template <class Op, class T>
struct Field {
  const char* name;
  T Op::*member;
  const char* type;
  const char* fallback;
};
template <class Op, class T>
constexpr Field<Op, T> field(const char* name, T Op::*member, const char* type = nullptr,
                             const char* fallback = nullptr) {
  return {name, member, type, fallback};
}

// int[] and float[] of up to four elements inline (beyond that they allocate, as a vector would).
using Ints = c10::SmallVector<int64_t, 4>;
using Floats = c10::SmallVector<double, 4>;

// How a member type appears in a schema and is read off the stack.
template <class T>
struct Type;
template <>
struct Type<at::Tensor> {
  static constexpr const char* kSchema = "Tensor";
  static at::Tensor read(c10::IValue&& v) { return std::move(v).toTensor(); }
};
template <>
struct Type<c10::optional<at::Tensor>> {
  static constexpr const char* kSchema = "Tensor?";
  static c10::optional<at::Tensor> read(c10::IValue&& v) {
    if (v.isNone()) return c10::nullopt;
    return std::move(v).toTensor();
  }
};
template <>
struct Type<c10::List<at::Tensor>> {
  static constexpr const char* kSchema = "Tensor[]";
  static c10::List<at::Tensor> read(c10::IValue&& v) { return std::move(v).toTensorList(); }
};
template <>
struct Type<int64_t> {
  static constexpr const char* kSchema = "int";
  static int64_t read(c10::IValue&& v) { return v.toInt(); }
};
template <>
struct Type<c10::optional<int64_t>> {
  static constexpr const char* kSchema = "int?";
  static c10::optional<int64_t> read(c10::IValue&& v) {
    if (v.isNone()) return c10::nullopt;
    return v.toInt();
  }
};
template <>
struct Type<std::vector<int64_t>> {
  static constexpr const char* kSchema = "int[]";
  static std::vector<int64_t> read(c10::IValue&& v) { return v.toIntVector(); }
};
// op::Ints and op::Floats: each element read off the interpreter's list, the list not copied.
template <class E>
struct InlineList {
  static c10::SmallVector<E, 4> read(c10::IValue&& v) {
    c10::SmallVector<E, 4> out;
    for (const c10::IValue& e : v.toListRef()) out.push_back(e.to<E>());
    return out;
  }
};
template <>
struct Type<Ints> : InlineList<int64_t> {
  static constexpr const char* kSchema = "int[]";
};
template <>
struct Type<double> {
  static constexpr const char* kSchema = "float";
  static double read(c10::IValue&& v) { return v.toDouble(); }
};
template <>
struct Type<std::vector<double>> {
  static constexpr const char* kSchema = "float[]";
  static std::vector<double> read(c10::IValue&& v) { return v.toDoubleVector(); }
};
template <>
struct Type<Floats> : InlineList<double> {
  static constexpr const char* kSchema = "float[]";
};
template <>
struct Type<bool> {
  static constexpr const char* kSchema = "bool";
  static bool read(c10::IValue&& v) { return v.toBool(); }
};
template <>
struct Type<std::string> {
  static constexpr const char* kSchema = "str";
  static std::string read(c10::IValue&& v) { return v.toStringRef(); }
};
template <>
struct Type<c10::IValue> {
  static constexpr const char* kSchema = "Any";
  static c10::IValue read(c10::IValue&& v) { return std::move(v); }
};

// How many arguments the operator takes.
template <class Op>
constexpr size_t arity() {
  return std::tuple_size_v<decltype(Op::fields())>;
}

// "memoplan::name(Type name, ...) -> Returns".
template <class Op>
std::string schema() {
  std::string s = std::string(Op::kName) + "(";
  bool first = true;
  std::apply(
      [&](const auto&... f) {
        auto one = [&](const auto& field) {
          using T = std::remove_reference_t<decltype(std::declval<Op>().*(field.member))>;
          if (!first) s += ", ";
          first = false;
          s += field.type != nullptr ? field.type : Type<T>::kSchema;
          s += " ";
          s += field.name;
          if (field.fallback != nullptr) s += std::string("=") + field.fallback;
        };
        (one(f), ...);
        (void)one;  // an operator without fields
      },
      Op::fields());
  return s + ") -> " + Op::kReturns;
}

// The operator's symbol (made once).
template <class Op>
c10::Symbol symbol() {
  static const c10::Symbol s = c10::Symbol::fromQualString(Op::kName);
  return s;
}

// The struct from the operator's `arity<Op>()` arguments at `args`, each moved out.
template <class Op>
Op read(c10::IValue* args) {
  Op op;
  std::apply(
      [&](const auto&... f) {
        size_t i = 0;
        auto one = [&](const auto& field) {
          using T = std::remove_reference_t<decltype(op.*(field.member))>;
          op.*(field.member) = Type<T>::read(std::move(args[i++]));
        };
        (one(f), ...);
        (void)one;  // an operator without fields
      },
      Op::fields());
  return op;
}

// The struct from the top of `stack`; its arguments dropped.
template <class Op>
Op pop(torch::jit::Stack& stack) {
  constexpr size_t n = arity<Op>();
  if constexpr (n == 0) return Op{};
  Op op = read<Op>(&stack[stack.size() - n]);
  torch::jit::drop(stack, n);
  return op;
}

namespace detail {
template <class F, class M>
bool same_member(const F& field, M member) {
  if constexpr (std::is_same_v<decltype(field.member), M>) {
    return field.member == member;
  } else {
    return false;
  }
}
}  // namespace detail

// The position of `member` among the operator's arguments (a member not listed throws).
template <class Op, class T>
size_t index(T Op::*member) {
  size_t found = arity<Op>(), i = 0;
  std::apply([&](const auto&... f) { ((detail::same_member(f, member) ? found = i++ : i++), ...); },
             Op::fields());
  TORCH_CHECK(found < arity<Op>(), Op::kName, ": a member that is not one of its arguments");
  return found;
}

// The input of an operator's node (node->kind() == symbol<Op>()) that fills `member` (const for a
// const node).
template <class Op, class T, class N>
auto input(N* node, T Op::*member) {
  return node->inputs().at(index(member));
}

// Makes an operator's node: each input set by member, then create() (all must be set).
template <class Op>
class Builder {
 public:
  explicit Builder(torch::jit::Graph& graph) : graph_(graph), inputs_(arity<Op>(), nullptr) {}

  template <class T>
  Builder& set(T Op::*member, torch::jit::Value* value) {
    inputs_[index(member)] = value;
    return *this;
  }
  // A constant made at the graph's insertion point, now (so in the order of the calls).
  template <class T, class V>
  Builder& constant(T Op::*member, const V& value) {
    return set(member, graph_.insertConstant(value));
  }

  // The first values.size() arguments, in order: for an operator whose leading arguments are
  // those of the aten op it replaces, `values` that op's inputs.
  Builder& set_leading(c10::ArrayRef<torch::jit::Value*> values) {
    TORCH_CHECK(values.size() <= inputs_.size(), Op::kName, ": too many arguments");
    std::copy(values.begin(), values.end(), inputs_.begin());
    return *this;
  }

  // The inputs in the schema's order.
  const std::vector<torch::jit::Value*>& inputs() const {
    for (torch::jit::Value* v : inputs_) {
      TORCH_CHECK(v != nullptr, Op::kName, ": an argument was not set");
    }
    return inputs_;
  }
  // A new node of the operator (not inserted) with `outputs` outputs.
  torch::jit::Node* create(size_t outputs = 1) const {
    return graph_.create(symbol<Op>(), inputs(), outputs);
  }

 private:
  torch::jit::Graph& graph_;
  std::vector<torch::jit::Value*> inputs_;
};

namespace detail {
template <class T>
struct IsTuple : std::false_type {};
template <class... T>
struct IsTuple<std::tuple<T...>> : std::true_type {};

template <class Op, auto Kernel>
void run(torch::jit::Stack& stack) {
  using Result = decltype(Kernel(std::declval<Op>()));
  if constexpr (std::is_void_v<Result>) {
    Kernel(pop<Op>(stack));
  } else if constexpr (IsTuple<Result>::value) {
    Result result = Kernel(pop<Op>(stack));
    std::apply([&](auto&... r) { (stack.emplace_back(std::move(r)), ...); }, result);
  } else {
    Result result = Kernel(pop<Op>(stack));
    stack.emplace_back(std::move(result));
  }
}
}  // namespace detail

// As make_operator below, but unrecorded: the Python API's operators (plan, stats, ...), which
// run in no graph.
template <class Op, auto Kernel>
torch::jit::Operator make_api_operator(
    c10::AliasAnalysisKind alias = c10::AliasAnalysisKind::CONSERVATIVE) {
  return torch::jit::Operator(schema<Op>(), &detail::run<Op, Kernel>, alias);
}

// The operator: its schema, its arguments read into the struct and handed to Kernel (a function
// taking the struct by value), its result pushed (a std::tuple: each of its elements, for a
// schema returning several; void: nothing); recorded as op_record.h says.
template <class Op, auto Kernel>
torch::jit::Operator make_operator(
    c10::AliasAnalysisKind alias = c10::AliasAnalysisKind::FROM_SCHEMA) {
  return recorded_operator(schema<Op>(), &detail::run<Op, Kernel>, alias);
}

}  // namespace memoplan::torch_ext::op
