// memoplan's tuned kernels as a user sees them: plan(..., kernels = "tuned")
// (memoplan/torch/plan.h) replaces hot ops with memoplan's own where they measure faster; these say
// what ran and let tests and benchmarks pin the choice. They live in libmemoplan_tuned.so: link
// memoplan::tuned to call them (plan() alone loads the library when asked for kernels "tuned";
// kernel_report() is in plan.h and needs no link). No torch headers.
#pragma once

#include <cstdint>
#include <string>

namespace memoplan::torch_ext {

struct KernelStats {
  uint64_t tuned_calls = 0;   // memoplan::linear calls run by memoplan's GEMM
  uint64_t stock_calls = 0;   // calls where aten's op was measured faster, or could not be replaced
  uint64_t shapes_tuned = 0;  // distinct (M, K, N, activation, bias, threads) measured
  uint64_t weights_packed = 0;
  uint64_t residuals_in_place = 0;  // convolutions that wrote over their dying residual operand
};
KernelStats kernel_stats();

// How a shape picks between memoplan's GEMM and aten's op. kMeasure (the default) times both;
// the other two skip the timing: for tests and for benchmarks that must run one side only.
enum class KernelChoice { kMeasure, kAlwaysMemoplan, kAlwaysAten };
void set_kernel_choice(KernelChoice choice);
// Convolutions in oneDNN's blocked channel layout (nChw16c / nChw8c: docs/KERNELS.md) for the
// graphs plan() rewrites from now on: on by default where oneDNN runs AVX2 or better and
// MEMOPLAN_BLOCKED_LAYOUT is not 0; off, convolutions take the NCHW / NHWC layout plan. Returns
// whether it was on.
bool set_blocked_layout(bool enabled);
// Winograd for the blocked layout's 3x3 stride-1 convolutions (docs/KERNELS.md): memoplan's
// F(2x2, 3x3) and oneDNN's own (its F(2, 3) kernels, AVX-512 only). kMeasure (the default) times
// them against oneDNN's direct kernels once per shape and thread count and keeps the fastest;
// kAlways takes memoplan's wherever it applies, kOneDnn oneDNN's wherever it has one, kNever
// neither. MEMOPLAN_WINOGRAD=1 / =onednn / =0 set kAlways / kOneDnn / kNever at start. Returns
// the previous setting.
enum class WinogradChoice { kMeasure, kAlways, kNever, kOneDnn };
WinogradChoice set_winograd(WinogradChoice choice);

}  // namespace memoplan::torch_ext
