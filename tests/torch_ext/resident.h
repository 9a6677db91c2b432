// Whether the page holding p is resident (mincore works on any mapping, PROT_NONE too): the
// allocator tests' check that freed pages went back. No torch headers.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace memoplan::torch_ext::testing {

inline bool resident(const void* p) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  unsigned char in_core = 0;
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page - 1));
  return mincore(start, page, &in_core) == 0 && (in_core & 1);
}

}  // namespace memoplan::torch_ext::testing
