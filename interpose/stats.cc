#include "stats.h"

#include <unistd.h>

#include <cstdio>

#include "state.h"

namespace memoplan::shim {

namespace {
Stats process_stats;  // constant-initialized: usable before any constructor runs
}  // namespace

Stats& stats() { return process_stats; }

void print_stats(int fd) {
  const Stats& s = stats();
  auto get = [](const std::atomic<uint64_t>& a) {
    return static_cast<unsigned long long>(a.load(std::memory_order_relaxed));
  };
  // Threads still running have counted since their last flush: add theirs.
  unsigned long long passes = get(s.passes), hits = get(s.planned_hits),
                     steady = get(s.steady_hits), outside = get(s.outside_passes),
                     peak = get(s.peak_live_bytes);
  {
    RegistryLock lock;
    for (const ThreadState* t = global().running; t; t = t->running_next) {
      const replay::Counters c = t->counters.load();
      passes += c.passes;
      hits += c.planned_hits;
      steady += c.steady_hits;
      outside += c.outside_passes;
      const uint64_t thread_peak = t->peak_live_bytes.load(std::memory_order_relaxed);
      if (thread_peak > peak) peak = thread_peak;
    }
  }
  char options[1536];
  describe_options(global().options, options, sizeof options);
  char text[3072];
  int n = snprintf(
      text, sizeof text,
      "memoplan: options %s\n"
      "memoplan: passes %llu, plans %llu, plan failures %llu, redetections %llu, profiled "
      "allocations "
      "%llu (%llu too large to tag, %llu over the tag budget)\n"
      "memoplan: planned hits %llu, steady-state hits %llu, steady-state fallbacks "
      "%llu\n"
      "memoplan: fallbacks",
      options, passes, get(s.plans), get(s.plan_failures), get(s.redetections), get(s.profiled),
      get(s.untracked_large), get(s.untracked_budget), hits, steady, get(s.steady_fallbacks));
  for (int r = 0;
       r < static_cast<int>(FallbackReason::kCount) && n > 0 && n < static_cast<int>(sizeof text);
       ++r) {
    n += snprintf(text + n, sizeof text - n, " %s %llu", to_string(static_cast<FallbackReason>(r)),
                  get(s.fallbacks[r]));
  }
  if (n > 0 && n < static_cast<int>(sizeof text)) {
    n += snprintf(text + n, sizeof text - n,
                  "\nmemoplan: slab bytes %llu, lower bound %llu, peak live slab bytes %llu, "
                  "remote frees %llu, moved by realloc %llu, outside marked passes %llu\n",
                  get(s.slab_bytes), get(s.lower_bound_bytes), peak, get(s.remote_frees),
                  get(s.moved_by_realloc), outside);
  }
  if (n > 0 && n < static_cast<int>(sizeof text)) {
    n += snprintf(text + n, sizeof text - n,
                  "memoplan: out of memory %llu, bookkeeping failures %llu, address space "
                  "failures %llu, tag commit failures %llu, slab map failures %llu, late slab "
                  "releases %llu, forks %llu, released bytes %llu, idle slabs discarded %llu\n",
                  get(s.out_of_memory), get(s.bookkeeping_failures), get(s.address_space_failures),
                  get(s.tag_commit_failures), get(s.slab_map_failures), get(s.late_slab_releases),
                  get(s.forks), get(s.released_bytes), get(s.idle_discards));
  }
  if (n > static_cast<int>(sizeof text)) n = sizeof text;
  if (n > 0) {
    ssize_t ignored = write(fd, text, static_cast<size_t>(n));
    (void)ignored;
  }
}

__attribute__((destructor)) static void print_stats_at_exit() {
  Global& g = global();
  if (g.init_state.load() != 2 || !g.options.stats_print) return;
  print_stats(g.log_fd);
}

}  // namespace memoplan::shim
