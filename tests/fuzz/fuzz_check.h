// What the fuzz targets share: a check that aborts (libFuzzer and the replay tests both report an
// abort as a failure, with the input that caused it), and the checks every parsed trace goes
// through, whichever reader produced it.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "memoplan/planner/trace.h"

// Not assert(): the fuzz builds may define NDEBUG.
#define FUZZ_CHECK(condition, ...)                                                         \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #condition); \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fputc('\n', stderr);                                                            \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace memoplan::fuzz {

// A trace a reader accepted must plan: the default strategy and, for small traces, one more fast
// strategy (chosen from the trace, so every one is reached) return plans the independent
// validator accepts, and each plan survives its JSON round trip. Traces of more than 512 rows
// are not planned (speed: the readers are what these targets are about).
void check_accepted_trace(const Trace& trace);

}  // namespace memoplan::fuzz
