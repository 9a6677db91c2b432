// mode:profile writes each thread's profiled pass as a trace file; mode:replay loads one (and
// optionally a plan made offline, e.g. by `memoplan plan -s best`) and every inference thread
// replays it. A file that cannot be used is reported in one line and the program runs unplanned.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/planner/validator.h"
#include "memoplan/trace_io.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// What the keys in a trace depend on: a trace is replayable only under the same settings.
std::string key_scheme(const Options& o) {
  return "libmemoplan_preload callsite_depth:" + std::to_string(o.callsite_depth) +
         " min_size:" + std::to_string(o.min_size);
}

// %p: process id, %t: thread index, %%: a percent sign.
std::string expand_path(const char* pattern, uint32_t thread) {
  std::string out;
  for (const char* c = pattern; *c; ++c) {
    if (*c == '%' && c[1] == 'p') {
      out += std::to_string(getpid());
      ++c;
    } else if (*c == '%' && c[1] == 't') {
      out += std::to_string(thread);
      ++c;
    } else if (*c == '%' && c[1] == '%') {
      out += '%';
      ++c;
    } else {
      out += *c;
    }
  }
  return out;
}

std::atomic<uint32_t> traces_written{0};

void give_up(const char* why) {  // no allocation: also says "out of memory"
  log_line("memoplan: mode:replay runs unplanned: %s", why);
  global().replay_pass_state.store(2, std::memory_order_release);
}
void give_up(const std::string& why) { give_up(why.c_str()); }

}  // namespace

namespace {

void write_pass_trace_unguarded(const ThreadState& t, const Trace& profiled) {
  const Options& o = global().options;
  if (!strstr(o.trace_path, "%t") && traces_written.load() > 0) {
    log_line(
        "memoplan: the pass of thread %u is not written: %s already holds another thread's "
        "(put %%t in trace: for one file per thread)",
        t.index, o.trace_path);
    return;
  }
  Trace trace = profiled;
  trace.meta.name = program_invocation_short_name;
  trace.meta.source = key_scheme(o);
  const std::string path = expand_path(o.trace_path, t.index);
  const std::string error = write_trace(trace, path);
  if (!error.empty()) {
    log_line("memoplan: cannot write the profiled pass: %s", error.c_str());
    return;
  }
  traces_written.fetch_add(1);
  log_line("memoplan: wrote the pass of thread %u (%zu allocations) to %s", t.index,
           trace.allocations.size(), path.c_str());
}

// The plan file o.plan_path, checked to be a valid plan for `trace`.
Result<Plan> read_checked_plan(const Options& o, const Trace& trace) {
  Result<Plan> loaded = read_plan(o.plan_path);
  if (!loaded) return loaded;
  if (loaded->trace_fingerprint != trace_fingerprint(trace)) {
    return Error{std::string(o.plan_path) + " was made for another trace (fingerprint " +
                 loaded->trace_fingerprint + ", " + o.trace_path + " has " +
                 trace_fingerprint(trace) + ")"};
  }
  // Never trust a file with memory safety: the independent validator checks every overlap.
  const ValidationReport report = validate_plan(trace, *loaded);
  if (!report.valid) {
    return Error{std::string(o.plan_path) + " is not a valid plan for " + o.trace_path + ": " +
                 (report.messages.empty() ? "" : report.messages.front())};
  }
  return loaded;
}

void load_replay_pass_unguarded() {
  Global& g = global();
  if (g.options.mode != Mode::kReplay || g.mode_off) return;
  ReentryGuard guard;
  const Options& o = g.options;
  Result<Trace> trace = read_trace(o.trace_path);
  if (!trace) return give_up(trace.error());
  if (trace->meta.source != key_scheme(o)) {
    return give_up(std::string(o.trace_path) + " was recorded as \"" + trace->meta.source +
                   "\", not \"" + key_scheme(o) +
                   "\" (record it with mode:profile and the same callsite_depth and min_size)");
  }
  if (trace->allocations.empty() || trace->allocations.size() > (1u << 31)) {
    return give_up(std::string(o.trace_path) + " holds no replayable pass");
  }
  // Replay matches in allocation order: a file's rows may be in any order. The escaping blocks'
  // places are laid out once here, for every thread that replays the pass.
  plan_stage::CompileOptions options;
  set_shared_pass_options(options);
  Result<plan_stage::PlannedPass> pass = Error{""};
  if (o.plan_path[0]) {
    Result<Plan> loaded = read_checked_plan(o, *trace);
    if (!loaded) return give_up(loaded.error());
    pass = plan_stage::lay_out(*trace, std::move(*loaded), options);
  } else {
    pass = plan_stage::compile(*trace, options);
  }
  if (!pass) return give_up(pass.error());
  const std::string strategy = pass->plan.strategy;
  const uint64_t slab_bytes = pass->plan.slab_bytes;
  std::string why;
  if (!publish_shared_pass(std::move(*pass), &why)) return give_up(why);
  log_line("memoplan: replaying %s (%zu allocations, %s plan, slab %llu bytes)", o.trace_path,
           trace->allocations.size(), strategy.c_str(),
           static_cast<unsigned long long>(slab_bytes));
}

}  // namespace

// Both run where an exception must not escape (a malloc call, the library's constructor); the
// trace and plan readers throw std::bad_alloc when memory runs out.
void write_pass_trace(const ThreadState& t, const Trace& trace) {
  try {
    write_pass_trace_unguarded(t, trace);
  } catch (...) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: cannot write the profiled pass of thread %u: out of memory", t.index);
  }
}

void load_replay_pass() {
  try {
    load_replay_pass_unguarded();
  } catch (...) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    give_up("out of memory while reading the trace and plan");
  }
}

void set_shared_pass_options(plan_stage::CompileOptions& options) {
  options.order = plan_stage::SlotOrder::kAllocation;
  options.escaping_limit = global().slabs.arena_bytes();
}

const plan_stage::PlannedPass* publish_shared_pass(plan_stage::PlannedPass&& pass,
                                                   std::string* why) {
  Global& g = global();
  const Plan& plan = pass.plan;
  if (plan.alignment > g.slabs.arena_bytes() || plan.slab_bytes > g.slabs.arena_bytes()) {
    *why = "the plan needs a " + std::to_string(plan.slab_bytes) + "-byte slab; slab_max is " +
           std::to_string(g.slabs.arena_bytes());
    return nullptr;
  }
  // Kept: see Global::replay_pass (as is every learned pass, in use or not).
  const plan_stage::PlannedPass* kept = new plan_stage::PlannedPass(std::move(pass));
  g.replay_pass.store(kept, std::memory_order_release);
  g.replay_pass_state.store(1, std::memory_order_release);
  return kept;
}

bool start_loaded_replay(ThreadState& t, ReplayStart start) {
  Global& g = global();
  if (g.replay_pass_state.load(std::memory_order_acquire) != 1) return false;
  return install_replay(t, *g.replay_pass.load(std::memory_order_acquire), start);
}

}  // namespace memoplan::shim
