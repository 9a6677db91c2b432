// The shim's process-wide and per-thread state. Per-thread state is reached through one
// initial-exec TLS pointer (no TLS constructor, no __tls_get_addr: safe inside malloc).
#pragma once

#include <atomic>
#include <cstdint>

#include "callsite_cache.h"
#include "detection.h"
#include "memoplan/record/record_log.h"
#include "memoplan/record/tag_region.h"
#include "memoplan/replay/arena.h"
#include "memoplan/replay/counters.h"
#include "memoplan/replay/matcher.h"
#include "options.h"

namespace memoplan::plan_stage {
struct PlannedPass;  // memoplan/plan_stage/planned_pass.h
}  // namespace memoplan::plan_stage

namespace memoplan::shim {

enum class Phase : uint8_t {
  kWarmup,     // explicit passes: skipping the first `passes`
  kProfiling,  // recording (an explicit pass, or everything until a period is found)
  kReplaying,  // serving from the slab
  kSeeking,    // mode:replay without pass marks: waiting for the loaded pass's first allocation
  kDisabled,   // nothing to plan here (no period found, plan failed): pass-through
};

// Re-checking a detected plan (replay.cc): windows of tracked requests, and the keys of requests
// the plan did not know in this window and in the last window that missed any. A key missed in
// two such windows recurs: the plan does not describe the pass. Keys missed once (work between
// passes whose sizes vary, a one-off request) do not count: they go to the fallback, the plan
// stays.
struct ReplayRecheck {
  static constexpr int kKeys = 16;
  uint32_t window = 256;  // requests per window: a few passes
  uint32_t requests = 0;
  uint32_t missing_windows = 0;  // windows with a recurring miss in the current series
  uint32_t clean_windows = 0;    // windows without a miss since the last one with a miss
  uint32_t redetections = 0;
  int missed_count = 0, previous_count = 0;
  uint64_t missed[kKeys] = {};    // distinct keys missed in this window (the first kKeys)
  uint64_t previous[kKeys] = {};  // and in the last window that missed any
  uint64_t recurring = 0;         // a key missed in this window that the last one missed too
  uint64_t unexplained_key = 0;   // the newest such key
  // This plan's steady-state hits and fallbacks (escaping included), retracted from the
  // steady-state statistics if the plan is re-detected.
  uint64_t plan_steady_hits = 0, plan_steady_misses = 0;
  uint64_t plan_steady_passes = 0, plan_full_passes = 0;  // the same for Stats' pass counts
  uint64_t plan_steady_between = 0;  // of the misses: irregular work between passes
};

// A thread's profile: its records (record::RecordLog, on the thread's event clock; memory from the
// fallback allocator) and the references that keep the profile: the thread while it runs, and
// each profiled block still alive (its free, on any thread, closes its record). Whoever drops the
// last reference frees it, so neither an exiting thread nor a late free touches freed memory.
//
// The records themselves go as soon as they are of no use (the plan is made, profiling gave up,
// the thread exited), even while profiled blocks live on (weights made during the profiled pass
// stay alive for the whole run): giving them back starts a new generation, and the free of a
// block tagged in an older one closes nothing. A free on another thread counts itself in
// `closing` while it may write a record, and the records wait for those (see give_back_records).
struct ThreadState;
struct Profile {
  record::RecordLog log;
  std::atomic<uint64_t> refs{1};                      // the thread's own + live profiled blocks
  std::atomic<const ThreadState*> recorder{nullptr};  // null once the thread has exited
  std::atomic<uint32_t> generation{0};                // of the records in the log now
  std::atomic<uint32_t> closing{0};                   // other threads' frees closing a record now

  explicit Profile(record::MemorySource memory) : log(memory) {}
  // Profiled blocks alive now (while the thread holds its reference).
  uint64_t live_blocks() const { return refs.load(std::memory_order_acquire) - 1; }
  // What a profiled block's tag slot keeps: the record's generation and index.
  uint64_t record_tag(uint64_t index) const {
    return uint64_t{generation.load(std::memory_order_relaxed)} << 32 | index;
  }
};
// Drops one reference; the last one frees the profile.
void release_profile(Profile* profile);
// The recorder thread (or its exit): forgets the records and gives their memory back; returns the
// bytes. Waits for other threads' frees that are closing a record right now (a fork child first
// sets `closing` to 0 in the profiles of the threads it knows: their closers did not come along).
uint64_t give_back_records(Profile& profile);

struct ThreadState {
  uint32_t index = 0;
  // Counters of the hot paths, kept per thread (a shared atomic on every hit cost as much as the
  // rest of the hit) and added to the process-wide statistics at pass ends and thread exit; the
  // statistics at exit add those of threads still running.
  replay::OwnedCounters counters;
  CallsiteCache callsite;  // callsite.cc's
  Phase phase = Phase::kWarmup;
  bool explicit_passes = false;  // the program called memoplan_pass_begin on this thread
  bool in_pass = false;          // between memoplan_pass_begin and memoplan_pass_end
  uint64_t passes_begun = 0;

  // Profiling: the records of this thread's tracked allocations.
  Profile* profile = nullptr;
  uint64_t pass_first_record = 0;  // explicit passes: first record of the profiled pass
  // Detection (detect:true; detect.cc's): where the search stands, and the keys a plan found
  // through irregular work leaves out.
  Detection detection;
  IrregularWork irregular;

  // Replay: the plan's slots in pass order, the matcher's cursor over them and this thread's arena.
  replay::Slot* slots = nullptr;
  uint32_t slot_count = 0;
  replay::Matcher matcher;
  replay::Arena* arena = nullptr;
  uint64_t replayed_passes = 0;
  // A plan keyed by call site alone (a pass whose sizes vary from pass to pass: issue 18), each
  // slot sized to the largest request seen there. A larger request falls back and is noted in
  // `wanted`; at the pass end the pass is planned again from `rows` (each slot's begin and end on
  // the profiled pass's clock, alignment and whether it escapes), in a new arena.
  bool size_free = false;
  bool replan_pending = false;
  uint64_t* wanted = nullptr;  // per slot
  uint64_t* rows = nullptr;    // per slot: begin, end, alignment, escapes
  uint64_t lower_bound_bytes = 0;
  uint64_t misses_at_last_cycle = 0;  // recheck.plan_steady_misses when the last pass ended
  // Size-free plans match by call site, which cannot tell a pass that made fewer requests (a
  // tensor below min_size at a small shape) from one in step: the cursor would stay behind for
  // good. When only the pass's first allocation is made with none of its blocks alive, an empty
  // arena at a request means the pass starts over: the cursor goes back to it.
  bool resync_at_empty = false;
  ReplayRecheck recheck;
  std::atomic<uint64_t> peak_live_bytes{0};  // the arenas' peaks, as of the last flush
  // Its steady-state hits and requests as of the last flush (note_thread_steady), for statistics
  // read while it runs (the fields they come from are the owner's own). Under RegistryLock.
  uint64_t flushed_steady_hits = 0, flushed_steady_requests = 0;
  ThreadState* running_prev = nullptr;  // Global::running list, under Global::registry_lock
  ThreadState* running_next = nullptr;
};

struct Global {
  std::atomic<int> init_state{0};  // 0 not started, 1 running, 2 done
  Options options;
  bool mode_off = false;
  record::TagRegion tags;     // profiling: one slot per tracked allocation
  replay::ArenaRegion slabs;  // replay: one arena per thread
  std::atomic<uint32_t> next_thread_index{0};
  // Threads that have not exited, for the statistics at exit. The lock also orders a thread's
  // flush of its counters against their reading.
  ThreadState* running = nullptr;
  std::atomic_flag registry_lock = ATOMIC_FLAG_INIT;
  int log_fd = 2;
  bool portable_keys = false;  // see portable_keys(Options)
  // mode:replay: the pass every inference thread replays, loaded from files once (with its
  // escaping blocks' places), under the reentry guard: its memory is the fallback's. Never freed:
  // a thread may start on it at any time, even while the process exits. Set before
  // replay_pass_state becomes 1.
  const plan_stage::PlannedPass* replay_pass = nullptr;
  std::atomic<int> replay_pass_state{0};  // 0 not loaded yet, 1 ready, 2 unusable
};

Global& global();

// The calling thread's state, created on first use (nullptr while that is impossible).
extern __thread ThreadState* tls_state __attribute__((tls_model("initial-exec")));
ThreadState* create_thread_state();
inline ThreadState* thread_state() {
  ThreadState* t = tls_state;
  return __builtin_expect(t != nullptr, 1) ? t : create_thread_state();
}

// threads.cc: the thread-exit key and the fork handlers (initialization registers them; false
// when either cannot be registered).
bool install_thread_hooks();

// Adds the thread's local counters to the process-wide statistics.
void flush_counters(ThreadState& t);
void flush_counters_locked(ThreadState& t);  // the caller holds RegistryLock

// Holds Global::registry_lock (thread start and exit, counter flushes, the statistics at exit).
class RegistryLock {
 public:
  RegistryLock();
  ~RegistryLock();
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
};

// Nested calls (our own bookkeeping, libunwind, the planner) go straight to the fallback.
struct ReentryGuard {
  ReentryGuard();
  ~ReentryGuard();
  static bool active();
};

// One line to the log, no malloc.
void log_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace memoplan::shim
