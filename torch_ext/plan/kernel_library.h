// The library that provides a kernel set, brought into the process when plan() is asked for it:
// libmemoplan_tuned.so (torch_ext/tuned/) registers Kernels::kTuned when it loads
// (planning.h: register_kernels). A program linked against it, or one that loaded it itself
// (torch.ops.load_library), has it already; the rest get it here, on the first plan() that asks.
// No torch headers.
#pragma once

#include <string>

#include "memoplan/torch/plan.h"  // Kernels

namespace memoplan::torch_ext {

// Makes registered_kernels(kernels) non-null if it can: loads the library that provides them,
// first from the directory libmemoplan_torch.so was loaded from, then by the dynamic loader's own
// search. Returns an empty string on success (and for Kernels::kStock, which needs no library),
// else what was tried and why each failed. Thread-safe; a library once loaded stays loaded.
std::string load_kernels(Kernels kernels);

}  // namespace memoplan::torch_ext
