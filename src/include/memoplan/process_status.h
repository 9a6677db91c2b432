// This process's own figures from /proc/self/status: its resident memory now (VmRSS) and at its
// peak (VmHWM); and from /proc/self/pagemap, how much of a range of its memory is resident. One
// reader for memoplan run's probes, memoplan-serve's metrics, the weights' accounting and the
// benchmarks.
#pragma once

#include <cstdint>

namespace memoplan {

// The /proc/self/status field `field` ("VmRSS", "VmHWM", any "kB" field) in bytes; 0 when it
// cannot be read.
uint64_t status_bytes(const char* field);

// Bytes of the pages of [start, start + bytes) that are resident in this process now (present in
// its page table: /proc/self/pagemap; swapped or never touched pages are not). Every page the
// range touches counts whole. 0 when the page map cannot be read.
uint64_t resident_bytes(const void* start, uint64_t bytes);

}  // namespace memoplan
