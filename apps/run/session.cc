// The one translation unit of memoplan-run that includes <torch/script.h> (slow to compile).
#include "session.h"

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <chrono>
#include <optional>
#include <set>

#include "aoti_session.h"
#include "memoplan/heapmap.h"
#include "memoplan/process_status.h"
#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/fuser.h"
#include "memoplan/torch/plan.h"
#include "memoplan/trace_io.h"
#include "progress.h"
#include "rss_probe.h"
#include "session_common.h"

namespace memoplan::run {
namespace {

using Clock = std::chrono::steady_clock;

torch::jit::Module load(const std::string& path, torch::jit::ExtraFilesMap* extra) {
  try {
    torch::jit::ExtraFilesMap none;
    torch::jit::Module module = torch::jit::load(path, c10::kCPU, extra ? *extra : none);
    module.eval();
    return module;
  } catch (const std::exception& e) {
    throw BadInput(path + ": not a TorchScript file (" + one_line(e) + ")");
  }
}

InputSpec input_spec(const RunOptions& options, torch::jit::ExtraFilesMap& extra) {
  return run_input_spec(options, extra["input_shape"], extra["input_dtype"], extra["input_high"]);
}

Pass forward_of(torch::jit::Module& module) {
  return [&module](const std::vector<c10::IValue>& inputs) { return module.forward(inputs); };
}

// The bytes of the module's parameters and buffers (each storage once).
uint64_t weight_bytes(const torch::jit::Module& module) {
  std::set<const void*> seen;
  uint64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
      bytes += t.storage().nbytes();
  };
  for (const at::Tensor& t : module.parameters()) add(t);
  for (const at::Tensor& t : module.buffers()) add(t);
  return bytes;
}

// Plans `budgeted` under options.budget and fills the report's budget fields but the sampled ones.
void plan_budgeted(torch::jit::Module& budgeted, const std::vector<c10::IValue>& inputs,
                   const RunOptions& options, uint64_t slab_bytes, RunReport& report) {
  const torch_ext::BudgetText text = *torch_ext::parse_budget(options.budget);
  report.budget_text = options.budget;
  report.page_cache = options.cold ? "cold" : "warm";
  report.budget_bytes =
      text.bytes ? text.bytes
                 : static_cast<uint64_t>(static_cast<double>(weight_bytes(budgeted) + slab_bytes) *
                                         text.percent / 100);
  torch_ext::PlanOptions plan_options;
  plan_options.strategy = options.strategy;
  plan_options.memory = options.memory;
  plan_options.budget_bytes = report.budget_bytes;
  torch_ext::PlanSummary summary;
  try {
    summary = torch_ext::plan(budgeted, inputs, plan_options);
  } catch (const torch_ext::BudgetTooSmall& e) {
    throw BadInput(options.model + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error("planning " + options.model +
                             " under a budget failed: " + one_line(e));
  }
  const torch_ext::BudgetSummary b = *torch_ext::budget_summary(budgeted);
  report.weights_bytes = b.weights_bytes;
  report.budget_slab_bytes = summary.slab_bytes;
  report.budget_pinned_bytes = b.pinned_bytes;
  report.budget_streamed_bytes = b.streamed_bytes;
  report.budget_planned_peak_bytes = b.planned_peak_bytes;
  report.budget_work_bytes = b.work_bytes;
  report.budget_smallest_bytes = b.smallest_budget_bytes;
  report.budget_sliced_groups = b.sliced_groups;
  report.weight_file = b.weight_file;
  // A new budget takes no pass: timed here with the same one.
  const Clock::time_point start = Clock::now();
  torch_ext::set_budget(budgeted, report.budget_bytes);
  report.budget_replan_ms = ms_since(start);
}

// Three passes with the resident weights sampled at every step: the peak.
void sample_budgeted(torch::jit::Module& budgeted, const InputSource& source, uint64_t first,
                     RunReport& report) {
  torch_ext::sample_resident_weights(budgeted, true);
  torch_ext::resident_weight_peak(budgeted, true);
  for (uint64_t i = 0; i < 3; ++i) budgeted.forward(source(first + i));
  report.resident_weight_peak_bytes = torch_ext::resident_weight_peak(budgeted, true);
  torch_ext::sample_resident_weights(budgeted, false);
  report.peak_resident_bytes = report.budget_slab_bytes + report.resident_weight_peak_bytes;
}

void write_heapmap(const torch::jit::Module& planned, const torch_ext::PlanSummary& summary,
                   const RunOptions& options, const RunReport& report) {
  std::optional<torch_ext::PlanDetail> detail = torch_ext::plan_detail(planned, summary.key);
  if (!detail) throw std::runtime_error("the plan's trace is not available for the heap map");
  HeapmapOptions heapmap;
  heapmap.title = report.model + " " + report.input + " " + report.dtype + ", " + summary.strategy;
  const std::string svg = render_heapmap_svg(detail->trace, detail->plan, heapmap);
  if (std::string error = write_file_text(options.heapmap, svg); !error.empty()) {
    throw BadInput(error);
  }
}

// --trace: the profiled pass (with memory min, its sharing claims), for `memoplan plan`.
void write_profiled_trace(const torch::jit::Module& planned, const torch_ext::PlanSummary& summary,
                          const RunOptions& options) {
  std::optional<torch_ext::PlanDetail> detail = torch_ext::plan_detail(planned, summary.key);
  if (!detail) throw std::runtime_error("the plan's trace is not available for --trace");
  if (std::string error = write_trace(detail->trace, options.trace); !error.empty()) {
    throw BadInput(error);
  }
}

RunReport run_script_session(const RunOptions& options) {
  RunReport report;
  check_file(options.model, "a TorchScript file");
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}, {"input_dtype", ""}, {"input_high", ""}};
  Clock::time_point start = Clock::now();
  std::optional<Progress> progress;
  const bool tuned_kernels = options.kernels == Kernels::kTuned;
  progress.emplace("loading " + options.model + (tuned_kernels ? " three times" : " twice"), 0,
                   options.progress);
  torch::jit::Module unplanned = load(options.model, &extra);
  torch::jit::Module planned = load(options.model, nullptr);
  std::optional<torch::jit::Module> tuned;
  if (tuned_kernels) tuned = load(options.model, nullptr);
  progress->finish();
  report.load_ms = ms_since(start);

  const InputSpec spec = input_spec(options, extra);
  fill_run_fields(options, spec, report);
  const InputSource source = input_source(spec, options.seed);
  // plan() gets pass 0's inputs, the warm-up and timed passes those from 1 on.
  const std::vector<c10::IValue> inputs = source(0);
  const torch_ext::PlanStats at_start = torch_ext::plan_stats();

  c10::InferenceMode inference;  // the plan's key includes it: the workers run in it too
  try {
    unplanned.forward(inputs);  // the input fits before anything is planned
  } catch (const std::exception& e) {
    throw BadInput(options.model + " does not run on input " + report.input + " " + report.dtype +
                   ": " + one_line(e));
  }
  torch_ext::PlanOptions plan_options;
  plan_options.strategy = options.strategy;
  plan_options.memory = options.memory;
  torch_ext::PlanSummary summary;
  start = Clock::now();
  progress.emplace("planning (warm-up, profiled pass, " + options.strategy + ")", 0,
                   options.progress);
  try {
    summary = torch_ext::plan(planned, inputs, plan_options);
  } catch (const std::exception& e) {
    throw std::runtime_error("planning " + options.model + " failed: " + one_line(e));
  }
  progress->finish();
  report.plan_call_ms = ms_since(start);
  fill_plan_fields(summary, report);
  if (!options.heapmap.empty()) {
    write_heapmap(planned, summary, options, report);
    report.heapmap = options.heapmap;
  }
  if (!options.trace.empty()) write_profiled_trace(planned, summary, options);

  if (tuned) {
    progress.emplace("planning with tuned kernels (measuring each GEMM shape)", 0,
                     options.progress);
    plan_options.kernels = Kernels::kTuned;
    plan_options.release_weights = true;  // this copy is ours (released_weights.h)
    try {
      const torch_ext::PlanSummary tuned_summary = torch_ext::plan(*tuned, inputs, plan_options);
      report.tuned_executor = tuned_summary.executor;
      report.tuned_slab_bytes = tuned_summary.slab_bytes;
      report.tuned_lower_bound_bytes = tuned_summary.lower_bound_bytes;
      report.tuned_offset_lower_bound_bytes = tuned_summary.offset_lower_bound_bytes;
      report.packed_weight_bytes = tuned_summary.packed_weight_bytes;
      report.plain_weight_bytes = tuned_summary.released_weight_bytes;
      report.plain_weight_resident_bytes = tuned_summary.released_weight_resident_bytes;
      report.flops = tuned_summary.coverage.flops;
      report.tuned_flops = tuned_summary.coverage.tuned_flops;
      for (const torch_ext::Coverage::Left& l : tuned_summary.coverage.left) {
        report.left_on_aten.push_back({l.op, l.reason, l.calls, l.flops});
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("planning " + options.model +
                               " with tuned kernels failed: " + one_line(e));
    }
    progress->finish();
    report.kernel_report = torch_ext::kernel_report();
  }
  std::optional<torch::jit::Module> budgeted;
  if (!options.budget.empty()) {
    progress.emplace(
        "planning under the budget " + options.budget + " (weights to a file-backed mapping)", 0,
        options.progress);
    budgeted = load(options.model, nullptr);
    plan_budgeted(*budgeted, inputs, options, summary.slab_bytes, report);
    progress->finish();
  }
  Copies copies;
  copies.unplanned = forward_of(unplanned);
  copies.planned = forward_of(planned);
  if (tuned) copies.tuned = forward_of(*tuned);
  if (budgeted) {
    copies.budgeted = forward_of(*budgeted);
    if (options.cold)
      copies.before_budgeted = [&] { torch_ext::drop_weight_page_cache(*budgeted); };
  }
  measure(copies, source, 1, options, report);
  if (budgeted) {
    sample_budgeted(*budgeted, source,
                    1 + static_cast<uint64_t>(options.threads) * options.warmup + options.iters,
                    report);
  }

  record_shapes(
      spec, options, at_start,
      [&](const std::vector<c10::IValue>& top) {
        torch_ext::PlanOptions largest;
        largest.strategy = options.strategy;
        largest.memory = options.memory;
        return torch_ext::plan(planned, top, largest).lower_bound_bytes;
      },
      report);
  return report;
}

void run_script_probe(const RunOptions& options) {
  check_file(options.model, "a TorchScript file");
  // The process before the model: the runtime's own share of the peak (LibTorch alone is ~190 MB).
  const uint64_t runtime_bytes = status_bytes("VmRSS");
  torch::jit::ExtraFilesMap extra{{"input_shape", ""}, {"input_dtype", ""}, {"input_high", ""}};
  torch::jit::Module module = load(options.model, &extra);
  const InputSpec spec = input_spec(options, extra);
  const InputSource source = input_source(spec, options.seed);
  c10::InferenceMode inference;
  if (options.rss_probe == "planned" || options.rss_probe == "tuned") {
    torch_ext::PlanOptions plan_options;
    plan_options.strategy = options.strategy;
    plan_options.memory = options.memory;
    if (options.rss_probe == "tuned") {
      plan_options.kernels = Kernels::kTuned;
      plan_options.release_weights = true;
    }
    torch_ext::plan(module, source(0), plan_options);
  }
  probe_passes(options, source, forward_of(module), runtime_bytes);
}

}  // namespace

RunReport run_session(const RunOptions& options) {
  // One intra-op thread unless asked: planning covers the calling thread's allocations
  // (docs/TORCH_EXT.md), and the threads of a server are its inference threads.
  at::set_num_threads(options.intra_op);
  torch_ext::set_fuser(options.fuser);
  limit_openblas_threads(options.intra_op);
  if (torch_ext::is_aoti_package(options.model)) return run_aoti_session(options);
  RunReport report = run_script_session(options);
  report.format = "torchscript";
  return report;
}

void run_rss_probe(const RunOptions& options) {
  at::set_num_threads(options.intra_op);
  torch_ext::set_fuser(options.fuser);
  limit_openblas_threads(options.intra_op);
  if (torch_ext::is_aoti_package(options.model)) return run_aoti_probe(options);
  run_script_probe(options);
}

}  // namespace memoplan::run
