// Replay in the shim (replay_state.h): the thread's planned slots in pass order, matched by key
// (call site and size) a few slots past the cursor, the pass repeating; served by replay::serve
// from the thread's arena. The hit is that inline function and a few counters; everything else is
// replay_miss, the named slow path. Also where a thread gets its plan (install_replay) and gives
// it back (retire_replay).
#include <cerrno>
#include <cstring>

#include "callsite_cache.h"
#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "huge_blocks.h"
#include "lifecycle.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/replay/serve.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// How far ahead the matcher looks when the program skipped planned allocations.
constexpr uint32_t kLookahead = 8;

inline bool steady(const ThreadState& t) { return in_steady_state(t.replay, t.explicit_passes); }

// The profile's records, once the plan is made (profiled blocks still alive close nothing then).
__attribute__((noinline)) void drop_records(ThreadState& t) { release_records(t.profiling); }

// A detected pass ends with its last planned allocation (every allocation, for a pass of one).
// Out of line: the hit path stays small.
__attribute__((noinline)) void detected_pass_completed(ThreadState& t) {
  ReplayState& r = t.replay;
  recheck_pass_completed(t.recheck, steady(t));
  ++r.replayed_passes;
  if (__builtin_expect(r.replan_pending, 0)) {
    r.replan_pending = false;
    replan_size_free(t);
  }
  if (__builtin_expect(t.profiling.profile->log.count() != 0, 0)) drop_records(t);
  // A failed replan leaves the thread without an arena (the old one is gone by then).
  if (__builtin_expect(r.arena != nullptr, 1)) keep_replay_peak(r);
  // Publish now and then: a detected pass can be a single allocation long.
  replay::OwnedCounters::bump(t.counters.passes);
  if (t.counters.passes.load(std::memory_order_relaxed) % 64 == 0) flush_counters(t);
  if (__builtin_expect(t.irregular.count != 0, 0)) recheck_irregular_pass(t);
}

// Every request the arena did not serve: counted by reason; a detected plan notes what it did not
// know for the re-check. The caller then asks the fallback allocator.
__attribute__((noinline, cold)) void* replay_miss(ThreadState& t, replay::Fallback why,
                                                  uint64_t key, uint64_t size,
                                                  bool recheck = true) {
  stats().fallback(why);
  recheck_miss(t, why, key, size, recheck);
  return nullptr;
}

// The arena goes back now if none of its blocks is alive, else with the last one's free; the
// thread no longer owns it.
void retire_when_freed(ReplayState& r) {
  if (!r.arena || r.arena->live_blocks() == 0) return;  // retire_replay gives it back
  keep_replay_peak(r);
  r.arena->retire();
  r.arena = nullptr;
}

void free_slots(ReplayState& r) {
  replay::Slot* slots = r.slots;
  r.slots = nullptr;
  r.slot_count = 0;
  r.matcher.stop();
  fallback::free(slots);
  fallback::free(r.wanted);
  fallback::free(r.rows);
  r.wanted = r.rows = nullptr;
  r.size_free = r.replan_pending = r.resync_at_empty = false;
}

// A size-free plan's request larger than its slot: served by the fallback (counted as not
// planned, but not as a request the plan does not know: no re-detection), and the slot grows at
// the pass end (replan_size_free).
__attribute__((noinline, cold)) void* replay_exceeded(ThreadState& t, uint32_t index, uint64_t size,
                                                      uint64_t key) {
  ReplayState& r = t.replay;
  if (size > r.wanted[index]) r.wanted[index] = size;
  r.replan_pending = true;
  return replay_miss(t, replay::Fallback::kNotPlanned, key, size, /*recheck=*/false);
}

// The tables install_replay gives the thread, or the reason it gets none (said here).
bool make_replay(ThreadState& t, const plan_stage::PlannedPass& pass, replay::Slot** slots,
                 replay::Arena** arena) {
  Global& g = global();
  const uint64_t slab_bytes = pass.slab_bytes;
  if (slab_bytes > g.slabs.arena_bytes()) {
    log_line("memoplan: thread %u needs a %llu-byte slab, above slab_max", t.index,
             static_cast<unsigned long long>(slab_bytes));
    return false;
  }
  const size_t bytes = pass.slots.size() * sizeof(replay::Slot);
  *slots = static_cast<replay::Slot*>(fallback::malloc(bytes));
  if (!*slots) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: out of memory for its replay table", t.index);
    return false;
  }
  memcpy(*slots, pass.slots.data(), bytes);
  // An arena that cannot be mapped (the map count limit, overcommit refused) leaves this thread
  // unplanned: every request of it goes to the fallback, as without memoplan.
  replay::ArenaRegion::Failure failure;
  *arena = g.slabs.create(slab_bytes, &t, &failure);
  if (!*arena) {
    fallback::free(*slots);
    if (failure == replay::ArenaRegion::Failure::kNoArena) {
      log_line("memoplan: no slab left for thread %u (raise threads)", t.index);
    } else {
      log_line("memoplan: thread %u runs unplanned: cannot map its %llu-byte slab", t.index,
               static_cast<unsigned long long>(slab_bytes));
    }
    return false;
  }
  return true;
}

bool install(ThreadState& t, const plan_stage::PlannedPass& pass, const ReplayStart& start) {
  ReplayState& r = t.replay;
  const uint32_t count = static_cast<uint32_t>(pass.slots.size());
  if (count == 0) return false;
  // The pass's blocks of the old plan (its output) may still be alive: the old arena goes back
  // with the last of them.
  if (start.retire_live_arena) retire_when_freed(r);
  if (!retire_replay(t)) return false;  // the old arena must be empty first
  replay::Slot* slots = nullptr;
  replay::Arena* arena = nullptr;
  if (!make_replay(t, pass, &slots, &arena)) return false;
  r.slots = slots;
  r.slot_count = count;
  r.arena = arena;
  // A freed escaping block of a huge request's size gives its pages back (arena.h says why).
  if (pass.escaping_bytes) {
    arena->discard_when_freed(pass.slab_bytes - pass.escaping_bytes, kHugeRequest);
  }
  r.matcher.start_cyclic(slots, count, kLookahead, start.cursor);
  if (start.first_pass_begun) r.replayed_passes = 1;
  if (start.steady_from_start) r.replayed_passes = 2;  // in_steady_state's threshold
  if (start.wanted) {
    r.size_free = true;
    r.wanted = start.wanted;
    r.rows = start.rows;
    r.resync_at_empty = start.resync_at_empty;
  }
  recheck_plan_installed(t.recheck, count);
  enter_replay(t);
  const Global& g = global();
  if (g.options.verbose) {
    log_line(
        "memoplan: thread %u: replays a plan of %u allocations, slab %llu bytes (lower bound "
        "%llu; %llu for the escaping blocks' two places)",
        t.index, count, static_cast<unsigned long long>(pass.slab_bytes),
        static_cast<unsigned long long>(pass.plan.lower_bound_bytes),
        static_cast<unsigned long long>(pass.escaping_bytes));
  }
  stats().plans.fetch_add(1, std::memory_order_relaxed);
  stats().slab_bytes.fetch_add(pass.slab_bytes, std::memory_order_relaxed);
  stats().escaping_bytes.fetch_add(pass.escaping_bytes, std::memory_order_relaxed);
  stats().lower_bound_bytes.fetch_add(pass.plan.lower_bound_bytes, std::memory_order_relaxed);
  start_reaper();
  // The pages profiling kept for reuse (engine.cc) are of no use to this thread any more; another
  // thread still profiling maps fresh ones. Nor are the unwind tables its profiling read and has
  // not given back yet (callsite_cache.h): replay finds its paths in the call-site cache.
  global().tags.trim();
  give_back_unwind_tables(t.callsite);
  return true;
}

}  // namespace

bool install_replay(ThreadState& t, const plan_stage::PlannedPass& pass, ReplayStart start) {
  if (install(t, pass, start)) return true;
  fallback::free(start.wanted);
  fallback::free(start.rows);
  return false;
}

void* replay_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key) {
  ReplayState& r = t.replay;
  if (__builtin_expect(recheck_counts_request(t.recheck), 0)) {
    close_recheck_window(t);
    if (__builtin_expect(r.arena == nullptr, 0)) return nullptr;  // the plan was given up
  }
  const uint64_t cycles = r.matcher.cycles();
  replay::Fallback why = replay::Fallback::kNotPlanned;
  void* p;
  bool exceeded = false;
  uint32_t index = replay::Matcher::kNone;
  if (__builtin_expect(r.size_free, 0)) {
    if (r.resync_at_empty && r.matcher.cursor() != 0 && r.replayed_passes != 0) {
      r.arena->drain_remote_frees();
      if (r.arena->live_blocks() == 0) {  // a pass boundary, and the cursor is not at it
        r.matcher.set_cursor(0);
        detected_pass_completed(t);
      }
    }
    // Keyed by call site alone: a request larger than its slot is this plan's to grow, not one it
    // does not know.
    index = r.matcher.match(key);
    exceeded = index != replay::Matcher::kNone && size > r.slots[index].size;
    p = index == replay::Matcher::kNone || exceeded
            ? nullptr
            : replay::serve_slot(r.slots[index], *r.arena, size, alignment, &why);
  } else {
    p = replay::serve(r.matcher, r.slots, *r.arena, key, size, alignment, &why);
  }
  if (__builtin_expect(exceeded, 0)) replay_exceeded(t, index, size, key);
  if (__builtin_expect(r.matcher.cycles() != cycles, 0) && !t.explicit_passes) {
    detected_pass_completed(t);
  }
  if (__builtin_expect(exceeded, 0)) return nullptr;
  if (__builtin_expect(p == nullptr, 0)) return replay_miss(t, why, key, size);
  replay::OwnedCounters::bump(t.counters.planned_hits);
  if (steady(t)) {
    replay::OwnedCounters::bump(t.counters.steady_hits);
    recheck_steady_hit(t.recheck, size);
  }
  return p;
}

void replay_pass_begins(ReplayState& r) {
  r.matcher.set_cursor(0);
  ++r.replayed_passes;
}

void rewind_replay(ReplayState& r) { r.matcher.set_cursor(0); }

void keep_replay_peak(ReplayState& r) {
  const uint64_t arena_peak = r.arena->peak_live_bytes();
  if (arena_peak > r.peak_live_bytes.load(std::memory_order_relaxed)) {
    r.peak_live_bytes.store(arena_peak, std::memory_order_relaxed);
  }
}

uint64_t trim_replay(ReplayState& r) { return r.arena ? r.arena->discard_pages() : 0; }

bool retire_replay(ThreadState& t) {
  ReplayState& r = t.replay;
  if (r.arena) {
    keep_replay_peak(r);
    const int saved = errno;  // giving the arena back unmaps memory
    const bool released = r.arena->release_if_empty();
    errno = saved;
    if (!released) return false;
    fault::pause_at(fault::Point::kSlabReleased);  // the fault tests fork here
    r.arena = nullptr;
  }
  if (r.slots) {
    free_slots(r);
    run_unplanned(t);
  }
  return true;
}

void drop_replay(ThreadState& t) {
  retire_when_freed(t.replay);
  retire_replay(t);
}

void retire_replay_at_exit(ThreadState& t, bool after_fork) {
  ReplayState& r = t.replay;
  if (r.arena) {
    keep_replay_peak(r);
    // After a fork the region has retired every arena this thread still owned, going by the
    // arena table alone: its arena may be one it had given back (or one now another thread's).
    if (!after_fork) r.arena->retire();
    r.arena = nullptr;
  }
  if (r.slots) free_slots(r);
}

}  // namespace memoplan::shim
