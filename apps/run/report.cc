#include "report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "memoplan/heapmap.h"  // format_bytes

namespace memoplan::run {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double per_pass(uint64_t count, uint64_t passes) {
  return passes ? static_cast<double>(count) / passes : 0;
}

// Rounded to `digits` decimals for printing (sub-microsecond digits of a latency are noise);
// dividing by a power of ten, not multiplying by its inverse, gives the double that prints short.
double round_to(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

uint64_t fallbacks(const RunReport& r) { return r.fallback_not_planned + r.fallback_overlap; }

// As memoplan/torch/plan.h computes them (no torch headers here).
double tuned_flops_fraction(const RunReport& r) {
  return r.flops > 0 ? r.tuned_flops / r.flops : 1.0;
}
double coalesced_bytes_fraction(const RunReport& r) {
  return r.planned_bytes > 0 ? static_cast<double>(r.coalesced_bytes) / r.planned_bytes : 0.0;
}

std::string ratio(double a, double b) { return b > 0 ? fmt::format("{:.3f}x", a / b) : "-"; }

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

std::string format_text(const RunReport& r) {
  const double u_med = median(r.unplanned_ms), p_med = median(r.planned_ms);
  const double u_p99 = percentile(r.unplanned_ms, 99), p_p99 = percentile(r.planned_ms, 99);
  const double u_mallocs = per_pass(r.unplanned_mallocs, r.unplanned_passes);
  const double p_mallocs = per_pass(r.planned_mallocs, r.planned_passes);
  std::string s;
  s += fmt::format("memoplan run {}{}: input {} {}, strategy {}\n", r.model,
                   r.format == "aot_inductor" ? " (AOTInductor package)" : "", r.input, r.dtype,
                   r.strategy);
  if (!r.executor.empty()) {
    s += fmt::format("  executor: planned {}{}\n", r.executor,
                     r.tuned_executor.empty() ? "" : ", tuned " + r.tuned_executor);
  }
  s += fmt::format(
      "  {} thread{} ({} intra-op thread{} each), {} iterations (an unplanned and a "
      "planned pass) after {} warm-up\n",
      r.threads, r.threads == 1 ? "" : "s", r.intra_op, r.intra_op == 1 ? "" : "s", r.iters,
      r.warmup);
  if (r.block > 1) {
    s += fmt::format("  each copy times {} passes in a row, then the next copy the same inputs\n",
                     r.block);
  }
  if (r.warm_passes > 0) {
    s += fmt::format("  each copy's timed pass{} right after {} untimed one{} of the same copy\n",
                     r.block > 1 ? "es" : "", r.warm_passes, r.warm_passes == 1 ? "" : "s");
  }
  if (!r.malloc_library.empty()) {
    s += fmt::format("  malloc: {} (both copies; the plan serves the planned copy's tensors)\n",
                     r.malloc_library);
  }
  if (r.fuser_on_cpu) {
    s += r.fuser ? std::string("  LibTorch's TensorExpr fuser: on in every copy (--fuser)\n")
                 : std::string(
                       "  LibTorch's TensorExpr fuser: off in every copy (LibTorch's default "
                       "here is on; --fuser)\n");
  }
  s += fmt::format("  {:<36}{:>12}{:>12}\n", "", "unplanned", "planned");
  s += fmt::format("  {:<36}{:>12.3f}{:>12.3f}   planned/unplanned {}\n",
                   "latency per pass, median ms", u_med, p_med, ratio(p_med, u_med));
  s += fmt::format("  {:<36}{:>12.3f}{:>12.3f}\n", "latency per pass, p99 ms", u_p99, p_p99);
  s += fmt::format("  {:<36}{:>12.2f}{:>12.2f}\n", "tensor mallocs per pass", u_mallocs, p_mallocs);
  s += fmt::format("  slab {} ({} B), lower bound {} ({} B): {} of the bound\n",
                   format_bytes(r.slab_bytes), r.slab_bytes, format_bytes(r.lower_bound_bytes),
                   r.lower_bound_bytes, ratio(r.slab_bytes, r.lower_bound_bytes));
  if (r.memory == Memory::kMin) {
    s += fmt::format(
        "  memory min: {} tensors share bytes; offset lower bound {} ({} B): slab {} of it\n",
        r.shared_tensors, format_bytes(r.offset_lower_bound_bytes), r.offset_lower_bound_bytes,
        ratio(r.slab_bytes, r.offset_lower_bound_bytes));
    s += fmt::format("  memory min: {:.1f}% of the planned bytes coalesced (over live tensors)\n",
                     100.0 * coalesced_bytes_fraction(r));
    s += fmt::format(
        "  memory min: {:.1f} convolutions and {:.1f} max poolings in parts per planned pass; {} "
        "convolution shapes run whole (their parts differed from aten's bytes), {} (their parts "
        "measured to save too little)\n",
        per_pass(r.sliced_convolutions, r.planned_passes),
        per_pass(r.sliced_poolings, r.planned_passes), r.convolution_shapes_whole,
        r.convolution_shapes_saving_little);
  }
  s += fmt::format(
      "  planned tensors per pass {} (slab hits per pass {:.2f}), escaping {} (outputs)\n",
      r.planned_tensors, per_pass(r.planned_hits, r.planned_passes), r.escaping_tensors);
  s += fmt::format(
      "  fallbacks {} in {} planned passes ({} replayed; not_planned {}, overlap {}), "
      "escaping outputs {}\n",
      fallbacks(r), r.planned_passes, r.replayed_passes, r.fallback_not_planned, r.fallback_overlap,
      r.fallback_escaping);
  if (r.varying) {
    s += fmt::format(
        "  shapes: {} distinct drawn (seed {}, {}); {} of {} timed planned passes fully planned "
        "({:.1f}%); {} profiled passes in the whole run, {} plans from the shape family's "
        "formulas\n",
        r.distinct_shapes, r.seed, r.draw, r.fully_planned_passes, r.planned_passes,
        100.0 * per_pass(r.fully_planned_passes, r.planned_passes), r.profiled_passes,
        r.family_plans);
    s += fmt::format(
        "  largest slab a thread held {} ({} B), lower bound of the largest shape ({}) {} ({} B): "
        "{} of the bound\n",
        format_bytes(r.slab_bytes_max), r.slab_bytes_max, r.largest_shape,
        format_bytes(r.lower_bound_bytes_max), r.lower_bound_bytes_max,
        ratio(r.slab_bytes_max, r.lower_bound_bytes_max));
  }
  s += fmt::format(
      "  planning {:.2f} ms, plan() {:.0f} ms (warm-up, profiled pass, planning), "
      "loading {:.0f} ms\n",
      r.planning_ms, r.plan_call_ms, r.load_ms);
  if (r.peak_rss_bytes_unplanned && r.peak_rss_bytes_planned) {
    s += fmt::format("  {:<36}{:>12}{:>12}   planned/unplanned {}\n",
                     "peak RSS, a process of its own", format_bytes(r.peak_rss_bytes_unplanned),
                     format_bytes(r.peak_rss_bytes_planned),
                     ratio(r.peak_rss_bytes_planned, r.peak_rss_bytes_unplanned));
    if (r.peak_rss_bytes_tuned) {
      s += fmt::format("  {:<36}{:>24}   tuned/unplanned {}\n", "peak RSS of the tuned copy",
                       format_bytes(r.peak_rss_bytes_tuned),
                       ratio(r.peak_rss_bytes_tuned, r.peak_rss_bytes_unplanned));
    }
    if (r.runtime_rss_bytes) {
      const auto net = [&](uint64_t peak) {
        return format_bytes(peak > r.runtime_rss_bytes ? peak - r.runtime_rss_bytes : 0);
      };
      s += fmt::format("  {:<36}{:>12}{:>12}{}   (before the model: {})\n",
                       "net of the process before the model", net(r.peak_rss_bytes_unplanned),
                       net(r.peak_rss_bytes_planned),
                       r.peak_rss_bytes_tuned ? fmt::format("{:>12}", net(r.peak_rss_bytes_tuned))
                                              : std::string(),
                       format_bytes(r.runtime_rss_bytes));
    }
  } else if (!r.rss_error.empty()) {
    s += fmt::format("  peak RSS not measured: {}\n", r.rss_error);
  }
  if (r.passes_differing == 0) {
    s += fmt::format("  outputs bit-identical in all {} passes\n", r.passes_compared);
  } else {
    s += fmt::format("  outputs DIFFER in {} of {} passes (first: {})\n", r.passes_differing,
                     r.passes_compared, r.first_difference);
  }
  if (r.kernels == Kernels::kTuned) {
    const double t_med = median(r.tuned_ms);
    s += fmt::format(
        "  tuned kernels: median {:.3f} ms, p99 {:.3f} ms: tuned/stock {}, tuned/planned {}; "
        "outputs within {:.2g} (max relative difference, tolerance {:.0e}){}\n",
        t_med, percentile(r.tuned_ms, 99), ratio(t_med, u_med), ratio(t_med, p_med),
        r.tuned_max_relative_difference, kTunedTolerance,
        tuned_within_tolerance(r) ? "" : "  OUT OF TOLERANCE");
    s += fmt::format("  tuned plan: slab {} ({} B), lower bound {} ({} B), offset lower bound {}\n",
                     format_bytes(r.tuned_slab_bytes), r.tuned_slab_bytes,
                     format_bytes(r.tuned_lower_bound_bytes), r.tuned_lower_bound_bytes,
                     format_bytes(r.tuned_offset_lower_bound_bytes));
    s += fmt::format(
        "  tuned weights: packed {}; plain {} in their file, {} of it read by a planned pass "
        "(resident)\n",
        format_bytes(r.packed_weight_bytes), format_bytes(r.plain_weight_bytes),
        format_bytes(r.plain_weight_resident_bytes));
    s += fmt::format(
        "  tuned coverage: {:.1f}% of {:.3g} GFLOP per pass (convolutions and products) on "
        "memoplan's kernels{}\n",
        100.0 * tuned_flops_fraction(r), r.flops / 1e9,
        r.left_on_aten.empty() ? "" : "; left on aten:");
    for (const RunReport::LeftOp& l : r.left_on_aten) {
      s += fmt::format("    {} x{}: {:.1f}% ({})\n", l.op, l.calls,
                       r.flops > 0 ? 100.0 * l.flops / r.flops : 0.0, l.reason);
    }
    for (size_t start = 0; start < r.kernel_report.size();) {
      const size_t end = r.kernel_report.find('\n', start);
      s += "    " + r.kernel_report.substr(start, end - start) + "\n";
      start = end == std::string::npos ? r.kernel_report.size() : end + 1;
    }
  }
  if (!r.budget_text.empty()) {
    const double b_med = median(r.budgeted_ms);
    s += fmt::format(
        "  budget {} ({} B), page cache {}: median {:.3f} ms, p99 {:.3f} ms: budgeted/planned {}\n",
        format_bytes(r.budget_bytes), r.budget_bytes, r.page_cache, b_med,
        percentile(r.budgeted_ms, 99), ratio(b_med, p_med));
    s += fmt::format(
        "    peak resident {} = slab {} + weights and work arena {} (sampled at every step; "
        "planned peak {}, work arena {}); "
        "weights {}: {} pinned, {} streamed per pass, {} sliced; smallest feasible budget {}; "
        "re-plan {:.2f} ms\n",
        format_bytes(r.peak_resident_bytes), format_bytes(r.budget_slab_bytes),
        format_bytes(r.resident_weight_peak_bytes), format_bytes(r.budget_planned_peak_bytes),
        format_bytes(r.budget_work_bytes), format_bytes(r.weights_bytes),
        format_bytes(r.budget_pinned_bytes), format_bytes(r.budget_streamed_bytes),
        r.budget_sliced_groups, format_bytes(r.budget_smallest_bytes), r.budget_replan_ms);
  }
  if (!r.heapmap.empty()) s += fmt::format("  heap map: {}\n", r.heapmap);
  return s;
}

std::string format_json(const RunReport& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["format"] = r.format;
  j["input"] = r.input;
  j["dtype"] = r.dtype;
  j["threads"] = r.threads;
  j["intra_op"] = r.intra_op;
  j["warm_passes"] = r.warm_passes;
  j["block"] = r.block;
  j["iters"] = r.iters;
  j["warmup"] = r.warmup;
  j["strategy"] = r.strategy;
  if (!r.executor.empty()) j["executor"] = r.executor;
  if (!r.tuned_executor.empty()) j["tuned_executor"] = r.tuned_executor;
  j["malloc"] = r.malloc_library;
  j["tensorexpr_fuser"] = r.fuser && r.fuser_on_cpu;
  j["unplanned_ms"] = round_to(median(r.unplanned_ms), 4);
  j["planned_ms"] = round_to(median(r.planned_ms), 4);
  j["unplanned_p99_ms"] = round_to(percentile(r.unplanned_ms, 99), 4);
  j["planned_p99_ms"] = round_to(percentile(r.planned_ms, 99), 4);
  j["slab_bytes"] = r.slab_bytes;
  j["lower_bound_bytes"] = r.lower_bound_bytes;
  j["offset_lower_bound_bytes"] = r.offset_lower_bound_bytes;
  j["memory"] = name(r.memory);
  j["shared_tensors"] = r.shared_tensors;
  if (r.memory == Memory::kMin) {
    j["sliced_convolutions_per_pass"] = per_pass(r.sliced_convolutions, r.planned_passes);
    j["sliced_poolings_per_pass"] = per_pass(r.sliced_poolings, r.planned_passes);
    j["convolution_shapes_whole"] = r.convolution_shapes_whole;
    j["convolution_shapes_saving_little"] = r.convolution_shapes_saving_little;
    j["coalesced_bytes_fraction"] = round_to(coalesced_bytes_fraction(r), 4);
  }
  j["planned_tensors"] = r.planned_tensors;
  j["escaping_tensors"] = r.escaping_tensors;
  j["tensor_mallocs_per_pass_unplanned"] = per_pass(r.unplanned_mallocs, r.unplanned_passes);
  j["tensor_mallocs_per_pass_planned"] = per_pass(r.planned_mallocs, r.planned_passes);
  j["slab_hits_per_pass"] = per_pass(r.planned_hits, r.planned_passes);
  j["planned_passes"] = r.planned_passes;
  j["replayed_passes"] = r.replayed_passes;
  j["fallbacks"] = fallbacks(r);
  j["fallbacks_not_planned"] = r.fallback_not_planned;
  j["fallbacks_overlap"] = r.fallback_overlap;
  j["escaping_fallbacks"] = r.fallback_escaping;
  j["seed"] = r.seed;
  j["draw"] = r.draw;
  j["distinct_shapes"] = r.distinct_shapes;
  j["planned_pass_fraction"] = round_to(per_pass(r.fully_planned_passes, r.planned_passes), 4);
  j["profiled_passes"] = r.profiled_passes;
  j["family_plans"] = r.family_plans;
  j["slab_bytes_max"] = r.slab_bytes_max;
  j["lower_bound_bytes_max"] = r.lower_bound_bytes_max;
  j["largest_shape"] = r.largest_shape;
  j["planning_ms"] = round_to(r.planning_ms, 4);
  j["plan_call_ms"] = round_to(r.plan_call_ms, 2);
  j["load_ms"] = round_to(r.load_ms, 2);
  // Each in a fresh process of its own (memoplan-run --rss-probe); null when not measured.
  j["peak_rss_bytes_unplanned"] =
      r.peak_rss_bytes_unplanned ? nlohmann::json(r.peak_rss_bytes_unplanned) : nlohmann::json();
  j["peak_rss_bytes_planned"] =
      r.peak_rss_bytes_planned ? nlohmann::json(r.peak_rss_bytes_planned) : nlohmann::json();
  if (r.kernels == Kernels::kTuned) {
    j["peak_rss_bytes_tuned"] =
        r.peak_rss_bytes_tuned ? nlohmann::json(r.peak_rss_bytes_tuned) : nlohmann::json();
  }
  // The unplanned probe's RSS before it loaded the model (the process and the runtime alone).
  j["runtime_rss_bytes"] =
      r.runtime_rss_bytes ? nlohmann::json(r.runtime_rss_bytes) : nlohmann::json();
  if (!r.rss_error.empty()) j["rss_error"] = r.rss_error;
  j["passes_compared"] = r.passes_compared;
  j["outputs_identical"] = r.passes_differing == 0;
  if (!r.first_difference.empty()) j["first_difference"] = r.first_difference;
  if (!r.heapmap.empty()) j["heapmap"] = r.heapmap;
  if (!r.budget_text.empty()) {
    j["budget"] = r.budget_text;
    j["budget_bytes"] = r.budget_bytes;
    j["page_cache"] = r.page_cache;
    j["weights_bytes"] = r.weights_bytes;
    j["peak_resident_bytes"] = r.peak_resident_bytes;
    j["resident_weight_peak_bytes"] = r.resident_weight_peak_bytes;
    j["budget_slab_bytes"] = r.budget_slab_bytes;
    j["budgeted_ms"] = round_to(median(r.budgeted_ms), 4);
    j["budgeted_p99_ms"] = round_to(percentile(r.budgeted_ms, 99), 4);
    j["budget_planned_peak_bytes"] = r.budget_planned_peak_bytes;
    j["budget_work_bytes"] = r.budget_work_bytes;
    j["budget_pinned_bytes"] = r.budget_pinned_bytes;
    j["budget_streamed_bytes"] = r.budget_streamed_bytes;
    j["budget_sliced_groups"] = r.budget_sliced_groups;
    j["smallest_budget_bytes"] = r.budget_smallest_bytes;
    j["budget_replan_ms"] = round_to(r.budget_replan_ms, 4);
    j["weight_file"] = r.weight_file;
  }
  j["kernels"] = name(r.kernels);
  if (r.kernels == Kernels::kTuned) {
    j["stock_ms"] = round_to(median(r.unplanned_ms), 4);
    j["tuned_ms"] = round_to(median(r.tuned_ms), 4);
    j["tuned_p99_ms"] = round_to(percentile(r.tuned_ms, 99), 4);
    j["tuned_max_relative_difference"] = r.tuned_max_relative_difference;
    j["tuned_within_tolerance"] = tuned_within_tolerance(r);
    j["tuned_slab_bytes"] = r.tuned_slab_bytes;
    j["tuned_lower_bound_bytes"] = r.tuned_lower_bound_bytes;
    j["tuned_offset_lower_bound_bytes"] = r.tuned_offset_lower_bound_bytes;
    j["packed_weight_bytes"] = r.packed_weight_bytes;
    j["plain_weight_bytes"] = r.plain_weight_bytes;
    j["plain_weight_resident_bytes"] = r.plain_weight_resident_bytes;
    j["tuned_flops_fraction"] = round_to(tuned_flops_fraction(r), 4);
    j["flops_per_pass"] = r.flops;
    nlohmann::json left = nlohmann::json::array();
    for (const RunReport::LeftOp& l : r.left_on_aten) {
      left.push_back({{"op", l.op},
                      {"reason", l.reason},
                      {"calls", l.calls},
                      {"flops_fraction", round_to(r.flops > 0 ? l.flops / r.flops : 0.0, 4)}});
    }
    j["left_on_aten"] = left;
    std::vector<std::string> shapes;  // per GEMM shape: aten vs memoplan, as measured in plan()
    for (size_t start = 0; start < r.kernel_report.size();) {
      const size_t end = std::min(r.kernel_report.find('\n', start), r.kernel_report.size());
      shapes.push_back(r.kernel_report.substr(start, end - start));
      start = end + 1;
    }
    j["kernel_shapes"] = shapes;
  }
  return j.dump();
}

}  // namespace memoplan::run
