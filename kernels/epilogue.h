// The GEMM's epilogue on one row of C: c = alpha * c (+ bias), then the activation. One
// implementation per instruction set (epilogue_<isa>.cc, each with its own target flags), picked
// at run time like the micro-kernels; the driver applies it to each tile right after the tile's
// last K chunk, while the tile is still in L1.
#ifndef MEMOPLAN_KERNELS_EPILOGUE_H_
#define MEMOPLAN_KERNELS_EPILOGUE_H_

#include <cstdint>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {

// row[j] = activation(alpha * row[j] + (bias ? bias[j] : 0)) for j in [0, n).
using EpilogueRowFn = void (*)(float* row, int64_t n, const float* bias, float alpha,
                               Activation activation);

void epilogue_row_generic(float* row, int64_t n, const float* bias, float alpha,
                          Activation activation);
void epilogue_row_avx2(float* row, int64_t n, const float* bias, float alpha,
                       Activation activation);

// The best one this CPU runs (MEMOPLAN_KERNELS_ISA caps it, as for the micro-kernels).
EpilogueRowFn epilogue_row();

// GELU's exact form, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), in scalar code: the generic
// epilogue and the AVX2 one's tail use it.
float gelu_scalar(float x);
// x * min(max(x + 3, 0), 6) / 6, as aten's hardswish (MobileNetV3's classifier after its linear).
float hardswish_scalar(float x);

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_EPILOGUE_H_
