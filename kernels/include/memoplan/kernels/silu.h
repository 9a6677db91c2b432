// SiLU in place, x * sigmoid(x) = x / (1 + exp(-x)), over a run of floats: EfficientNet's
// activation after its convolutions, run after the call where oneDNN's fused swish post-op was
// the slower (onednn/silu_choice.cc). Zen 4, in L1: AVX-512 0.20 ns an element, AVX2 0.32. Within
// 1e-6 of the exact value relative to it; silu(0) is 0 (a blocked tensor's padded lanes stay
// zero), NaN stays NaN. No torch headers.
#ifndef MEMOPLAN_KERNELS_SILU_H_
#define MEMOPLAN_KERNELS_SILU_H_

#include <cstdint>

namespace memoplan::kernels {

using SiluFn = void (*)(float* x, int64_t n);

void silu_generic(float* x, int64_t n);
void silu_avx2(float* x, int64_t n);
void silu_avx512(float* x, int64_t n);

// The widest one this CPU runs (MEMOPLAN_KERNELS_ISA caps it, as for the micro-kernels).
SiluFn silu();
// Whether that is the AVX-512 one.
bool silu_is_avx512();

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_SILU_H_
