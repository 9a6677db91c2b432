// What the blocked region's translation units share about its tensors (blocked_tensor.cc): the
// sizes oneDNN reads, tensors made in one layout, an input made readable, scratchpads. The public
// side (is_blocked, format_of, convert, ...) is in blocked.h. ATen types; for tuned/blocked/ only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "memoplan/onednn/onednn.h"

namespace memoplan::torch_ext::blocked {

onednn::Shape shape_of(const at::Tensor& x);  // N, C, H, W of a 4-d tensor
// A new tensor of sizes `s` in layout `f` (blocked: padded channels and the tag), float.
at::Tensor new_tensor(const onednn::Shape& s, onednn::Format f, const at::TensorOptions& options);
// A 4-d float CPU activation in one of the three layouts: `x` itself where it is, else x as
// contiguous NCHW floats; `op` names the caller in the error for anything else.
at::Tensor dense(const at::Tensor& x, const char* op);
// An oneDNN scratchpad of `bytes` (undefined for 0), planned like any temporary.
at::Tensor scratchpad(size_t bytes, const at::TensorOptions& options);
void* data_or_null(const at::Tensor& t);

}  // namespace memoplan::torch_ext::blocked
