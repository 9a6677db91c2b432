// The blocked channel layout (nChw16c / nChw8c, onednn.h) as a region of a CNN's forward graph:
// blocked_pass.cc finds the convolutions and the ops between them that oneDNN computes on that
// layout (activations, pooling, residual additions, squeeze-excitation products), fuses batch
// norms, activations and residual additions into the convolutions' epilogues, and converts at the
// region's edges only; blocked_ops.cc runs the ops. ATen types; for tuned/ only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "onednn.h"
#include "tuned/conv_weights.h"

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext::blocked {

// Rewrites the graph's convolution regions to the blocked layout (nothing when
// onednn::block_size() is 0). Returns how many convolutions it took.
int replace_regions(torch::jit::Graph& graph);
// What the pass did, one line per graph (for kernel_report()).
std::string report();

struct ConvArgs : conv::Call {
  int64_t site = -1;  // where its packed weights live
  bool input_blocked = true;
  std::vector<onednn::PostOp> post;    // in order; kResidualAdd adds `residual`
  c10::optional<at::Tensor> residual;  // blocked, the output's sizes
};

struct PoolArgs {
  bool avg = false;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false, count_include_pad = true;
};

at::Tensor conv(const at::Tensor& x, const ConvArgs& args);
at::Tensor eltwise(const at::Tensor& x, const std::vector<onednn::PostOp>& chain);
at::Tensor pool(const at::Tensor& x, const PoolArgs& args);
at::Tensor adaptive_avg_pool(const at::Tensor& x, const std::vector<int64_t>& output_size);
at::Tensor binary(const at::Tensor& a, const at::Tensor& b, onednn::BinaryKind kind,
                  const std::vector<onednn::PostOp>& post);
// Whether `x` is a blocked activation a region op made: sizes N x C x H x W, strides of the padded
// channel blocks, and the tag that follows its values in its storage.
bool is_blocked(const at::Tensor& x);
at::Tensor to_blocked(const at::Tensor& plain);  // NCHW or NHWC, any float dtype
at::Tensor to_plain(const at::Tensor& blocked);  // NCHW, contiguous
// Writes `plain` into the blocked tensor `blocked` (same sizes); returns `blocked`.
at::Tensor to_blocked_into(const at::Tensor& blocked, const at::Tensor& plain);
// aten's version of one elementwise post-op (the fallbacks).
at::Tensor apply_eltwise(const at::Tensor& y, const onednn::PostOp& op);

}  // namespace memoplan::torch_ext::blocked
