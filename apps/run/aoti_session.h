// `memoplan run` on an AOTInductor package (.pt2, LibTorch >= 2.6): the package loaded twice, one
// copy's run() planned as one call (torch_ext::PlannedCall), both timed interleaved as a
// TorchScript file's copies are (measure.h), the same report. Kernels stock and memory offset
// only: the tuned kernels, memory min and budgets rewrite a TorchScript graph. No torch headers.
#pragma once

#include "report.h"
#include "run_options.h"

namespace memoplan::run {

// session.h's run_session for a package: throws BadInput (a file that is not a package, an input
// it does not take, no input shape known) or std::runtime_error.
RunReport run_aoti_session(const RunOptions& options);
// rss_probe.h's probe for a package ("unplanned" or "planned").
void run_aoti_probe(const RunOptions& options);

}  // namespace memoplan::run
