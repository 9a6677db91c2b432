// A batch norm in inference as a scale and shift per channel, then ReLU or nothing: the region's
// batch norm (blocked.h's batch_norm, simple_ops.cc) and a concatenation that feeds one
// (cat_norm, channel_ops.cc). ATen types; for tuned/blocked/ only.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "blocked.h"

namespace memoplan::torch_ext::blocked {

struct ScaleShift {
  std::vector<float> alpha, beta;  // per channel; 0 on a block's padding lanes
  float floor = -INFINITY;         // 0: ReLU
};

// Whether `post` is exactly one ReLU (alpha 0).
inline bool relu_only(const std::vector<onednn::PostOp>& post) {
  return post.size() == 1 && post[0].kind == static_cast<int>(onednn::Eltwise::kRelu) &&
         post[0].alpha == 0.f;
}
// Whether the batch norm of an activation of `channels` channels may run as a scale and shift,
// followed by `post` (none, or one ReLU): inference, contiguous float statistics (and weight,
// bias) of `channels`, and no autograd (`input_requires_grad`: the activation's inputs, under grad
// mode).
bool scale_shift_applies(int64_t channels, bool input_requires_grad, const BatchNormArgs& a,
                         const std::vector<onednn::PostOp>& post);
// aten's terms (batch_norm_cpu_collect_linear_and_constant_terms): alpha = weight / sqrt(var +
// eps), beta = bias - mean * alpha, for `channels` channels padded with zeros to `padded`.
ScaleShift scale_shift_of(const BatchNormArgs& a, int64_t channels, int64_t padded,
                          const std::vector<onednn::PostOp>& post);

// y[i] = max(x[i] * alpha[i] + beta[i], floor) for i < n; with `one` set, alpha[0] and beta[0]
// for every i. max keeps a NaN (relu's floor 0 as aten's), four lanes at a time (SSE2).
inline void scale_shift(const float* x, float* y, int64_t n, const float* alpha, const float* beta,
                        int one, float floor) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 low = _mm_set1_ps(floor);
  const __m128 a1 = _mm_set1_ps(alpha[0]), b1 = _mm_set1_ps(beta[0]);
  for (; i + 4 <= n; i += 4) {
    const __m128 a = one ? a1 : _mm_loadu_ps(alpha + i), b = one ? b1 : _mm_loadu_ps(beta + i);
    // maxps answers its second operand where one is NaN: the value, NaN included.
    _mm_storeu_ps(y + i, _mm_max_ps(low, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(x + i), a), b)));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i] * alpha[one ? 0 : i] + beta[one ? 0 : i];
    y[i] = floor > v ? floor : v;
  }
}

}  // namespace memoplan::torch_ext::blocked
