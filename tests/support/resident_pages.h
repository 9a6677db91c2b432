// Pages of [p, p + bytes) resident now (mincore, which works on any mapping, PROT_NONE too): the
// tests' check that freed pages went back. 0 where the range is not mapped. libc only; the C test
// programs have their own (tests/interpose/programs/program_check.h).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memoplan::test_support {

inline size_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const size_t pages = (reinterpret_cast<uintptr_t>(p) + bytes - start + page - 1) / page;
  std::vector<unsigned char> in_core(pages);
  if (mincore(reinterpret_cast<void*>(start), pages * page, in_core.data()) != 0) return 0;
  size_t resident = 0;
  for (unsigned char c : in_core) resident += c & 1;
  return resident;
}

}  // namespace memoplan::test_support
