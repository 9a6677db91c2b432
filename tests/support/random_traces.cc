#include "random_traces.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace memoplan::testing {
namespace {

uint64_t log_uniform_size(std::mt19937_64& rng, double lo = 64, double hi = 64.0 * 1024 * 1024) {
  std::uniform_real_distribution<double> exponent(std::log(lo), std::log(hi));
  return static_cast<uint64_t>(std::exp(exponent(rng)));
}

}  // namespace

const std::vector<TraceShape>& all_shapes() {
  static const std::vector<TraceShape> shapes = {TraceShape::kUniform, TraceShape::kChain,
                                                 TraceShape::kResidual, TraceShape::kTies,
                                                 TraceShape::kDnnLike};
  return shapes;
}

std::string to_string(TraceShape shape) {
  switch (shape) {
    case TraceShape::kUniform:
      return "uniform";
    case TraceShape::kChain:
      return "chain";
    case TraceShape::kResidual:
      return "residual";
    case TraceShape::kTies:
      return "ties";
    case TraceShape::kDnnLike:
      return "dnn_like";
  }
  return "?";
}

Trace random_trace(TraceShape shape, size_t allocations, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(shape));
  Trace trace;
  trace.meta.name = "random_" + to_string(shape) + "_" + std::to_string(allocations);
  trace.meta.source = "random_traces(seed=" + std::to_string(seed) + ")";
  const uint64_t horizon = 2 * allocations + 2;
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };

  for (size_t i = 0; i < allocations; ++i) {
    Allocation a;
    a.id = i;
    uint64_t t = 2 * i;  // one allocation per two ticks keeps chains readable
    switch (shape) {
      case TraceShape::kUniform: {
        std::uniform_int_distribution<uint64_t> tick(0, horizon - 1);
        uint64_t x = tick(rng), y = tick(rng);
        a.begin = std::min(x, y);
        a.end = std::max(x, y) + 1;
        a.size = log_uniform_size(rng);
        break;
      }
      case TraceShape::kChain:
        a.begin = t;
        a.end = t + 2 + 2 * std::uniform_int_distribution<uint64_t>(0, 1)(rng) + 1;
        a.size = log_uniform_size(rng, 4096, 8 << 20);
        break;
      case TraceShape::kResidual:
        a.begin = t;
        a.end = coin(0.2) ? t + 2 * std::uniform_int_distribution<uint64_t>(3, 12)(rng) : t + 3;
        a.size = log_uniform_size(rng, 4096, 8 << 20);
        break;
      case TraceShape::kTies: {
        static const uint64_t sizes[] = {1 << 12, 1 << 16, 1 << 20, 3 << 20};
        a.begin = (t / 8) * 8;
        a.end = a.begin + 8 * std::uniform_int_distribution<uint64_t>(1, 3)(rng);
        a.size = sizes[std::uniform_int_distribution<int>(0, 3)(rng)];
        break;
      }
      case TraceShape::kDnnLike: {
        // Like the recorded torchvision passes: a handful of pass-long blocks however long the
        // pass (outputs, caches), ~30% workspaces freed inside their op, activations consumed by
        // the next few ops, and ~10% skip connections held across up to 64 ops.
        a.begin = t;
        const double kind = std::uniform_real_distribution<double>(0, 1)(rng);
        const double pass_long = std::min(0.01, 16.0 / static_cast<double>(allocations));
        if (kind < pass_long) {
          a.end = horizon;
          a.escapes = coin(0.5);
        } else if (kind < 0.3) {
          a.end = t + 1;
        } else if (kind < 0.4) {
          a.end = t + 2 * std::uniform_int_distribution<uint64_t>(4, 64)(rng) + 1;
        } else {
          a.end = t + 2 * std::uniform_int_distribution<uint64_t>(1, 6)(rng) + 1;
        }
        a.size = log_uniform_size(rng, 256, 16 << 20);
        break;
      }
    }
    if (coin(0.05)) a.size = 0;
    a.provenance.op = "op" + std::to_string(i % 17);
    trace.allocations.push_back(a);
  }
  return trace;
}

}  // namespace memoplan::testing
