// Reductions of an AVX2 vector to one float, for the files compiled with -mavx2 (the epilogue's
// softmax, gemv's dot products). Include only from such a file.
#ifndef MEMOPLAN_KERNELS_AVX2_REDUCE_H_
#define MEMOPLAN_KERNELS_AVX2_REDUCE_H_

#include <immintrin.h>

namespace memoplan::kernels {

inline float horizontal_max(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float horizontal_sum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_AVX2_REDUCE_H_
