// The shim's process-wide and per-thread state. Per-thread state is reached through one
// initial-exec TLS pointer (no TLS constructor, no __tls_get_addr: safe inside malloc).
#pragma once

#include <atomic>
#include <cstdint>

#include "callsite_cache.h"
#include "detection.h"
#include "memoplan/record/tag_region.h"
#include "memoplan/replay/arena.h"
#include "memoplan/replay/counters.h"
#include "options.h"
#include "profiling.h"
#include "recheck.h"
#include "replay_state.h"

namespace memoplan::plan_stage {
struct PlannedPass;  // memoplan/plan_stage/planned_pass.h
}  // namespace memoplan::plan_stage

namespace memoplan::shim {

// Where a thread stands in its lifecycle (lifecycle.h; only lifecycle.cc changes it).
enum class Phase : uint8_t {
  kWarmup,     // explicit passes: skipping the first `passes`
  kProfiling,  // recording (an explicit pass, or everything until a period is found)
  kReplaying,  // serving from the slab
  kSeeking,    // mode:replay without pass marks: waiting for the loaded pass's first allocation
  kDisabled,   // nothing to plan here (no period found, plan failed): pass-through
};

// A thread's state: a few fields of the thread as a whole, then one part per stage, each a struct
// of its own header written only by the file named beside it (the others read it, and ask that
// file for any change). The order keeps what the replay hit reads near the front of each part.
struct ThreadState {
  uint32_t index = 0;  // threads.cc's
  // Counters of the hot paths, kept per thread (a shared atomic on every hit cost as much as the
  // rest of the hit) and added to the process-wide statistics at pass ends and thread exit; the
  // statistics at exit add those of threads still running. Bumped wherever a request is counted.
  replay::OwnedCounters counters;
  CallsiteCache* callsite = nullptr;  // callsite.cc's, made at the thread's first unwind
  // lifecycle.cc's: the phase, and the program's pass marks.
  Phase phase{Phase::kWarmup};
  bool explicit_passes = false;  // the program called memoplan_pass_begin on this thread
  bool in_pass = false;          // between memoplan_pass_begin and memoplan_pass_end
  uint64_t passes_begun = 0;

  Profiling profiling;      // profile.cc's
  Detection detection;      // detect.cc's
  IrregularWork irregular;  // detect.cc's
  ReplayState replay;       // replay.cc's
  ReplayRecheck recheck;    // recheck.cc's (recheck.h)
  // learned_pass.cc's: the learned pass this thread started on (nullptr: none), and whether it
  // left it (leave_learned_pass).
  const plan_stage::PlannedPass* learned_pass = nullptr;
  bool left_learned_pass = false;
  // stats.cc's: its steady-state hits and requests as of the last flush (note_thread_steady), for
  // statistics read while it runs (the fields they come from are the owner's own). Under
  // RegistryLock.
  uint64_t flushed_steady_hits = 0, flushed_steady_requests = 0;
  ThreadState* running_prev = nullptr;  // threads.cc's: Global::running, under registry_lock
  ThreadState* running_next = nullptr;
};

struct Global {
  std::atomic<int> init_state{0};  // 0 not started, 1 running, 2 done
  Options options;
  bool mode_off = false;
  record::TagRegion tags;     // profiling: one slot per tracked allocation
  replay::ArenaRegion slabs;  // replay: one arena per thread
  // [tags | slabs | bootstrap pool], reserved once (engine.cc); 0 under mode:off.
  uintptr_t span_base = 0, span_size = 0;
  std::atomic<uint32_t> next_thread_index{0};
  // Threads that have not exited, for the statistics at exit. The lock also orders a thread's
  // flush of its counters against their reading.
  ThreadState* running = nullptr;
  std::atomic_flag registry_lock = ATOMIC_FLAG_INIT;
  int log_fd = 2;
  bool portable_keys = false;  // see portable_keys(Options)
  // The pass every thread may start: mode:replay's, loaded from files once (with its escaping
  // blocks' places), or mode:auto's newest learned one (learned_pass.h keeps those in use). Made
  // under the reentry guard: its memory is the fallback's. Never freed: a thread may start on it
  // at any time, even while the process exits. Set before replay_pass_state becomes 1.
  std::atomic<const plan_stage::PlannedPass*> replay_pass{nullptr};
  std::atomic<int> replay_pass_state{0};  // 0 not loaded yet, 1 ready, 2 unusable
};

Global& global();

// The shim's globals must be constant-initialized: malloc runs before any constructor of this
// library does, and a dynamic initializer would reset them after use. This makes the compiler
// check it (C++20's constinit, in C++17 as each compiler spells it).
#if defined(__clang__)
#define MEMOPLAN_CONSTINIT [[clang::require_constant_initialization]]
#elif defined(__GNUC__)
#define MEMOPLAN_CONSTINIT __constinit
#else
#define MEMOPLAN_CONSTINIT
#endif

// The calling thread's state, created on first use (nullptr while that is impossible).
extern __thread ThreadState* tls_state __attribute__((tls_model("initial-exec")));
ThreadState* create_thread_state();
inline ThreadState* thread_state() {
  ThreadState* t = tls_state;
  return __builtin_expect(t != nullptr, 1) ? t : create_thread_state();
}

// threads.cc: the thread-exit key and the fork handlers (initialization registers them; false
// when either cannot be registered).
bool install_thread_hooks();

// Adds the thread's local counters to the process-wide statistics.
void flush_counters(ThreadState& t);
void flush_counters_locked(ThreadState& t);  // the caller holds RegistryLock

// Holds Global::registry_lock (thread start and exit, counter flushes, the statistics at exit).
class RegistryLock {
 public:
  RegistryLock();
  ~RegistryLock();
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
};

// Nested calls (our own bookkeeping, libunwind, the planner) go straight to the fallback.
struct ReentryGuard {
  ReentryGuard();
  ~ReentryGuard();
  static bool active();
};

// One line to the log, no malloc.
void log_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace memoplan::shim
