#include "memoplan/kernels/tune.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
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

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A finalist must beat the default's median by more than this to replace it.
constexpr double kTieFraction = 0.02;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<Measurement> tune(const GemmShape& shape, const TuneOptions& options) {
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // A prepacked B is packed from one random row read K times (row stride 0): the time of a product
  // does not depend on its values, and the K x N matrix would be as large again as a packing.
  const int64_t b_rows = shape.b_prepacked ? 1 : shape.k;
  std::vector<float> a(shape.m * shape.k), b(b_rows * shape.n), bias(shape.n), c(shape.m * shape.n);
  for (float& x : a) x = uniform(rng);
  for (float& x : b) x = uniform(rng);
  for (float& x : bias) x = uniform(rng);
  const MatrixView a_view{a.data(), shape.m, shape.k, shape.k, 1};
  const MatrixView b_view{b.data(), shape.k, shape.n, shape.b_prepacked ? 0 : shape.n, 1};
  const Epilogue epilogue{shape.bias ? bias.data() : nullptr, shape.activation};

  struct Candidate {
    GemmConfig config;
    double screened_ms = 0;
  };
  std::vector<Candidate> measured;
  // B packed for a panel width: a packing depends on nr alone, so configurations of one nr share
  // it. The packings alive at once stay within options.pack_scratch_bytes (one always): a new one
  // that would pass it drops the others, least recently used first.
  struct Packing {
    PackedB panels;
    uint64_t used = 0;
  };
  std::map<int, Packing> packs;
  uint64_t clock = 0;
  TuneStats stats;
  auto held = [&] {
    size_t bytes = 0;
    for (const auto& [nr, p] : packs) bytes += p.panels.bytes();
    return bytes;
  };
  auto pack = [&](int nr) -> const PackedB& {
    auto it = packs.find(nr);
    if (it == packs.end()) {
      const size_t bytes = PackedB::bytes_for(shape.k, shape.n, nr);
      while (!packs.empty() && held() + bytes > options.pack_scratch_bytes) {
        packs.erase(std::min_element(packs.begin(), packs.end(), [](const auto& x, const auto& y) {
          return x.second.used < y.second.used;
        }));
      }
      it = packs.emplace(nr, Packing{PackedB(b_view, nr), 0}).first;
      ++stats.packings;
      stats.peak_pack_bytes = std::max(stats.peak_pack_bytes, held());
    }
    it->second.used = ++clock;
    return it->second.panels;
  };
  auto call = [&](const Candidate& candidate) {
    const PackedB* panels = shape.b_prepacked ? &pack(candidate.config.kernel.nr) : nullptr;
    const auto t0 = Clock::now();
    if (panels) {
      gemm(a_view, *panels, c.data(), shape.n, epilogue, candidate.config, options.parallel);
    } else {
      gemm(a_view, b_view, c.data(), shape.n, epilogue, candidate.config, options.parallel);
    }
    return ms_since(t0);
  };
  const int repetitions = std::max(1, options.repetitions);
  const auto start = Clock::now();

  const int default_nr = default_config().kernel.nr;
  for (const GemmConfig& config : candidate_configs(shape)) {
    measured.push_back({config, 0});
    // Before the first (the default), the core runs the product for a while (at least 3 calls and
    // 10 ms): a core that just woke up or changes its clock for AVX-512 runs the first calls at
    // another speed, which the default, measured first, would pay for.
    if (measured.size() == 1) {
      const auto warm = Clock::now();
      for (int i = 0; i < 3 || (ms_since(warm) < 10 && i < 1000); ++i) call(measured[0]);
    }
    // Screening: about two timed calls each (one untimed first), while half the budget lasts.
    call(measured.back());
    std::vector<double> ms;
    for (int r = 0; r < std::min(2, repetitions); ++r) ms.push_back(call(measured.back()));
    measured.back().screened_ms = median(ms);
    if (config.kernel.nr != default_nr) packs.erase(config.kernel.nr);  // the finalists pack again
    if (ms_since(start) > options.budget_ms / 2) break;
  }

  // The final: the default and the fastest of the screening, timed in interleaved rounds (each
  // round calls each finalist once, in a rotated order), so that the machine's drift and a
  // neighbour's burst fall on all of them alike; the median of the rounds decides.
  constexpr size_t kFinalists = 4;
  std::vector<size_t> order(measured.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin() + 1, order.end(), [&](size_t x, size_t y) {
    return measured[x].screened_ms < measured[y].screened_ms;
  });
  const size_t finalists = std::min(kFinalists, order.size());
  for (size_t f = 0; f < finalists; ++f) call(measured[order[f]]);  // untimed: the packs are new
  std::vector<std::vector<double>> rounds(finalists);
  for (int r = 0; r < repetitions; ++r) {
    for (size_t j = 0; j < finalists; ++j) {
      const size_t f = (j + static_cast<size_t>(r)) % finalists;
      rounds[f].push_back(call(measured[order[f]]));
    }
  }
  // Another configuration replaces the default only when it is faster by more than the rounds'
  // resolution (kTieFraction): on a tie the default stays, its speed known on every shape and CPU.
  std::vector<double> final_ms(finalists);
  for (size_t f = 0; f < finalists; ++f) final_ms[f] = median(rounds[f]);
  std::vector<size_t> ranked(finalists);
  for (size_t f = 0; f < finalists; ++f) ranked[f] = f;
  auto ranking_ms = [&](size_t f) {  // finalist 0: the default
    return f == 0 ? final_ms[f] / (1 + kTieFraction) : final_ms[f];
  };
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](size_t x, size_t y) { return ranking_ms(x) < ranking_ms(y); });
  std::vector<Measurement> out;
  for (size_t f : ranked) out.push_back({measured[order[f]].config, final_ms[f], true});
  for (size_t i = finalists; i < order.size(); ++i) {
    out.push_back({measured[order[i]].config, measured[order[i]].screened_ms, false});
  }
  if (options.stats) *options.stats = stats;
  return out;
}

}  // namespace memoplan::kernels
