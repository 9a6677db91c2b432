// Process-wide counters, printed at exit with stats_print:true. Relaxed atomics: they are
// statistics, not synchronization.
#pragma once

#include <atomic>
#include <cstdint>

namespace memoplan::shim {

enum class FallbackReason : int {
  kNotPlanned,  // no slot in the plan matches the request (a new or unexpected allocation)
  kEscaping,    // the matching slot lives past the pass end in the profile, so is never planned
  kOverlap,     // the slot's memory is still in use (the program deviated): the guard said no
  kAlignment,   // the request wants an alignment the planned offset does not have
  kGuardFull,   // too many live slab blocks to track
  kCount,
};
const char* to_string(FallbackReason reason);

struct Stats {
  std::atomic<uint64_t> passes{0};           // pass boundaries seen (explicit or detected)
  std::atomic<uint64_t> profiled{0};         // allocations recorded while profiling
  std::atomic<uint64_t> untracked_large{0};  // too large for a tag slot while profiling
  std::atomic<uint64_t> plans{0};            // plans made (one per thread)
  std::atomic<uint64_t> plan_failures{0};    // profiles that did not give a usable plan
  std::atomic<uint64_t> redetections{0};     // detected plans found wrong and detected again
  std::atomic<uint64_t> planned_hits{0};     // requests served from a slab
  std::atomic<uint64_t> fallbacks[static_cast<int>(FallbackReason::kCount)]{};
  std::atomic<uint64_t> slab_bytes{0};         // sum over threads
  std::atomic<uint64_t> lower_bound_bytes{0};  // sum over threads
  std::atomic<uint64_t> peak_live_bytes{0};    // largest live slab bytes seen on one thread
  std::atomic<uint64_t> remote_frees{0};       // slab blocks freed by another thread
  std::atomic<uint64_t> moved_by_realloc{0};   // slab blocks realloc moved to the fallback
  std::atomic<uint64_t> outside_passes{0};     // min_size or more, between marked passes
  // Fallbacks of steady-state passes only: passes after the first replayed one.
  std::atomic<uint64_t> steady_hits{0};
  std::atomic<uint64_t> steady_fallbacks{0};
  // Failures around the plan (docs/reliability_faults.md). None of them ever fails a request that
  // the fallback allocator could serve.
  std::atomic<uint64_t> out_of_memory{0};           // requests answered NULL: the fallback failed
  std::atomic<uint64_t> bookkeeping_failures{0};    // the shim's own allocations that failed
  std::atomic<uint64_t> address_space_failures{0};  // tag/slab regions not reserved: unplanned
  std::atomic<uint64_t> tag_commit_failures{0};     // profiled blocks whose tag slot was not mapped
  std::atomic<uint64_t> slab_map_failures{0};       // slabs not mapped: that thread runs unplanned
  std::atomic<uint64_t> late_slab_releases{0};      // slabs of exited threads freed by their last
                                                    // block's free on another thread
  std::atomic<uint64_t> forks{0};                   // forks this process came out of (child side)

  void fallback(FallbackReason reason) {
    fallbacks[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
};

Stats& stats();
// Writes the report to fd (no malloc).
void print_stats(int fd);

}  // namespace memoplan::shim
