// Replay in the shim: the thread's planned slots in pass order, matched by key (call site and
// size) a few slots past the cursor, the pass repeating; served by replay::serve from the
// thread's arena. The hit is that inline function and a few counters; everything else is
// replay_miss, the named slow path.
#include <cerrno>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "memoplan/replay/serve.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// Steady state: after the thread's first replayed pass. Marked passes count at pass begin; a
// detected pass counts when its last slot is used, so its first replayed pass may be partial (the
// plan starts mid-pass) or a thread's one-off pass that merely matched (mode:replay's seeking):
// two completed cycles show that the pass repeats.
inline bool steady(const ThreadState& t) {
  return t.explicit_passes ? t.replayed_passes > 1 : t.replayed_passes >= 2;
}

// A detected plan is re-checked: when requests it does not know about keep coming (a key missed
// again in kMissingWindows windows of a few passes, with fewer than kCleanWindows windows without
// a miss in between), it did not describe the pass — detection locked onto a repeated layer, or
// the program changed — and the thread detects its pass again, now requiring a period that
// contains the missed key and is longer than the old plan.
constexpr uint32_t kMissingWindows = 3;
constexpr uint32_t kMaxRedetections = 8;
constexpr uint32_t kCleanWindows = 4;  // windows without a miss that end a series of missing ones

// The plan does not describe the pass: profile afresh, requiring a period that contains `key`
// and is longer than the plan. The old arena stays until its last block is freed (retire_replay).
__attribute__((noinline)) void start_redetection(ThreadState& t, uint64_t key) {
  ReplayRecheck& r = t.recheck;
  if (r.redetections >= kMaxRedetections || !global().options.detect) return;
  ++r.redetections;
  stats().redetections.fetch_add(1, std::memory_order_relaxed);
  // This plan's "steady state" was not the program's: its requests count as before steady state.
  stats().retracted_steady_hits.fetch_add(r.plan_steady_hits, std::memory_order_relaxed);
  stats().retracted_steady.fetch_add(r.plan_steady_hits + r.plan_steady_misses,
                                     std::memory_order_relaxed);
  stats().retracted_between.fetch_add(r.plan_steady_between, std::memory_order_relaxed);
  stats().steady_passes.fetch_sub(r.plan_steady_passes, std::memory_order_relaxed);
  stats().full_passes.fetch_sub(r.plan_full_passes, std::memory_order_relaxed);
  if (global().options.verbose) {
    log_line(
        "memoplan: thread %u: its plan of %u allocations does not describe the pass (a "
        "request it does not know recurs): detecting again",
        t.index, t.slot_count);
  }
  detect_again(t, key, t.slot_count);
}

__attribute__((noinline)) void close_recheck_window(ThreadState& t) {
  ReplayRecheck& r = t.recheck;
  r.requests = 0;
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

// The arena's peak, where the statistics read it (any thread).
void keep_peak(ThreadState& t) {
  const uint64_t arena_peak = t.arena->peak_live_bytes();
  if (arena_peak > t.peak_live_bytes.load(std::memory_order_relaxed)) {
    t.peak_live_bytes.store(arena_peak, std::memory_order_relaxed);
  }
}

// The profile's records, once the plan is made (profiled blocks still alive close nothing then).
__attribute__((noinline)) void release_records(ThreadState& t) {
  stats().released_bytes.fetch_add(give_back_records(*t.profile), std::memory_order_relaxed);
}

// A plan found through irregular work leaves out the keys that recur irregularly between passes:
// a miss of one is counted for this pass and is no reason to re-check (detection.h).
inline bool irregular_work_miss(ThreadState& t, uint64_t key) {
  return t.irregular.count != 0 &&
         irregular_miss(t.irregular, key, t.matcher.cursor() == 0 && t.replayed_passes != 0);
}

// At a pass end while the plan leaves keys out as irregular: a key whose misses per pass repeat is
// regular at a larger scale than the plan's pass: the thread detects again, requiring it.
__attribute__((noinline, cold)) void note_irregular_pass(ThreadState& t) {
  const int repeating = irregular_pass_ended(t.irregular);
  if (repeating >= 0) start_redetection(t, t.irregular.keys[repeating]);
}

// A detected pass ends with its last planned allocation (every allocation, for a pass of one).
inline void detected_pass_completed(ThreadState& t) {
  if (steady(t)) {
    stats().steady_passes.fetch_add(1, std::memory_order_relaxed);
    ++t.recheck.plan_steady_passes;
    if (t.recheck.plan_steady_misses == t.misses_at_last_cycle) {
      stats().full_passes.fetch_add(1, std::memory_order_relaxed);
      ++t.recheck.plan_full_passes;
    }
  }
  t.misses_at_last_cycle = t.recheck.plan_steady_misses;
  ++t.replayed_passes;
  if (__builtin_expect(t.replan_pending, 0)) replan_size_free(t);
  if (__builtin_expect(t.profile->log.count() != 0, 0)) release_records(t);
  keep_peak(t);
  // Publish now and then: a detected pass can be a single allocation long.
  replay::OwnedCounters::bump(t.counters.passes);
  if (t.counters.passes.load(std::memory_order_relaxed) % 64 == 0) flush_counters(t);
  if (__builtin_expect(t.irregular.count != 0, 0)) note_irregular_pass(t);
}

// Every request the arena did not serve: counted by reason; a detected plan notes what it did not
// know for the re-check. The caller then asks the fallback allocator.
__attribute__((noinline, cold)) void* replay_miss(ThreadState& t, replay::Fallback why,
                                                  uint64_t key, bool recheck = true) {
  stats().fallback(why);
  const bool checked = why == replay::Fallback::kNotPlanned && !t.explicit_passes && recheck;
  const bool between = checked && irregular_work_miss(t, key);
  if (steady(t)) {
    (why == replay::Fallback::kEscaping ? stats().steady_escaping : stats().steady_fallbacks)
        .fetch_add(1, std::memory_order_relaxed);
    ++t.recheck.plan_steady_misses;
    if (between) {
      stats().steady_between.fetch_add(1, std::memory_order_relaxed);
      ++t.recheck.plan_steady_between;
    }
  }
  if (checked && !between) {
    // Checked at each miss, not by comparing the two windows' first keys: a pass with more
    // distinct misses than kKeys, cut at another point by every window, would never match.
    ReplayRecheck& r = t.recheck;
    bool known = false;
    for (int i = 0; i < r.missed_count && !known; ++i) known = r.missed[i] == key;
    if (!known && r.missed_count < ReplayRecheck::kKeys) r.missed[r.missed_count++] = key;
    for (int j = 0; j < r.previous_count && !r.recurring; ++j) {
      if (r.previous[j] == key) r.recurring = key;
    }
  }
  return nullptr;
}

void free_slots(ThreadState& t) {
  replay::Slot* slots = t.slots;
  t.slots = nullptr;
  t.slot_count = 0;
  t.matcher.stop();
  fallback::free(slots);
  fallback::free(t.wanted);
  fallback::free(t.rows);
  t.wanted = t.rows = nullptr;
  t.size_free = t.replan_pending = t.resync_at_empty = false;
}

// A size-free plan's request larger than its slot: served by the fallback (counted as not
// planned, but not as a request the plan does not know: no re-detection), and the slot grows at
// the pass end (replan_size_free).
__attribute__((noinline, cold)) void* replay_exceeded(ThreadState& t, uint32_t index, uint64_t size,
                                                      uint64_t key) {
  if (size > t.wanted[index]) t.wanted[index] = size;
  t.replan_pending = true;
  return replay_miss(t, replay::Fallback::kNotPlanned, key, /*recheck=*/false);
}

}  // namespace

void* replay_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key) {
  if (__builtin_expect(++t.recheck.requests == t.recheck.window, 0)) close_recheck_window(t);
  const uint64_t cycles = t.matcher.cycles();
  replay::Fallback why = replay::Fallback::kNotPlanned;
  void* p;
  bool exceeded = false;
  uint32_t index = replay::Matcher::kNone;
  if (__builtin_expect(t.size_free, 0)) {
    if (t.resync_at_empty && t.matcher.cursor() != 0 && t.replayed_passes != 0) {
      t.arena->drain_remote_frees();
      if (t.arena->live_blocks() == 0) {  // a pass boundary, and the cursor is not at it
        t.matcher.set_cursor(0);
        detected_pass_completed(t);
      }
    }
    // Keyed by call site alone: a request larger than its slot is this plan's to grow, not one it
    // does not know.
    index = t.matcher.match(key);
    exceeded = index != replay::Matcher::kNone && size > t.slots[index].size;
    p = index == replay::Matcher::kNone || exceeded
            ? nullptr
            : replay::serve_slot(t.slots[index], *t.arena, size, alignment, &why);
  } else {
    p = replay::serve(t.matcher, t.slots, *t.arena, key, size, alignment, &why);
  }
  if (__builtin_expect(exceeded, 0)) replay_exceeded(t, index, size, key);
  if (__builtin_expect(t.matcher.cycles() != cycles, 0) && !t.explicit_passes) {
    detected_pass_completed(t);
  }
  if (__builtin_expect(exceeded, 0)) return nullptr;
  if (__builtin_expect(p == nullptr, 0)) return replay_miss(t, why, key);
  replay::OwnedCounters::bump(t.counters.planned_hits);
  if (steady(t)) {
    replay::OwnedCounters::bump(t.counters.steady_hits);
    ++t.recheck.plan_steady_hits;
  }
  return p;
}

bool retire_replay(ThreadState& t) {
  if (t.arena) {
    keep_peak(t);
    const int saved = errno;  // giving the arena back unmaps memory
    const bool released = t.arena->release_if_empty();
    errno = saved;
    if (!released) return false;
    fault::pause_at(fault::Point::kSlabReleased);  // the fault tests fork here
    t.arena = nullptr;
  }
  if (t.slots) {
    free_slots(t);
    t.phase = Phase::kDisabled;
  }
  return true;
}

void retire_replay_at_exit(ThreadState& t, bool after_fork) {
  if (t.arena) {
    keep_peak(t);
    // After a fork the region has retired every arena this thread still owned, going by the
    // arena table alone: t.arena may be one it had given back (or one now another thread's).
    if (!after_fork) t.arena->retire();
    t.arena = nullptr;
  }
  if (t.slots) free_slots(t);
}

}  // namespace memoplan::shim
