// What recording and replay count, for both ways in: one list of counters (MEMOPLAN_COUNTERS),
// from which the plain snapshot (Counters), the process-wide atomics (SharedCounters) and the
// per-thread owner-written cells (OwnedCounters) are all made, so sums, differences and copies are
// written once. Each way in fills the counters that apply to it and leaves the rest at 0.
#pragma once

#include <atomic>
#include <cstdint>

namespace memoplan::replay {

// Why a request that reached the matcher was not served from the arena.
enum class Fallback : int {
  kNotPlanned,  // no slot near the cursor matches (a new or unexpected allocation)
  kEscaping,    // the matching slot outlived the profiled pass, so it is never planned
  kOverlap,     // the slot's memory is still in use (the program deviated): the guard said no
  kAlignment,   // the request wants an alignment the planned offset does not have
  kGuardFull,   // too many live arena blocks to track
  kCount,
};
inline constexpr int kFallbackKinds = static_cast<int>(Fallback::kCount);
const char* to_string(Fallback reason);

// X(name): every counter, in the order the statistics print them.
#define MEMOPLAN_COUNTERS(X)                                                                      \
  X(passes)           /* pass boundaries seen (explicit, detected or graph) */                    \
  X(planned_passes)   /* passes that replayed a plan (extension) */                               \
  X(profiled_passes)  /* passes recorded to make a plan (extension) */                            \
  X(unplanned_passes) /* passes run without a plan (extension) */                                 \
  X(plans)            /* plans made */                                                            \
  X(plan_failures)    /* profiles that did not give a usable plan */                              \
  X(redetections)     /* detected plans found wrong and detected again (shim) */                  \
  X(profiled)         /* allocations recorded while profiling (shim) */                           \
  X(untracked_large)  /* too large for a tag slot while profiling (shim) */                       \
  X(untracked_budget) /* not tagged: the live tag budget (vm.max_map_count) was reached (shim) */ \
  X(planned_hits)     /* requests served from an arena */                                         \
  X(steady_hits)      /* ... of them in steady-state passes (shim) */                             \
  X(steady_fallbacks) /* fallbacks other than escaping in steady-state passes (shim) */           \
  X(steady_escaping)  /* escaping fallbacks in steady-state passes (shim) */                      \
  X(requests)         /* requests of min_size bytes or more the program made (shim) */            \
  X(unplanned_requests)    /* ... of them on threads that plan nothing (shim) */                  \
  X(retracted_steady)      /* steady-state requests of plans later re-detected (shim) */          \
  X(retracted_steady_hits) /* ... of them served from those plans' slabs (shim) */                \
  X(steady_between)        /* steady-state fallbacks of irregular work between passes (shim) */   \
  X(retracted_between)     /* ... of them under plans later re-detected (shim) */                 \
  X(slabs)                 /* arenas made */                                                      \
  X(slab_bytes)            /* their bytes */                                                      \
  X(escaping_bytes)        /* ... of them for escaping blocks' two places (shim) */               \
  X(lower_bound_bytes)     /* the plans' lower bounds, summed like slab_bytes */                  \
  X(remote_frees)          /* arena blocks freed by another thread */                             \
  X(parked_slab_reuses)    /* arenas made from one given back and kept mapped (Config::parked) */ \
  X(moved_by_realloc)      /* arena blocks realloc moved to the fallback (shim) */                \
  X(outside_passes)        /* requests between marked passes (shim) */                            \
  X(passed_on)             /* requests of a pass served by the allocator behind (extension) */    \
  X(exact_blocks)  /* warm-up tensors given blocks whose pages go back at free (extension) */     \
  X(out_of_memory) /* requests answered NULL: the fallback failed (shim) */                       \
  X(bookkeeping_failures)   /* the runtime's own allocations that failed */                       \
  X(address_space_failures) /* tag/arena regions not reserved: unplanned */                       \
  X(tag_commit_failures)    /* profiled blocks whose tag slot was not mapped */                   \
  X(slab_map_failures)      /* arenas not mapped: that thread runs unplanned */                   \
  X(late_slab_releases)     /* arenas of exited threads released by their last block's free */    \
  X(forks)                  /* forks this process came out of (child side) */                     \
  X(released_bytes)         /* given back while running: profile records, idle arena pages */     \
  X(idle_discards)          /* idle arenas whose pages the reaper gave back */

// A snapshot: plain numbers.
struct Counters {
#define MEMOPLAN_COUNTER_FIELD(name) uint64_t name = 0;
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  uint64_t fallbacks[kFallbackKinds] = {};

  uint64_t fallback(Fallback reason) const { return fallbacks[static_cast<int>(reason)]; }
  uint64_t all_fallbacks() const;
  Counters& operator+=(const Counters& other);
};
Counters operator-(const Counters& after, const Counters& before);

// The counters as atomic cells, readable from any thread.
struct CounterCells {
#define MEMOPLAN_COUNTER_FIELD(name) std::atomic<uint64_t> name{0};
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_FIELD)
#undef MEMOPLAN_COUNTER_FIELD
  std::atomic<uint64_t> fallbacks[kFallbackKinds] = {};

  Counters load() const;
};

// Process-wide: relaxed atomics (statistics, not synchronization); constant-initialized, so usable
// before any constructor runs.
struct SharedCounters : CounterCells {
  static void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  void fallback(Fallback reason) { bump(fallbacks[static_cast<int>(reason)]); }
  void add(const Counters& c);
};

// One thread's: only that thread writes (a relaxed load and store, a plain increment on x86, where
// a shared atomic on every hit cost as much as the rest of the hit), any thread may read.
struct OwnedCounters : CounterCells {
  static void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void fallback(Fallback reason) { bump(fallbacks[static_cast<int>(reason)]); }
  Counters take();  // load, then zero (owner only)
};

}  // namespace memoplan::replay
