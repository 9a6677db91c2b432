// The planning runtime's three graph operators (memoplan::AllocateSlab / AllocateTensor /
// EndPass, registered in pass_operators.cc) and the key of a pass's inputs. graph_pass.cc puts
// the operators into a module's forward; plan_api.cc keys plan()'s requests the way a pass does.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "op_descriptor.h"

namespace memoplan::torch_ext {

inline const c10::Symbol kAllocateSlab = c10::Symbol::fromQualString("memoplan::AllocateSlab");
inline const c10::Symbol kAllocateTensor = c10::Symbol::fromQualString("memoplan::AllocateTensor");

// memoplan::AllocateSlab(module, inputs...): a pass of `module` begins, keyed by its inputs (the
// graph's after self). Variadic, so written out here rather than as op_descriptor.h's field list;
// every maker and reader of the node goes through it.
struct AllocateSlabOp {
  int64_t module = -1;
  const c10::IValue* inputs = nullptr;  // on the interpreter's stack
  size_t count = 0;
  // The node (not inserted).
  static torch::jit::Node* create(torch::jit::Graph& graph, torch::jit::Value* module,
                                  c10::ArrayRef<torch::jit::Value*> inputs) {
    std::vector<torch::jit::Value*> all = {module};
    all.insert(all.end(), inputs.begin(), inputs.end());
    return graph.create(kAllocateSlab, all, 0);
  }
  static const torch::jit::Value* module_of(const torch::jit::Node* node) { return node->input(0); }
  // From its `count` arguments at `first`.
  static AllocateSlabOp read(const c10::IValue* first, size_t count) {
    return {first[0].toInt(), first + 1, count - 1};
  }
};

// memoplan::EndPass(int module): the pass of `module` ends.
struct EndPassOp {
  static constexpr const char* kName = "memoplan::EndPass";
  static constexpr const char* kReturns = "()";
  int64_t module = -1;
  static constexpr auto fields() {
    return std::make_tuple(op::field("module", &EndPassOp::module));
  }
};
// The node's number is an attribute, not a constant input: one node per mark instead of three
// (two constants and the call) in every copy of the graph the executor keeps (bert_encoder: the
// constants' nodes and values were some 13 MiB of a planned process's peak).
inline const c10::Symbol kNodeAttribute = c10::Symbol::attr("memoplan_node");

// Everything the allocation sequence of a pass depends on that its inputs show (the thread count
// and grad mode, then every tensor's dtype, device, sizes, strides, every scalar's value), in a
// reused thread-local buffer: no allocation per pass once it has grown.
const std::string& pass_key(const c10::IValue* inputs, size_t count);

// The shape family of a pass's inputs (runtime_pass::FamilyOf's fill, `context` a PassInputs):
// the key with every tensor's sizes taken out, and those sizes.
struct PassInputs {
  const c10::IValue* first;
  size_t count;
};
void pass_family_key(const void* context, std::string* key, std::vector<int64_t>* dims);

}  // namespace memoplan::torch_ext
