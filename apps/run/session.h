// One `memoplan run`: load the model twice, plan one copy, measure both interleaved, report.
// No torch headers.
#pragma once

#include <stdexcept>

#include "report.h"
#include "run_options.h"

namespace memoplan::run {

// The user's input is at fault (no such file, not TorchScript, a shape the model rejects): one
// line, exit code 2.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws BadInput, or std::runtime_error when something else failed (planning, writing).
RunReport run_session(const RunOptions& options);

}  // namespace memoplan::run
