#include "stats.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

#include "fallback.h"
#include "state.h"

namespace memoplan::shim {

namespace {
Stats process_stats;  // constant-initialized: usable before any constructor runs
}  // namespace

Stats& stats() { return process_stats; }

namespace {

// Appends to text at n (no malloc); keeps n within size.
__attribute__((format(printf, 4, 5))) void append(char* text, size_t size, int& n,
                                                  const char* format, ...) {
  if (n < 0 || n >= static_cast<int>(size)) return;
  va_list args;
  va_start(args, format);
  const int m = vsnprintf(text + n, size - static_cast<size_t>(n), format, args);
  va_end(args);
  n = m < 0 ? n : n + m > static_cast<int>(size) ? static_cast<int>(size) : n + m;
}

double percent(unsigned long long part, unsigned long long whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

namespace {
const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kWarmup:
      return "warming up";
    case Phase::kProfiling:
      return "profiling";
    case Phase::kReplaying:
      return "replaying";
    case Phase::kSeeking:
      return "seeking the loaded pass";
    case Phase::kDisabled:
      return "unplanned";
  }
  return "?";
}
}  // namespace

namespace {

// A thread's steady state: its current plan's, unless that plan was re-detected (then its requests
// count as before steady state, as in the process-wide figures).
struct ThreadSteady {
  uint32_t index = 0;
  uint64_t hits = 0, requests = 0;
};
constexpr int kThreadsReported = 16;
ThreadSteady exited_threads[kThreadsReported];  // the busiest exited threads; under RegistryLock
int exited_count = 0;

ThreadSteady steady_of(const ThreadState& t) {
  ThreadSteady s;
  s.index = t.index;
  if (t.phase == Phase::kReplaying) {
    s.hits = t.recheck.plan_steady_hits;
    s.requests = t.recheck.plan_steady_hits + t.recheck.plan_steady_misses;
  }
  return s;
}

// Keeps the kThreadsReported with the most steady-state requests in `top`.
void keep_busiest(ThreadSteady* top, int& count, const ThreadSteady& s) {
  if (s.requests == 0) return;
  if (count < kThreadsReported) {
    top[count++] = s;
    return;
  }
  int least = 0;
  for (int i = 1; i < count; ++i) least = top[i].requests < top[least].requests ? i : least;
  if (s.requests > top[least].requests) top[least] = s;
}

}  // namespace

void keep_exited_thread(const ThreadState& t) {
  keep_busiest(exited_threads, exited_count, steady_of(t));
}

void log_thread_summary(const ThreadState& t, const char* when) {
  using ull = unsigned long long;
  log_line(
      "memoplan: thread %u %s: %s, plan of %u allocations, replayed passes %llu, this plan's "
      "steady-state hits %llu and fallbacks %llu, redetections %u",
      t.index, when, phase_name(t.phase), t.slot_count, ull{t.replayed_passes},
      ull{t.recheck.plan_steady_hits}, ull{t.recheck.plan_steady_misses}, t.recheck.redetections);
}

void print_stats(int fd) {
  const Stats& s = stats();
  // Threads still running have counted since their last flush: add theirs.
  replay::Counters c = s.load();
  unsigned long long peak = s.peak_live_bytes.load(std::memory_order_relaxed);
  ThreadSteady busiest[kThreadsReported];
  int busiest_count = 0;
  {
    RegistryLock lock;
    for (int i = 0; i < exited_count; ++i) keep_busiest(busiest, busiest_count, exited_threads[i]);
    for (const ThreadState* t = global().running; t; t = t->running_next) {
      c += t->counters.load();
      keep_busiest(busiest, busiest_count, steady_of(*t));
      if (global().options.verbose) log_thread_summary(*t, "at exit");
      const uint64_t thread_peak = t->peak_live_bytes.load(std::memory_order_relaxed);
      if (thread_peak > peak) peak = thread_peak;
    }
  }
  using ull = unsigned long long;
  char options[1536];
  describe_options(global().options, options, sizeof options);
  char text[4096];
  int n = 0;
  append(text, sizeof text, n,
         "memoplan: options %s (fallback in use: %s)\n"
         "memoplan: passes %llu, plans %llu, plan failures %llu, redetections %llu, profiled "
         "allocations %llu (%llu too large to tag, %llu over the tag budget)\n"
         "memoplan: planned hits %llu, steady-state hits %llu, steady-state fallbacks %llu\n"
         "memoplan: fallbacks",
         options, fallback::name(), ull{c.passes}, ull{c.plans}, ull{c.plan_failures},
         ull{c.redetections}, ull{c.profiled}, ull{c.untracked_large}, ull{c.untracked_budget},
         ull{c.planned_hits}, ull{c.steady_hits}, ull{c.steady_fallbacks});
  for (int r = 0; r < static_cast<int>(FallbackReason::kCount); ++r) {
    append(text, sizeof text, n, " %s %llu", to_string(static_cast<FallbackReason>(r)),
           ull{c.fallbacks[r]});
  }
  append(text, sizeof text, n,
         "\nmemoplan: slab bytes %llu (%llu of them for escaping blocks), lower bound %llu, "
         "peak live slab bytes %llu, remote frees %llu, moved by realloc %llu, outside marked "
         "passes %llu\n",
         ull{c.slab_bytes}, ull{c.escaping_bytes}, ull{c.lower_bound_bytes}, peak,
         ull{c.remote_frees}, ull{c.moved_by_realloc}, ull{c.outside_passes});
  append(text, sizeof text, n,
         "memoplan: out of memory %llu, bookkeeping failures %llu, address space failures %llu, "
         "tag commit failures %llu, slab map failures %llu, late slab releases %llu, forks %llu, "
         "released bytes %llu, idle slabs discarded %llu\n",
         ull{c.out_of_memory}, ull{c.bookkeeping_failures}, ull{c.address_space_failures},
         ull{c.tag_commit_failures}, ull{c.slab_map_failures}, ull{c.late_slab_releases},
         ull{c.forks}, ull{c.released_bytes}, ull{c.idle_discards});
  // Where every request of min_size bytes or more went, and the verdict.
  // A plan re-detected later was not the program's pass: its "steady state" counts as before it.
  const ull retracted = c.retracted_steady, retracted_hits = c.retracted_steady_hits;
  const ull counted = c.steady_hits + c.steady_fallbacks + c.steady_escaping;
  const ull steady = counted > retracted ? counted - retracted : 0;
  const ull steady_hits = c.steady_hits > retracted_hits ? c.steady_hits - retracted_hits : 0;
  const ull apart = steady + c.outside_passes + c.unplanned_requests;
  const ull before = c.requests > apart ? c.requests - apart : 0;
  append(
      text, sizeof text, n,
      "memoplan: requests of min_size or more %llu: in steady state %llu (escaping %llu), before "
      "it (profiling, warm-up) %llu (of them under plans later re-detected %llu), outside marked "
      "passes %llu, on threads that plan nothing %llu\n",
      ull{c.requests}, steady, ull{c.steady_escaping}, before, retracted, ull{c.outside_passes},
      ull{c.unplanned_requests});
  if (global().options.mode == Mode::kProfile) {
    append(text, sizeof text, n, "memoplan: mode:profile records passes and plans nothing\n");
  } else if (c.plans == 0) {
    append(text, sizeof text, n,
           "memoplan: found no repeating pass: nothing was planned (see docs/SHIM.md, \"Pass "
           "detection\"; mark passes with memoplan_pass_begin/end)\n");
  } else {
    append(text, sizeof text, n,
           "memoplan: planned %.1f%% of %llu steady-state requests of min_size or more (%.1f%% of "
           "all %llu)",
           percent(steady_hits, steady), steady, percent(c.planned_hits, c.requests),
           ull{c.requests});
    // Irregular work between passes (a response grown by appending): left out of the plan.
    const ull between =
        c.steady_between > c.retracted_between ? c.steady_between - c.retracted_between : 0;
    if (between > 0 && steady > between) {
      append(text, sizeof text, n,
             "; %llu of them made between passes by work that recurs irregularly, left to the "
             "fallback: the passes' own %.1f%% planned",
             between, percent(steady_hits, steady - between));
    }
    append(text, sizeof text, n, "\n");
  }
  append(text, sizeof text, n,
         "memoplan: detected passes in steady state %llu, every request served from the slab in "
         "%llu (%.1f%%); plans keyed by call site alone (sizes that vary) %llu, replanned %llu "
         "times\n",
         ull{s.steady_passes.load(std::memory_order_relaxed)},
         ull{s.full_passes.load(std::memory_order_relaxed)},
         percent(s.full_passes.load(std::memory_order_relaxed),
                 s.steady_passes.load(std::memory_order_relaxed)),
         ull{s.size_free_plans.load(std::memory_order_relaxed)},
         ull{s.size_free_replans.load(std::memory_order_relaxed)});
  // Per thread, busiest first: a thread that planned a stretch of its start-up (Python's imports
  // repeat short patterns) next to the threads that run the model.
  for (int i = 1; i < busiest_count; ++i) {
    for (int j = i; j > 0 && busiest[j].requests > busiest[j - 1].requests; --j) {
      const ThreadSteady swap = busiest[j];
      busiest[j] = busiest[j - 1];
      busiest[j - 1] = swap;
    }
  }
  if (busiest_count > 0) {
    append(text, sizeof text, n, "memoplan: steady state by thread, busiest first:");
    for (int i = 0; i < busiest_count && i < 8; ++i) {
      append(text, sizeof text, n, "%s thread %u planned %.1f%% of %llu", i ? "," : "",
             busiest[i].index, percent(busiest[i].hits, busiest[i].requests),
             ull{busiest[i].requests});
    }
    append(text, sizeof text, n, "\n");
  }
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
