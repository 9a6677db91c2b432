// ShuffleNet's channel shuffle as the blocked layout's graph pass (blocked_pass.cc) finds it in
// traced, scripted and frozen graphs, and its removal with the size arithmetic only it reads.
// Torch's IR types; for blocked/ only.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <unordered_set>

namespace memoplan::torch_ext::blocked {

// channel_shuffle(x, g): x.view(N, g, C // g, H, W), transpose(1, 2), contiguous(), then
// view(N, -1, H, W) (torchvision 0.14) or view(N, C, H, W) (0.21), or reshape for either view;
// each the only use of the one before, N, C, H, W x's sizes (aten::size(x, i) or the unpacked
// aten::size(x)), g a constant. Null nodes and groups 1 where there is none.
struct Shuffle {
  torch::jit::Node *view = nullptr, *transpose = nullptr, *contiguous = nullptr, *flat = nullptr;
  int64_t groups = 1;
};
// The shuffle that reads `x` (through its only data reader).
Shuffle shuffle_of(torch::jit::Value* x);

// The shuffle's four nodes replaced by `result`, and the size arithmetic that only they read
// removed; every node destroyed is added to `removed`.
void remove_shuffle(const Shuffle& shuffle, torch::jit::Value* result,
                    std::unordered_set<const torch::jit::Node*>* removed);

// A constant 1 or -3: the channels of a 4-d activation.
bool channel_dim(const torch::jit::Value* v);

}  // namespace memoplan::torch_ext::blocked
