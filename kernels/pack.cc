#include "pack.h"

#include <cstdlib>
#include <new>

namespace memoplan::kernels {

void pack_a(const MatrixView& a, int64_t row0, int64_t rows, int64_t col0, int64_t depth, int mr,
            float* out) {
  for (int64_t sliver = 0; sliver * mr < rows; ++sliver) {
    float* dst = out + sliver * depth * mr;
    for (int r = 0; r < mr; ++r) {
      const int64_t row = sliver * mr + r;
      if (row >= rows) {
        for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = 0.0f;
        continue;
      }
      // Reads one row of A in order (row-major A: contiguous), writes with stride mr.
      const float* src = a.data + (row0 + row) * a.row_stride + col0 * a.col_stride;
      for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = src[k * a.col_stride];
    }
  }
}

void pack_b(const MatrixView& b, int64_t col0, int64_t cols, int nr, float* out) {
  const int64_t depth = b.rows;
  for (int64_t panel = 0; panel * nr < cols; ++panel) {
    float* dst = out + panel * depth * nr;
    const int64_t first = col0 + panel * nr;
    const int64_t width = cols - panel * nr < nr ? cols - panel * nr : nr;
    if (b.col_stride == 1) {
      // Row-major B: each k copies a run of `width` contiguous floats.
      for (int64_t k = 0; k < depth; ++k) {
        const float* src = b.data + k * b.row_stride + first;
        float* row = dst + k * nr;
        for (int64_t j = 0; j < width; ++j) row[j] = src[j];
        for (int64_t j = width; j < nr; ++j) row[j] = 0.0f;
      }
    } else {
      // Column-major B (a transposed weight, W stored N x K): read each column in order.
      for (int64_t j = 0; j < nr; ++j) {
        if (j >= width) {
          for (int64_t k = 0; k < depth; ++k) dst[k * nr + j] = 0.0f;
          continue;
        }
        const float* src = b.data + (first + j) * b.col_stride;
        for (int64_t k = 0; k < depth; ++k) dst[k * nr + j] = src[k * b.row_stride];
      }
    }
  }
}

float* allocate_floats(size_t count) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, (count ? count : 1) * sizeof(float)) != 0) throw std::bad_alloc();
  return static_cast<float*>(p);
}

void free_floats(float* p) { std::free(p); }

}  // namespace memoplan::kernels
