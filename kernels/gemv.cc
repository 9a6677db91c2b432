// kernels::gemv (gemm.h): a product of a few rows of A by a linear's weight as it is stored, and
// its portable row kernel. At M = 1 or 2 (a classifier at batch 1 or 2) a product is a stream
// over the weight, bound by memory: packing gains nothing there, and reading the plain rows once
// needs no packed copy beside them.
#include <algorithm>

#include "epilogue.h"
#include "gemv.h"
#include "memoplan/kernels/gemm.h"
#include "micro_kernel.h"

namespace memoplan::kernels {

void gemv_rows_generic(const float* a, int64_t lda, int64_t m, const float* w, int64_t ldw,
                       int64_t k, int64_t n_begin, int64_t n_end, float* c, int64_t ldc,
                       float alpha, bool accumulate) {
  for (int64_t j = n_begin; j < n_end; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float dot = 0.0f;
      for (int64_t t = 0; t < k; ++t) dot += a[i * lda + t] * w[j * ldw + t];
      float& out = c[i * ldc + j];
      out = accumulate ? alpha * dot + out : alpha * dot;
    }
  }
}

void gemv(const MatrixView& a, const MatrixView& w, float* c, int64_t ldc, const Epilogue& epilogue,
          const ParallelFor& parallel) {
  static const GemvRowsFn kernel = MEMOPLAN_AVX2_OR_GENERIC(gemv_rows_avx2, gemv_rows_generic);
  const int64_t n = w.rows, k = w.cols;
  const EpilogueRowFn finish = epilogue_row();
  auto columns = [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < a.rows; i += kGemvMaxRows) {
      const int64_t m = std::min(kGemvMaxRows, a.rows - i);
      kernel(a.data + i * a.row_stride, a.row_stride, m, w.data, w.row_stride, k, begin, end,
             c + i * ldc, ldc, epilogue.alpha, epilogue.accumulate);
    }
    if (epilogue.bias == nullptr && epilogue.activation == Activation::kNone) return;
    for (int64_t i = 0; i < a.rows; ++i) {
      finish(c + i * ldc + begin, end - begin, epilogue.bias ? epilogue.bias + begin : nullptr,
             1.0f, epilogue.activation);
    }
  };
  // Whole groups of four weight rows (the row kernel's step) per thread; serial below 32 groups
  // (128 weight rows).
  const int64_t groups = (n + 3) / 4;
  if (!parallel || groups < 32) return columns(0, n);
  parallel(groups, [&](int64_t first, int64_t last) { columns(first * 4, std::min(n, last * 4)); });
}

}  // namespace memoplan::kernels
