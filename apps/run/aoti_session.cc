#include "aoti_session.h"

#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <optional>

#include "memoplan/process_status.h"
#include "memoplan/torch/aoti_package.h"
#include "memoplan/torch/call_plan.h"
#include "progress.h"
#include "session.h"  // BadInput
#include "session_common.h"

namespace memoplan::run {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kWhat = "an AOTInductor package";

// A model per inference thread (their run() calls run at once, on the same constants).
std::unique_ptr<torch_ext::AotiPackage> load(const std::string& path, int threads) {
  try {
    return std::make_unique<torch_ext::AotiPackage>(path, static_cast<size_t>(threads));
  } catch (const std::exception& e) {
    throw BadInput(one_line(e));
  }
}

// The input of the run. A package runs the shapes it was exported for, and AOTInductor checks
// none (only a debug compile does): a larger input would be read past its end. Where the metadata
// names the shape, --input and --dtype must match it.
InputSpec input_spec(const RunOptions& options, const torch_ext::AotiPackage& package) {
  const std::string shape = package.metadata("input_shape");
  const std::string dtype = package.metadata("input_dtype");
  InputSpec spec = run_input_spec(options, shape, dtype, package.metadata("input_high"));
  if (shape.empty()) return spec;
  RunOptions from_file = options;
  from_file.input.clear();
  from_file.dtype.clear();
  const InputSpec exported = run_input_spec(from_file, shape, dtype, "");
  if (spec.varies() || spec.shape != exported.shape || spec.dtype != exported.dtype) {
    throw BadInput(options.model + " was exported for input " + spec_shape_text(exported) + " " +
                   exported.dtype + ", not " + spec_shape_text(spec) + " " + spec.dtype +
                   " (its metadata's input_shape; AOTInductor runs the shapes it was compiled "
                   "for and checks none)");
  }
  return spec;
}

Pass run_of(torch_ext::AotiPackage& package) {
  return [&package](const std::vector<c10::IValue>& inputs) { return package.run(inputs); };
}

// The planned copy's pass: the package's run() as one planned call.
Pass planned_run_of(torch_ext::AotiPackage& package, torch_ext::PlannedCall& call) {
  return [&package, &call](const std::vector<c10::IValue>& inputs) {
    return call.run(inputs, [&] { return package.run(inputs); });
  };
}

torch_ext::PlanOptions plan_options(const RunOptions& options) {
  torch_ext::PlanOptions plan_options;
  plan_options.strategy = options.strategy;
  return plan_options;
}

}  // namespace

RunReport run_aoti_session(const RunOptions& options) {
  RunReport report;
  report.format = "aot_inductor";
  check_file(options.model, kWhat);
  Clock::time_point start = Clock::now();
  std::optional<Progress> progress;
  progress.emplace("loading " + options.model + " twice", 0, options.progress);
  const std::unique_ptr<torch_ext::AotiPackage> unplanned = load(options.model, options.threads);
  const std::unique_ptr<torch_ext::AotiPackage> planned = load(options.model, options.threads);
  progress->finish();
  report.load_ms = ms_since(start);

  const InputSpec spec = input_spec(options, *unplanned);
  fill_run_fields(options, spec, report);
  const InputSource source = input_source(spec, options.seed);
  const std::vector<c10::IValue> inputs = source(0);  // planning's; passes from 1 on as in measure
  const torch_ext::PlanStats at_start = torch_ext::plan_stats();

  c10::InferenceMode inference;  // as the workers run
  try {
    unplanned->run(inputs);  // the input fits before anything is planned
  } catch (const std::exception& e) {
    throw BadInput(options.model + " does not run on input " + report.input + " " + report.dtype +
                   ": " + one_line(e));
  }
  torch_ext::PlannedCall call(plan_options(options));
  const Pass planned_pass = planned_run_of(*planned, call);
  start = Clock::now();
  progress.emplace("planning (warm-up, profiled pass, " + options.strategy + ")", 0,
                   options.progress);
  torch_ext::PlanSummary summary;
  try {
    summary = call.plan(inputs, [&] { return planned->run(inputs); });
  } catch (const std::exception& e) {
    throw std::runtime_error("planning " + options.model + " failed: " + one_line(e));
  }
  progress->finish();
  report.plan_call_ms = ms_since(start);
  fill_plan_fields(summary, report);

  Copies copies;
  copies.unplanned = run_of(*unplanned);
  copies.planned = planned_pass;
  measure(copies, source, 1, options, report);

  record_shapes(spec, options, at_start,
                [&](const std::vector<c10::IValue>& top) {
                  return call.plan(top, [&] { return planned->run(top); }).lower_bound_bytes;
                },
                report);
  return report;
}

void run_aoti_probe(const RunOptions& options) {
  check_file(options.model, kWhat);
  // The process before the package: the runtime's own share of the peak.
  const uint64_t runtime_bytes = status_bytes("VmRSS");
  const std::unique_ptr<torch_ext::AotiPackage> package = load(options.model, options.threads);
  const InputSource source = input_source(input_spec(options, *package), options.seed);
  c10::InferenceMode inference;
  if (options.rss_probe != "planned") {
    probe_passes(options, source, run_of(*package), runtime_bytes);
    return;
  }
  torch_ext::PlannedCall call(plan_options(options));
  const std::vector<c10::IValue> inputs = source(0);
  call.plan(inputs, [&] { return package->run(inputs); });
  probe_passes(options, source, planned_run_of(*package, call), runtime_bytes);
}

}  // namespace memoplan::run
