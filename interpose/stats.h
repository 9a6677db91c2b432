// Process-wide counters, printed at exit with stats_print:true and written as JSON at any time
// (memoplan_stats_json, stats_file): the runtime's one counter list (replay::SharedCounters,
// memoplan/replay/counters.h) plus the largest live slab bytes of a thread. Relaxed atomics:
// statistics, not synchronization.
#pragma once

#include <atomic>
#include <cstddef>
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
  // Passes learned from exited threads that ran one each (learned_pass.h), and the threads that
  // started on one.
  std::atomic<uint64_t> learned_passes{0}, learned_pass_threads{0};
  // Threads' profiling paused: what they profiled stayed alive, or an attempt found no pass
  // (detection.h).
  std::atomic<uint64_t> profiling_pauses{0};
  // Huge requests served from the tag region instead of the fallback (huge_blocks.h).
  std::atomic<uint64_t> huge_blocks{0};
};

Stats& stats();
// Writes the report to fd (no malloc).
void print_stats(int fd);

// The same figures as one JSON object (docs/SHIM.md, "Live statistics"), NUL-terminated in buf
// when len > 0 (cut short when it does not fit); returns the length it needed, NUL excluded, as
// snprintf does. No malloc; any thread, any time. `at_exit`: the figures print_stats reports at
// exit (running threads' own fields read directly, and "at_exit":true); otherwise each running
// thread's per-thread figures are those of its last counter flush (note_thread_steady), which are
// safe to read while it runs.
size_t stats_json(char* buf, size_t len, bool at_exit);

// stats_file.cc. Writes stats_json to the file `pattern` names (%p: process id, %%: a percent
// sign): to PATH.tmp, then renamed to PATH. One writer at a time; after the write at exit, none.
// False when it was not written (the first failure is logged).
bool write_stats_file(const char* pattern, bool at_exit);
// Starts the thread that rewrites stats_file every stats_interval_ms (a no-op unless both are
// set, and once it runs): from the library's constructor, and in a fork child from its first
// counter flush (flush_counters), as the idle-slab reaper.
void start_stats_writer();
// In a fork child: the writer thread did not come along. A file whose path has no %p is the
// parent's: the child writes none.
void stats_file_after_fork_in_child();
// At exit: the last write (stats_file set; with or without an interval).
void write_stats_file_at_exit();

struct ThreadState;
// verbose:true: one line on where the thread stands (its phase, its plan, that plan's steady-state
// hits and fallbacks), at its exit and in the report at the process's exit.
void log_thread_summary(const ThreadState& t, const char* when);
// An exiting thread's steady-state requests and hits, kept for the report's per-thread line
// (the busiest few; called under RegistryLock).
void keep_exited_thread(const ThreadState& t);
// Keeps the thread's steady-state requests and hits where live statistics read them (called
// under RegistryLock by flush_counters_locked).
void note_thread_steady(ThreadState& t);

}  // namespace memoplan::shim
