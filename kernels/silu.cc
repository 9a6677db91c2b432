// The portable SiLU and the run-time choice among the instruction sets' (silu.h).
#include <cmath>

#include "memoplan/kernels/silu.h"
#include "micro_kernel.h"

namespace memoplan::kernels {

void silu_generic(float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = x[j] / (1.0f + std::exp(-x[j]));
}

SiluFn silu() {
#if MEMOPLAN_KERNELS_X86
  static const SiluFn chosen = cpu_supports(Isa::kAvx512) ? silu_avx512
                               : cpu_supports(Isa::kAvx2) ? silu_avx2
                                                          : silu_generic;
#else
  static const SiluFn chosen = silu_generic;
#endif
  return chosen;
}

bool silu_is_avx512() {
#if MEMOPLAN_KERNELS_X86
  return silu() == silu_avx512;
#else
  return false;
#endif
}

}  // namespace memoplan::kernels
