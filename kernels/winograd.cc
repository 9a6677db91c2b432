// Winograd F(2x2, 3x3) (winograd.h): the driver (blocks of tiles over the caller's threads,
// per-thread scratch), the weight transform, the reference loops and the availability check. One
// block's transforms and products are in winograd_avx2.cc.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "pack.h"
#include "winograd_block.h"

namespace memoplan::kernels::winograd {

bool available(int block) {
  if (block != 8 && block != 16) return false;
  return find_micro_kernel(MicroKernelInfo{Isa::kAvx2, 6, 16}) != nullptr;
}

size_t packed_weights_floats(const Shape& s) {
  const int64_t cp = (s.c + s.block - 1) / s.block * s.block, k16 = (s.k + 15) / 16 * 16;
  return static_cast<size_t>(16 * cp * k16);
}

// U = G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. Layout: for each of the 16
// positions, panels of 16 output channels, each Cp x 16 (k-major): the micro-kernel's packed B.
void pack_weights(const Shape& s, const float* weight, float* packed, const float* scales) {
  const int64_t cp = (s.c + s.block - 1) / s.block * s.block, k16 = (s.k + 15) / 16 * 16;
  const int64_t panels = k16 / 16;
  const double g_matrix[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  for (int64_t i = 0; i < static_cast<int64_t>(packed_weights_floats(s)); ++i) packed[i] = 0.f;
  for (int64_t ko = 0; ko < s.k; ++ko) {
    for (int64_t c = 0; c < s.c; ++c) {
      float g[9];
      for (int q = 0; q < 9; ++q) {
        const float w = weight[(ko * s.c + c) * 9 + q];
        g[q] = scales ? w * scales[ko] : w;
      }
      double t[4][3];
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 3; ++j) {
          t[i][j] = 0;
          for (int q = 0; q < 3; ++q) t[i][j] += g_matrix[i][q] * g[q * 3 + j];
        }
      }
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
          double u = 0;
          for (int q = 0; q < 3; ++q) u += t[i][q] * g_matrix[j][q];
          const int64_t p = i * 4 + j, panel = ko / 16;
          packed[((p * panels + panel) * cp + c) * 16 + ko % 16] = static_cast<float>(u);
        }
      }
    }
  }
}

Geometry geometry(const Shape& s) {
  Geometry g;
  g.s = s;
  g.cp = (s.c + s.block - 1) / s.block * s.block;
  g.kp = (s.k + s.block - 1) / s.block * s.block;
  g.k16 = (s.k + 15) / 16 * 16;
  g.panels = g.k16 / 16;
  g.tiles_h = (s.h + 1) / 2;
  g.tiles_w = (s.w + 1) / 2;
  g.tiles = s.n * g.tiles_h * g.tiles_w;
  // Blocks of at most kMaxTiles tiles (V and M stay in L2); with several threads, as many as a
  // multiple of them, unless all tiles fit one block (run() then splits its phases instead).
  const int64_t slivers = (g.tiles + kMr - 1) / kMr;
  int64_t blocks = (g.tiles + kMaxTiles - 1) / kMaxTiles;
  const int64_t threads = std::max(1, s.threads);
  if (blocks > 1) blocks = std::min(slivers, (blocks + threads - 1) / threads * threads);
  blocks = std::max<int64_t>(1, blocks);
  g.per_block = (slivers + blocks - 1) / blocks * kMr;
  return g;
}

int64_t block_scratch_floats(const Geometry& g) { return 16 * g.per_block * (g.cp + g.k16); }

namespace {

// Per-thread V and M of a block.
thread_local FloatBuffer scratch;

}  // namespace

void run(const Shape& s, const float* in, const float* packed_weights, const float* bias,
         const std::vector<PostOp>& post, const float* residual, float* out,
         const ParallelFor& parallel) {
  if (!available(s.block)) throw std::runtime_error("memoplan: Winograd needs AVX2 and FMA");
#if MEMOPLAN_KERNELS_X86
  BlockArgs a;
  a.g = geometry(s);
  if (a.g.tiles == 0 || a.g.kp == 0) return;
  a.kernel = find_micro_kernel(MicroKernelInfo{Isa::kAvx2, kMr, kNr})->run;
  std::vector<float> bias_padded(a.g.k16 + 8, 0.f);
  if (bias) std::copy_n(bias, s.k, bias_padded.begin());
  a.in = in;
  a.u = packed_weights;
  a.bias = bias_padded.data();
  a.post = post.data();
  a.post_count = static_cast<int64_t>(post.size());
  a.residual = residual;
  a.out = out;
  const int64_t blocks = (a.g.tiles + a.g.per_block - 1) / a.g.per_block;
  if (parallel && blocks == 1 && s.threads > 1) {
    // Few tiles (a deep layer, a small batch): one block whose phases are split, the products
    // by position and panel so that each thread streams its share of the weights only.
    float* v = scratch.get(block_scratch_floats(a.g));
    float* m = v + 16 * a.g.per_block * a.g.cp;
    const int64_t count = block_tiles(a.g, 0);
    parallel(count, [&](int64_t i0, int64_t i1) { transform_inputs_avx2(a, 0, i0, i1, v); });
    parallel(16 * a.g.panels, [&](int64_t j0, int64_t j1) { multiply_avx2(a, 0, j0, j1, v, m); });
    parallel(count, [&](int64_t i0, int64_t i1) { transform_outputs_avx2(a, 0, i0, i1, m); });
    return;
  }
  auto body = [&](int64_t begin, int64_t end) {
    float* buffer = scratch.get(block_scratch_floats(a.g));
    for (int64_t block = begin; block < end; ++block) run_block_avx2(a, block, buffer);
  };
  if (parallel && blocks > 1) {
    parallel(blocks, body);
  } else {
    body(0, blocks);
  }
#else
  (void)in, (void)packed_weights, (void)bias, (void)post, (void)residual, (void)out,
      (void)parallel;  // unreachable: available() is false off x86-64
#endif
}

namespace {
int64_t at(const Shape& s, int64_t channels, int64_t img, int64_t ch, int64_t y, int64_t x) {
  const int64_t blocks = (channels + s.block - 1) / s.block;
  return (((img * blocks + ch / s.block) * s.h + y) * s.w + x) * s.block + ch % s.block;
}
}  // namespace

void reference(const Shape& s, const float* in, const float* weight, const float* bias,
               const std::vector<PostOp>& post, const float* residual, float* out) {
  const int64_t kp = (s.k + s.block - 1) / s.block * s.block;
  for (int64_t img = 0; img < s.n; ++img) {
    for (int64_t ko = 0; ko < kp; ++ko) {
      for (int64_t y = 0; y < s.h; ++y) {
        for (int64_t x = 0; x < s.w; ++x) {
          const int64_t o = at(s, s.k, img, ko, y, x);
          if (ko >= s.k) {
            out[o] = 0.f;
            continue;
          }
          double sum = bias ? bias[ko] : 0.0;
          for (int64_t c = 0; c < s.c; ++c) {
            for (int dy = 0; dy < 3; ++dy) {
              for (int dx = 0; dx < 3; ++dx) {
                const int64_t yy = y + dy - 1, xx = x + dx - 1;
                if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
                sum += static_cast<double>(in[at(s, s.c, img, c, yy, xx)]) *
                       weight[((ko * s.c + c) * 3 + dy) * 3 + dx];
              }
            }
          }
          for (const PostOp& op : post) {
            switch (op.kind) {
              case PostOp::Kind::kRelu:
                sum = sum > 0 ? sum : op.alpha * sum;
                break;
              case PostOp::Kind::kClip:
                sum = std::fmin(std::fmax(sum, op.alpha), op.beta);
                break;
              case PostOp::Kind::kResidual:
                sum += residual[o];
                break;
            }
          }
          out[o] = static_cast<float>(sum);
        }
      }
    }
  }
}

}  // namespace memoplan::kernels::winograd
