// The register-tiled micro-kernel, written once for any SIMD vector type: MR rows of NV vectors
// of C stay in registers while k runs; each step loads NV vectors of packed B, broadcasts one
// element of packed A per row, and does MR * NV fused multiply-adds. Each instruction set's file
// includes this with its own target flags and its vector traits (Simd::Vec, Simd::kWidth,
// zero, load, store, broadcast, fma, add).
#ifndef MEMOPLAN_KERNELS_MICRO_KERNEL_SIMD_H_
#define MEMOPLAN_KERNELS_MICRO_KERNEL_SIMD_H_

#include <cstdint>

namespace memoplan::kernels {

template <class Simd, int MR, int NV>
void simd_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                 bool accumulate) {
  using Vec = typename Simd::Vec;
  constexpr int kWidth = Simd::kWidth;
  static_assert(MR * NV + NV + 1 <= Simd::kRegisters, "the tile does not fit the registers");
  Vec acc[MR][NV];
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Simd::zero();
  }
  for (int64_t k = 0; k < kc; ++k) {
    Vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = Simd::load(b + v * kWidth);
#pragma GCC unroll 24
    for (int r = 0; r < MR; ++r) {
      const Vec ar = Simd::broadcast(a + r);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = Simd::fma(ar, bv[v], acc[r][v]);
    }
    a += MR;
    b += NV * kWidth;
  }
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * kWidth;
      Vec x = acc[r][v];
      if (accumulate) x = Simd::add(x, Simd::load(p));
      Simd::store(p, x);
    }
  }
}

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_MICRO_KERNEL_SIMD_H_
