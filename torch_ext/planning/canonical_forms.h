// Canonical graph forms: one pass, run by plan() on every forward graph it rewrites (whatever the
// options) before any other rewrite, that brings the forms a user's export leaves in the graph to
// the ones memoplan's rewrites match, computing the same bits:
//  - aten::_convolution (what torch.jit.trace records for every convolution) becomes
//    aten::conv1d / conv2d / conv3d, or conv_transpose1d / 2d / 3d, when its `transposed` flag and
//    its lists are constants (and, not transposed, its output padding is zero). Its cuDNN flags
//    (benchmark, deterministic, cudnn_enabled, allow_tf32) do nothing on the CPU;
//  - a list of tensors grown by aten::append and read only by concatenations (a scripted
//    DenseNet's `features`) becomes one list per concatenation, as torch.jit.trace records it;
//    LibTorch's RemoveListMutation folds an append into its list only when nothing reads the
//    list in between;
//  - op aliases (aten::absolute, aten::multiply, ...) become their canonical op
//    (torch::jit::NormalizeOps).
// Forms it does not know stay as they are (and run on aten). Frozen weights (tensor constants) need
// no rewrite: the tuned rewrites take a constant weight where they take a module attribute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

struct CanonicalForms {
  int64_t convolutions = 0;    // aten::_convolution nodes made aten::conv*d / conv_transpose*d
  int64_t left_as_is = 0;      // aten::_convolution nodes left (a flag or list not constant)
  int64_t appended_lists = 0;  // lists grown by aten::append made one list per concatenation
};

CanonicalForms canonicalize(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace memoplan::torch_ext
