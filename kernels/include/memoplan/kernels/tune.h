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
  double ms = 0;          // median of its timed calls
  bool finalist = false;  // timed in the interleaved final (else: its screening calls only)
};

struct TuneOptions {
  int repetitions = 5;     // rounds of the final (the screening times min(2, this) calls each)
  double budget_ms = 400;  // screen new candidates while half of this lasts (the final after)
  ParallelFor parallel;    // the parallelism the op will run with
};

// The candidates for this CPU, the default configuration first.
std::vector<GemmConfig> candidate_configs(const GemmShape& shape);

// The candidates measured on random data of `shape`, in two steps: after a warm-up of the core,
// each candidate, likeliest first, screened with a few calls while half the budget lasts; then the
// default and the three fastest of the screening timed in `repetitions` interleaved rounds. The
// finalists first, fastest first (the default ahead of any within 2% of it: front() is the pick),
// then the other screened candidates, fastest first.
std::vector<Measurement> tune(const GemmShape& shape, const TuneOptions& options = {});

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_TUNE_H_
