// memoplan's own 3x3 convolution: Winograd's F(2x2, 3x3) (Lavin and Gray, 2016) on the blocked
// channel layout (N x ceil(C/B) x H x W x B floats, B = 8 or 16: oneDNN's nChw8c / nChw16c).
// Each 2x2 output tile costs 16 products per channel pair instead of 36: the input tiles are
// transformed (V = B^T d B), the 16 transformed positions are 16 GEMMs on memoplan's micro-kernel
// against weights transformed once (U = G g G^T), and the output transform (Y = A^T M A) applies
// the bias, a residual addition and ReLU / clip in the same pass. Stride 1, padding 1, no
// dilation, one group; float; AVX2 + FMA. Tiles are processed in blocks that keep V and M in L2,
// blocks split over the caller's threads. Torch-free: torch_ext's blocked convolution measures it
// against oneDNN's direct kernels per shape (docs/KERNELS.md).
#ifndef MEMOPLAN_KERNELS_WINOGRAD_H_
#define MEMOPLAN_KERNELS_WINOGRAD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels::winograd {

struct Shape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input (channels unpadded)
  int64_t k = 0;                       // output channels; the output is n x k x h x w
  int block = 8;                       // channels per block of the layout: 8 or 16
  int threads = 1;  // workers of run()'s ParallelFor: tiles are split into a multiple of them
};

// After the bias, in order: leaky ReLU max(x, 0) + alpha min(x, 0), clip to [alpha, beta], or
// + the residual (blocked like the output).
struct PostOp {
  enum class Kind { kRelu, kClip, kResidual } kind = Kind::kRelu;
  float alpha = 0.f, beta = 0.f;
};

// Whether this CPU runs it (AVX2 + FMA and the 6x16 micro-kernel; MEMOPLAN_KERNELS_ISA=generic
// turns it off) for that block size.
bool available(int block);

// The transformed weights: 16 x ceil(C/B)*B x ceil(K/16)*16 floats.
size_t packed_weights_floats(const Shape& s);
// weight: K x C x 3 x 3, contiguous. Padding channels are zero. With `scales` (K floats), each
// output channel's weights are multiplied by its scale (in float, as a folded copy would be)
// before they are transformed.
void pack_weights(const Shape& s, const float* weight, float* packed,
                  const float* scales = nullptr);

// out = post(conv(in, weight) + bias): in, out (and the residual) blocked; bias K floats or null.
// Scratch is per thread and kept (grown on demand, a few hundred KiB).
void run(const Shape& s, const float* in, const float* packed_weights, const float* bias,
         const std::vector<PostOp>& post, const float* residual, float* out,
         const ParallelFor& parallel = {});

// Plain loops in double precision on the same layouts: what the tests compare against.
void reference(const Shape& s, const float* in, const float* weight, const float* bias,
               const std::vector<PostOp>& post, const float* residual, float* out);

}  // namespace memoplan::kernels::winograd

#endif  // MEMOPLAN_KERNELS_WINOGRAD_H_
