// Re-checking a detected plan: whether requests the plan does not know keep coming (then the plan
// does not describe the pass and the thread detects it again), and what the plan counted in
// steady state (retracted from the statistics if it is re-detected). The thread's ReplayRecheck
// is recheck.cc's; replay.cc counts into it through the inline functions below (the replay hit
// must not pay a call) and the rest through recheck.cc's.
#pragma once

#include <cstdint>

#include "memoplan/replay/counters.h"
#include "stats.h"

namespace memoplan::shim {

struct ThreadState;

// Windows of tracked requests, and the keys of requests the plan did not know in this window and
// in the last window that missed any. A key missed in two such windows recurs: the plan does not
// describe the pass. Keys missed once (work between passes whose sizes vary, a one-off request)
// do not count: they go to the fallback, the plan stays.
struct ReplayRecheck {
  static constexpr int kKeys = 16;
  uint32_t window = 256;  // requests per window: a few passes
  uint32_t requests = 0;
  uint32_t missing_windows = 0;  // windows with a recurring miss in the current series
  uint32_t clean_windows = 0;    // windows without a miss since the last one with a miss
  uint32_t redetections = 0;     // the thread's, over all its plans
  int missed_count = 0, previous_count = 0;
  uint64_t missed[kKeys] = {};    // distinct keys missed in this window (the first kKeys)
  uint64_t previous[kKeys] = {};  // and in the last window that missed any
  uint64_t recurring = 0;         // a key missed in this window that the last one missed too
  uint64_t unexplained_key = 0;   // the newest such key
  // This plan's steady-state hits and fallbacks (escaping included), retracted from the
  // steady-state statistics if the plan is re-detected.
  uint64_t plan_steady_hits = 0, plan_steady_misses = 0;
  uint64_t plan_steady_passes = 0, plan_full_passes = 0;  // the same for Stats' pass counts
  uint64_t plan_steady_between = 0;   // of the misses: irregular work between passes
  uint64_t misses_at_last_cycle = 0;  // plan_steady_misses when the last detected pass ended
  // Steady-state bytes the plan served, and those of misses it should have served (not escaping
  // blocks, not irregular work between passes, not a size-free plan's requests that outgrew their
  // slots). A plan that serves under nine tenths of those bytes, kMissingWindows windows in a
  // row, does not describe the pass: random sizes can pass for a short one (glibc's
  // bench-malloc-thread: 58% served). The thread detects again and, after its last re-detection,
  // gives the plan up and pauses profiling (recheck.cc). Counted in bytes: a DNN's misses are its
  // small requests (the zoo's plans serve 98.6-100% of requests).
  uint64_t plan_steady_hit_bytes = 0, plan_steady_poor_bytes = 0;
  uint64_t window_hit_bytes = 0, window_poor_bytes = 0;  // the two when this window began
  uint32_t poor_windows = 0;                             // consecutive windows under nine tenths
  uint64_t poor_key = 0;                                 // the newest such miss's key
  // A learned pass just started on (learned_pass.h): the first window is one pass long, and at
  // its end a thread that missed more of it than it hit leaves the pass (leave_learned_pass).
  bool judge_adoption = false;
};

// A request under the plan: true when it closes a window (then close_recheck_window).
inline bool recheck_counts_request(ReplayRecheck& r) { return ++r.requests == r.window; }

// A steady-state hit of this plan, of `size` bytes.
inline void recheck_steady_hit(ReplayRecheck& r, uint64_t size) {
  ++r.plan_steady_hits;
  r.plan_steady_hit_bytes += size;
}

// A detected pass ended (with its last planned allocation): counted in steady state, and as full
// when no request of it went to the fallback.
inline void recheck_pass_completed(ReplayRecheck& r, bool steady) {
  if (steady) {
    stats().steady_passes.fetch_add(1, std::memory_order_relaxed);
    ++r.plan_steady_passes;
    if (r.plan_steady_misses == r.misses_at_last_cycle) {
      stats().full_passes.fetch_add(1, std::memory_order_relaxed);
      ++r.plan_full_passes;
    }
  }
  r.misses_at_last_cycle = r.plan_steady_misses;
}

// A new plan of `slot_count` slots: the re-check starts afresh (the thread's redetections stay),
// its window a few passes long.
void recheck_plan_installed(ReplayRecheck& r, uint32_t slot_count);

// The thread started on a learned pass of `slot_count` slots (after recheck_plan_installed): its
// first window is that pass, and the pass is judged at its end.
void recheck_judge_adoption(ReplayRecheck& r, uint32_t slot_count);

// The window of requests is full: a key missed again in enough windows, or too few bytes served,
// starts a re-detection (or, past the last, gives the plan up: then t.replay holds no arena).
void close_recheck_window(ThreadState& t);

// A request of `size` bytes the arena did not serve, for `why`: counted in steady state, and
// (`recheck`, a request the plan does not know) noted for the window.
void recheck_miss(ThreadState& t, replay::Fallback why, uint64_t key, uint64_t size, bool recheck);

// At a pass end while the plan leaves keys out as irregular (t.irregular.count != 0): a key whose
// misses per pass repeat is regular at a larger scale than the plan's pass: the thread detects
// again, requiring it.
void recheck_irregular_pass(ThreadState& t);

}  // namespace memoplan::shim
