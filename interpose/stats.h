// Process-wide counters, printed at exit with stats_print:true: the runtime's one counter list
// (replay::SharedCounters, memoplan/replay/counters.h) plus the largest live slab bytes of a
// thread. Relaxed atomics: statistics, not synchronization.
#pragma once

#include <atomic>
#include <cstdint>

#include "memoplan/replay/counters.h"

namespace memoplan::shim {

using FallbackReason = replay::Fallback;
using replay::to_string;

struct Stats : replay::SharedCounters {
  std::atomic<uint64_t> peak_live_bytes{0};  // largest live slab bytes seen on one thread
  // Detected passes replayed in steady state, and of them those in which every request of
  // min_size or more came from the slab (no fallback of any kind).
  std::atomic<uint64_t> steady_passes{0}, full_passes{0};
  // Plans keyed by call site alone (passes whose sizes vary), and their replans.
  std::atomic<uint64_t> size_free_plans{0}, size_free_replans{0};
};

Stats& stats();
// Writes the report to fd (no malloc).
void print_stats(int fd);

struct ThreadState;
// verbose:true: one line on where the thread stands (its phase, its plan, that plan's steady-state
// hits and fallbacks), at its exit and in the report at the process's exit.
void log_thread_summary(const ThreadState& t, const char* when);
// An exiting thread's steady-state requests and hits, kept for the report's per-thread line
// (the busiest few; called under RegistryLock).
void keep_exited_thread(const ThreadState& t);

}  // namespace memoplan::shim
