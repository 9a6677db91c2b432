// torch_ext/tuned/: memoplan's tuned kernels inside a TorchScript graph. The rewrites that replace
// hot ops (linear, products, the transformer encoder layer, convolutions) with memoplan's own,
// each measured against aten per shape during plan()'s warm-up; FluidML's layout plan over the
// convolutions' activations (layout_pass.cc, layout_plan.cc, the DP in layout/). Depends on the
// planning runtime (torch_ext/planning/planning.h: registers itself as PlanOptions::kernels ==
// "tuned", reads the pass key, makes persistent weights off the plan) and on kernels/ (the GEMM);
// neither depends on it. The public face (statistics, report, choice) is
// memoplan/torch/kernels.h. No torch headers here.
#pragma once

#include <cstdint>
#include <string>

#include "memoplan/torch/kernels.h"

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext {

// Replaces every aten::linear of `graph` (inlined) whose weight is a float matrix with
// memoplan::linear; a relu or gelu (approximate 'none') that is the linear's only user is fused
// into it; then the other rewrites below. What they make belongs to `module`. Returns how many ops
// were replaced.
int replace_hot_ops(torch::jit::Graph& graph, int64_t module);
// The part for aten::_transformer_encoder_layer_fwd (tuned_encoder.cc): memoplan::encoder_layer,
// the same layer on memoplan's GEMM (projections, attention products, feed-forward) with aten's
// layer norm and softmax.
int replace_encoder_layers(torch::jit::Graph& graph);
// aten::_native_multi_head_attention -> memoplan::attention (tuned_attention.cc).
int replace_attention(torch::jit::Graph& graph);
// The part for aten::addmm, aten::matmul and aten::bmm (tuned_matmul.cc): a product with a weight
// (a matrix that keeps its storage and version) runs as memoplan::linear on the packed weight;
// a product of two activations (attention scores) on memoplan's GEMM with B packed per call.
int replace_matmul_ops(torch::jit::Graph& graph);
std::string matmul_report();
// The part for aten::conv2d (layout_pass.cc, tuned_conv.cc, layout_plan.h): every convolution
// becomes memoplan::conv2d, measured in both activation layouts (NCHW, NHWC) and, when pointwise,
// on memoplan's GEMM; FluidML's layout plan then picks each activation's layout.
int replace_convolutions(torch::jit::Graph& graph);

}  // namespace memoplan::torch_ext
