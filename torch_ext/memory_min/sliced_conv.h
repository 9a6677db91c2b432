// memoplan::conv2d_sliced's work as a call (sliced_ops.cc), for ops of tuned/ that end in a
// convolution and fall back to it (bn_relu_conv1x1.cc) or compute one in parts of their own
// (budget_conv.cc); the checks of parts against aten (each made once per key: a ChoiceCache); the
// counters sliced_counts() reports.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "memoplan/onednn/onednn.h"
#include "planning/choice_cache.h"  // the checks of parts, once per key

namespace memoplan::torch_ext {

// Slicing is for temporaries of at least this many bytes (a band of bn_relu_conv1x1 too); below,
// the calls it adds cost more than the bytes are worth.
constexpr int64_t kWorthBytes = 256 << 10;

// Whether `t` takes no part in autograd: memory min's ops compute in parts only then.
inline bool no_autograd(const at::Tensor& t) {
  return !(at::GradMode::is_enabled() && t.requires_grad());
}

// aten::conv2d's arguments, as memoplan's convolution ops take them first (sliced_operators.h).
struct ConvArgs {
  at::Tensor input, weight;
  c10::optional<at::Tensor> bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

// The convolution as one SlicedConvSpec, parts not chosen yet: for dense float NCHW tensors, a
// dense or depthwise convolution with a non-empty output; nullopt otherwise.
std::optional<onednn::SlicedConvSpec> conv_spec(const ConvArgs& a);

// aten's convolution of `input` (a's or a probe) with a's weights.
at::Tensor conv_whole(const ConvArgs& a, const at::Tensor& input);

// The parts of `s` where they compute aten's bytes for this shape and thread count (checked once
// per process on a random probe, beside the pass), else null.
std::shared_ptr<const onednn::SlicedConv> checked_parts(const ConvArgs& a,
                                                        const onednn::SlicedConvSpec& s);

// memoplan::conv2d_sliced: in parts where sliced_ops.h allows, else aten's call.
at::Tensor conv2d_sliced(const ConvArgs& a);

// What the checks of parts against aten share: byte-for-byte equality of two contiguous tensors,
// and the generator of their random probes (a fixed seed: the same probe in every process).
bool same_bytes(const at::Tensor& a, const at::Tensor& b);
at::Generator probe_generator();

// sliced_counts(): a convolution computed in parts; a shape whose parts did not give aten's bytes.
void count_convolution_in_parts();
void count_whole_after_check();

}  // namespace memoplan::torch_ext
