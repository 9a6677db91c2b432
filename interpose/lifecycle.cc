// A thread's lifecycle in the shim (lifecycle.h), in one place: every phase transition is one of
// the small functions below, and the program's pass marks move the thread between them.
//
// Without pass marks (detect:true), a thread profiles from its first tracked request:
//   profiling --(detect.cc finds a repeating pass; plan_builder.cc plans it; replay.cc's
//                install_replay gives it to the thread)--> replaying
//   replaying --(recheck.cc: a request the plan does not know recurs: detect_again)--> profiling,
//                the next plan required to contain that request (the old arena goes once empty);
//                past the last re-detection, a plan serving too little --> unplanned, profiling
//                paused (the arena goes with its last block)
//   replaying --(a size-free plan's request outgrew its slot: replanned at the pass end)-->
//                replaying, on a new plan
// With pass marks (memoplan_pass_begin/end, pass_begins and pass_ends below):
//   warm-up --(after `passes` marked passes)--> profiling --(the pass end plans it)--> replaying
//   and a thread that detected first gives its plan back and starts over at warm-up.
// mode:replay: seeking --(the loaded pass's first request, or the first pass mark after the
//   warm-up)--> replaying.
// From any of them --(profiling gives up, planning fails, mode:profile wrote its pass, the loaded
//   pass is unusable, a plan given back with nothing after it)--> unplanned (Phase::kDisabled).
#include "lifecycle.h"

#include "engine.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "stats.h"

namespace memoplan::shim {

void enter_warmup(ThreadState& t) { t.phase = Phase::kWarmup; }
void enter_profiling(ThreadState& t) { t.phase = Phase::kProfiling; }
void enter_replay(ThreadState& t) { t.phase = Phase::kReplaying; }
void run_unplanned(ThreadState& t) { t.phase = Phase::kDisabled; }

void start_lifecycle(ThreadState& t) {
  // With detection on, record from the first allocation; explicit passes (if the program calls
  // memoplan_pass_begin) take over and restart profiling after the warm-up passes.
  if (!global().options.detect) {
    t.phase = Phase::kWarmup;
  } else {
    t.phase = global().options.mode == Mode::kReplay ? Phase::kSeeking : Phase::kProfiling;
  }
}

// mode:replay on a thread without pass marks: replay starts at the loaded pass's first
// allocation (a wrong start costs one pass of fallbacks: the matcher finds the start again).
void seek_loaded_pass(ThreadState& t, uint64_t key) {
  const Global& g = global();
  const int state = g.replay_pass_state.load(std::memory_order_acquire);
  if (state == 2) {
    run_unplanned(t);
  } else if (state == 1 && key == g.replay_pass.load(std::memory_order_acquire)->slots[0].key &&
             !start_loaded_replay(t)) {
    run_unplanned(t);
  }
}

void pass_begins(ThreadState& t) {
  const Global& g = global();
  if (!t.explicit_passes && (t.phase == Phase::kProfiling || t.phase == Phase::kReplaying ||
                             t.phase == Phase::kSeeking)) {
    // The program marks its passes: they replace automatic detection (and a plan it made, once
    // none of that plan's blocks is alive), warm-up passes first.
    if (retire_replay(t)) enter_warmup(t);
  }
  t.explicit_passes = true;
  t.in_pass = true;
  ++t.passes_begun;
  replay::OwnedCounters::bump(t.counters.passes);
  switch (t.phase) {
    case Phase::kWarmup: {
      if (t.passes_begun <= g.options.passes) break;
      if (g.options.mode != Mode::kReplay) {
        enter_profiling(t);
        start_profiled_pass(t.profiling);
        break;
      }
      ReplayStart start;
      start.first_pass_begun = true;
      if (!start_loaded_replay(t, start) &&
          g.replay_pass_state.load(std::memory_order_acquire) != 0) {
        run_unplanned(t);  // unusable files, or no slab for this thread
      }
      break;
    }
    case Phase::kProfiling:
      // The previous profiled pass ended without memoplan_pass_end: profile this one instead.
      start_profiled_pass(t.profiling);
      break;
    case Phase::kReplaying:
      replay_pass_begins(t.replay);
      // The profile's records: the plan is made.
      if (t.profiling.profile->log.count()) release_records(t.profiling);
      break;
    case Phase::kSeeking:
    case Phase::kDisabled:
      break;
  }
}

void pass_ends(ThreadState& t) {
  t.in_pass = false;
  flush_counters(t);
  if (t.phase != Phase::kProfiling || !t.explicit_passes) return;
  ReentryGuard guard;
  const Profile& profile = *t.profiling.profile;
  const uint64_t first = t.profiling.pass_first_record;
  if (!finish_profile(t, first, profile.log.count() - first, profile.log.tick(), 0)) {
    run_unplanned(t);
    stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: its profiled pass could not be planned", t.index);
  }
  // The first replayed pass starts at the next memoplan_pass_begin.
  rewind_replay(t.replay);
}

}  // namespace memoplan::shim
