// Portable micro-kernels: plain loops the compiler vectorizes with whatever the baseline ISA has
// (SSE2 on x86-64). The fallback on CPUs without AVX2, and the reference shape for tests.
#include "micro_kernel.h"

namespace memoplan::kernels {
namespace {

template <int MR, int NR>
void generic_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                    bool accumulate) {
  float acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < MR; ++r) {
      const float ar = a[k * MR + r];
      for (int j = 0; j < NR; ++j) acc[r][j] += ar * b[k * NR + j];
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
    for (int j = 0; j < NR; ++j) row[j] = (accumulate ? row[j] : 0.0f) + acc[r][j];
  }
}

const MicroKernel kGeneric[] = {
    {{Isa::kGeneric, 4, 8}, generic_kernel<4, 8>},
    {{Isa::kGeneric, 4, 16}, generic_kernel<4, 16>},
};

}  // namespace

MicroKernelTable generic_micro_kernels() {
  return {kGeneric, static_cast<int>(sizeof(kGeneric) / sizeof(kGeneric[0]))};
}

}  // namespace memoplan::kernels
