// The AVX2 + FMA affine + ReLU row (compiled with -mavx2 -mfma -ffp-contract=off: the unfused
// form keeps its two roundings; run only where the CPU has both); the tail is the portable row's.
#include <immintrin.h>

#include "memoplan/kernels/affine_relu.h"

namespace memoplan::kernels {

void affine_relu_row_avx2(const float* x, float* y, int64_t n, float a, float b, bool fused) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), zero = _mm256_setzero_ps();
  int64_t j = 0;
  if (fused) {
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), va, vb);
      _mm256_storeu_ps(y + j, _mm256_max_ps(zero, v));
    }
  } else {
    for (; j + 8 <= n; j += 8) {
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), va), vb);
      _mm256_storeu_ps(y + j, _mm256_max_ps(zero, v));
    }
  }
  affine_relu_row_generic(x + j, y + j, n - j, a, b, fused);  // the tail: the same roundings
}

}  // namespace memoplan::kernels
