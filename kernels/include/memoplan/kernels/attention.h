// Scaled dot-product attention of one head on memoplan's GEMM: the scores stay in a per-thread
// buffer (L2-sized for a few hundred tokens), the scale is folded into the softmax, and nothing is
// allocated per call once the buffer has grown. No torch; torch_ext/tuned/tuned_encoder.cc runs
// it per (batch, head) over the intra-op threads.
#ifndef MEMOPLAN_KERNELS_ATTENTION_H_
#define MEMOPLAN_KERNELS_ATTENTION_H_

#include <cstdint>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {

// row[j] = exp(scale row[j] - m) / sum_i exp(scale row[i] - m), m = max_j scale row[j]: the
// softmax of a row of attention scores with their scale folded in (one pass fewer over the
// scores). A row holding a NaN, or whose maximum is infinite, gets IEEE's result through the
// scalar path (NaNs, as aten's softmax gives). The AVX2 one runs only where the CPU has it
// (compiled with its own flags; its exp is the GELU epilogue's, within 2 ulp).
using SoftmaxRowFn = void (*)(float* row, int64_t n, float scale);
void softmax_row_generic(float* row, int64_t n, float scale);
void softmax_row_avx2(float* row, int64_t n, float scale);
// The best one this CPU runs (MEMOPLAN_KERNELS_ISA caps it, as for the micro-kernels).
SoftmaxRowFn softmax_row();

// out (q.rows x d, row stride ldo) = softmax(scale * q k^T, over each row) v, in the calling
// thread. q is tq x d, k and v are tk x d (any strides; views into a fused QKV buffer work). A
// row of scores with a NaN gives NaNs, as aten's softmax does.
void attention_head(const MatrixView& q, const MatrixView& k, const MatrixView& v, float scale,
                    float* out, int64_t ldo, const GemmConfig& config);

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_ATTENTION_H_
