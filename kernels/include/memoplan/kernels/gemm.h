// memoplan's single-precision GEMM for the hot ops of a planned graph (aten::linear, addmm,
// matmul, bmm, 1x1 conv2d): C = A * B (+ bias) (then an activation), with either operand packed
// once ahead of time (weights at plan time) or on the fly, several packed layouts and loop orders
// to choose from by measuring them on the real shapes (FluidML's eval; kernels/tune.h), and AVX-512
// or AVX2+FMA micro-kernels picked at run time. No torch headers: LibTorch calls it through
// torch_ext's op replacement, tests and benchmarks call it directly.
#ifndef MEMOPLAN_KERNELS_GEMM_H_
#define MEMOPLAN_KERNELS_GEMM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace memoplan::kernels {

// A strided view of a row-major-or-not matrix: element (r, c) is data[r * row_stride + c *
// col_stride]. A transpose is the same data with the strides swapped.
struct MatrixView {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 1;
  MatrixView transposed() const { return {data, cols, rows, col_stride, row_stride}; }
};

// The instruction set a micro-kernel needs; the best one the CPU has is the default.
enum class Isa { kGeneric, kAvx2, kAvx512 };
Isa best_isa();
const char* to_string(Isa isa);

// One register-blocked micro-kernel: an mr x nr tile of C per call.
struct MicroKernelInfo {
  Isa isa;
  int mr, nr;
};
// The micro-kernels the CPU can run, best first.
std::vector<MicroKernelInfo> available_micro_kernels();

// A right-hand operand (K x N) packed in panels of `nr` columns, k-major inside a panel, padded
// with zeros to a multiple of nr: the layout the micro-kernel streams. Packing a weight once is
// what removes the per-call re-packing of OpenBLAS and oneDNN.
class PackedB {
 public:
  PackedB() = default;
  PackedB(const MatrixView& b, int nr);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int nr() const { return nr_; }
  const float* panel(int64_t index) const { return data_.get() + index * k_ * nr_; }
  int64_t panels() const { return (n_ + nr_ - 1) / nr_; }
  bool empty() const { return !data_; }
  size_t bytes() const { return bytes_for(k_, n_, nr_); }
  // What a packing of a K x N matrix in panels of width nr holds (the last panel padded).
  static size_t bytes_for(int64_t k, int64_t n, int nr) {
    return static_cast<size_t>((n + nr - 1) / nr * nr * k) * sizeof(float);
  }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  int64_t k_ = 0, n_ = 0;
  int nr_ = 0;
};

enum class Activation { kNone, kRelu, kGelu, kHardswish };
const char* to_string(Activation activation);

// How a product is computed: which micro-kernel, cache blocking and loop order. Every
// configuration gives the same result up to floating-point summation order (K is summed in kc
// chunks, in order).
struct GemmConfig {
  MicroKernelInfo kernel{Isa::kGeneric, 4, 8};
  int64_t kc = 256;  // K per packed block (the A and B slivers that stay in L1/L2)
  int64_t mc = 96;   // rows of A per packed block (a multiple of mr)
  // kRowsOuter: for each block of rows, every column panel (the A block stays in L2, B streams);
  // kColsOuter: for each column panel, every row block (the B panel stays in L1, A streams).
  enum class Order { kRowsOuter, kColsOuter } order = Order::kRowsOuter;
  std::string to_string() const;
};

// The default configuration for the best micro-kernel of this CPU.
GemmConfig default_config();

// Splits [0, n) into chunks run in parallel, e.g. at::parallel_for; serial when empty.
using ParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>&)>;

// What happens to each element of C = A * B after the product: C = alpha * C (+ bias[column]),
// then the activation; with `accumulate`, C's previous contents are added first (a residual
// connection: C = C_before + A * B + bias; alpha must then be 1).
struct Epilogue {
  const float* bias = nullptr;  // one per column of C, or null
  Activation activation = Activation::kNone;
  float alpha = 1.0f;
  bool accumulate = false;
};

// C (M x N, row stride ldc, contiguous rows) = A (M x K) * B (K x N), then + bias and the
// activation. `b` packed with config.kernel.nr (PackedB::nr() must match, else it is repacked).
void gemm(const MatrixView& a, const PackedB& b, float* c, int64_t ldc, const Epilogue& epilogue,
          const GemmConfig& config, const ParallelFor& parallel = {});
// The same with B packed on the fly (both operands are activations, e.g. bmm).
void gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc, const Epilogue& epilogue,
          const GemmConfig& config, const ParallelFor& parallel = {});

// C (M x N) = A (M x K) * W^T with W (N x K) a linear's weight as stored (contiguous rows, as A's),
// then the epilogue: a stream over W, each of its rows read once per four rows of A and dotted
// with them (kernels/gemv.cc). For the few rows of a classifier at batch 1 or 2, where a product
// is bound by memory: no packing, no copy of W.
constexpr int64_t kGemvMaxRows = 4;
void gemv(const MatrixView& a, const MatrixView& w, float* c, int64_t ldc, const Epilogue& epilogue,
          const ParallelFor& parallel = {});

// Plain triple loop in double precision: what the tests compare against.
void reference_gemm(const MatrixView& a, const MatrixView& b, float* c, int64_t ldc,
                    const Epilogue& epilogue);

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_GEMM_H_
