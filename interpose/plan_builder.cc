// Turns a profiled pass into a trace, the trace into a plan, and a plan into a thread's replay
// table and slab. Runs under the reentry guard, so the planner's (and the trace writer's) own
// allocations go to the fallback allocator.
#include <cstring>
#include <new>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "memoplan/planner/planner.h"
#include "memoplan/record/trace_of.h"
#include "memoplan/replay/escaping.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// How far ahead the matcher looks when the program skipped planned allocations.
constexpr uint32_t kLookahead = 8;

}  // namespace

bool install_replay(ThreadState& t, const replay::Slot* planned, uint32_t count,
                    uint64_t slab_bytes, uint64_t lower_bound_bytes, uint32_t cursor) {
  Global& g = global();
  if (count == 0 || !retire_replay(t)) return false;  // the old arena must be empty first
  if (slab_bytes > g.slabs.arena_bytes()) {
    log_line("memoplan: thread %u needs a %llu-byte slab, above slab_max", t.index,
             static_cast<unsigned long long>(slab_bytes));
    return false;
  }
  auto* slots = static_cast<replay::Slot*>(fallback::malloc(count * sizeof(replay::Slot)));
  if (!slots) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: out of memory for its replay table", t.index);
    return false;
  }
  memcpy(slots, planned, count * sizeof(replay::Slot));
  const uint64_t planned_bytes = slab_bytes;
  slab_bytes = replay::place_escaping(slots, count, slab_bytes, g.slabs.arena_bytes());
  // An arena that cannot be mapped (the map count limit, overcommit refused) leaves this thread
  // unplanned: every request of it goes to the fallback, as without memoplan.
  replay::ArenaRegion::Failure failure;
  replay::Arena* arena = g.slabs.create(slab_bytes, &t, &failure);
  if (!arena) {
    fallback::free(slots);
    if (failure == replay::ArenaRegion::Failure::kNoArena) {
      log_line("memoplan: no slab left for thread %u (raise threads)", t.index);
    } else {
      log_line("memoplan: thread %u runs unplanned: cannot map its %llu-byte slab", t.index,
               static_cast<unsigned long long>(slab_bytes));
    }
    return false;
  }
  t.slots = slots;
  t.slot_count = count;
  t.arena = arena;
  t.matcher.start_cyclic(slots, count, kLookahead, cursor);
  const uint32_t redetections = t.recheck.redetections;  // a thread's, over all its plans
  t.recheck = ReplayRecheck{};
  t.recheck.redetections = redetections;
  t.recheck.window = count < (1u << 28) ? (count * 4 > 256 ? count * 4 : 256) : (1u << 30);
  t.phase = Phase::kReplaying;
  if (g.options.verbose) {
    log_line(
        "memoplan: thread %u: replays a plan of %u allocations, slab %llu bytes (lower bound "
        "%llu; %llu for the escaping blocks' two places)",
        t.index, count, static_cast<unsigned long long>(slab_bytes),
        static_cast<unsigned long long>(lower_bound_bytes),
        static_cast<unsigned long long>(slab_bytes - planned_bytes));
  }
  stats().plans.fetch_add(1, std::memory_order_relaxed);
  stats().slab_bytes.fetch_add(slab_bytes, std::memory_order_relaxed);
  stats().escaping_bytes.fetch_add(slab_bytes - planned_bytes, std::memory_order_relaxed);
  stats().lower_bound_bytes.fetch_add(lower_bound_bytes, std::memory_order_relaxed);
  start_reaper();
  // The pages profiling kept for reuse (engine.cc) are of no use to this thread any more; another
  // thread still profiling maps fresh ones.
  g.tags.trim();
  return true;
}

namespace {

bool plan_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                  uint32_t cursor, const uint64_t* records) {
  Trace trace = records ? record::trace_of_indices(t.profile->log, records, count, cut_tick)
                        : record::trace_of(t.profile->log, first, count, cut_tick);
  if (global().options.mode == Mode::kProfile) {
    // Measure only: the pass goes to a file and the thread runs unplanned from here on.
    write_pass_trace(t, trace);
    t.phase = Phase::kDisabled;
    return true;
  }
  Result<Plan> plan = plan_trace(trace);
  if (!plan) {
    log_line("memoplan: planning failed: %s", plan.error().c_str());
    return false;
  }
  auto* slots = static_cast<replay::Slot*>(fallback::malloc(count * sizeof(replay::Slot)));
  if (!slots) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  for (uint64_t i = 0; i < count; ++i) {
    const Allocation& a = trace.allocations[i];
    slots[i] = {a.provenance.callsite, a.size, plan->offsets[i], !a.escapes};
  }
  const bool ok = install_replay(t, slots, static_cast<uint32_t>(count), plan->slab_bytes,
                                 plan->lower_bound_bytes, cursor);
  fallback::free(slots);
  return ok;
}

}  // namespace

bool finish_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                    uint32_t cursor, const uint64_t* records) {
  if (count == 0 || count > (1u << 31)) return false;
  // This runs inside a malloc call: an exception must not escape into the program's C frames.
  // The planner's containers throw std::bad_alloc when the allocator behind us is exhausted.
  try {
    return plan_profile(t, first, count, cut_tick, cursor, records);
  } catch (const std::bad_alloc&) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u: out of memory while planning its pass", t.index);
  } catch (...) {
    log_line("memoplan: thread %u: planning its pass failed", t.index);
  }
  return false;
}

}  // namespace memoplan::shim
