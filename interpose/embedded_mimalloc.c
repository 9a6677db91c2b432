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
