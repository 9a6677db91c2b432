// The timed part of `memoplan run`: T threads (one intra-op thread each, inference mode) warm
// both modules up, then take iterations from a shared counter, each one unplanned pass and one
// planned pass, timed separately, with their outputs compared bit for bit. Only the measured
// fields of the report are filled in.
#pragma once

#include <vector>

#include "report.h"
#include "run_options.h"

namespace torch::jit {
struct Module;
}
namespace c10 {
struct IValue;
}

namespace memoplan::run {

// Exceptions of forward calls are passed on (from the first thread that threw).
void measure(torch::jit::Module& unplanned, torch::jit::Module& planned,
             const std::vector<c10::IValue>& inputs, const RunOptions& options, RunReport& report);

}  // namespace memoplan::run
