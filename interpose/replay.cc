// Replay: the thread's planned slots in pass order, matched by key (call site and size) at a
// cursor, checked against the live ranges of the slab before they are handed out.
#include <sys/mman.h>

#include <cerrno>

#include "engine.h"
#include "fallback.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// How far ahead the matcher looks when the program skipped planned allocations.
constexpr uint32_t kLookahead = 8;

// Index of the slot that serves `key`, or slot_count when none near the cursor does.
inline uint32_t match(const ThreadState& t, uint64_t key) {
  uint32_t i = t.cursor;
  for (uint32_t step = 0; step <= kLookahead; ++step) {
    if (t.slots[i].key == key) return i;
    if (++i == t.slot_count) i = 0;
  }
  return t.slot_count;
}

// Steady state: after the thread's first replayed pass. Marked passes count at pass begin; a
// detected pass counts when its last slot is used, so its first replayed pass may be partial (the
// plan starts mid-pass) or a thread's one-off pass that merely matched (mode:replay's seeking):
// two completed cycles show that the pass repeats.
inline bool steady(const ThreadState& t) {
  return t.explicit_passes ? t.replayed_passes > 1 : t.replayed_passes >= 2;
}

inline void count_fallback(ThreadState& t, FallbackReason reason) {
  stats().fallback(reason);
  if (steady(t)) {
    if (reason != FallbackReason::kEscaping) {
      stats().steady_fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// A detected plan is re-checked: when requests it does not know about keep coming (in each of
// kMissingWindows consecutive windows of a few passes), it did not describe the pass — detection
// locked onto a repeated layer, or the program changed — and the thread detects its pass again.
constexpr uint32_t kMissingWindows = 3;
constexpr uint32_t kMaxRedetections = 3;

void close_recheck_window(ThreadState& t) {
  ReplayRecheck& r = t.recheck;
  r.requests = 0;
  r.missing_windows = r.misses ? r.missing_windows + 1 : 0;
  r.misses = 0;
  if (r.missing_windows < kMissingWindows || t.explicit_passes) return;
  r.missing_windows = 0;
  if (r.redetections >= kMaxRedetections || !global().options.detect) return;
  ++r.redetections;
  stats().redetections.fetch_add(1, std::memory_order_relaxed);
  // Profile afresh; the old slab stays until its last block is freed (see retire_replay).
  t.phase = Phase::kProfiling;
  t.detect_first_record = t.record_count;
  t.next_detection = t.record_count + 64;
  t.required_key = r.unexplained_key;
  t.redetect_budget = t.slot_count * 16 > 4096 ? t.slot_count * 16 : 4096;
  t.redetect_relaxed = false;
}

}  // namespace

void drain_remote_frees(ThreadState& t) {
  void* head = t.remote_frees.exchange(nullptr, std::memory_order_acquire);
  while (head) {
    void* next = *static_cast<void**>(head);
    const uint64_t offset = static_cast<uint64_t>(static_cast<char*>(head) - t.slab);
    t.live_bytes -= t.live.erase(offset);
    head = next;
  }
}

void release_replay(ThreadState& t) {
  Global& g = global();
  // Forget everything first, then give it back: a fork in the middle leaves the child a state
  // that owns nothing rather than one that would give the same memory back twice.
  PlannedSlot* slots = t.slots;
  runtime::ByteRange* live_storage = t.live_storage;
  std::atomic<uint64_t>* block_sizes = t.block_sizes;
  t.slots = nullptr;
  t.live_storage = nullptr;
  t.block_sizes = nullptr;
  t.slot_count = 0;
  t.phase = Phase::kDisabled;
  g.slab_owner[t.slab_index] = nullptr;
  munmap(block_sizes, t.block_sizes_bytes);
  g.slabs.decommit(t.slab_index, t.slab_bytes);
  g.slabs.release(t.slab_index);
  fallback::free(slots);
  fallback::free(live_storage);
}

bool retire_replay(ThreadState& t) {
  if (!t.slots) return true;
  drain_remote_frees(t);
  if (t.live.count() != 0) return false;
  release_replay(t);
  return true;
}

void* replay_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key) {
  if (t.remote_frees.load(std::memory_order_relaxed)) drain_remote_frees(t);
  if (__builtin_expect(++t.recheck.requests == t.recheck.window, 0)) close_recheck_window(t);
  const uint32_t index = match(t, key);
  if (index == t.slot_count) {
    count_fallback(t, FallbackReason::kNotPlanned);
    if (!t.explicit_passes) {
      ++t.recheck.misses;
      t.recheck.unexplained_key = key;
    }
    return nullptr;
  }
  if (index + 1 == t.slot_count) {
    t.cursor = 0;
    if (!t.explicit_passes) {  // a detected pass ends with its last planned allocation
      ++t.replayed_passes;
      // Publish now and then: a detected pass can be a single allocation long.
      t.counters.passes.bump();
      if (t.counters.passes.get() % 64 == 0) flush_counters(t);
    }
  } else {
    t.cursor = index + 1;
  }
  const PlannedSlot& slot = t.slots[index];
  if (!slot.planned) {
    count_fallback(t, FallbackReason::kEscaping);
    return nullptr;
  }
  if (slot.offset & (alignment - 1)) {
    count_fallback(t, FallbackReason::kAlignment);
    return nullptr;
  }
  const uint64_t lo = slot.offset, hi = slot.offset + size;
  if (t.live.overlaps(lo, hi)) {
    count_fallback(t, FallbackReason::kOverlap);
    return nullptr;
  }
  if (!t.live.insert(lo, hi)) {
    count_fallback(t, FallbackReason::kGuardFull);
    return nullptr;
  }
  t.block_sizes[lo >> 6].store(size, std::memory_order_relaxed);
  t.live_bytes += size;
  if (t.live_bytes > t.peak_live_bytes.get()) {
    t.peak_live_bytes.value.store(t.live_bytes, std::memory_order_relaxed);
  }
  t.counters.planned_hits.bump();
  if (steady(t)) t.counters.steady_hits.bump();
  return t.slab + lo;
}

void slab_free(void* p) {
  Global& g = global();
  ThreadState* owner = g.slab_owner[g.slabs.slot_of(p)];
  if (owner == thread_state()) {
    owner->live_bytes -=
        owner->live.erase(static_cast<uint64_t>(static_cast<char*>(p) - owner->slab));
    return;
  }
  // Another thread's slab: hand the block back through its lock-free stack; the owner removes it
  // from its live ranges on its next allocation. Until then the memory simply stays unused.
  stats().remote_frees.fetch_add(1, std::memory_order_relaxed);
  void* head = owner->remote_frees.load(std::memory_order_relaxed);
  do {
    *static_cast<void**>(p) = head;
  } while (!owner->remote_frees.compare_exchange_weak(head, p, std::memory_order_seq_cst,
                                                      std::memory_order_relaxed));
  // The owner has exited: nobody else will drain. Sequentially consistent with the owner's exit
  // (it sets `exited` before its last drain), so either it saw this block or we see `exited`.
  if (owner->exited.load(std::memory_order_seq_cst)) {
    ReentryGuard guard;
    const int saved = errno;  // releasing the slab unmaps memory
    while (owner->exit_lock.test_and_set(std::memory_order_acquire)) {
    }
    if (owner->slots && retire_replay(*owner)) {
      stats().late_slab_releases.fetch_add(1, std::memory_order_relaxed);
    }
    owner->exit_lock.clear(std::memory_order_release);
    errno = saved;
  }
}

size_t slab_usable_size(void* p) {
  Global& g = global();
  const ThreadState* owner = g.slab_owner[g.slabs.slot_of(p)];
  const uint64_t offset = static_cast<uint64_t>(static_cast<char*>(p) - owner->slab);
  return owner->block_sizes[offset >> 6].load(std::memory_order_relaxed);
}

}  // namespace memoplan::shim
