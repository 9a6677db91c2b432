#include "memoplan/kernels/tune.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace memoplan::kernels {

std::vector<GemmConfig> candidate_configs(const GemmShape& shape) {
  // The likeliest first: tune() stops at its time budget, which on a large product (a BERT
  // projection, ~10 ms a call) covers only the first handful. All of K in one chunk when it is at
  // most 1024 (each C tile then written once; 256 x 768 x 3072 measured 19-20 ms against 24-28
  // with 256-512 chunks), then 512, 384 and 256; 128 last.
  std::vector<int64_t> chunks;
  if (shape.k <= 1024) chunks.push_back(std::max<int64_t>(1, shape.k));
  for (int64_t kc : {512, 384, 256, 128}) {
    if (kc < shape.k && std::find(chunks.begin(), chunks.end(), kc) == chunks.end()) {
      chunks.push_back(kc);
    }
  }
  std::vector<GemmConfig> out{default_config()};
  for (int64_t kc : chunks) {
    for (const MicroKernelInfo& kernel : available_micro_kernels()) {
      // The generic kernels are there for CPUs without AVX2; measuring them elsewhere wastes time.
      if (kernel.isa == Isa::kGeneric && available_micro_kernels().front().isa != Isa::kGeneric) {
        continue;
      }
      for (auto order : {GemmConfig::Order::kColsOuter, GemmConfig::Order::kRowsOuter}) {
        for (int64_t mc_slivers : {24, 8}) {
          if (order == GemmConfig::Order::kColsOuter && mc_slivers != 24) continue;  // mc unused
          GemmConfig c;
          c.kernel = kernel;
          c.kc = kc;
          c.mc = kernel.mr * mc_slivers;
          c.order = order;
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
