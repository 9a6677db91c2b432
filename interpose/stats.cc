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
      t.index, when, phase_name(t.phase), t.replay.slot_count, ull{t.replay.replayed_passes},
      ull{t.recheck.plan_steady_hits}, ull{t.recheck.plan_steady_misses}, t.recheck.redetections);
}

namespace {

// Everything the report says, gathered once for print_stats and stats_json.
struct Report {
  replay::Counters c;
  unsigned long long peak = 0;
  unsigned long long steady_passes = 0, full_passes = 0, size_free_plans = 0, size_free_replans = 0;
  unsigned long long learned_passes = 0, learned_pass_threads = 0, profiling_pauses = 0;
  unsigned long long huge_blocks = 0, kept_waits_run_out = 0;
  ThreadSteady busiest[kThreadsReported];  // busiest first
  int busiest_count = 0;
  unsigned running_threads = 0;
  // Where every request of min_size bytes or more went. A plan re-detected later was not the
  // program's pass: its "steady state" counts as before it.
  unsigned long long steady = 0, steady_hits = 0, before = 0, between = 0;
};

// at_exit: running threads' steady state read from their own fields (print_stats at exit, as
// always), with verbose:true's line for each; otherwise as of their last flush.
void gather(Report& r, bool at_exit) {
  using ull = unsigned long long;
  const Stats& s = stats();
  {
    // Under the lock that flushes take: a flush moves a thread's counts into the process-wide
    // ones, and a snapshot sees them on one side or the other, never both or neither.
    RegistryLock lock;
    r.c = s.load();
    r.peak = s.peak_live_bytes.load(std::memory_order_relaxed);
    for (int i = 0; i < exited_count; ++i) {
      keep_busiest(r.busiest, r.busiest_count, exited_threads[i]);
    }
    // Threads still running have counted since their last flush: add theirs.
    for (const ThreadState* t = global().running; t; t = t->running_next) {
      ++r.running_threads;
      r.c += t->counters.load();
      ThreadSteady steady;
      if (at_exit) {
        steady = steady_of(*t);
        if (global().options.verbose) log_thread_summary(*t, "at exit");
      } else {
        steady.index = t->index;
        steady.hits = t->flushed_steady_hits;
        steady.requests = t->flushed_steady_requests;
      }
      keep_busiest(r.busiest, r.busiest_count, steady);
      const uint64_t thread_peak = t->replay.peak_live_bytes.load(std::memory_order_relaxed);
      if (thread_peak > r.peak) r.peak = thread_peak;
    }
  }
  r.steady_passes = s.steady_passes.load(std::memory_order_relaxed);
  r.full_passes = s.full_passes.load(std::memory_order_relaxed);
  r.size_free_plans = s.size_free_plans.load(std::memory_order_relaxed);
  r.size_free_replans = s.size_free_replans.load(std::memory_order_relaxed);
  r.learned_passes = s.learned_passes.load(std::memory_order_relaxed);
  r.learned_pass_threads = s.learned_pass_threads.load(std::memory_order_relaxed);
  r.profiling_pauses = s.profiling_pauses.load(std::memory_order_relaxed);
  r.huge_blocks = s.huge_blocks.load(std::memory_order_relaxed);
  r.kept_waits_run_out = global().tags.waits_run_out();
  const replay::Counters& c = r.c;
  const ull retracted = c.retracted_steady, retracted_hits = c.retracted_steady_hits;
  const ull counted = c.steady_hits + c.steady_fallbacks + c.steady_escaping;
  r.steady = counted > retracted ? counted - retracted : 0;
  r.steady_hits = c.steady_hits > retracted_hits ? c.steady_hits - retracted_hits : 0;
  const ull apart = r.steady + c.outside_passes + c.unplanned_requests;
  r.before = c.requests > apart ? c.requests - apart : 0;
  // Irregular work between passes (a response grown by appending): left out of the plan.
  r.between = c.steady_between > c.retracted_between ? c.steady_between - c.retracted_between : 0;
  // Per thread, busiest first: a thread that planned a stretch of its start-up (Python's imports
  // repeat short patterns) next to the threads that run the model.
  for (int i = 1; i < r.busiest_count; ++i) {
    for (int j = i; j > 0 && r.busiest[j].requests > r.busiest[j - 1].requests; --j) {
      const ThreadSteady swap = r.busiest[j];
      r.busiest[j] = r.busiest[j - 1];
      r.busiest[j - 1] = swap;
    }
  }
}

constexpr int kThreadsPrinted = 8;

}  // namespace

void note_thread_steady(ThreadState& t) {
  const ThreadSteady s = steady_of(t);
  t.flushed_steady_hits = s.hits;
  t.flushed_steady_requests = s.requests;
}

void print_stats(int fd) {
  Report r;
  gather(r, /*at_exit=*/true);
  const replay::Counters& c = r.c;
  using ull = unsigned long long;
  char options[2560];
  describe_options(global().options, options, sizeof options);
  char text[5120];
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
  for (int reason = 0; reason < static_cast<int>(FallbackReason::kCount); ++reason) {
    append(text, sizeof text, n, " %s %llu", to_string(static_cast<FallbackReason>(reason)),
           ull{c.fallbacks[reason]});
  }
  append(text, sizeof text, n,
         "\nmemoplan: slab bytes %llu (%llu of them for escaping blocks), lower bound %llu, "
         "peak live slab bytes %llu, remote frees %llu, moved by realloc %llu, outside marked "
         "passes %llu\n",
         ull{c.slab_bytes}, ull{c.escaping_bytes}, ull{c.lower_bound_bytes}, r.peak,
         ull{c.remote_frees}, ull{c.moved_by_realloc}, ull{c.outside_passes});
  append(text, sizeof text, n,
         "memoplan: out of memory %llu, bookkeeping failures %llu, address space failures %llu, "
         "tag commit failures %llu, slab map failures %llu, late slab releases %llu, forks %llu, "
         "released bytes %llu, idle slabs discarded %llu\n",
         ull{c.out_of_memory}, ull{c.bookkeeping_failures}, ull{c.address_space_failures},
         ull{c.tag_commit_failures}, ull{c.slab_map_failures}, ull{c.late_slab_releases},
         ull{c.forks}, ull{c.released_bytes}, ull{c.idle_discards});
  // Where every request of min_size bytes or more went, and the verdict.
  append(
      text, sizeof text, n,
      "memoplan: requests of min_size or more %llu: in steady state %llu (escaping %llu), before "
      "it (profiling, warm-up) %llu (of them under plans later re-detected %llu), outside marked "
      "passes %llu, on threads that plan nothing %llu\n",
      ull{c.requests}, r.steady, ull{c.steady_escaping}, r.before, ull{c.retracted_steady},
      ull{c.outside_passes}, ull{c.unplanned_requests});
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
           percent(r.steady_hits, r.steady), r.steady, percent(c.planned_hits, c.requests),
           ull{c.requests});
    if (r.between > 0 && r.steady > r.between) {
      append(text, sizeof text, n,
             "; %llu of them made between passes by work that recurs irregularly, left to the "
             "fallback: the passes' own %.1f%% planned",
             r.between, percent(r.steady_hits, r.steady - r.between));
    }
    append(text, sizeof text, n, "\n");
  }
  append(text, sizeof text, n,
         "memoplan: detected passes in steady state %llu, every request served from the slab in "
         "%llu (%.1f%%); plans keyed by call site alone (sizes that vary) %llu, replanned %llu "
         "times; passes learned from exited threads %llu, threads that started on one %llu; "
         "profiling paused %llu times (blocks that stay alive, or no pass found in an attempt); "
         "huge blocks kept from the fallback %llu; profiled requests that waited in vain for kept "
         "pages the reaper held %llu\n",
         r.steady_passes, r.full_passes, percent(r.full_passes, r.steady_passes), r.size_free_plans,
         r.size_free_replans, r.learned_passes, r.learned_pass_threads, r.profiling_pauses,
         r.huge_blocks, r.kept_waits_run_out);
  if (r.busiest_count > 0) {
    append(text, sizeof text, n, "memoplan: steady state by thread, busiest first:");
    for (int i = 0; i < r.busiest_count && i < kThreadsPrinted; ++i) {
      append(text, sizeof text, n, "%s thread %u planned %.1f%% of %llu", i ? "," : "",
             r.busiest[i].index, percent(r.busiest[i].hits, r.busiest[i].requests),
             ull{r.busiest[i].requests});
    }
    append(text, sizeof text, n, "\n");
  }
  if (n > 0) {
    ssize_t ignored = write(fd, text, static_cast<size_t>(n));
    (void)ignored;
  }
}

namespace {

// JSON into a caller's buffer without malloc: writes what fits (always NUL-terminated when there
// is room for one byte) and counts everything, as snprintf does.
class JsonOut {
 public:
  JsonOut(char* buf, size_t len) : buf_(len ? buf : nullptr), len_(buf ? len : 0) {}

  __attribute__((format(printf, 2, 3))) void raw(const char* format, ...) {
    va_list args;
    va_start(args, format);
    const int m = n_ < len_ ? vsnprintf(buf_ + n_, len_ - n_, format, args)
                            : vsnprintf(nullptr, 0, format, args);
    va_end(args);
    if (m > 0) n_ += static_cast<size_t>(m);
  }
  // A quoted string; '"', '\\' and control characters escaped (other bytes as they are).
  void string(const char* s) {
    put('"');
    for (; *s; ++s) {
      const unsigned char ch = static_cast<unsigned char>(*s);
      if (ch == '"' || ch == '\\') {
        put('\\');
        put(static_cast<char>(ch));
      } else if (ch < 0x20) {
        raw("\\u%04x", ch);
      } else {
        put(static_cast<char>(ch));
      }
    }
    put('"');
  }
  void key(const char* name) {  // "name": after a comma unless it opens an object
    if (n_ > 0 && last_ != '{') put(',');
    string(name);
    put(':');
  }
  void open(const char* name) {
    if (name) key(name);
    put('{');
  }
  void close() { put('}'); }
  void number(const char* name, unsigned long long value) {
    key(name);
    raw("%llu", value);
  }
  void fraction(const char* name, double value) {
    key(name);
    raw("%.2f", value);
  }
  void boolean(const char* name, bool value) {
    key(name);
    raw("%s", value ? "true" : "false");
  }
  void text(const char* name, const char* value) {
    key(name);
    string(value);
  }
  // The length needed, NUL excluded; NUL-terminates what was written.
  size_t finish() {
    if (len_) buf_[n_ < len_ ? n_ : len_ - 1] = '\0';
    return n_;
  }
  void put(char ch) {
    if (n_ + 1 < len_) buf_[n_] = ch;
    ++n_;
    last_ = ch;
  }

 private:
  char* buf_;
  size_t len_;
  size_t n_ = 0;
  char last_ = 0;  // the last character put (raw's do not count: none of them opens an object)
};

void options_json(JsonOut& out, const Options& o) {
  out.open("options");
  out.text("mode", to_string(o.mode));
  out.text("fallback", to_string(o.fallback));
  out.number("min_size", o.min_size);
  out.number("passes", o.passes);
  out.number("threads", o.threads);
  out.number("callsite_depth", o.callsite_depth);
  out.number("slab_max", o.slab_max);
  out.number("max_period", o.max_period);
  out.number("idle_release", o.idle_release);
  out.number("profile_keep", o.profile_keep);
  out.boolean("detect", o.detect);
  out.boolean("huge_pages", o.huge_pages);
  out.boolean("stats_print", o.stats_print);
  out.boolean("verbose", o.verbose);
  out.text("log", o.log_path);
  out.text("trace", o.trace_path);
  out.text("plan", o.plan_path);
  out.text("stats_file", o.stats_file);
  out.number("stats_interval_ms", o.stats_interval_ms);
  out.close();
}

}  // namespace

size_t stats_json(char* buf, size_t len, bool at_exit) {
  Report r;
  gather(r, at_exit);
  const replay::Counters& c = r.c;
  JsonOut out(buf, len);
  out.open(nullptr);
  out.number("version", 1);
  out.number("pid", static_cast<unsigned long long>(getpid()));
  out.boolean("at_exit", at_exit);
  options_json(out, global().options);
  out.text("fallback_in_use", fallback::name());
  // Every counter of the runtime's list (the shim leaves the extension's at 0).
  out.open("counters");
#define MEMOPLAN_COUNTER_JSON(name) out.number(#name, c.name);
  MEMOPLAN_COUNTERS(MEMOPLAN_COUNTER_JSON)
#undef MEMOPLAN_COUNTER_JSON
  out.open("fallbacks");
  for (int reason = 0; reason < static_cast<int>(FallbackReason::kCount); ++reason) {
    out.number(to_string(static_cast<FallbackReason>(reason)), c.fallbacks[reason]);
  }
  out.close();
  out.close();
  out.number("peak_live_slab_bytes", r.peak);
  out.number("steady_passes", r.steady_passes);
  out.number("full_passes", r.full_passes);
  out.number("size_free_plans", r.size_free_plans);
  out.number("size_free_replans", r.size_free_replans);
  out.number("learned_passes", r.learned_passes);
  out.number("learned_pass_threads", r.learned_pass_threads);
  out.number("profiling_pauses", r.profiling_pauses);
  out.number("huge_blocks", r.huge_blocks);
  out.number("kept_waits_run_out", r.kept_waits_run_out);
  // The report's account of the requests of min_size or more, and its verdict.
  out.open("requests");
  out.number("total", c.requests);
  out.number("steady_state", r.steady);
  out.number("steady_state_hits", r.steady_hits);
  out.number("steady_state_escaping", c.steady_escaping);
  out.number("before_steady_state", r.before);
  out.number("under_redetected_plans", c.retracted_steady);
  out.number("outside_marked_passes", c.outside_passes);
  out.number("on_unplanned_threads", c.unplanned_requests);
  out.number("between_passes", r.between);
  out.close();
  out.fraction("planned_percent", percent(r.steady_hits, r.steady));
  out.fraction("planned_percent_of_all", percent(c.planned_hits, c.requests));
  out.open("threads");
  out.number("running", r.running_threads);
  out.number("started", global().next_thread_index.load(std::memory_order_relaxed));
  out.key("busiest");
  out.put('[');
  for (int i = 0; i < r.busiest_count && i < kThreadsPrinted; ++i) {
    if (i) out.put(',');
    out.open(nullptr);
    out.number("thread", r.busiest[i].index);
    out.number("steady_state", r.busiest[i].requests);
    out.number("steady_state_hits", r.busiest[i].hits);
    out.fraction("planned_percent", percent(r.busiest[i].hits, r.busiest[i].requests));
    out.close();
  }
  out.put(']');
  out.close();
  out.close();
  return out.finish();
}

__attribute__((destructor)) static void print_stats_at_exit() {
  Global& g = global();
  if (g.init_state.load() != 2) return;
  if (g.options.stats_print) print_stats(g.log_fd);
  write_stats_file_at_exit();
}

}  // namespace memoplan::shim
