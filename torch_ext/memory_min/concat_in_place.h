// memoplan::cat's work (sharing_pass.cc) as a call, for ops of torch_ext/tuned/ that begin with a
// concatenation (memory min's dense-layer bottleneck): aten::cat's bytes, each input copied only
// where the plan did not already lay it in its place in the output.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace memoplan::torch_ext {

// `copied_all`, when given, says whether the output holds bytes of its own on every pass (aten::cat
// made it: the inputs are not one stretch of it each), so that the caller may write over it; a
// concatenation the plan may lay over its inputs says no, whether or not it did on this pass.
at::Tensor concat_in_place(const c10::List<at::Tensor>& list, int64_t dim, bool* copied_all);

}  // namespace memoplan::torch_ext
