// SiLU on AVX2 + FMA (compiled with -mavx2 -mfma): e = exp(-|x|) from the shared exp, then
// sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) below, so exp never overflows.
#include <immintrin.h>

#include "avx2_exp.h"
#include "memoplan/kernels/silu.h"

namespace memoplan::kernels {

void silu_avx2(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 e = exp_nonpositive(_mm256_or_ps(v, sign_bit));
    // The numerator: e where v's sign bit is set, else 1 (a division measured faster than a
    // reciprocal and its Newton step here).
    const __m256 s = _mm256_div_ps(_mm256_blendv_ps(one, e, v), _mm256_add_ps(one, e));
    _mm256_storeu_ps(x + j, _mm256_mul_ps(v, s));
  }
  if (j < n) silu_generic(x + j, n - j);
}

}  // namespace memoplan::kernels
