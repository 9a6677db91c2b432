// The AVX2 + FMA epilogue (compiled with -mavx2 -mfma; run only where the CPU has both). GELU's
// erf is Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7), the form aten's
// Vectorized<float>::erf uses, with a Cephes-style exp (range reduction by ln 2, a degree-6
// polynomial, the exponent set through the integer unit): 8 lanes at a time instead of a libm
// call per element, which cost BERT-base 4 ms a layer. The same exp serves the attention softmax.
#include <immintrin.h>

#include "avx2_exp.h"
#include "avx2_reduce.h"
#include "epilogue.h"
#include "memoplan/kernels/attention.h"

namespace memoplan::kernels {
namespace {

__m256 erf(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_and_ps(sign_bit, x);
  const __m256 ax = _mm256_xor_ps(sign, x);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, one));
  __m256 r = _mm256_set1_ps(1.061405429f);
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-1.453152027f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(1.421413741f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(-0.284496736f));
  r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(0.254829592f));
  const __m256 e = exp_nonpositive(_mm256_xor_ps(sign_bit, _mm256_mul_ps(x, x)));
  // 1 - r t exp(-x^2), with x's sign.
  const __m256 y = _mm256_fnmadd_ps(_mm256_mul_ps(e, t), r, one);
  return _mm256_xor_ps(sign, y);
}

__m256 gelu(__m256 x) {
  const __m256 half_x = _mm256_mul_ps(x, _mm256_set1_ps(0.5f));
  const __m256 phi = erf(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_fmadd_ps(half_x, phi, half_x);
}

// As hardswish_scalar: x * min(max(x + 3, 0), 6) / 6 (NaN stays NaN: max/min return their
// second operand, x + 3, when one is NaN).
__m256 hardswish(__m256 x) {
  __m256 t = _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, _mm256_set1_ps(3.0f)));
  t = _mm256_min_ps(_mm256_set1_ps(6.0f), t);
  return _mm256_div_ps(_mm256_mul_ps(x, t), _mm256_set1_ps(6.0f));
}

}  // namespace

void softmax_row_avx2(float* row, int64_t n, float scale) {
  if (n < 8) {
    softmax_row_generic(row, n, scale);
    return;
  }
  const __m256 s = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(-__builtin_inff());
  __m256 unordered = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_mul_ps(s, _mm256_loadu_ps(row + j));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, x);
  }
  float m = horizontal_max(vmax);
  bool nan = _mm256_movemask_ps(unordered) != 0;
  for (; j < n; ++j) {
    const float x = scale * row[j];
    nan = nan || x != x;
    m = x > m ? x : m;
  }
  // exp_nonpositive clamps what it is given: NaN and infinite maxima take IEEE's path.
  if (nan || m == __builtin_inff() || m == -__builtin_inff()) {
    softmax_row_generic(row, n, scale);
    return;
  }
  const __m256 vm = _mm256_set1_ps(m);
  __m256 vsum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_fmsub_ps(s, _mm256_loadu_ps(row + j), vm));
    _mm256_storeu_ps(row + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = horizontal_sum(vsum);
  for (; j < n; ++j) {
    row[j] = __builtin_expf(scale * row[j] - m);
    sum += row[j];
  }
  const __m256 inverse = _mm256_set1_ps(1.0f / sum);
  for (j = 0; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(row + j, _mm256_mul_ps(inverse, _mm256_loadu_ps(row + j)));
  }
  const float inv = 1.0f / sum;
  for (; j < n; ++j) row[j] *= inv;
}

void epilogue_row_avx2(float* row, int64_t n, const float* bias, float alpha,
                       Activation activation) {
  const __m256 a = _mm256_set1_ps(alpha);
  const __m256 zero = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_loadu_ps(row + j);
    if (alpha != 1.0f) x = _mm256_mul_ps(x, a);
    if (bias) x = _mm256_add_ps(x, _mm256_loadu_ps(bias + j));
    if (activation == Activation::kRelu) {
      x = _mm256_max_ps(x, zero);
    } else if (activation == Activation::kGelu) {
      x = gelu(x);
    } else if (activation == Activation::kHardswish) {
      x = hardswish(x);
    }
    _mm256_storeu_ps(row + j, x);
  }
  if (j < n) epilogue_row_generic(row + j, n - j, bias ? bias + j : nullptr, alpha, activation);
}

}  // namespace memoplan::kernels
