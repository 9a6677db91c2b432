// The GEMM driver: cache blocking around the micro-kernel (Goto's scheme: K in kc chunks, rows in
// mc blocks packed into L2, columns in nr panels), edge tiles through a small buffer, the
// epilogue (bias, activation; epilogue.h) on each tile right after its last K chunk, and
// parallelism over column panels or row blocks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "epilogue.h"
#include "micro_kernel.h"
#include "pack.h"

namespace memoplan::kernels {
namespace {

// The packed right-hand operand as the driver sees it, whoever owns the memory.
struct Panels {
  const float* data;
  int64_t k, n;
  int nr;
  const float* panel(int64_t index) const { return data + index * k * nr; }
};

// Per-thread scratch: packed A blocks, B packed on the fly.
struct Scratch {
  FloatBuffer a, b;
};
thread_local Scratch scratch;

void apply_epilogue(float* c, int64_t ldc, int64_t rows, int64_t col0, int64_t cols,
                    const Epilogue& epilogue) {
  if (!epilogue.bias && epilogue.activation == Activation::kNone && epilogue.alpha == 1.0f) return;
  const EpilogueRowFn row_fn = epilogue_row();
  const float* bias = epilogue.bias ? epilogue.bias + col0 : nullptr;
  for (int64_t i = 0; i < rows; ++i) {
    row_fn(c + i * ldc + col0, cols, bias, epilogue.alpha, epilogue.activation);
  }
}

// The epilogue as seen from column j0 on (its bias shifted).
Epilogue epilogue_at(const Epilogue& epilogue, int64_t j0) {
  Epilogue shifted = epilogue;
  if (shifted.bias) shifted.bias += j0;
  return shifted;
}

// One tile: full tiles go straight to C, edge tiles through a buffer of mr x nr.
void run_tile(const MicroKernel& kernel, int64_t kc, const float* a, const float* b, float* c,
              int64_t ldc, int64_t rows, int64_t cols, bool accumulate) {
  const int mr = kernel.info.mr, nr = kernel.info.nr;
  if (rows == mr && cols == nr) {
    kernel.run(kc, a, b, c, ldc, accumulate);
    return;
  }
  alignas(64) float tile[24 * 48];
  kernel.run(kc, a, b, tile, nr, false);
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = c + i * ldc;
    const float* src = tile + i * nr;
    if (accumulate) {
      for (int64_t j = 0; j < cols; ++j) dst[j] += src[j];
    } else {
      std::memcpy(dst, src, cols * sizeof(float));
    }
  }
}

// Rows [row0, row1) x panels [panel0, panel1) of C, all of K.
void compute_block(const MatrixView& a, const Panels& b, float* c, int64_t ldc,
                   const Epilogue& epilogue, const GemmConfig& config, const MicroKernel& kernel,
                   int64_t row0, int64_t row1, int64_t panel0, int64_t panel1) {
  const int mr = kernel.info.mr, nr = kernel.info.nr;
  const int64_t k_total = b.k;
  const int64_t kc_max = std::max<int64_t>(1, config.kc);
  const int64_t mc_max = std::max<int64_t>(mr, config.mc / mr * mr);
  const int64_t col0 = panel0 * nr, col1 = std::min(b.n, panel1 * nr);
  if (k_total == 0) {
    if (!epilogue.accumulate) {
      for (int64_t i = row0; i < row1; ++i) {
        std::fill(c + i * ldc + col0, c + i * ldc + col1, 0.0f);
      }
    }
    apply_epilogue(c + row0 * ldc, ldc, row1 - row0, col0, col1 - col0, epilogue);
    return;
  }
  auto tiles = [&](const float* a_block, int64_t i0, int64_t rows, int64_t pc, int64_t kc,
                   int64_t panel) {
    const float* b_panel = b.panel(panel) + pc * nr;
    const int64_t j0 = panel * nr;
    const int64_t cols = std::min<int64_t>(nr, b.n - j0);
    const bool last_chunk = pc + kc == k_total;
    for (int64_t ir = 0; ir < rows; ir += mr) {
      const int64_t tile_rows = std::min<int64_t>(mr, rows - ir);
      float* tile = c + (i0 + ir) * ldc + j0;
      run_tile(kernel, kc, a_block + (ir / mr) * kc * mr, b_panel, tile, ldc, tile_rows, cols,
               pc > 0 || epilogue.accumulate);
      // The epilogue while the tile is in L1, once its sums are complete.
      if (last_chunk) apply_epilogue(tile, ldc, tile_rows, 0, cols, epilogue_at(epilogue, j0));
    }
  };
  if (config.order == GemmConfig::Order::kRowsOuter) {
    float* a_block = scratch.a.get(mc_max * kc_max);
    for (int64_t ic = row0; ic < row1; ic += mc_max) {
      const int64_t rows = std::min(mc_max, row1 - ic);
      for (int64_t pc = 0; pc < k_total; pc += kc_max) {
        const int64_t kc = std::min(kc_max, k_total - pc);
        pack_a(a, ic, rows, pc, kc, mr, a_block);
        for (int64_t panel = panel0; panel < panel1; ++panel)
          tiles(a_block, ic, rows, pc, kc, panel);
      }
    }
  } else {
    // All rows of one K chunk packed at once, then panel by panel: each B sliver (kc x nr) stays
    // in L1 while every row block passes over it.
    const int64_t rows_total = row1 - row0;
    const int64_t padded = (rows_total + mr - 1) / mr * mr;
    float* a_all = scratch.a.get(padded * kc_max);
    for (int64_t pc = 0; pc < k_total; pc += kc_max) {
      const int64_t kc = std::min(kc_max, k_total - pc);
      pack_a(a, row0, rows_total, pc, kc, mr, a_all);
      for (int64_t panel = panel0; panel < panel1; ++panel) {
        tiles(a_all, row0, rows_total, pc, kc, panel);
      }
    }
  }
}

const MicroKernel& kernel_for(const GemmConfig& config, int nr) {
  const MicroKernel* kernel = find_micro_kernel(config.kernel);
  if (!kernel || kernel->info.nr != nr) kernel = find_micro_kernel_for_nr(nr);
  if (!kernel)
    throw std::invalid_argument("no micro-kernel for panels of width " + std::to_string(nr) +
                                " on this CPU");
  return *kernel;
}

void run(const MatrixView& a, const Panels& b, float* c, int64_t ldc, const Epilogue& epilogue,
         const GemmConfig& config, const ParallelFor& parallel) {
  if (a.cols != b.k) throw std::invalid_argument("gemm: A is M x K, B must be K x N");
  if (epilogue.accumulate && epilogue.alpha != 1.0f) {
    throw std::invalid_argument("gemm: alpha with accumulate is not supported");
  }
  const MicroKernel& kernel = kernel_for(config, b.nr);
  const int64_t m = a.rows, panels = (b.n + b.nr - 1) / b.nr;
  if (m == 0 || b.n == 0) return;
  if (!parallel) {
    compute_block(a, b, c, ldc, epilogue, config, kernel, 0, m, 0, panels);
    return;
  }
  // Split the dimension that has more independent work: column panels (each task packs its own
  // A blocks) or row slivers.
  const int64_t slivers = (m + kernel.info.mr - 1) / kernel.info.mr;
  if (panels >= slivers) {
    parallel(panels, [&](int64_t begin, int64_t end) {
      compute_block(a, b, c, ldc, epilogue, config, kernel, 0, m, begin, end);
    });
  } else {
    const int64_t mr = kernel.info.mr;
    parallel(slivers, [&](int64_t begin, int64_t end) {
      compute_block(a, b, c, ldc, epilogue, config, kernel, begin * mr, std::min(m, end * mr), 0,
                    panels);
    });
  }
}

}  // namespace

void PackedB::Free::operator()(float* p) const { free_floats(p); }

PackedB::PackedB(const MatrixView& b, int nr) : k_(b.rows), n_(b.cols), nr_(nr) {
  if (nr <= 0) throw std::invalid_argument("PackedB: nr must be positive");
  data_.reset(allocate_floats(static_cast<size_t>(panels() * k_ * nr_)));
  pack_b(b, 0, n_, nr_, data_.get());
}

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kHardswish:
      return "hardswish";
  }
  return "?";
}

std::string GemmConfig::to_string() const {
  return std::string(kernels::to_string(kernel.isa)) + " " + std::to_string(kernel.mr) + "x" +
         std::to_string(kernel.nr) + " kc " + std::to_string(kc) + " mc " + std::to_string(mc) +
         (order == Order::kRowsOuter ? " rows-outer" : " cols-outer");
}

GemmConfig default_config() {
  GemmConfig config;
  config.kernel = available_micro_kernels().front();
  config.mc = config.kernel.mr * 16;
  return config;
}

void gemm(const MatrixView& a, const PackedB& b, float* c, int64_t ldc, const Epilogue& epilogue,
          const GemmConfig& config, const ParallelFor& parallel) {
  run(a, Panels{b.empty() ? nullptr : b.panel(0), b.k(), b.n(), b.nr()}, c, ldc, epilogue, config,
      parallel);
}

void gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, const Epilogue& epilogue,
          const GemmConfig& config, const ParallelFor& parallel) {
  // The configuration's kernel when this CPU runs it, else the best one it does.
  const int nr =
      find_micro_kernel(config.kernel) ? config.kernel.nr : available_micro_kernels().front().nr;
  const int64_t panels = (b.cols + nr - 1) / nr;
  float* packed = scratch.b.get(std::max<int64_t>(1, panels * b.rows * nr));
  pack_b(b, 0, b.cols, nr, packed);
  run(a, Panels{packed, b.rows, b.cols, nr}, c, ldc, epilogue, config, parallel);
}

void reference_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc,
                    const Epilogue& epilogue) {
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t j = 0; j < b.cols; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < a.cols; ++k) {
        sum += static_cast<double>(a.data[i * a.row_stride + k * a.col_stride]) *
               b.data[k * b.row_stride + j * b.col_stride];
      }
      sum *= epilogue.alpha;
      if (epilogue.accumulate) sum += c[i * ldc + j];
      if (epilogue.bias) sum += epilogue.bias[j];
      float value = static_cast<float>(sum);
      if (epilogue.activation == Activation::kRelu) value = value > 0.0f ? value : 0.0f;
      if (epilogue.activation == Activation::kGelu) value = gelu_scalar(value);
      if (epilogue.activation == Activation::kHardswish) value = hardswish_scalar(value);
      c[i * ldc + j] = value;
    }
  }
}

}  // namespace memoplan::kernels
