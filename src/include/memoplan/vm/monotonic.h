// CLOCK_MONOTONIC in nanoseconds: the one clock the slab reaper and the tag region's kept-slot
// expiry compare against (no malloc; async-signal-safe).
#pragma once

#include <time.h>

#include <cstdint>

namespace memoplan::vm {

inline uint64_t monotonic_ns() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

}  // namespace memoplan::vm
