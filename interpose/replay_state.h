// Replay in the shim: the thread's plan (its slots in pass order, the matcher's cursor over them,
// its arena) and what a plan keyed by call site alone keeps to be planned again. The thread's
// ReplayState is replay.cc's: install_replay gives it a plan, retire_replay takes it away, and
// replay_alloc serves from it; the others read it and go through the functions below.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memoplan/replay/arena.h"
#include "memoplan/replay/matcher.h"

namespace memoplan::plan_stage {
struct PlannedPass;  // memoplan/plan_stage/planned_pass.h
}  // namespace memoplan::plan_stage

namespace memoplan::shim {

struct ThreadState;

struct ReplayState {
  replay::Slot* slots = nullptr;  // the plan's, in pass order (fallback memory)
  uint32_t slot_count = 0;
  replay::Matcher matcher;
  replay::Arena* arena = nullptr;
  uint64_t replayed_passes = 0;
  // A plan keyed by call site alone (a pass whose sizes vary from pass to pass), each slot sized
  // to the largest request seen there. A larger request falls back and is noted in `wanted`; at
  // the pass end the pass is planned again from `rows` (each slot's begin and end on the profiled
  // pass's clock, alignment and whether it escapes), in a new arena.
  bool size_free = false;
  bool replan_pending = false;
  // Size-free plans match by call site, which cannot tell a pass that made fewer requests (a
  // tensor below min_size at a small shape) from one in step: the cursor would stay behind for
  // good. When only the pass's first allocation is made with none of its blocks alive, an empty
  // arena at a request means the pass starts over: the cursor goes back to it.
  bool resync_at_empty = false;
  uint64_t* wanted = nullptr;                // per slot
  uint64_t* rows = nullptr;                  // per slot: begin, end, alignment, escapes
  std::atomic<uint64_t> peak_live_bytes{0};  // the arenas' peaks, as of the last flush
};

// Steady state: after the thread's first replayed pass. Marked passes count at pass begin; a
// detected pass counts when its last slot is used, so its first replayed pass may be partial (the
// plan starts mid-pass) or a thread's one-off pass that merely matched (mode:replay's seeking):
// two completed cycles show that the pass repeats.
inline bool in_steady_state(const ReplayState& r, bool explicit_passes) {
  return explicit_passes ? r.replayed_passes > 1 : r.replayed_passes >= 2;
}

// How install_replay starts a thread on a plan.
struct ReplayStart {
  uint32_t cursor = 0;  // the pass position the thread is at (the matcher's cursor)
  // The thread's arena goes even with blocks alive (retired: back with its last free); otherwise
  // it must be empty, or the plan is not installed.
  bool retire_live_arena = false;
  // A pass mark has begun the plan's first pass: it counts as replayed.
  bool first_pass_begun = false;
  // A plan keyed by call site alone: ReplayState's wanted (zeroed) and rows, from the fallback
  // allocator, and resync_at_empty. install_replay owns both arrays from the call on (it frees
  // them if it fails).
  uint64_t* wanted = nullptr;
  uint64_t* rows = nullptr;
  bool resync_at_empty = false;
  // A pass adopted at its first request (learned_pass.h): whole from the start, so in steady state
  // from its first pass (a detected pass's first is partial).
  bool steady_from_start = false;
};
// Gives the thread an arena of pass.slab_bytes and a copy of pass.slots (from the fallback), and
// switches it to replay. False (the thread keeps what it had, or runs unplanned) when the slab is
// above slab_max or cannot be mapped, or the table cannot be allocated.
bool install_replay(ThreadState& t, const plan_stage::PlannedPass& pass, ReplayStart start);

// Serves a tracked request from the thread's arena (the hit itself is replay::serve, inline), or
// returns null (counted; the caller asks the fallback).
void* replay_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key);

// Marked passes: a pass begins (the cursor at the plan's start, one more replayed pass), or the
// profiled one ended (the first replayed pass starts at the next mark: the cursor at the start).
void replay_pass_begins(ReplayState& r);
void rewind_replay(ReplayState& r);

// Gives the thread's arena and replay table back if none of its blocks is alive (true then, and
// the thread holds no plan afterwards). Owner only.
bool retire_replay(ThreadState& t);
// Gives the plan up now: the table is freed and the arena goes back with its last live block's
// free. The thread holds no plan afterwards. Owner only.
void drop_replay(ThreadState& t);
// At thread exit: the arena goes to the runtime, which gives it back with its last block's free;
// the replay table is freed. `after_fork`, for a thread a fork left behind: only forgets the arena
// (ArenaRegion::after_fork_in_child retired it) and frees the table.
void retire_replay_at_exit(ThreadState& t, bool after_fork);

// The arena's peak, where the statistics read it (peak_live_bytes).
void keep_replay_peak(ReplayState& r);
// malloc_trim: the arena's pages, when none of its blocks is alive. Returns the bytes.
uint64_t trim_replay(ReplayState& r);

}  // namespace memoplan::shim
