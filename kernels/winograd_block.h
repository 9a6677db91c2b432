// One block of tiles of Winograd F(2x2, 3x3) (winograd.h), the part compiled per instruction set:
// plain pointers and numbers only, so that no inline function of the standard library is
// instantiated with AVX2 code (the linker could hand that copy to callers on any CPU).
#ifndef MEMOPLAN_KERNELS_WINOGRAD_BLOCK_H_
#define MEMOPLAN_KERNELS_WINOGRAD_BLOCK_H_

#include <cstdint>

#include "memoplan/kernels/winograd.h"
#include "micro_kernel.h"

namespace memoplan::kernels::winograd {

constexpr int kMr = 6, kNr = 16, kMaxTiles = 96;

struct Geometry {
  Shape s;
  int64_t cp = 0, kp = 0, k16 = 0, panels = 0, tiles_h = 0, tiles_w = 0, tiles = 0;
  int64_t per_block = 0;  // tiles per block, a multiple of kMr
};
Geometry geometry(const Shape& s);

struct BlockArgs {
  Geometry g;
  MicroKernelFn kernel = nullptr;  // the AVX2 6x16 one
  const float* in = nullptr;
  const float* u = nullptr;     // packed weights
  const float* bias = nullptr;  // k16 + 8 floats, zero past K
  const PostOp* post = nullptr;
  int64_t post_count = 0;
  const float* residual = nullptr;  // or null
  float* out = nullptr;
};

// Scratch floats one block needs: V, then M.
int64_t block_scratch_floats(const Geometry& g);

// The tiles of a block (the last one may have fewer than per_block).
int64_t block_tiles(const Geometry& g, int64_t block);

// Tiles [block * per_block, ...) of the output, in three phases (each may be split over threads:
// tiles [i0, i1) of the block, products [item0, item1) of the 16 x panels) or all at once.
// scratch = V (16 * per_block * cp floats), then M (16 * per_block * k16).
void transform_inputs_avx2(const BlockArgs& args, int64_t block, int64_t i0, int64_t i1, float* v);
void multiply_avx2(const BlockArgs& args, int64_t block, int64_t item0, int64_t item1,
                   const float* v, float* m);
void transform_outputs_avx2(const BlockArgs& args, int64_t block, int64_t i0, int64_t i1,
                            const float* m);
void run_block_avx2(const BlockArgs& args, int64_t block, float* scratch);

}  // namespace memoplan::kernels::winograd

#endif  // MEMOPLAN_KERNELS_WINOGRAD_BLOCK_H_
