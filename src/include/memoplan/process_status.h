// This process's own figures from /proc/self/status: its resident memory now (VmRSS) and at its
// peak (VmHWM). One reader for memoplan run's probes, memoplan-serve's metrics and the benchmarks.
#pragma once

#include <cstdint>

namespace memoplan {

// The /proc/self/status field `field` ("VmRSS", "VmHWM", any "kB" field) in bytes; 0 when it
// cannot be read.
uint64_t status_bytes(const char* field);

}  // namespace memoplan
