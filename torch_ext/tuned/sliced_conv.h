// memoplan::conv2d_sliced's work as a call (sliced_ops.cc), for ops of tuned/ that end in a
// convolution and fall back to it; the checks of parts against aten; the counters sliced_counts()
// reports.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace memoplan::torch_ext {

// aten::conv2d's result, computed in parts where sliced_ops.h allows (else aten's call).
at::Tensor conv2d_sliced(const at::Tensor& input, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, std::vector<int64_t> dilation,
                         int64_t groups);

// What the checks of parts against aten share: byte-for-byte equality of two contiguous tensors,
// and the generator of their random probes (a fixed seed: the same probe in every process).
bool same_bytes(const at::Tensor& a, const at::Tensor& b);
at::Generator probe_generator();

// sliced_counts(): a convolution computed in parts; a shape whose parts did not give aten's bytes.
void count_convolution_in_parts();
void count_whole_after_check();

}  // namespace memoplan::torch_ext
