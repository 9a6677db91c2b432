// The re-check of a detected plan (recheck.h): windows of requests, the keys missed in them, and
// the re-detection when a missed key recurs; what the plan counted in steady state is retracted
// then, since that steady state was not the program's.
#include "recheck.h"

#include "detection.h"
#include "learned_pass.h"
#include "state.h"

namespace memoplan::shim {
namespace {

// When requests the plan does not know about keep coming (a key missed again in kMissingWindows
// windows of a few passes, with fewer than kCleanWindows windows without a miss in between), it
// did not describe the pass — detection locked onto a repeated layer, or the program changed — and
// the thread detects its pass again, now requiring a period that contains the missed key and is
// longer than the old plan.
constexpr uint32_t kMissingWindows = 3;
constexpr uint32_t kMaxRedetections = 8;
constexpr uint32_t kCleanWindows = 4;  // windows without a miss that end a series of missing ones

// This plan's "steady state" was not the program's: its requests count as before steady state.
void retract_steady_state(const ReplayRecheck& r) {
  stats().retracted_steady_hits.fetch_add(r.plan_steady_hits, std::memory_order_relaxed);
  stats().retracted_steady.fetch_add(r.plan_steady_hits + r.plan_steady_misses,
                                     std::memory_order_relaxed);
  stats().retracted_between.fetch_add(r.plan_steady_between, std::memory_order_relaxed);
  stats().steady_passes.fetch_sub(r.plan_steady_passes, std::memory_order_relaxed);
  stats().full_passes.fetch_sub(r.plan_full_passes, std::memory_order_relaxed);
}

// The plan does not describe the pass: profile afresh, requiring a period that contains `key`
// and is longer than the plan. The old arena stays until its last block is freed (retire_replay).
__attribute__((noinline)) void start_redetection(ThreadState& t, uint64_t key) {
  ReplayRecheck& r = t.recheck;
  if (r.redetections >= kMaxRedetections || !global().options.detect) return;
  ++r.redetections;
  stats().redetections.fetch_add(1, std::memory_order_relaxed);
  retract_steady_state(r);
  if (global().options.verbose) {
    log_line(
        "memoplan: thread %u: its plan of %u allocations does not describe the pass (a "
        "request it does not know recurs): detecting again",
        t.index, t.replay.slot_count);
  }
  detect_again(t, key, t.replay.slot_count);
}

// Past the last re-detection, a plan that serves too little of the pass costs more than it saves:
// it goes now (its arena with its last block) and the thread runs unplanned, profiling paused as
// for a structure being built (detection.h: a later phase is still found, a pause later).
__attribute__((noinline, cold)) void give_up_plan(ThreadState& t) {
  retract_steady_state(t.recheck);
  if (global().options.verbose) {
    log_line(
        "memoplan: thread %u: its plan of %u allocations serves under nine tenths of the "
        "pass, %u re-detections on: given up",
        t.index, t.replay.slot_count, t.recheck.redetections);
  }
  drop_replay(t);
  pause_profiling(t, "its plans served under nine tenths of the pass");
}

// A plan found through irregular work leaves out the keys that recur irregularly between passes:
// a miss of one is counted for this pass and is no reason to re-check (detection.h).
inline bool irregular_work_miss(ThreadState& t, uint64_t key) {
  return t.irregular.count != 0 &&
         irregular_miss(t.irregular, key,
                        t.replay.matcher.cursor() == 0 && t.replay.replayed_passes != 0);
}

// A plan's windows: a few passes, at least 256 requests.
uint32_t window_for(uint32_t slot_count) {
  return slot_count < (1u << 28) ? (slot_count * 4 > 256 ? slot_count * 4 : 256) : (1u << 30);
}

}  // namespace

void recheck_plan_installed(ReplayRecheck& r, uint32_t slot_count) {
  const uint32_t redetections = r.redetections;  // a thread's, over all its plans
  r = ReplayRecheck{};
  r.redetections = redetections;
  r.window = window_for(slot_count);
}

void recheck_judge_adoption(ReplayRecheck& r, uint32_t slot_count) {
  r.window = slot_count;
  r.judge_adoption = true;
}

__attribute__((noinline)) void close_recheck_window(ThreadState& t) {
  ReplayRecheck& r = t.recheck;
  r.requests = 0;
  if (__builtin_expect(r.judge_adoption, 0)) {
    r.judge_adoption = false;
    r.window = window_for(t.replay.slot_count);
    if (r.plan_steady_misses > r.plan_steady_hits) {
      retract_steady_state(r);
      return leave_learned_pass(t);
    }
  }
  const uint64_t hit = r.plan_steady_hit_bytes - r.window_hit_bytes;
  const uint64_t poor = r.plan_steady_poor_bytes - r.window_poor_bytes;
  r.window_hit_bytes = r.plan_steady_hit_bytes;
  r.window_poor_bytes = r.plan_steady_poor_bytes;
  r.poor_windows = poor * 10 > hit + poor ? r.poor_windows + 1 : 0;
  if (r.poor_windows >= kMissingWindows && !t.explicit_passes) {
    r.poor_windows = 0;
    return r.redetections < kMaxRedetections ? start_redetection(t, r.poor_key) : give_up_plan(t);
  }
  const uint64_t recurring = r.recurring;
  r.recurring = 0;
  if (r.missed_count) {  // a pass longer than a window leaves windows without its misses
    for (int i = 0; i < r.missed_count; ++i) r.previous[i] = r.missed[i];
    r.previous_count = r.missed_count;
    r.missed_count = 0;
    r.clean_windows = 0;
  } else if (++r.clean_windows >= kCleanWindows) {
    r.missing_windows = 0;
  }
  if (recurring) {
    ++r.missing_windows;
    r.unexplained_key = recurring;
  }
  if (r.missing_windows < kMissingWindows || t.explicit_passes) return;
  r.missing_windows = 0;
  start_redetection(t, r.unexplained_key);
}

void recheck_miss(ThreadState& t, replay::Fallback why, uint64_t key, uint64_t size, bool recheck) {
  const bool checked = why == replay::Fallback::kNotPlanned && !t.explicit_passes && recheck;
  const bool between = checked && irregular_work_miss(t, key);
  ReplayRecheck& r = t.recheck;
  if (in_steady_state(t.replay, t.explicit_passes)) {
    (why == replay::Fallback::kEscaping ? stats().steady_escaping : stats().steady_fallbacks)
        .fetch_add(1, std::memory_order_relaxed);
    ++r.plan_steady_misses;
    // Not a size-free plan's request outgrowing its slot (`recheck` false): replanned.
    if (recheck && why != replay::Fallback::kEscaping && !between) {
      r.plan_steady_poor_bytes += size;
      r.poor_key = key;
    }
    if (between) {
      stats().steady_between.fetch_add(1, std::memory_order_relaxed);
      ++r.plan_steady_between;
    }
  }
  if (checked && !between) {
    // Checked at each miss, not by comparing the two windows' first keys: a pass with more
    // distinct misses than kKeys, cut at another point by every window, would never match.
    bool known = false;
    for (int i = 0; i < r.missed_count && !known; ++i) known = r.missed[i] == key;
    if (!known && r.missed_count < ReplayRecheck::kKeys) r.missed[r.missed_count++] = key;
    for (int j = 0; j < r.previous_count && !r.recurring; ++j) {
      if (r.previous[j] == key) r.recurring = key;
    }
  }
}

__attribute__((noinline, cold)) void recheck_irregular_pass(ThreadState& t) {
  const int repeating = irregular_pass_ended(t.irregular);
  if (repeating >= 0) start_redetection(t, t.irregular.keys[repeating]);
}

}  // namespace memoplan::shim
