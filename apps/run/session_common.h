// What both kinds of `memoplan run` session share (a TorchScript file: session.cc; an
// AOTInductor package: aoti_session.cc): errors in one line, the inputs of every pass, the plan's
// figures in the report, the shapes a run drew, and the RSS probe's passes. No torch headers.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "input_spec.h"
#include "measure.h"
#include "memoplan/torch/plan.h"
#include "report.h"
#include "run_options.h"

namespace memoplan::run {

// One line out of a LibTorch message (TorchScript's traceback and c10's backtrace dropped).
std::string one_line(const std::exception& e);

// BadInput unless `path` is a file; `what` names the kind expected ("a TorchScript file").
void check_file(const std::string& path, const std::string& what);

// aten's intra-op setting does not reach OpenBLAS: set it there too (session_common.cc says why).
void limit_openblas_threads(int threads);

// The file name of the library (or program) that defines the malloc this process calls.
std::string malloc_library();

// The input of the run: --input/--dtype/--draw over what the file carries (its "input_shape",
// "input_dtype" and "input_high", each "" when it has none). BadInput when neither says.
InputSpec run_input_spec(const RunOptions& options, const std::string& file_shape,
                         const std::string& file_dtype, const std::string& file_high);

// Every pass's inputs: one fixed input, or one drawn per pass (seeded: every copy and every run
// gets the same values).
InputSource input_source(const InputSpec& spec, uint64_t seed);

// The report's fields from the options and the input (model, threads, input, dtype, ...).
void fill_run_fields(const RunOptions& options, const InputSpec& spec, RunReport& report);
// The report's plan fields from plan()'s (or PlannedCall::plan's) summary.
void fill_plan_fields(const torch_ext::PlanSummary& summary, RunReport& report);

// The run's closing figures: the plan counters since `at_start` (profiled passes, family plans,
// largest slab), the distinct shapes of the run's passes (pass 0 for planning, the warm-ups, the
// timed ones) and, when they vary, the lower bound of the largest (most elements), which
// `lower_bound_of` plans on its input (throws std::runtime_error naming the shape on failure).
void record_shapes(const InputSpec& spec, const RunOptions& options,
                   const torch_ext::PlanStats& at_start,
                   const std::function<uint64_t(const std::vector<c10::IValue>&)>& lower_bound_of,
                   RunReport& report);

// The probe process's passes (rss_probe.h): the run's warm-up and timed passes of `pass` on the
// run's threads, then "runtime_rss_bytes N peak_rss_bytes N" on stdout. `runtime_bytes`: VmRSS
// before the model was loaded.
void probe_passes(const RunOptions& options, const InputSource& source, const Pass& pass,
                  uint64_t runtime_bytes);

}  // namespace memoplan::run
