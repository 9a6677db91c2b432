// What plan(..., memory = "min") did with the ops it computes in parts (memoplan/torch/plan.h).
// In libmemoplan_torch.so. No torch headers.
#pragma once

#include <cstdint>

namespace memoplan::torch_ext {

// plan(..., memory = "min") computes aten's convolutions and max poolings in parts where that
// shrinks their temporaries (docs/TORCH_EXT.md, "Convolutions in parts"). Calls so far, process-
// wide, that ran in parts; and convolution shapes (with their thread count) whose parts did not
// give aten's bytes when checked, which run whole; and those whose parts, measured beside aten's
// whole call, saved too few bytes (under 256 KiB, or more than half of aten's temporaries left).
struct SlicedCounts {
  uint64_t convolutions = 0, poolings = 0, whole_after_check = 0, whole_saving_little = 0;
};
SlicedCounts sliced_counts();

}  // namespace memoplan::torch_ext
