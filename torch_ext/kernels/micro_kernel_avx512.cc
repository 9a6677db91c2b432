// AVX-512F micro-kernels (compiled with -mavx512f -mfma; run only where the CPU has AVX-512F). MR
// rows of NV 16-float vectors: MR * NV accumulators, NV vectors of B and one broadcast of A must
// fit the 32 zmm registers.
#include <immintrin.h>

#include "micro_kernel.h"

namespace memoplan::kernels {
namespace {

template <int MR, int NV>
void avx512_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                   bool accumulate) {
  static_assert(MR * NV + NV + 1 <= 32, "out of zmm registers");
  __m512 acc[MR][NV];
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 24
    for (int r = 0; r < MR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
    a += MR;
    b += NV * 16;
  }
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * 16;
      __m512 x = acc[r][v];
      if (accumulate) x = _mm512_add_ps(x, _mm512_loadu_ps(p));
      _mm512_storeu_ps(p, x);
    }
  }
}

const MicroKernel kAvx512[] = {
    {{Isa::kAvx512, 6, 32}, avx512_kernel<6, 2>},
    {{Isa::kAvx512, 12, 32}, avx512_kernel<12, 2>},
    {{Isa::kAvx512, 8, 48}, avx512_kernel<8, 3>},
    {{Isa::kAvx512, 24, 16}, avx512_kernel<24, 1>},
};

}  // namespace

MicroKernelTable avx512_micro_kernels() {
  return {kAvx512, static_cast<int>(sizeof(kAvx512) / sizeof(kAvx512[0]))};
}

}  // namespace memoplan::kernels
