// The timed part of `memoplan run`: T threads (one intra-op thread each, inference mode) warm
// the modules up, then take iterations from a shared counter, each one unplanned pass and one
// planned pass (and one tuned pass), timed separately, with their outputs compared. Only the
// measured fields of the report are filled in.
#pragma once

#include <cstdint>
#include <functional>
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

// The inputs of pass `index`, the same for every copy: thread t's warm-up iterations are
// first_index + t * warmup + i, the timed ones first_index + threads * warmup + k in the order
// the threads take them.
using InputSource = std::function<std::vector<c10::IValue>(uint64_t index)>;

// Exceptions of forward calls are passed on (from the first thread that threw). `tuned` (may be
// null): a third copy timed in each iteration too, its outputs compared with a tolerance.
// `budgeted` (may be null): a copy under a memory budget, timed too (after evicting its weight
// file from the page cache with options.cold), its outputs compared exactly.
void measure(torch::jit::Module& unplanned, torch::jit::Module& planned, torch::jit::Module* tuned,
             torch::jit::Module* budgeted, const InputSource& inputs, uint64_t first_index,
             const RunOptions& options, RunReport& report);

}  // namespace memoplan::run
