// Taking a measurement's operands out of the CPU caches between timed calls, so that an op is
// measured as a pass runs it when the model's weights do not fit the last-level cache: each
// layer's weights come from memory, not from the previous call. Each cache line of the ranges
// given is written back and invalidated (x86-64 clflushopt, else clflush; aarch64 `dc civac`),
// in every level and, being coherent, in every core's caches: no memory is used for it (a buffer of
// twice the last-level cache read through, as before, was 128 MiB of the tuned copy's peak on a
// small transformer). No torch; used by tuned::time_both's callers.
#pragma once

#include <cstddef>

namespace memoplan::torch_ext::tuned {

// Every cache line of [data, data + bytes) leaves the caches; returns once they have (a fence).
// Pages of the range not resident are read in first (the instruction checks access as a load):
// pass only ranges the measured call reads anyway. A no-op on other architectures (the
// measurement runs warm).
void flush_from_caches(const void* data, size_t bytes);

}  // namespace memoplan::torch_ext::tuned
