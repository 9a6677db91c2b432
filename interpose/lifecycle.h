// A thread's lifecycle in the shim: its Phase (state.h) and the program's pass marks. Only
// lifecycle.cc changes them, one function per transition below; the stages call the transition
// they cause (lifecycle.cc's opening comment draws the whole cycle).
#pragma once

#include <cstdint>

namespace memoplan::shim {

struct ThreadState;

// A new thread's first phase: profiling from its first request with detection on (seeking the
// loaded pass under mode:replay), else warming up until its marked passes (threads.cc).
void start_lifecycle(ThreadState& t);

// Transitions. Each enters one phase and does nothing else.
// Marked passes replace detection (once the detected plan is given back): warm-up first.
void enter_warmup(ThreadState& t);
// Recording: a marked pass after the warm-up, a detected plan re-checked and found wrong, or a
// search that retired the old plan to make its own.
void enter_profiling(ThreadState& t);
// install_replay gave the thread a plan.
void enter_replay(ThreadState& t);
// Nothing to plan: profiling gave up, planning failed, mode:profile wrote its pass, the loaded
// pass is unusable, or the thread's plan was given back with nothing after it.
void run_unplanned(ThreadState& t);

// The program's pass marks (memoplan_pass_begin/end, after engine.cc's checks): a marked pass
// begins (warm-up, profiling or replay of it), or ends (a profiled pass is planned).
void pass_begins(ThreadState& t);
void pass_ends(ThreadState& t);

// mode:replay without pass marks: a tracked request while seeking (its `key`); the loaded pass's
// first allocation starts the replay.
void seek_loaded_pass(ThreadState& t, uint64_t key);

}  // namespace memoplan::shim
