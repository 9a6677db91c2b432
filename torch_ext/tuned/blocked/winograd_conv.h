// The blocked convolution's implementations behind one onednn::Conv: oneDNN's direct kernels,
// oneDNN's Winograd (its F(2, 3) kernels, for small batches) and memoplan's Winograd F(2x2, 3x3)
// (kernels/winograd.h, for 3x3 stride-1 padding-1 convolutions whose epilogue it has: bias, ReLU /
// leaky ReLU / clip, a residual addition). Where more than one applies, each is measured on the
// shape (synthetic operands, three interleaved runs, once per shape and thread count) and the
// fastest is returned; KernelOptions::winograd (kernels.h) kNever / kAlways keep oneDNN's direct
// kernels / take memoplan's Winograd wherever it applies. ATen's threads only; for tuned/.
#pragma once

#include <memory>
#include <string>

#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {

std::shared_ptr<const onednn::Conv> best_conv(const onednn::ConvSpec& spec);
// One line per measured shape: the times and the choice (for kernel_report()).
std::string winograd_report();

}  // namespace memoplan::torch_ext::blocked
