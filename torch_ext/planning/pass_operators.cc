// The planning runtime's graph operators: memoplan::AllocateSlab (picks the thread's plan for the
// inputs' key), memoplan::AllocateTensor (moves the matcher to its node), memoplan::EndPass, and
// the key of a pass's inputs (pass_operators.h).
#include "pass_operators.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <charconv>
#include <cstring>
#include <vector>

#include "op_record.h"
#include "pass_runtime.h"

namespace memoplan::torch_ext {
namespace {

using torch::jit::Node;

void append_int(std::string& key, int64_t v) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof digits, v);
  key.append(digits, result.ptr);
  key += ',';
}

// Everything the allocation sequence of a pass depends on that the inputs show: every tensor's
// dtype, device, sizes, strides and requires_grad, every scalar's value, recursively through lists
// and tuples. Compared in full, never by hash. With `dims` (the shape family's key): every tensor's
// sizes go to dims instead, and its strides are "c" when it is contiguous (they follow from the
// sizes), else written out.
void append_key(std::string& key, const c10::IValue& v, std::vector<int64_t>* dims = nullptr) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      key += "T-;";
      return;
    }
    key += 'T';
    key += c10::toString(t.scalar_type());
    key += c10::DeviceTypeName(t.device().type(), /*lower_case=*/true);
    key += t.requires_grad() ? "g[" : "[";
    if (dims) {
      append_int(key, t.dim());
      dims->insert(dims->end(), t.sizes().begin(), t.sizes().end());
      if (t.is_contiguous()) {
        key += "c];";
        return;
      }
    } else {
      for (int64_t d : t.sizes()) append_int(key, d);
    }
    key += '/';
    for (int64_t s : t.strides()) append_int(key, s);
    key += "];";
  } else if (v.isInt()) {
    key += 'i';
    append_int(key, v.toInt());
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    key += 'd';
    append_int(key, bits);
  } else if (v.isBool()) {
    key += v.toBool() ? "b1," : "b0,";
  } else if (v.isNone()) {
    key += "N,";
  } else if (v.isString()) {
    key += 's';
    key += v.toStringRef();
    key += '\0';
  } else if (v.isList()) {
    key += '[';
    for (const c10::IValue& e : v.toListRef()) append_key(key, e, dims);
    key += ']';
  } else if (v.isTuple()) {
    key += '(';
    for (const c10::IValue& e : v.toTupleRef().elements()) append_key(key, e, dims);
    key += ')';
  } else {
    key += '?';
    key += v.type()->str();
    key += ',';
  }
}

void append_mode(std::string& key) {
  append_int(key, at::get_num_threads());
  key += c10::InferenceMode::is_enabled() ? "inf,"
         : c10::GradMode::is_enabled()    ? "grad,"
                                          : "nograd,";
}

}  // namespace

const std::string& pass_key(const c10::IValue* inputs, size_t count) {
  static thread_local std::string key;
  key.clear();
  append_mode(key);
  for (size_t i = 0; i < count; ++i) append_key(key, inputs[i]);
  return key;
}

void pass_family_key(const void* context, std::string* key, std::vector<int64_t>* dims) {
  const PassInputs& in = *static_cast<const PassInputs*>(context);
  key->clear();
  dims->clear();
  append_mode(*key);
  for (size_t i = 0; i < in.count; ++i) append_key(*key, in.first[i], dims);
}

namespace {

torch::jit::Operation allocate_slab_op(const Node* node) {
  const size_t inputs = node->inputs().size();
  return [inputs](torch::jit::Stack& stack) {
    const AllocateSlabOp op = AllocateSlabOp::read(&stack[stack.size() - inputs], inputs);
    const PassInputs in{op.inputs, op.count};
    runtime_pass::allocate_slab(op.module, pass_key(op.inputs, op.count), {&pass_family_key, &in});
    torch::jit::drop(stack, inputs);
  };
}

torch::jit::Operation allocate_tensor_op(const Node* node) {
  const int64_t id = node->i(kNodeAttribute);
  return [id](torch::jit::Stack&) { runtime_pass::allocate_tensor(id); };
}

void end_pass(EndPassOp op) { runtime_pass::end_pass(op.module); }

// Registered with alias analysis CONSERVATIVE, which the JIT treats as a side effect: the nodes
// are never removed, merged or moved across one another by its optimizations.
torch::jit::RegisterOperators memoplan_operators({
    torch::jit::Operator("memoplan::AllocateSlab(...) -> ()", allocate_slab_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::AllocateTensor(...) -> ()", allocate_tensor_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    op::make_operator<EndPassOp, &end_pass>(c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace
}  // namespace memoplan::torch_ext
