// What a region convolution of the blocked layout's graph pass (blocked_pass.cc) takes in with
// it, each when it is the only op reading the value before it: the batch norm (folded into the
// weights), activations, a residual addition of another region activation computed before the
// convolution, and activations after that (ResNet's relu(bn(conv(x)) + identity)). In-place ops
// only when nothing reads what they write after them. Torch's IR types; for blocked/ only.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <vector>

#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {

struct ConvFusion {
  torch::jit::Node* batch_norm = nullptr;
  std::vector<onednn::PostOp> post;  // in order; kResidualAdd adds `residual`
  torch::jit::Value* residual = nullptr;
  torch::jit::Node* last = nullptr;  // the last node taken (the convolution when none)
  int taken() const { return static_cast<int>(post.size()) + (batch_norm ? 1 : 0); }
};

// What the aten::conv2d node `conv` takes in; `in_region` says whether a value is one of the
// region's activations; with `graph_sets_attributes` no batch norm (graph_match.h).
ConvFusion fuse_after(torch::jit::Node* conv, bool graph_sets_attributes,
                      const std::function<bool(const torch::jit::Value*)>& in_region);

// The nodes `fusion.last` back to `conv` (each the only reader of the one before, through its
// first input except a residual add's): what the fused node replaces.
std::vector<torch::jit::Node*> fused_chain(torch::jit::Node* conv, const ConvFusion& fusion);

}  // namespace memoplan::torch_ext::blocked
