// AVX2 + FMA micro-kernels (compiled with -mavx2 -mfma; run only where the CPU has both): 16 ymm
// registers of 8 floats.
#include <immintrin.h>

#include "micro_kernel.h"
#include "micro_kernel_simd.h"

namespace memoplan::kernels {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int kWidth = 8, kRegisters = 16;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec x) { _mm256_storeu_ps(p, x); }
  static Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
};

const MicroKernel kAvx2[] = {
    {{Isa::kAvx2, 6, 16}, simd_kernel<Avx2, 6, 2>},
    {{Isa::kAvx2, 4, 24}, simd_kernel<Avx2, 4, 3>},
    {{Isa::kAvx2, 12, 8}, simd_kernel<Avx2, 12, 1>},
};

}  // namespace

MicroKernelTable avx2_micro_kernels() {
  return {kAvx2, static_cast<int>(sizeof(kAvx2) / sizeof(kAvx2[0]))};
}

}  // namespace memoplan::kernels
