// The row kernels behind kernels::gemv (gemm.h): C[:, n_begin:n_end] of a product of a few rows
// of A by a linear's weight as stored (N x K, contiguous rows), before bias and activation.
#ifndef MEMOPLAN_KERNELS_GEMV_H_
#define MEMOPLAN_KERNELS_GEMV_H_

#include <cstdint>

namespace memoplan::kernels {

// c[i][j] = alpha * sum_k a[i][k] w[j][k] (+ c[i][j] if accumulate), i < m <= kGemvMaxRows,
// n_begin <= j < n_end.
using GemvRowsFn = void (*)(const float* a, int64_t lda, int64_t m, const float* w, int64_t ldw,
                            int64_t k, int64_t n_begin, int64_t n_end, float* c, int64_t ldc,
                            float alpha, bool accumulate);

void gemv_rows_generic(const float* a, int64_t lda, int64_t m, const float* w, int64_t ldw,
                       int64_t k, int64_t n_begin, int64_t n_end, float* c, int64_t ldc,
                       float alpha, bool accumulate);
void gemv_rows_avx2(const float* a, int64_t lda, int64_t m, const float* w, int64_t ldw, int64_t k,
                    int64_t n_begin, int64_t n_end, float* c, int64_t ldc, float alpha,
                    bool accumulate);

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_GEMV_H_
