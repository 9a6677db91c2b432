// The node queries of the blocked layout's graph pass (blocked_pass.cc): which ops oneDNN computes
// on the blocked layout (as a post-op or alone), constants read off the graph, and who reads a
// value after a node. Torch's IR types; for blocked/ only.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <initializer_list>
#include <string>

#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {

c10::Symbol symbol(const char* name);
bool is_kind(const torch::jit::Node* node, std::initializer_list<const char*> kinds);
bool in_place(const torch::jit::Node* node);  // aten::relu_, aten::add_, ...
// Whether `node` may run out of place: it is not in place, or nothing reads what it overwrites
// after it.
bool writable(torch::jit::Node* node);
bool constant_bool(const torch::jit::Value* v, bool* out);

// The elementwise function `node` computes on its first input, if oneDNN has it.
bool eltwise_of(const torch::jit::Node* node, onednn::PostOp* op);
// add(a, b, alpha=1) / add_ / mul / mul_ of two tensors.
bool binary_of(const torch::jit::Node* node, onednn::BinaryKind* kind);

// Whether some node other than `node` may read `value` after it: later in the same block or in a
// block entered later; not in another branch of an If that holds both; inside a loop, anything.
bool read_after(const torch::jit::Value* value, torch::jit::Node* node);
// The one node that reads `value`'s data, in `value`'s block, when every other use reads only
// metadata; else null.
torch::jit::Node* sole_reader(const torch::jit::Value* value);

}  // namespace memoplan::torch_ext::blocked
