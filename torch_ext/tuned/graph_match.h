// What the tuned graph rewrites ask of a TorchScript graph (layout_pass.cc, blocked/
// blocked_pass.cc): where a value comes from, whether a use reads data, and the batch norm a
// convolution's output feeds. Torch's IR types; for tuned/ only.
#pragma once

#include <ATen/core/symbol.h>

namespace torch::jit {
struct Block;
struct Node;
struct Value;
}  // namespace torch::jit

namespace memoplan::torch_ext::graph_match {

// Whether `block` or any block inside it has a node of `kind`.
bool contains(torch::jit::Block* block, c10::Symbol kind);

// A use that produces no tensor (sizes, dtype, device, `is None`, but also item() or equal():
// fine for a layout whose values are the same tensor's, not for one that reorders them).
bool is_neutral(const torch::jit::Node* node);
// A use that reads a tensor's metadata only (size, dim, numel, dtype, device, `is None`).
bool reads_metadata_only(const torch::jit::Node* node);

// A module attribute, a tensor constant (a frozen module's weights) or None: storage that lives
// as long as the module. Through an If (nn.BatchNorm2d passes its statistics as
// `running_mean if ... else None`).
bool is_attribute(const torch::jit::Value* value);

// Whether `value` is (or can be made) defined before `point`: attribute reads and constants after
// it are moved up (inlining reads a submodule's attributes where its forward was).
bool defined_before(torch::jit::Value* value, torch::jit::Node* point);

// The batch norm that takes the convolution's output, its other uses neutral (the batch-size
// check of nn.BatchNorm2d), with attributes for its weights and statistics: foldable into the
// convolution's weights in eval mode. Its operands are moved before `conv`. Never when the graph
// sets attributes (`graph_sets_attributes`: they could change between the two).
torch::jit::Node* following_batch_norm(torch::jit::Node* conv, bool graph_sets_attributes);

}  // namespace memoplan::torch_ext::graph_match
