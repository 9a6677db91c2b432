// Choosing a GEMM configuration by measuring the candidates on the real shape (FluidML's `eval`):
// every micro-kernel this CPU runs x cache blockings x loop orders, each timed on the product it
// will compute, fastest first. The tuned ops keep each shape's result for the life of the
// process, so a shape is measured once (during plan()'s warm-up).
#ifndef MEMOPLAN_KERNELS_TUNE_H_
#define MEMOPLAN_KERNELS_TUNE_H_

#include <cstddef>
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

// Scratch a measurement may hold for packed weights at once (tune()'s packings, a product's two
// candidate packings: tuned/projection.cc): beyond it, candidates are packed and timed one at a
// time, so that a large weight's measurement does not set plan()'s peak.
inline constexpr size_t kMeasureScratchBytes = size_t{8} << 20;

// What one tune() held for its measurement: the packed B panels alive at once at most.
struct TuneStats {
  size_t peak_pack_bytes = 0;
  int packings = 0;  // B packed this many times (a packing dropped for the bound is made again)
};

struct TuneOptions {
  int repetitions = 5;     // rounds of the final (the screening times min(2, this) calls each)
  double budget_ms = 400;  // screen new candidates while half of this lasts (the final after)
  ParallelFor parallel;    // the parallelism the op will run with
  // Packed B panels (b_prepacked) kept at once, one per panel width, at most this many bytes (one
  // packing always): a packing that would pass it replaces the others, and a candidate whose
  // packing was dropped packs again before its call (untimed). Unbounded, a 1280 x 1000
  // classifier's finalists held 15 MiB of packings at once (mobilenet_v2's planning peak).
  size_t pack_scratch_bytes = kMeasureScratchBytes;
  TuneStats* stats = nullptr;  // filled where given
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
