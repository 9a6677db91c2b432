// The bytes a call keeps live at once besides what it returns, as c10's CPU allocator reports them
// (the thread-local memory reporting that torch.profiler's profile_memory reads). Memory min asks
// it of aten's whole convolution and of its parts before it slices one: what aten lays out beside
// the output depends on the LibTorch release and the model form (LibTorch 2.6 computes some
// convolutions of a frozen graph with no reorder at all), so an estimate can slice a convolution
// into more bytes than it saves.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace memoplan::torch_ext {

// The most bytes live at once while `call` runs on this thread, less the bytes of the tensor it
// returns (freed before this returns). nullopt when the allocator behind memoplan's reported
// nothing (one that is not c10's default CPU allocator may not report).
std::optional<int64_t> peak_temporaries(const std::function<at::Tensor()>& call);

}  // namespace memoplan::torch_ext
