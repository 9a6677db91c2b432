// AVX2 + FMA micro-kernels (compiled with -mavx2 -mfma; run only where the CPU has both). MR rows
// of NV 8-float vectors: MR * NV accumulators, NV vectors of B and one broadcast of A must fit
// the 16 ymm registers.
#include <immintrin.h>

#include "micro_kernel.h"

namespace memoplan::kernels {
namespace {

template <int MR, int NV>
void avx2_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                 bool accumulate) {
  static_assert(MR * NV + NV + 1 <= 16, "out of ymm registers");
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + v * 8);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
    a += MR;
    b += NV * 8;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * 8;
      __m256 x = acc[r][v];
      if (accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(p));
      _mm256_storeu_ps(p, x);
    }
  }
}

const MicroKernel kAvx2[] = {
    {{Isa::kAvx2, 6, 16}, avx2_kernel<6, 2>},
    {{Isa::kAvx2, 4, 24}, avx2_kernel<4, 3>},
    {{Isa::kAvx2, 12, 8}, avx2_kernel<12, 1>},
};

}  // namespace

MicroKernelTable avx2_micro_kernels() {
  return {kAvx2, static_cast<int>(sizeof(kAvx2) / sizeof(kAvx2[0]))};
}

}  // namespace memoplan::kernels
