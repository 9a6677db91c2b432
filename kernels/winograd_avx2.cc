// Winograd F(2x2, 3x3) on AVX2 + FMA (compiled with -mavx2 -mfma; winograd::available() says
// whether the CPU runs it): one block of tiles, 8 channels to a vector. (1) V = B^T d B for every
// tile and input channel, written straight into the micro-kernel's packed-A layout (slivers of 6
// tiles, channel-major); (2) for each of the 16 positions, M = V U on the 6x16 micro-kernel
// (K = the padded input channels, no repacking); (3) Y = A^T M A per tile and 8 output channels,
// then the bias and the post-ops, stored blocked. No standard-library templates here
// (winograd_block.h says why).
#include <immintrin.h>

#include "winograd_block.h"

namespace memoplan::kernels::winograd {
namespace {

// The 8 floats of channels [ch, ch + 8) at (img, y, x) of a blocked tensor of `padded` channels.
inline int64_t offset(const Geometry& g, int64_t padded, int64_t img, int64_t ch, int64_t y,
                      int64_t x) {
  const Shape& s = g.s;
  return (((img * (padded / s.block) + ch / s.block) * s.h + y) * s.w + x) * s.block + ch % s.block;
}

// V = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: adds only.
inline void input_transform(const __m256 d[16], __m256 v[16]) {
  __m256 t[16];
  for (int j = 0; j < 4; ++j) {
    t[0 + j] = _mm256_sub_ps(d[0 + j], d[8 + j]);
    t[4 + j] = _mm256_add_ps(d[4 + j], d[8 + j]);
    t[8 + j] = _mm256_sub_ps(d[8 + j], d[4 + j]);
    t[12 + j] = _mm256_sub_ps(d[4 + j], d[12 + j]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m256* r = t + 4 * i;
    v[4 * i + 0] = _mm256_sub_ps(r[0], r[2]);
    v[4 * i + 1] = _mm256_add_ps(r[1], r[2]);
    v[4 * i + 2] = _mm256_sub_ps(r[2], r[1]);
    v[4 * i + 3] = _mm256_sub_ps(r[1], r[3]);
  }
}

// Y = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1]: the 2x2 outputs y[0..3] (row-major).
inline void output_transform(const __m256 m[16], __m256 y[4]) {
  __m256 t[8];
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_add_ps(_mm256_add_ps(m[j], m[4 + j]), m[8 + j]);
    t[4 + j] = _mm256_sub_ps(_mm256_sub_ps(m[4 + j], m[8 + j]), m[12 + j]);
  }
  for (int i = 0; i < 2; ++i) {
    const __m256* r = t + 4 * i;
    y[2 * i + 0] = _mm256_add_ps(_mm256_add_ps(r[0], r[1]), r[2]);
    y[2 * i + 1] = _mm256_sub_ps(_mm256_sub_ps(r[1], r[2]), r[3]);
  }
}

// Tiles [i0, i1) of a block of `count` starting at tile t0.
void transform_inputs(const Geometry& g, const float* in, int64_t t0, int64_t count, int64_t i0,
                      int64_t i1, float* v) {
  const Shape& s = g.s;
  const int64_t slivers = g.per_block / kMr, sliver_floats = g.cp * kMr;
  // Rows past the last tile (the last sliver's padding) must be finite: zero, by whoever
  // transforms the last tile (the rows are no one else's).
  if (i1 == count && count % kMr != 0) {
    for (int p = 0; p < 16; ++p) {
      float* last = v + (p * slivers + (count - 1) / kMr) * sliver_floats;
      for (int64_t ch = 0; ch < g.cp; ++ch) {
        for (int64_t r = count % kMr; r < kMr; ++r) last[ch * kMr + r] = 0.f;
      }
    }
  }
  alignas(32) float lanes[8];
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = t0 + i;
    const int64_t img = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
    const int64_t y0 = 2 * (rest / g.tiles_w) - 1, x0 = 2 * (rest % g.tiles_w) - 1;
    const int64_t sliver = i / kMr, r = i % kMr;
    const bool inside = y0 >= 0 && x0 >= 0 && y0 + 4 <= s.h && x0 + 4 <= s.w;
    const int64_t row = s.w * s.block;
    for (int64_t ch = 0; ch < g.cp; ch += 8) {
      // Channel group ch's plane, found once (offset() divides by the run-time block size).
      const float* plane = in + offset(g, g.cp, img, ch, 0, 0);
      __m256 d[16], vt[16];
      if (inside) {
        const float* corner = plane + y0 * row + x0 * s.block;
        for (int dy = 0; dy < 4; ++dy) {
          for (int dx = 0; dx < 4; ++dx) {
            d[dy * 4 + dx] = _mm256_loadu_ps(corner + dy * row + dx * s.block);
          }
        }
      } else {
        for (int dy = 0; dy < 4; ++dy) {
          for (int dx = 0; dx < 4; ++dx) {
            const int64_t y = y0 + dy, x = x0 + dx;
            d[dy * 4 + dx] = (y < 0 || y >= s.h || x < 0 || x >= s.w)
                                 ? _mm256_setzero_ps()
                                 : _mm256_loadu_ps(plane + y * row + x * s.block);
          }
        }
      }
      input_transform(d, vt);
      for (int p = 0; p < 16; ++p) {
        float* dst = v + (p * slivers + sliver) * sliver_floats + ch * kMr + r;
        _mm256_store_ps(lanes, vt[p]);
        for (int lane = 0; lane < 8; ++lane) dst[lane * kMr] = lanes[lane];
      }
    }
  }
}

// Products [item0, item1) (item = position * panels + panel) for slivers [0, used).
void multiply(const Geometry& g, MicroKernelFn kernel, const float* v, const float* u, int64_t used,
              int64_t item0, int64_t item1, float* m) {
  const int64_t slivers = g.per_block / kMr, rows = g.per_block;
  for (int64_t item = item0; item < item1; ++item) {
    const int64_t p = item / g.panels, j = item % g.panels;
    const float* v_p = v + p * slivers * g.cp * kMr;
    float* m_p = m + p * rows * g.k16;
    {
      const float* u_panel = u + item * g.cp * kNr;
      for (int64_t sl = 0; sl < used; ++sl) {
        kernel(g.cp, v_p + sl * g.cp * kMr, u_panel, m_p + sl * kMr * g.k16 + j * kNr, g.k16,
               false);
      }
    }
  }
}

inline __m256 apply(const PostOp* post, int64_t post_count, __m256 x, const float* residual) {
  for (int64_t i = 0; i < post_count; ++i) {
    const PostOp& op = post[i];
    switch (op.kind) {
      case PostOp::Kind::kRelu: {
        const __m256 zero = _mm256_setzero_ps();
        const __m256 negative = _mm256_min_ps(x, zero);
        x = _mm256_fmadd_ps(_mm256_set1_ps(op.alpha), negative, _mm256_max_ps(x, zero));
        break;
      }
      case PostOp::Kind::kClip:
        x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(op.alpha)), _mm256_set1_ps(op.beta));
        break;
      case PostOp::Kind::kResidual:
        x = _mm256_add_ps(x, _mm256_loadu_ps(residual));
        break;
    }
  }
  return x;
}

void transform_outputs(const Geometry& g, const float* m, const BlockArgs& a, int64_t t0,
                       int64_t i0, int64_t i1) {
  const Shape& s = g.s;
  const int64_t rows = g.per_block;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = t0 + i;
    const int64_t img = t / (g.tiles_h * g.tiles_w), rest = t % (g.tiles_h * g.tiles_w);
    const int64_t oy = 2 * (rest / g.tiles_w), ox = 2 * (rest % g.tiles_w);
    for (int64_t ch = 0; ch < g.kp; ch += 8) {
      __m256 mv[16], y[4];
      for (int p = 0; p < 16; ++p) mv[p] = _mm256_loadu_ps(m + (p * rows + i) * g.k16 + ch);
      output_transform(mv, y);
      // Channels past K (the layout's padding) stay zero whatever the post-ops make of 0.
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 real = _mm256_castsi256_ps(
          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(s.k - ch)), lane));
      const __m256 b = _mm256_and_ps(real, _mm256_loadu_ps(a.bias + ch));
      const int64_t plane = offset(g, g.kp, img, ch, 0, 0);
      for (int q = 0; q < 4; ++q) {
        const int64_t yy = oy + q / 2, xx = ox + q % 2;
        if (yy >= s.h || xx >= s.w) continue;
        const int64_t o = plane + (yy * s.w + xx) * s.block;
        const __m256 value = apply(a.post, a.post_count, _mm256_add_ps(y[q], b),
                                   a.residual ? a.residual + o : nullptr);
        _mm256_storeu_ps(a.out + o, _mm256_and_ps(real, value));
      }
    }
  }
}

}  // namespace

int64_t block_tiles(const Geometry& g, int64_t block) {
  const int64_t left = g.tiles - block * g.per_block;
  return left < g.per_block ? left : g.per_block;
}

void transform_inputs_avx2(const BlockArgs& a, int64_t block, int64_t i0, int64_t i1, float* v) {
  transform_inputs(a.g, a.in, block * a.g.per_block, block_tiles(a.g, block), i0, i1, v);
}

void multiply_avx2(const BlockArgs& a, int64_t block, int64_t item0, int64_t item1, const float* v,
                   float* m) {
  multiply(a.g, a.kernel, v, a.u, (block_tiles(a.g, block) + kMr - 1) / kMr, item0, item1, m);
}

void transform_outputs_avx2(const BlockArgs& a, int64_t block, int64_t i0, int64_t i1,
                            const float* m) {
  transform_outputs(a.g, m, a, block * a.g.per_block, i0, i1);
}

void run_block_avx2(const BlockArgs& a, int64_t block, float* scratch) {
  float* v = scratch;
  float* m = v + 16 * a.g.per_block * a.g.cp;
  const int64_t count = block_tiles(a.g, block);
  transform_inputs_avx2(a, block, 0, count, v);
  multiply_avx2(a, block, 0, 16 * a.g.panels, v, m);
  transform_outputs_avx2(a, block, 0, count, m);
}

}  // namespace memoplan::kernels::winograd
