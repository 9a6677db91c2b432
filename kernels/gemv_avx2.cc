// The AVX2 row kernel of kernels::gemv (gemv.h): four rows of W at a time, each read once as a
// stream and multiplied into every row of A (M <= 4: up to 16 accumulators of 8 lanes).
#include <immintrin.h>

#include "avx2_reduce.h"
#include "gemv.h"
#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {
namespace {

void store(float* c, float dot, float alpha, bool accumulate) {
  *c = accumulate ? alpha * dot + *c : alpha * dot;
}

// R rows of W (1..4) against M rows of A.
template <int M, int R>
void block(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t k, int64_t j, float* c,
           int64_t ldc, float alpha, bool accumulate) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  const float* wj = w + j * ldw;
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(wj + r * ldw + kk);
    for (int i = 0; i < M; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(av, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) {
      float dot = horizontal_sum(acc[i][r]);
      for (int64_t t = kk; t < k; ++t) dot += a[i * lda + t] * wj[r * ldw + t];
      store(c + i * ldc + j + r, dot, alpha, accumulate);
    }
  }
}

template <int M>
void rows(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t k, int64_t n_begin,
          int64_t n_end, float* c, int64_t ldc, float alpha, bool accumulate) {
  int64_t j = n_begin;
  for (; j + 4 <= n_end; j += 4) block<M, 4>(a, lda, w, ldw, k, j, c, ldc, alpha, accumulate);
  for (; j < n_end; ++j) block<M, 1>(a, lda, w, ldw, k, j, c, ldc, alpha, accumulate);
}

}  // namespace

void gemv_rows_avx2(const float* a, int64_t lda, int64_t m, const float* w, int64_t ldw, int64_t k,
                    int64_t n_begin, int64_t n_end, float* c, int64_t ldc, float alpha,
                    bool accumulate) {
  switch (m) {
    case 1:
      return rows<1>(a, lda, w, ldw, k, n_begin, n_end, c, ldc, alpha, accumulate);
    case 2:
      return rows<2>(a, lda, w, ldw, k, n_begin, n_end, c, ldc, alpha, accumulate);
    case 3:
      return rows<3>(a, lda, w, ldw, k, n_begin, n_end, c, ldc, alpha, accumulate);
    default:
      return rows<4>(a, lda, w, ldw, k, n_begin, n_end, c, ldc, alpha, accumulate);
  }
}

}  // namespace memoplan::kernels
