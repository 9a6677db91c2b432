// memoplan's tuned kernels as a user sees them: plan(..., kernels = "tuned")
// (memoplan/torch/plan.h) replaces hot ops with memoplan's own where they measure faster; these say
// what ran and let tests and benchmarks pin each choice (KernelOptions). They live in
// libmemoplan_tuned.so: link memoplan::tuned to call them (plan() alone loads the library when
// asked for kernels "tuned"; kernel_report() is in plan.h and needs no link). No torch headers.
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
  // Convolution calls in the blocked layout run by a primitive (oneDNN's or memoplan's Winograd),
  // and of them those that ran what an earlier call of their site resolved (its primitive, packing
  // and bias, no cache looked up: tuned/blocked/blocked_ops.cc).
  uint64_t convolutions_run = 0;
  uint64_t convolutions_resolved = 0;
};
KernelStats kernel_stats();

// How the tuned kernels choose, one typed setting per choice they make; every default measures.
// For tests and benchmarks that must run one side only, and for users who pin a choice. Read by
// each tuned op when it meets a new shape, and by plan() when it rewrites a graph (blocked_layout,
// region_layout): set them before plan(); choices already measured stay.
//
// memoplan's kernels or aten's, for every op a tuned kernel may replace.
enum class KernelChoice { kMeasure, kAlwaysMemoplan, kAlwaysAten };
// memoplan::linear's products (and the encoder's): memoplan's GEMM or oneDNN's matmul.
enum class GemmSide { kMeasure, kMemoplan, kOneDnn };
// Winograd for the blocked layout's 3x3 stride-1 convolutions (docs/KERNELS.md): memoplan's
// F(2x2, 3x3) and oneDNN's own (its F(2, 3) kernels, AVX-512 only). kMeasure times them against
// oneDNN's direct kernels once per shape and thread count and keeps the fastest; kAlways takes
// memoplan's wherever it applies, kOneDnn oneDNN's wherever it has one, kNever neither.
enum class WinogradChoice { kMeasure, kAlways, kNever, kOneDnn };
// The layout of every activation of a blocked region that the layout plan may choose: the plan's
// (kPlanned), or one for all.
enum class RegionLayout { kPlanned, kNchw, kNhwc, kBlocked };

struct KernelOptions {
  KernelChoice choice = KernelChoice::kMeasure;
  GemmSide gemm = GemmSide::kMeasure;
  WinogradChoice winograd = WinogradChoice::kMeasure;
  RegionLayout region_layout = RegionLayout::kPlanned;
  // Convolutions in oneDNN's blocked channel layout (nChw16c / nChw8c: docs/KERNELS.md) where
  // oneDNN runs AVX2 or better; false: they take the NCHW / NHWC layout plan.
  bool blocked_layout = true;
};
// The settings in force. At load they are the defaults above, except where the environment
// names another: MEMOPLAN_GEMM=memoplan|onednn, MEMOPLAN_WINOGRAD=0|1|onednn,
// MEMOPLAN_REGION_LAYOUT=nchw|nhwc|blocked (aliases for programs a benchmark starts, e.g.
// bench/run_ort_compare.py --also-env; read once, in tuned/kernel_options.cc).
KernelOptions kernel_options();
// Makes `options` the settings; returns those before.
KernelOptions set_kernel_options(const KernelOptions& options);

}  // namespace memoplan::torch_ext
