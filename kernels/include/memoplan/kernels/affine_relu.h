// One row of a per-channel affine map followed by ReLU, y = max(0, x * a + b): batch norm in
// inference and its ReLU as aten computes them, for an op that needs them on a few columns of an
// activation at a time (memory "min"'s dense-layer bottleneck,
// torch_ext/memory_min/bn_relu_conv1x1.cc). `fused` says whether x * a + b is rounded once (a fused
// multiply-add, as aten's kernels are where the compiler contracts them) or twice; the caller
// learns which from aten. ReLU keeps NaN and -0 as aten's (max(0, y) with y returned when neither
// is greater). No torch headers.
#ifndef MEMOPLAN_KERNELS_AFFINE_RELU_H_
#define MEMOPLAN_KERNELS_AFFINE_RELU_H_

#include <cstdint>

namespace memoplan::kernels {

// y[j] = max(0, x[j] * a + b) for j in [0, n); x and y may be the same row.
using AffineReluRowFn = void (*)(const float* x, float* y, int64_t n, float a, float b, bool fused);

void affine_relu_row_generic(const float* x, float* y, int64_t n, float a, float b, bool fused);
void affine_relu_row_avx2(const float* x, float* y, int64_t n, float a, float b, bool fused);

// The best one this CPU runs. Both give the same bytes.
AffineReluRowFn affine_relu_row();

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_AFFINE_RELU_H_
