// The blocked convolution's implementations behind one onednn::Conv: oneDNN's direct kernels,
// oneDNN's Winograd (its F(2, 3) kernels, for small batches) and memoplan's Winograd F(2x2, 3x3)
// (kernels/winograd.h, for 3x3 stride-1 padding-1 convolutions whose epilogue it has: bias, ReLU /
// leaky ReLU / clip, a residual addition). Where more than one applies, each is measured on the
// shape (synthetic operands, three interleaved runs, once per shape and thread count) and the
// fastest is returned, a Winograd only where its gain pays for its extra bytes (winograd_conv.cc's
// rule); KernelOptions::winograd (kernels.h) kNever / kAlways keep oneDNN's direct
// kernels / take memoplan's Winograd wherever it applies. ATen's threads only; for tuned/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {

// What a Winograd form's extra bytes cost: the bytes of the weights of the model the convolution
// is in (0: unknown, no price), and how much faster (relatively) the convolution must get per
// share of them the form adds (winograd_conv.cc's rule).
struct WinogradPrice {
  uint64_t model_weight_bytes = 0;
  double gain_per_share = 0;
};
// The price in module `module` (-1: none): its weights, and the rate its memory option sets.
WinogradPrice winograd_price(int64_t module);
// Whether a Winograd form that makes its convolution `gain` faster (1 - its time / the direct
// kernels') and holds `extra_bytes` more than their packing is taken at `price`.
bool winograd_pays(double gain, double extra_bytes, const WinogradPrice& price);
std::shared_ptr<const onednn::Conv> best_conv(const onednn::ConvSpec& spec,
                                              const WinogradPrice& price);
// One line per measured shape: the times and the choice (for kernel_report()).
std::string winograd_report();

}  // namespace memoplan::torch_ext::blocked
