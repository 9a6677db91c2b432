// mimalloc 2.x compiled into the shim (MEMOPLAN_MIMALLOC_SOURCE: its source tree; CMakeLists.txt):
// its src/static.c, every source in one unit, with no override (it defines no malloc; the shim's
// exported functions call its mi_* API) and hidden (a program's own libmimalloc stays apart). The
// fallback then needs no dlopen, and the exported malloc, compiled with it under LTO, takes
// mimalloc's fast path inline instead of a jump through a pointer (exports.cc, unplanned.h).
// The system headers come first: static.c's own includes then find them declared with default
// visibility.
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "static.c"

// Every segment of this mimalloc from one arena the shim reserves here (`bytes`, PROT_NONE until
// mimalloc commits it with mprotect; its option limit_os_alloc then takes no other memory from
// the system), so whether a block is mimalloc's is one range check (fallback.cc). Called before
// mimalloc's first allocation. 0 where the range cannot be had: mimalloc stays unconfined.
__attribute__((visibility("hidden"))) int memoplan_mi_confine(size_t bytes, uintptr_t* base) {
  const size_t align = MI_SEGMENT_SIZE;  // an arena's blocks are segments, aligned to their size
  void* raw = mmap(NULL, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (raw == MAP_FAILED) return 0;
  const uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
  const uintptr_t end = start + bytes, raw_end = (uintptr_t)raw + bytes + align;
  if (start > (uintptr_t)raw) munmap(raw, start - (uintptr_t)raw);
  if (raw_end > end) munmap((void*)end, raw_end - end);
  if (!mi_manage_os_memory((void*)start, bytes, false, false, true, -1)) {
    munmap((void*)start, bytes);
    return 0;
  }
  mi_option_enable(mi_option_limit_os_alloc);
  *base = start;
  return 1;
}
