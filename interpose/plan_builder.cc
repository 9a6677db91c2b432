// Turns a profiled pass into a trace, the trace into a plan, and a plan into a thread's replay
// table and slab. Runs under the reentry guard, so the planner's (and the trace writer's) own
// allocations go to the fallback allocator.
#include <cstring>
#include <new>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/record/trace_of.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// How far ahead the matcher looks when the program skipped planned allocations.
constexpr uint32_t kLookahead = 8;

}  // namespace

bool install_replay(ThreadState& t, const plan_stage::PlannedPass& pass, ReplayStart start) {
  Global& g = global();
  const uint32_t count = static_cast<uint32_t>(pass.slots.size());
  if (count == 0) return false;
  if (start.retire_live_arena && t.arena && t.arena->live_blocks() != 0) {
    // The pass's blocks of the old plan (its output) are still alive: the old arena goes back
    // with the last of them.
    if (t.arena->peak_live_bytes() > t.peak_live_bytes.load(std::memory_order_relaxed)) {
      t.peak_live_bytes.store(t.arena->peak_live_bytes(), std::memory_order_relaxed);
    }
    t.arena->retire();
    t.arena = nullptr;
  }
  if (!retire_replay(t)) return false;  // the old arena must be empty first
  const uint64_t slab_bytes = pass.slab_bytes;
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
  memcpy(slots, pass.slots.data(), count * sizeof(replay::Slot));
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
  t.matcher.start_cyclic(slots, count, kLookahead, start.cursor);
  const uint32_t redetections = t.recheck.redetections;  // a thread's, over all its plans
  t.recheck = ReplayRecheck{};
  t.recheck.redetections = redetections;
  t.misses_at_last_cycle = 0;
  t.recheck.window = count < (1u << 28) ? (count * 4 > 256 ? count * 4 : 256) : (1u << 30);
  t.phase = Phase::kReplaying;
  if (g.options.verbose) {
    log_line(
        "memoplan: thread %u: replays a plan of %u allocations, slab %llu bytes (lower bound "
        "%llu; %llu for the escaping blocks' two places)",
        t.index, count, static_cast<unsigned long long>(slab_bytes),
        static_cast<unsigned long long>(pass.plan.lower_bound_bytes),
        static_cast<unsigned long long>(pass.escaping_bytes));
  }
  stats().plans.fetch_add(1, std::memory_order_relaxed);
  stats().slab_bytes.fetch_add(slab_bytes, std::memory_order_relaxed);
  stats().escaping_bytes.fetch_add(pass.escaping_bytes, std::memory_order_relaxed);
  stats().lower_bound_bytes.fetch_add(pass.plan.lower_bound_bytes, std::memory_order_relaxed);
  start_reaper();
  // The pages profiling kept for reuse (engine.cc) are of no use to this thread any more; another
  // thread still profiling maps fresh ones.
  g.tags.trim();
  return true;
}

namespace {

// What a size-free plan keeps to be planned again (ThreadState::wanted and rows): the largest
// request per slot (none yet) and each row's begin, end, alignment and escaping. False (nothing
// allocated) when out of memory.
bool size_free_arrays(const Trace& trace, uint64_t** wanted, uint64_t** rows) {
  const size_t count = trace.allocations.size();
  *wanted = static_cast<uint64_t*>(fallback::malloc(count * sizeof(uint64_t)));
  *rows = static_cast<uint64_t*>(fallback::malloc(4 * count * sizeof(uint64_t)));
  if (!*wanted || !*rows) {
    fallback::free(*wanted);
    fallback::free(*rows);
    *wanted = *rows = nullptr;
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    const Allocation& a = trace.allocations[i];
    (*wanted)[i] = 0;
    (*rows)[4 * i] = a.begin;
    (*rows)[4 * i + 1] = a.end;
    (*rows)[4 * i + 2] = a.align;
    (*rows)[4 * i + 3] = a.escapes;
  }
  return true;
}

// Whether, among the pass's planned (not escaping) allocations, only the first is made with none
// of the others alive: then, replaying, an empty arena means the pass starts over.
bool only_first_starts_empty(const Trace& trace) {
  const auto& rows = trace.allocations;
  if (rows.size() > 4096) return false;  // quadratic: long passes go without
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].escapes) continue;
    bool alive = false;
    for (size_t j = 0; j < i && !alive; ++j) {
      alive = !rows[j].escapes && effective_end(rows[j]) > rows[i].begin;
    }
    if (!alive) return false;
  }
  return !rows.empty();
}

bool plan_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                  uint32_t cursor, const uint64_t* records, const uint64_t* sizes) {
  Trace trace = records ? record::trace_of_indices(t.profile->log, records, count, cut_tick)
                        : record::trace_of(t.profile->log, first, count, cut_tick);
  if (sizes) {
    for (uint64_t i = 0; i < count; ++i) trace.allocations[i].size = sizes[i];
  }
  if (global().options.mode == Mode::kProfile) {
    // Measure only: the pass goes to a file and the thread runs unplanned from here on.
    write_pass_trace(t, trace);
    t.phase = Phase::kDisabled;
    return true;
  }
  // Keyed by call site and size, the escaping blocks placed after the slab; size-free: keyed by
  // the call site alone (the record's site), the escaping blocks left to the fallback (the
  // arena empty means a pass boundary: ThreadState::resync_at_empty).
  plan_stage::CompileOptions options;
  if (sizes) {
    options.row_keys.resize(count);
    for (uint64_t i = 0; i < count; ++i) options.row_keys[i] = t.profile->log.at(records[i]).site;
  } else {
    options.escaping_limit = global().slabs.arena_bytes();
  }
  Result<plan_stage::PlannedPass> pass = plan_stage::compile(trace, options);
  if (!pass) {
    log_line("memoplan: planning failed: %s", pass.error().c_str());
    return false;
  }
  uint64_t *wanted = nullptr, *rows = nullptr;
  if (sizes && !size_free_arrays(trace, &wanted, &rows)) return false;
  const bool ok = install_replay(t, *pass, {cursor});
  if (ok && sizes) t.resync_at_empty = only_first_starts_empty(trace);
  if (ok && sizes) {
    stats().size_free_plans.fetch_add(1, std::memory_order_relaxed);
    t.size_free = true;
    t.wanted = wanted;
    t.rows = rows;
    t.lower_bound_bytes = pass->plan.lower_bound_bytes;
  } else {
    fallback::free(wanted);
    fallback::free(rows);
  }
  return ok;
}

}  // namespace

bool finish_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                    uint32_t cursor, const uint64_t* records, const uint64_t* sizes) {
  if (count == 0 || count > (1u << 31) || (sizes && !records)) return false;
  // This runs inside a malloc call: an exception must not escape into the program's C frames.
  // The planner's containers throw std::bad_alloc when the allocator behind us is exhausted.
  try {
    return plan_profile(t, first, count, cut_tick, cursor, records, sizes);
  } catch (const std::bad_alloc&) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u: out of memory while planning its pass", t.index);
  } catch (...) {
    log_line("memoplan: thread %u: planning its pass failed", t.index);
  }
  return false;
}

namespace {

bool replan(ThreadState& t) {
  const uint32_t count = t.slot_count;
  Trace trace;
  trace.allocations.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    Allocation& a = trace.allocations[i];
    a.id = i;
    a.size = t.wanted[i] > t.slots[i].size ? t.wanted[i] : t.slots[i].size;
    a.begin = t.rows[4 * i];
    a.end = t.rows[4 * i + 1];
    a.align = t.rows[4 * i + 2];
    a.escapes = t.rows[4 * i + 3] != 0;
  }
  plan_stage::CompileOptions options;  // size-free: no escaping places (see plan_profile)
  options.row_keys.resize(count);
  for (uint32_t i = 0; i < count; ++i) options.row_keys[i] = t.slots[i].key;
  Result<plan_stage::PlannedPass> pass = plan_stage::compile(trace, options);
  if (!pass) return false;
  uint64_t *wanted = nullptr, *rows = nullptr;
  if (!size_free_arrays(trace, &wanted, &rows)) return false;
  const uint32_t cursor = t.matcher.cursor();
  const uint64_t replayed = t.replayed_passes;
  const bool resync = t.resync_at_empty;
  const bool ok = install_replay(t, *pass, {cursor, /*retire_live_arena=*/true});
  t.resync_at_empty = resync;
  if (!ok) {
    fallback::free(wanted);
    fallback::free(rows);
    return false;
  }
  t.replayed_passes = replayed;  // the steady state goes on
  t.size_free = true;
  t.wanted = wanted;
  t.rows = rows;
  t.lower_bound_bytes = pass->plan.lower_bound_bytes;
  stats().size_free_replans.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

void replan_size_free(ThreadState& t) {
  t.replan_pending = false;
  ReentryGuard guard;  // the planner allocates: from the fallback
  try {
    if (replan(t)) return;
  } catch (...) {
  }
  // Planning failed (out of memory): the plan stays as it is; larger requests keep falling back.
  stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace memoplan::shim
