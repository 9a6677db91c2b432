// Turns a profiled pass into a trace and the trace into a plan (plan_stage::compile), which
// install_replay (replay.cc) gives the thread; plans a size-free pass again when its requests
// outgrew their slots. Runs under the reentry guard, so the planner's (and the trace writer's) own
// allocations go to the fallback allocator.
#include <cstring>
#include <new>

#include "engine.h"
#include "fallback.h"
#include "lifecycle.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/record/trace_of.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// What a size-free plan keeps to be planned again (ReplayState::wanted and rows): the largest
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
  const record::RecordLog& log = t.profiling.profile->log;
  Trace trace = records ? record::trace_of_indices(log, records, count, cut_tick)
                        : record::trace_of(log, first, count, cut_tick);
  if (sizes) {
    for (uint64_t i = 0; i < count; ++i) trace.allocations[i].size = sizes[i];
  }
  if (global().options.mode == Mode::kProfile) {
    // Measure only: the pass goes to a file and the thread runs unplanned from here on.
    write_pass_trace(t, trace);
    run_unplanned(t);
    return true;
  }
  // Keyed by call site and size, the escaping blocks placed after the slab; size-free: keyed by
  // the call site alone (the record's site), the escaping blocks left to the fallback (the
  // arena empty means a pass boundary: ReplayState::resync_at_empty).
  plan_stage::CompileOptions options;
  if (sizes) {
    options.row_keys.resize(count);
    for (uint64_t i = 0; i < count; ++i) options.row_keys[i] = log.at(records[i]).site;
  } else {
    options.escaping_limit = global().slabs.arena_bytes();
  }
  Result<plan_stage::PlannedPass> pass = plan_stage::compile(trace, options);
  if (!pass) {
    log_line("memoplan: planning failed: %s", pass.error().c_str());
    return false;
  }
  ReplayStart start;
  start.cursor = cursor;
  if (sizes) {
    if (!size_free_arrays(trace, &start.wanted, &start.rows)) return false;
    start.resync_at_empty = only_first_starts_empty(trace);
  }
  const bool ok = install_replay(t, *pass, start);
  if (ok && sizes) stats().size_free_plans.fetch_add(1, std::memory_order_relaxed);
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
  const ReplayState& r = t.replay;
  const uint32_t count = r.slot_count;
  Trace trace;
  trace.allocations.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    Allocation& a = trace.allocations[i];
    a.id = i;
    a.size = r.wanted[i] > r.slots[i].size ? r.wanted[i] : r.slots[i].size;
    a.begin = r.rows[4 * i];
    a.end = r.rows[4 * i + 1];
    a.align = r.rows[4 * i + 2];
    a.escapes = r.rows[4 * i + 3] != 0;
  }
  plan_stage::CompileOptions options;  // size-free: no escaping places (see plan_profile)
  options.row_keys.resize(count);
  for (uint32_t i = 0; i < count; ++i) options.row_keys[i] = r.slots[i].key;
  Result<plan_stage::PlannedPass> pass = plan_stage::compile(trace, options);
  if (!pass) return false;
  // The thread goes on where it is in the pass, in steady state (install_replay keeps the count
  // of replayed passes).
  ReplayStart start;
  start.cursor = r.matcher.cursor();
  start.retire_live_arena = true;
  start.resync_at_empty = r.resync_at_empty;
  if (!size_free_arrays(trace, &start.wanted, &start.rows)) return false;
  if (!install_replay(t, *pass, start)) return false;
  stats().size_free_replans.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

void replan_size_free(ThreadState& t) {
  ReentryGuard guard;  // the planner allocates: from the fallback
  try {
    if (replan(t)) return;
  } catch (...) {
  }
  // Planning failed (out of memory): the plan stays as it is; larger requests keep falling back.
  stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace memoplan::shim
