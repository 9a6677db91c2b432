// Choosing a GEMM configuration by measuring the candidates on the real shape (FluidML's `eval`):
// every micro-kernel this CPU runs x cache blockings x loop orders, each timed on the product it
// will compute, fastest first. The tuned ops keep each shape's result for the life of the
// process, so a shape is measured once (during plan()'s warm-up).
#ifndef MEMOPLAN_KERNELS_TUNE_H_
#define MEMOPLAN_KERNELS_TUNE_H_

#include <cstdint>
#include <vector>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {

struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
  bool b_prepacked = true;  // a weight packed at plan time; false: packed on every call (bmm)
  Activation activation = Activation::kNone;
  bool bias = false;
};

struct Measurement {
  GemmConfig config;
  double ms = 0;  // median of the timed repetitions
};

struct TuneOptions {
  int repetitions = 5;     // timed calls per candidate (after one untimed warm-up call)
  double budget_ms = 400;  // stop measuring new candidates after this much time in all
  ParallelFor parallel;    // the parallelism the op will run with
};

// The candidates for this CPU, the default configuration first.
std::vector<GemmConfig> candidate_configs(const GemmShape& shape);

// Every candidate measured on random data of `shape`, fastest first.
std::vector<Measurement> tune(const GemmShape& shape, const TuneOptions& options = {});

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_TUNE_H_
