// The timed part of `memoplan run`: T threads (one intra-op thread each, inference mode) warm
// the modules up, then take iterations from a shared counter, each one unplanned pass and one
// planned pass (and one tuned pass), timed separately, with their outputs compared. Only the
// measured fields of the report are filled in.
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

// Exceptions of forward calls are passed on (from the first thread that threw). `tuned` (may be
// null): a third copy timed in each iteration too, its outputs compared with a tolerance.
void measure(torch::jit::Module& unplanned, torch::jit::Module& planned, torch::jit::Module* tuned,
             const std::vector<c10::IValue>& inputs, const RunOptions& options, RunReport& report);

}  // namespace memoplan::run
