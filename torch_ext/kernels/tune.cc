#include "memoplan/kernels/tune.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace memoplan::kernels {

std::vector<GemmConfig> candidate_configs(const GemmShape& shape) {
  std::vector<GemmConfig> out{default_config()};
  for (const MicroKernelInfo& kernel : available_micro_kernels()) {
    // The generic kernels are there for CPUs without AVX2; measuring them elsewhere wastes time.
    if (kernel.isa == Isa::kGeneric && available_micro_kernels().front().isa != Isa::kGeneric) {
      continue;
    }
    for (int64_t kc : {128, 256, 512}) {
      if (kc > 128 && kc / 2 >= shape.k) continue;  // larger chunks than K change nothing
      for (int64_t mc_slivers : {8, 24}) {
        for (auto order : {GemmConfig::Order::kRowsOuter, GemmConfig::Order::kColsOuter}) {
          GemmConfig c;
          c.kernel = kernel;
          c.kc = kc;
          c.mc = kernel.mr * mc_slivers;
          c.order = order;
          if (order == GemmConfig::Order::kColsOuter && mc_slivers != 8) continue;  // mc unused
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

std::vector<Measurement> tune(const GemmShape& shape, const TuneOptions& options) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(shape.m * shape.k), b(shape.k * shape.n), bias(shape.n),
      c(shape.m * shape.n);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  for (float& x : bias) x = uniform(rng);
  const MatrixView a_view{a.data(), shape.m, shape.k, shape.k, 1};
  const MatrixView b_view{b.data(), shape.k, shape.n, shape.n, 1};
  Epilogue epilogue{shape.bias ? bias.data() : nullptr, shape.activation};

  std::vector<Measurement> out;
  const auto start = std::chrono::steady_clock::now();
  for (const GemmConfig& config : candidate_configs(shape)) {
    const double spent =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!out.empty() && spent > options.budget_ms) break;
    PackedB packed;
    if (shape.b_prepacked) packed = PackedB(b_view, config.kernel.nr);
    auto call = [&] {
      if (shape.b_prepacked) {
        gemm(a_view, packed, c.data(), shape.n, epilogue, config, options.parallel);
      } else {
        gemm(a_view, b_view, c.data(), shape.n, epilogue, config, options.parallel);
      }
    };
    call();
    std::vector<double> ms;
    for (int r = 0; r < std::max(1, options.repetitions); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    out.push_back({config, ms[ms.size() / 2]});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Measurement& x, const Measurement& y) { return x.ms < y.ms; });
  return out;
}

}  // namespace memoplan::kernels
