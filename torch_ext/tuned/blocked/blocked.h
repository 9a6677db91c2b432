// The blocked channel layout (nChw16c / nChw8c, onednn.h) as a region of a CNN's forward graph:
// blocked_pass.cc finds the convolutions and the ops between them that oneDNN computes
// (activations, pooling, residual additions, squeeze-excitation products), fuses batch norms,
// activations and residual additions into the convolutions' epilogues, and hands the region's
// layout graph to the layout plan (layout_plan.h): every activation of the region is NCHW, NHWC or
// blocked, as measured per convolution and planned, with conversions only where the plan puts
// them; blocked_ops.cc (the convolution) and simple_ops.cc (the rest) run the ops on whichever
// layout their input has. ATen types; for tuned/ only.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/onednn/onednn.h"
#include "tuned/conv_weights.h"
#include "tuned/layout_plan.h"

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext::blocked {

// Rewrites the graph's convolution regions to the blocked layout (nothing when
// onednn::block_size() is 0). Returns how many convolutions it took.
int replace_regions(torch::jit::Graph& graph);
// What the pass did, one line per graph (for kernel_report()).
std::string report();
// The module will not run again: its graphs' lines go.
void forget_reports(int64_t module);

struct ConvArgs : conv::Call {
  int64_t site = -1;  // where its packed weights live
  onednn::Format output = onednn::Format::kBlocked;
  // In order; kResidualAdd adds `residual`. Inline: a call allocates nothing for its epilogue.
  c10::SmallVector<onednn::PostOp, 4> post;
  c10::optional<at::Tensor> residual;  // the output's sizes, any layout
  // The pass that measures the layouts: its packing goes after the call instead of staying at
  // the site, as the plan's primitive may read another (held at once, two forms of a 512 -> 512
  // layer were resnet18's tuned peak: 18 MiB above its steady state).
  bool transient_packing = false;
};

struct PoolArgs {
  bool avg = false;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false, count_include_pad = true;
};

// The region's ops. Each reads its inputs in whatever layout they come (blocked, NCHW, NHWC; any
// other strides are made NCHW first); the convolution writes args.output's layout, the binary op
// `output`'s (its operands converted to it where they differ), the others their input's.
at::Tensor conv(const at::Tensor& x, const ConvArgs& args);
// Whether oneDNN may run the convolution (else aten does: training, autograd, other dtypes).
bool onednn_may_run(const at::Tensor& x, const ConvArgs& args);
at::Tensor eltwise(const at::Tensor& x, const std::vector<onednn::PostOp>& chain);
at::Tensor pool(const at::Tensor& x, const PoolArgs& args);
at::Tensor adaptive_avg_pool(const at::Tensor& x, const std::vector<int64_t>& output_size);
at::Tensor binary(const at::Tensor& a, const at::Tensor& b, onednn::BinaryKind kind,
                  const std::vector<onednn::PostOp>& post,
                  onednn::Format output = onednn::Format::kBlocked);
// aten::batch_norm's operands after the input (weight and bias may be undefined).
struct BatchNormArgs {
  at::Tensor weight, bias, mean, var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
};
// The batch norm and then the post-ops, on x's layout (padding lanes stay zero); in training, or
// with operands it does not take, as aten computes it.
at::Tensor batch_norm(const at::Tensor& x, const BatchNormArgs& args,
                      const std::vector<onednn::PostOp>& post);
// Whether `x` is a blocked activation a region op made: sizes N x C x H x W, strides of the padded
// channel blocks, and the tag that follows its values in its storage.
bool is_blocked(const at::Tensor& x);
// The layout of a 4-d float activation: blocked (is_blocked), NCHW (contiguous) or NHWC
// (channels-last dense); anything else is read as NCHW once made contiguous.
onednn::Format format_of(const at::Tensor& x);
// Channel rearrangements (channel_ops.cc), each a new activation: `xs` concatenated along the
// channels in layout `output`, then with groups > 1 shuffled as ShuffleNet does
// (y.view(N, groups, C / groups, H, W).transpose(1, 2).contiguous().view(N, -1, H, W));
// aten::chunk along the channels, each chunk in x's layout.
at::Tensor cat_channels(const std::vector<at::Tensor>& xs, int64_t groups, onednn::Format output);
c10::List<at::Tensor> chunk_channels(const at::Tensor& x, int64_t chunks);
// batch_norm(cat_channels(xs, 1, output), bn, post) in one gather where it may (scale_shift.h).
at::Tensor cat_norm(const std::vector<at::Tensor>& xs, const BatchNormArgs& bn,
                    const std::vector<onednn::PostOp>& post, onednn::Format output);
// `x` in layout `to` (itself when it is in it already); float, any 4-d strides in.
at::Tensor convert(const at::Tensor& x, onednn::Format to);
at::Tensor to_blocked(const at::Tensor& x);  // convert(x, kBlocked)
at::Tensor to_plain(const at::Tensor& x);    // convert(x, kNchw): NCHW, contiguous
// `x` (any layout) converted into `target`, made by new_tensor in its layout with x's sizes:
// convert() and write_into() without the allocation (what the layout plan times). `op` names the
// operator in the error for an activation that is not a 4-d float.
void convert_into(const at::Tensor& target, const at::Tensor& x, const char* op = "blayout");
// Writes `values` into `target` (same sizes, any layout each; nothing when they are one tensor);
// returns `target`.
at::Tensor write_into(const at::Tensor& target, const at::Tensor& values);
// The costs the layout plan weighs for one region convolution on its input x: oneDNN's primitive
// for every (input, output) layout pair it has one for (Winograd's where it wins, blocked to
// blocked) timed on synthetic operands of x's shape, the conversion speed on x; then for every
// pair the plan may ask for, the cheapest primitive with the input converted to what it reads
// and its result to what the plan asked where they differ (`implementation`: read * 3 + written).
// oneDNN's reference loop and shapes it refuses count as layouts::kForbidden.
layouts::ConvCosts measure(const at::Tensor& x, const ConvArgs& args);
// aten's version of one elementwise post-op (the fallbacks).
at::Tensor apply_eltwise(const at::Tensor& y, const onednn::PostOp& op);

}  // namespace memoplan::torch_ext::blocked
