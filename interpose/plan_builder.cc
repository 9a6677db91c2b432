// Turns a profiled pass into a trace, the trace into a plan, and a plan into a thread's replay
// table and slab. Runs under the reentry guard, so the planner's (and the trace writer's) own
// allocations go to the fallback allocator.
#include <sys/mman.h>

#include <cstring>
#include <new>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "memoplan/planner/planner.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

constexpr uint32_t kLiveRangeCapacity = 1 << 14;

}  // namespace

Trace profiled_trace(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick) {
  Trace trace;
  trace.allocations.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const Record& r = t.record(first + i);
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    Allocation& a = trace.allocations[i];
    a.id = i;
    a.size = r.size;
    a.begin = r.begin;
    // Blocks alive past the pass end (or freed elsewhere) are never planned: in replay they would
    // still be alive when the next pass wants their memory.
    a.escapes = end == kLive || end == kForeign || end > cut_tick;
    a.end = a.escapes ? cut_tick : end;
    // Offsets are multiples of the trace's 64-byte default; stricter requests say so.
    a.align = r.align > trace.default_align ? r.align : 0;
    a.provenance.callsite = r.key;
    a.provenance.thread = t.index;
  }
  return trace;
}

bool install_replay(ThreadState& t, const PlannedSlot* planned, uint32_t count, uint64_t slab_bytes,
                    uint64_t lower_bound_bytes, uint32_t cursor) {
  Global& g = global();
  if (count == 0 || !retire_replay(t)) return false;  // the old slab must be empty first
  uint32_t slab_slot = 0;
  if (slab_bytes > g.slabs.slot_bytes()) {
    log_line("memoplan: thread %u needs a %llu-byte slab, above slab_max", t.index,
             static_cast<unsigned long long>(slab_bytes));
    return false;
  }
  if (!g.slabs.acquire(slab_slot)) {
    log_line("memoplan: no slab left for thread %u (raise threads)", t.index);
    return false;
  }
  // A slab that cannot be mapped (the map count limit, overcommit refused) leaves this thread
  // unplanned: every request of it goes to the fallback, as without memoplan.
  if (fault::should_fail(fault::Site::kSlabCommit) ||
      !g.slabs.commit(slab_slot, slab_bytes ? slab_bytes : 1)) {
    g.slabs.decommit(slab_slot, slab_bytes);  // a partial mapping (or none) back to PROT_NONE
    g.slabs.release(slab_slot);
    stats().slab_map_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: cannot map its %llu-byte slab", t.index,
             static_cast<unsigned long long>(slab_bytes));
    return false;
  }
  const size_t sizes_bytes = ((slab_bytes / 64 + 1) * sizeof(uint64_t) + 4095) & ~size_t{4095};
  void* sizes = fault::should_fail(fault::Site::kSlabCommit)
                    ? MAP_FAILED
                    : mmap(nullptr, sizes_bytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (sizes == MAP_FAILED) {
    g.slabs.decommit(slab_slot, slab_bytes);
    g.slabs.release(slab_slot);
    stats().slab_map_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: cannot map its slab's size table", t.index);
    return false;
  }
  auto* slots = static_cast<PlannedSlot*>(fallback::malloc(count * sizeof(PlannedSlot)));
  auto* live = static_cast<runtime::ByteRange*>(
      fallback::malloc(kLiveRangeCapacity * sizeof(runtime::ByteRange)));
  if (!slots || !live) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: out of memory for its replay table", t.index);
    fallback::free(slots);
    fallback::free(live);
    munmap(sizes, sizes_bytes);
    g.slabs.decommit(slab_slot, slab_bytes);
    g.slabs.release(slab_slot);
    return false;
  }
  memcpy(slots, planned, count * sizeof(PlannedSlot));
  t.slots = slots;
  t.slot_count = count;
  t.cursor = cursor % t.slot_count;
  t.slab = g.slabs.slot_address(slab_slot);
  t.slab_bytes = slab_bytes;
  t.slab_index = slab_slot;
  t.live_storage = live;
  t.block_sizes = static_cast<std::atomic<uint64_t>*>(sizes);
  t.block_sizes_bytes = sizes_bytes;
  t.live.init(live, kLiveRangeCapacity);
  t.recheck.window = count < (1u << 28) ? (count * 4 > 256 ? count * 4 : 256) : (1u << 30);
  t.recheck.requests = t.recheck.misses = t.recheck.missing_windows = 0;
  g.slab_owner[slab_slot] = &t;
  t.phase = Phase::kReplaying;
  stats().plans.fetch_add(1, std::memory_order_relaxed);
  stats().slab_bytes.fetch_add(slab_bytes, std::memory_order_relaxed);
  stats().lower_bound_bytes.fetch_add(lower_bound_bytes, std::memory_order_relaxed);
  return true;
}

namespace {

bool plan_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                  uint32_t cursor) {
  Trace trace = profiled_trace(t, first, count, cut_tick);
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
  auto* slots = static_cast<PlannedSlot*>(fallback::malloc(count * sizeof(PlannedSlot)));
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
                    uint32_t cursor) {
  if (count == 0 || count > (1u << 31)) return false;
  // This runs inside a malloc call: an exception must not escape into the program's C frames.
  // The planner's containers throw std::bad_alloc when the allocator behind us is exhausted.
  try {
    return plan_profile(t, first, count, cut_tick, cursor);
  } catch (const std::bad_alloc&) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u: out of memory while planning its pass", t.index);
  } catch (...) {
    log_line("memoplan: thread %u: planning its pass failed", t.index);
  }
  return false;
}

}  // namespace memoplan::shim
