// AVX-512F micro-kernels (compiled with -mavx512f -mfma; run only where the CPU has AVX-512F): 32
// zmm registers of 16 floats.
#include <immintrin.h>

#include "micro_kernel.h"
#include "micro_kernel_simd.h"

namespace memoplan::kernels {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int kWidth = 16, kRegisters = 32;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec x) { _mm512_storeu_ps(p, x); }
  static Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
};

const MicroKernel kAvx512[] = {
    {{Isa::kAvx512, 6, 32}, simd_kernel<Avx512, 6, 2>},
    {{Isa::kAvx512, 12, 32}, simd_kernel<Avx512, 12, 2>},
    {{Isa::kAvx512, 8, 48}, simd_kernel<Avx512, 8, 3>},
    {{Isa::kAvx512, 24, 16}, simd_kernel<Avx512, 24, 1>},
};

}  // namespace

MicroKernelTable avx512_micro_kernels() {
  return {kAvx512, static_cast<int>(sizeof(kAvx512) / sizeof(kAvx512[0]))};
}

}  // namespace memoplan::kernels
