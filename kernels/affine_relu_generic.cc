// The portable affine + ReLU row (compiled without contraction: "not fused" is two roundings)
// and the run-time choice between it and the AVX2 one.
#include <cmath>

#include "memoplan/kernels/affine_relu.h"
#include "micro_kernel.h"

namespace memoplan::kernels {

void affine_relu_row_generic(const float* x, float* y, int64_t n, float a, float b, bool fused) {
  for (int64_t j = 0; j < n; ++j) {
    float v;
    if (fused) {
      v = std::fma(x[j], a, b);
    } else {
      v = x[j] * a;
      v = v + b;
    }
    y[j] = 0.0f > v ? 0.0f : v;
  }
}

AffineReluRowFn affine_relu_row() {
  static const AffineReluRowFn chosen =
      MEMOPLAN_AVX2_OR_GENERIC(affine_relu_row_avx2, affine_relu_row_generic);
  return chosen;
}

}  // namespace memoplan::kernels
