// exp on AVX2 vectors, for the files compiled with -mavx2 -mfma (the epilogue's GELU and softmax,
// SiLU): Cephes' range reduction by ln 2, a degree-6 polynomial, the exponent set through the
// integer unit. Include only from such a file.
#ifndef MEMOPLAN_KERNELS_AVX2_EXP_H_
#define MEMOPLAN_KERNELS_AVX2_EXP_H_

#include <immintrin.h>

namespace memoplan::kernels {

// exp(x) for x <= 0 (what erf needs: exp(-x^2)); below -87.3 the result is 0.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 low = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, low, _CMP_LT_OQ);
  x = _mm256_max_ps(x, low);
  // x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two for an exact n ln2.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n + 127 in the exponent field (n >= -126 after the clamp).
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(underflow, result);
}

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_AVX2_EXP_H_
