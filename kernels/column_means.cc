// Column means (column_means.h): a fixed count of columns summed in registers, 16 at a time (an
// AVX-512 vector, two of AVX2's, four of SSE's), then 8, then one.
#include "memoplan/kernels/column_means.h"

namespace memoplan::kernels {
namespace {

template <int lanes>
void column_means_of(const float* __restrict src, int64_t rows, int64_t width,
                     float* __restrict dst) {
  float sum[lanes] = {};
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < lanes; ++c) sum[c] += src[r * width + c];
  }
  for (int c = 0; c < lanes; ++c) dst[c] = sum[c] / static_cast<float>(rows);
}

}  // namespace

void column_means(const float* src, int64_t rows, int64_t width, float* dst) {
  int64_t c = 0;
  for (; c + 16 <= width; c += 16) column_means_of<16>(src + c, rows, width, dst + c);
  for (; c + 8 <= width; c += 8) column_means_of<8>(src + c, rows, width, dst + c);
  for (; c < width; ++c) column_means_of<1>(src + c, rows, width, dst + c);
}

}  // namespace memoplan::kernels
