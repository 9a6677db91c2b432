// memoplan's GEMM (kernels/) against OpenBLAS's cblas_sgemm on the shapes of the hot ops
// of the transformer models, one thread: GFLOP/s of each (counter "GFLOPS").
//
//   build-bench/bench/kernels_bench --benchmark_counters_tabular=true
//
// OpenBLAS is looked up at run time (Debian's libblas.so.3 is OpenBLAS when libopenblas0-pthread
// is installed; its thread count is set to 1), so the benchmark builds without its headers.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <random>
#include <vector>

#include "memoplan/kernels/gemm.h"
#include "memoplan/kernels/tune.h"

namespace {

using namespace memoplan::kernels;

// cblas_sgemm(CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112, ...).
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);

Sgemm openblas() {
  static Sgemm sgemm = [] {
    for (const char* name : {"libopenblas.so.0", "libblas.so.3"}) {
      if (void* lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) {
        if (auto set = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) {
          set(1);
        }
        if (auto f = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"))) return f;
      }
    }
    return Sgemm{nullptr};
  }();
  return sgemm;
}

struct Operands {
  int64_t m, k, n;
  std::vector<float> x, w, bias, y;  // y = x W^T + bias, W stored N x K (aten::linear)
  Operands(int64_t m_, int64_t k_, int64_t n_)
      : m(m_), k(k_), n(n_), x(m_ * k_), w(n_ * k_), bias(n_), y(m_ * n_) {
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : bias) v = u(rng);
  }
  MatrixView x_view() const { return {x.data(), m, k, k, 1}; }
  MatrixView w_transposed() const { return MatrixView{w.data(), n, k, k, 1}.transposed(); }
};

void report(benchmark::State& state, const Operands& o) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * o.m * o.k * o.n * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

void OpenBlasLinear(benchmark::State& state) {
  Operands o(state.range(0), state.range(1), state.range(2));
  Sgemm sgemm = openblas();
  if (!sgemm) {
    state.SkipWithError("OpenBLAS (libblas.so.3 / libopenblas.so.0) not found");
    return;
  }
  for (auto _ : state) {
    // The bias as aten::addmm does it: copied into the output first, then beta = 1.
    for (int64_t i = 0; i < o.m; ++i) std::copy(o.bias.begin(), o.bias.end(), &o.y[i * o.n]);
    sgemm(101, 111, 112, o.m, o.n, o.k, 1.0f, o.x.data(), o.k, o.w.data(), o.k, 1.0f, o.y.data(),
          o.n);
    benchmark::DoNotOptimize(o.y.data());
  }
  report(state, o);
}

void MemoplanLinearDefault(benchmark::State& state) {
  Operands o(state.range(0), state.range(1), state.range(2));
  const GemmConfig config = default_config();
  const PackedB packed(o.w_transposed(), config.kernel.nr);  // at plan time
  for (auto _ : state) {
    gemm(o.x_view(), packed, o.y.data(), o.n, {o.bias.data()}, config);
    benchmark::DoNotOptimize(o.y.data());
  }
  state.SetLabel(config.to_string());
  report(state, o);
}

void MemoplanLinearTuned(benchmark::State& state) {
  Operands o(state.range(0), state.range(1), state.range(2));
  GemmShape shape{o.m, o.k, o.n, true, Activation::kNone, true};
  const GemmConfig config = tune(shape).front().config;
  const PackedB packed(o.w_transposed(), config.kernel.nr);
  for (auto _ : state) {
    gemm(o.x_view(), packed, o.y.data(), o.n, {o.bias.data()}, config);
    benchmark::DoNotOptimize(o.y.data());
  }
  state.SetLabel(config.to_string());
  report(state, o);
}

// M x K x N: 512^3 (the reference point), the BERT-base encoder's linears at sequence 128
// (QKV/out 768x768, feed-forward 768x3072 and back), and the small transformer encoder's (d 256,
// feed-forward 1024).
void Shapes(benchmark::internal::Benchmark* b) {
  for (auto s : std::vector<std::vector<int64_t>>{{512, 512, 512},
                                                  {128, 768, 768},
                                                  {128, 768, 3072},
                                                  {128, 3072, 768},
                                                  {128, 256, 256},
                                                  {128, 256, 1024},
                                                  {128, 1024, 256}}) {
    b->Args(s);
  }
  b->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK(OpenBlasLinear)->Apply(Shapes);
BENCHMARK(MemoplanLinearDefault)->Apply(Shapes);
BENCHMARK(MemoplanLinearTuned)->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
