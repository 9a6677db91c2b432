// Profiling: every tracked allocation gets its own tag slot, so its free (from any thread, through
// any interior pointer) finds its record with a shift. Costs two system calls per allocation, paid
// only in the passes being profiled.
#include <cstring>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "period.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

bool ensure_record_space(ThreadState& t) {
  if (!t.record_chunks) {
    t.record_chunks = static_cast<Record**>(fallback::calloc(kRecordChunks, sizeof(Record*)));
    if (!t.record_chunks) return false;
  }
  const uint64_t chunk = t.record_count / kRecordsPerChunk;
  if (chunk >= kRecordChunks) return false;
  if (!t.record_chunks[chunk]) {
    t.record_chunks[chunk] =
        static_cast<Record*>(fallback::calloc(kRecordsPerChunk, sizeof(Record)));
  }
  return t.record_chunks[chunk] != nullptr;
}

void give_up_profiling(ThreadState& t, const char* why) {
  t.phase = Phase::kDisabled;
  stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
  log_line("memoplan: thread %u runs unplanned: %s", t.index, why);
}

}  // namespace

void* profile_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key) {
  Global& g = global();
  if (size > g.tags.slot_bytes()) {
    stats().untracked_large.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (!ensure_record_space(t)) {
    if (t.record_count / kRecordsPerChunk < kRecordChunks) {
      stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
      give_up_profiling(t, "out of memory for its profile records");
    } else {
      give_up_profiling(t, "the profile outgrew its record space");
    }
    return nullptr;
  }
  uint32_t slot;
  if (!g.tags.acquire(slot)) return nullptr;  // 65,536 tracked blocks alive: this one is not
  if (fault::should_fail(fault::Site::kTagCommit) || !g.tags.commit(slot, size)) {
    // Untracked: the fallback serves it, and the plan will not know it (a not_planned fallback).
    g.tags.release(slot);
    stats().tag_commit_failures.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Record& r = t.record(t.record_count);
  r.key = key;
  r.size = size;
  r.align = alignment;
  r.begin = t.tick++;
  r.end.store(kLive, std::memory_order_relaxed);
  g.tag_owner[slot] = {&t, t.record_count};
  t.profiled_live.fetch_add(1, std::memory_order_relaxed);
  ++t.record_count;
  stats().profiled.fetch_add(1, std::memory_order_relaxed);
  profile_maybe_detect(t);
  return g.tags.slot_address(slot);
}

void profile_free(void* p) {
  Global& g = global();
  const uint32_t slot = g.tags.slot_of(p);
  const Global::SlotOwner owner = g.tag_owner[slot];
  Record& r = owner.thread->record(owner.record);
  ThreadState* self = thread_state();
  if (self == owner.thread) {
    r.end.store(self->tick++, std::memory_order_relaxed);
  } else {
    r.end.store(kForeign, std::memory_order_relaxed);
  }
  g.tags.decommit(slot, r.size);
  g.tags.release(slot);
  owner.thread->profiled_live.fetch_sub(1, std::memory_order_release);
}

size_t profile_usable_size(void* p) {
  Global& g = global();
  const Global::SlotOwner owner = g.tag_owner[g.tags.slot_of(p)];
  return owner.thread->record(owner.record).size;
}

void profile_maybe_detect(ThreadState& t) {
  Global& g = global();
  if (t.explicit_passes || !g.options.detect || t.record_count < t.next_detection) return;
  const uint64_t span = 3 * g.options.max_period;
  // Search often while the history is short, at most every 2,048 allocations once it is long.
  uint64_t interval = t.record_count / 4;
  interval = interval < 64 ? 64 : interval > 2048 ? 2048 : interval;
  t.next_detection = t.record_count + interval;
  if (t.record_count > 8 * g.options.max_period ||
      t.record_count + kRecordsPerChunk >= kRecordsPerChunk * kRecordChunks) {
    give_up_profiling(t,
                      "no repeating pass found (raise max_period, or mark passes with "
                      "memoplan_pass_begin/end)");
    return;
  }
  const uint64_t history = t.record_count - t.detect_first_record;
  if ((t.required_key || t.redetect_relaxed) && history > t.redetect_budget) {
    // The request the old plan missed never recurred inside a repeating pass (a one-off): search
    // without it once more, then stop profiling rather than profile (and fault) forever.
    if (!t.redetect_relaxed) {
      t.required_key = 0;
      t.redetect_relaxed = true;
      t.detect_first_record = t.record_count;
    } else {
      give_up_profiling(t, "re-detection found no repeating pass");
    }
    return;
  }
  // Copy the newest records into columns for the search.
  const uint64_t n = history < span ? history : span;
  const uint64_t first = t.record_count - n;
  uint64_t* columns = static_cast<uint64_t*>(fallback::malloc(5 * n * sizeof(uint64_t)));
  if (!columns) {  // searched again at the next interval
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t *keys = columns, *begins = columns + n, *ends = columns + 2 * n;
  for (uint64_t i = 0; i < n; ++i) {
    Record& r = t.record(first + i);
    keys[i] = r.key;
    begins[i] = r.begin;
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    ends[i] = end == kForeign ? kLive : end;
  }
  const PeriodResult found =
      find_period(keys, begins, ends, n, g.options.max_period, t.required_key, columns + 3 * n);
  fallback::free(columns);
  if (!found.found) return;
  // Re-detection: the old slab goes once its last block is freed; until then, keep profiling.
  if (!retire_replay(t)) return;
  t.phase = Phase::kProfiling;
  stats().passes.fetch_add(3, std::memory_order_relaxed);  // the three passes the search saw
  const uint64_t start = first + found.start;
  const uint64_t cut_tick = t.record(start + found.period).begin;
  const uint32_t cursor = static_cast<uint32_t>((t.record_count - start) % found.period);
  if (!finish_profile(t, start, found.period, cut_tick, cursor)) {
    give_up_profiling(t, "the detected pass could not be planned");
  }
}

}  // namespace memoplan::shim
