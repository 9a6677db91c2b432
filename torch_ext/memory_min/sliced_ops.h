// Memory "min"'s op replacements for the bytes an op takes besides its input and output
// (sliced_ops.cc; plan/graph_pass.cc runs them under memory min). aten's convolution on
// oneDNN lays its input and weights out anew on every call and computes into a blocked output that
// it then copies into the plain one; its max pooling writes 8-byte indices that TorchScript's
// max_pool2d drops. At batch 1 these temporaries are most of the peak on resnet50 (a 9 MiB weight
// reorder), googlenet and inception_v3 (a stem convolution's blocked output beside its copy) and
// mobilenet_v2 (a depthwise convolution's input laid out anew). The replacements compute in parts
// -- bands of output rows or slices of output channels (onednn.h's SlicedConv), slices of images
// and channels for pooling -- each put in its place in the one output: the temporaries shrink to
// a part's. A convolution runs in parts only where the result is bit-identical to aten's whole
// one, checked once per shape and thread count on random input beside the pass
// (runtime_pass::Unrecorded); else it is aten's. No torch headers.
#pragma once

#include <cstdint>

#include "memoplan/torch/memory_min.h"  // sliced_counts()

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Replaces every aten::conv2d and aten::max_pool2d of the inlined forward by its sliced form
// (memoplan::conv2d_sliced, memoplan::max_pool2d_sliced, same arguments). Each decides per call
// whether parts are allowed and worth it (float, NCHW contiguous, no autograd, a dense or
// depthwise convolution; at least 256 KiB of temporaries saved, at most half of aten's left:
// estimated, then measured once per shape against aten's whole call, allocation_peak.h; a frozen
// graph's depthwise convolution stays whole where LibTorch's TensorExpr fuser would compute it);
// otherwise it is the aten op. A memoplan::budget_conv2d (a memory budget's) becomes
// memoplan::budget_conv2d_min: what the budget does not slice runs as conv2d_sliced
// (budget_conv.cc). Returns how many nodes it replaced.
int replace_sliced_ops(torch::jit::Graph& graph);

}  // namespace memoplan::torch_ext
