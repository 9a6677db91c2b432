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

namespace c10 {
struct IValue;
}

namespace memoplan::run {

// The inputs of pass `index`, the same for every copy: thread t's warm-up iterations are
// first_index + t * warmup + i, the timed ones first_index + threads * warmup + k in the order
// the threads take them.
using InputSource = std::function<std::vector<c10::IValue>(uint64_t index)>;

// One pass of a copy of the model: a TorchScript module's forward, or a package's run() (planned:
// under its PlannedCall). Safe to call from several threads at once.
using Pass = std::function<c10::IValue(const std::vector<c10::IValue>& inputs)>;

// The copies timed in each iteration.
struct Copies {
  Pass unplanned, planned;
  Pass tuned;     // empty: none; else timed too, its outputs compared with a tolerance
  Pass budgeted;  // empty: none; else a copy under a memory budget, its outputs compared exactly
  // Untimed, before each budgeted pass (--page-cache cold: evict its weight file); may be empty.
  std::function<void()> before_budgeted;
};

// Exceptions of the passes are passed on (from the first thread that threw).
void measure(const Copies& copies, const InputSource& inputs, uint64_t first_index,
             const RunOptions& options, RunReport& report);

}  // namespace memoplan::run
