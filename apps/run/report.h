// What one `memoplan run` measured, and the two ways it is printed: a report for people and one
// JSON object for machines (docs/RUN.md lists the fields). No torch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/torch/plan.h"  // Kernels, Memory

namespace memoplan::run {

using torch_ext::Kernels;
using torch_ext::Memory;

struct RunReport {
  std::string model;     // the file as given
  std::string format;    // "torchscript", or "aot_inductor" (a .pt2 package)
  std::string input;     // "1x3x224x224"
  std::string dtype;     // "float32"
  std::string strategy;  // the planner strategy the plan was made with
  // What runs each planned copy: "flat" or "interpreter: why" (PlanSummary::executor); empty
  // where no such copy ran.
  std::string executor, tuned_executor;
  int threads = 1;      // inference threads
  int intra_op = 1;     // intra-op threads of each
  int warm_passes = 0;  // untimed passes of a copy before each block of timed ones
  int block = 1;        // timed passes of one copy in a row
  int iters = 0;        // timed iterations: each one unplanned pass and one planned pass
  int warmup = 0;       // untimed iterations per thread before them
  std::vector<double> unplanned_ms, planned_ms;  // per timed pass, all threads
  // --kernels tuned: the third copy's passes, and how far its outputs are from the unplanned
  // (stock) ones: max |tuned - stock| / max |stock| over all passes (-1: they differ in kind).
  Kernels kernels = Kernels::kStock;
  std::vector<double> tuned_ms;
  double tuned_max_relative_difference = 0;
  std::string kernel_report;  // per shape: aten vs memoplan, measured during plan()
  // The tuned copy's plan: its slab and both bounds (with and without sharing).
  uint64_t tuned_slab_bytes = 0, tuned_lower_bound_bytes = 0, tuned_offset_lower_bound_bytes = 0;
  // The tuned copy's weights after plan(): packed forms kept; plain weights moved into their file
  // (release_weights) and of those the bytes a planned pass read (resident).
  uint64_t packed_weight_bytes = 0, plain_weight_bytes = 0, plain_weight_resident_bytes = 0;
  // The tuned copy's coverage (PlanSummary::coverage): convolution and product FLOPs of a pass,
  // those on memoplan's kernels, and each op kind left on aten with its reason.
  double flops = 0, tuned_flops = 0;
  struct LeftOp {
    std::string op, reason;
    uint64_t calls = 0;
    double flops = 0;
  };
  std::vector<LeftOp> left_on_aten;

  // The plan (PlanSummary) and the time it took.
  uint64_t slab_bytes = 0, lower_bound_bytes = 0;
  // --memory min: the bound without sharing (today's offset bound) and the tensors laid over
  // live ones they share bytes with; lower_bound_bytes is then the bound with sharing.
  Memory memory = Memory::kOffset;
  uint64_t offset_lower_bound_bytes = 0, shared_tensors = 0;
  // Planned bytes, and those laid over live tensors they share bytes with (memory min).
  uint64_t planned_bytes = 0, coalesced_bytes = 0;
  // --memory min: convolutions and max poolings computed in parts in the timed planned passes,
  // and convolution shapes whose parts were checked and did not give aten's bytes (they run whole).
  uint64_t sliced_convolutions = 0, sliced_poolings = 0, convolution_shapes_whole = 0;
  uint64_t convolution_shapes_saving_little = 0;
  uint64_t planned_tensors = 0, escaping_tensors = 0;  // per pass
  double planning_ms = 0;                              // the planner's strategy
  double plan_call_ms = 0;  // memoplan::torch_ext::plan(): warm-up passes, profiled pass, planning
  double load_ms = 0;       // loading the file twice

  // Tensor requests of more than zero bytes that reached the system allocator in the timed passes
  // (unplanned: counted by a wrapper in c10's CPU slot; planned: PlanStats::tensor_mallocs), and
  // the passes they are over.
  uint64_t unplanned_mallocs = 0, unplanned_passes = 0;
  uint64_t planned_mallocs = 0, planned_passes = 0;
  uint64_t replayed_passes =
      0;                      // of the planned passes, those that ran on the plan (all, normally)
  uint64_t planned_hits = 0;  // tensors served from the slab in the timed passes
  // PlanStats fallbacks in the timed passes. `escaping` are the outputs (expected, one or a few
  // per pass); the other two mean the pass deviated from the profiled one.
  uint64_t fallback_not_planned = 0, fallback_overlap = 0, fallback_escaping = 0;

  // Peak RSS (VmHWM) of a process of its own that loads the model once and runs the same
  // warm-up and passes on the same threads, unplanned or planned (plan() included); 0 when not
  // measured (--no-rss) or the probe failed (rss_error says why).
  uint64_t peak_rss_bytes_unplanned = 0, peak_rss_bytes_planned = 0;
  uint64_t peak_rss_bytes_tuned = 0;  // --kernels tuned only
  // The unplanned probe's RSS before it loaded the model (the process and the runtime's
  // libraries): peak minus it is what the model and its passes took.
  uint64_t runtime_rss_bytes = 0;
  std::string rss_error;

  // The library whose malloc the process runs on (both copies; the plan serves the planned
  // copy's tensors): memoplan-run is linked with tcmalloc unless built without the pairing or
  // another allocator is preloaded.
  std::string malloc_library;
  // LibTorch's TensorExpr fuser as the copies ran (--fuser, PYTORCH_TENSOREXPR), and whether this
  // LibTorch fuses on the CPU at all (1.13: no, unless overridden; Debian's 2.6: yes).
  bool fuser = false, fuser_on_cpu = false;

  // Shapes that vary (--input with ranges; for a fixed shape these hold that shape's figures): the
  // seed and the distinct shapes drawn (plan() and every pass), the timed planned passes that ran
  // on a plan with no fallback, the profiled passes of the whole run (plan() included), the
  // largest slab a thread held and the lower bound of the largest shape drawn.
  uint64_t seed = 0;
  std::string draw = "uniform";  // how ranged dims were drawn (--draw)
  bool varying = false;
  uint64_t distinct_shapes = 1;
  uint64_t fully_planned_passes = 0;
  uint64_t profiled_passes = 0;
  uint64_t family_plans = 0;  // plans made from a shape family's formulas, none profiled
  uint64_t slab_bytes_max = 0, lower_bound_bytes_max = 0;
  std::string largest_shape;

  // --budget: a fourth copy planned under a memory budget (docs/BUDGET.md), its passes, the
  // budget plan, and the most weight bytes resident at a step of 3 sampled passes after the
  // timed ones (peak_resident_bytes adds the slab); its outputs count in passes_differing.
  uint64_t budget_bytes = 0;
  std::string budget_text;          // as given
  std::string page_cache = "warm";  // "cold": the weight file evicted before each budgeted pass
  std::vector<double> budgeted_ms;
  uint64_t weights_bytes = 0, budget_pinned_bytes = 0, budget_streamed_bytes = 0;
  uint64_t budget_planned_peak_bytes = 0, budget_smallest_bytes = 0, budget_slab_bytes = 0;
  uint64_t budget_work_bytes = 0;  // the convolutions' work arena (BudgetSummary::work_bytes)
  uint64_t budget_sliced_groups = 0, resident_weight_peak_bytes = 0, peak_resident_bytes = 0;
  double budget_replan_ms = 0;  // set_budget() to the same budget: a re-plan without a pass
  std::string weight_file;

  uint64_t passes_compared = 0, passes_differing = 0;  // outputs, unplanned vs planned
  std::string first_difference;                        // where the first differing pass differed
  std::string heapmap;                                 // SVG written, or empty
};

// Nearest-rank percentile (0 < p <= 100) of `values`; 0 when empty.
double percentile(std::vector<double> values, double p);

// How far tuned outputs may be from stock ones: aten's own results move this much between BLAS
// builds and thread counts.
inline constexpr double kTunedTolerance = 1e-5;
inline bool tuned_within_tolerance(const RunReport& r) {
  return r.tuned_max_relative_difference >= 0 && r.tuned_max_relative_difference <= kTunedTolerance;
}

std::string format_text(const RunReport& report);
std::string format_json(const RunReport& report);  // one line

}  // namespace memoplan::run
