// Threads: each thread's state from its first tracked request to its exit, the registry of
// running threads (the statistics at exit read their counters), and fork.
#include <pthread.h>

#include <new>

#include "callsite_cache.h"
#include "engine.h"
#include "fallback.h"
#include "learned_pass.h"
#include "lifecycle.h"
#include "stats.h"

namespace memoplan::shim {

__thread ThreadState* tls_state __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

__thread bool tls_dead __attribute__((tls_model("initial-exec"))) = false;
pthread_key_t thread_exit_key;

// A thread that is gone (exited, or left behind by a fork): its arena to the runtime, its profile
// reference dropped (the profile lives on while a profiled block is alive), its state freed.
void retire_thread(ThreadState& t, bool after_fork) {
  retire_replay_at_exit(t, after_fork);
  retire_profile(t.profiling);
  release_callsite_cache(t.callsite);
  t.~ThreadState();
  fallback::free(&t);
}

// fork: only the forking thread lives on in the child. The prepare handler takes the registry
// lock, which a thread holds through its whole start and exit: so at the fork every other thread
// is either running (on Global::running) or fully exited. A running thread is not stopped: the
// fork may catch it half-way through any update of its own state, so the child's recovery never
// relies on that state being whole (docs/SHIM.md, "Fork"): arenas are retired from the arena
// table, records are forgotten before they are given back, and a half-done step leaves a leak
// in the child, never a double release (tests/interpose/fault_fork_halfway_test.cc).
// Unwinding threads are let finish first (libunwind's and the loader's locks; callsite.cc).
void before_fork() {
  while (global().registry_lock.test_and_set(std::memory_order_acquire)) {
  }
  unwind_gate_close_for_fork();
}
void after_fork_in_parent() {
  unwind_gate_open_after_fork(/*in_child=*/false);
  global().registry_lock.clear(std::memory_order_release);
}

// In the child the other threads are gone, but their arenas and profiles stay reachable through
// the blocks they owned. An arena lock held by another thread's free at the fork is released.
// Threads that were running are retired now as if they had exited: every arena they owned (by the
// arena table) is given back at once if empty (else a child of a server with `threads` inference
// threads would find no slab left for its own), else when the child frees its last block; their
// profiles lose the thread's reference.
void after_fork_in_child() {
  unwind_gate_open_after_fork(/*in_child=*/true);
  stats().forks.fetch_add(1, std::memory_order_relaxed);
  reaper_after_fork_in_child();
  stats_file_after_fork_in_child();
  ThreadState* self = tls_state;
  global().slabs.after_fork_in_child(self);
  ThreadState* t = global().running;
  global().running = nullptr;
  while (t) {
    ThreadState* next = t->running_next;
    t->running_prev = t->running_next = nullptr;
    profile_after_fork_in_child(t->profiling);
    if (t == self) {
      t->running_next = global().running;
      global().running = t;
    } else {
      flush_counters_locked(*t);
      retire_thread(*t, /*after_fork=*/true);
    }
    t = next;
  }
  global().registry_lock.clear(std::memory_order_release);
}

// A thread that exits hands its arena to the runtime (given back now if empty, else with the free
// of its last block, on whichever thread) and drops its reference to its profile; its state goes.
void on_thread_exit(void* state) {
  ThreadState* t = static_cast<ThreadState*>(state);
  ReentryGuard guard;
  offer_exited_thread_pass(*t);          // before the lock: it may plan
  give_back_unwind_tables(t->callsite);  // before the lock: the loader's lock is taken
  {
    RegistryLock lock;  // the whole exit: see before_fork
    flush_counters_locked(*t);
    if (global().options.verbose) log_thread_summary(*t, "exits");
    keep_exited_thread(*t);
    (t->running_prev ? t->running_prev->running_next : global().running) = t->running_next;
    if (t->running_next) t->running_next->running_prev = t->running_prev;
    retire_thread(*t, /*after_fork=*/false);
  }
  tls_state = nullptr;
  tls_dead = true;  // later allocations of this thread's own TLS destructors: fallback only
}

}  // namespace

bool install_thread_hooks() {
  return pthread_key_create(&thread_exit_key, on_thread_exit) == 0 &&
         pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
}

RegistryLock::RegistryLock() {
  while (global().registry_lock.test_and_set(std::memory_order_acquire)) {
  }
}
RegistryLock::~RegistryLock() { global().registry_lock.clear(std::memory_order_release); }

void flush_counters(ThreadState& t) {
  if (t.replay.arena) start_reaper();  // a no-op once it runs (a fork child's did not come along)
  start_stats_writer();                // the same
  RegistryLock lock;
  flush_counters_locked(t);
}

void flush_counters_locked(ThreadState& t) {
  Stats& s = stats();
  s.add(t.counters.take());
  note_thread_steady(t);
  if (t.replay.arena) keep_replay_peak(t.replay);
  const uint64_t thread_peak = t.replay.peak_live_bytes.load(std::memory_order_relaxed);
  uint64_t peak = s.peak_live_bytes.load(std::memory_order_relaxed);
  while (thread_peak > peak &&
         !s.peak_live_bytes.compare_exchange_weak(peak, thread_peak, std::memory_order_relaxed)) {
  }
}

ThreadState* create_thread_state() {
  if (tls_dead) return nullptr;
  ReentryGuard guard;
  void* memory = fallback::calloc(1, sizeof(ThreadState));
  if (!memory) {  // this request goes to the fallback; the next one tries again
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ThreadState* t = new (memory) ThreadState();
  if (!create_profile(t->profiling, *t)) {
    t->~ThreadState();
    fallback::free(memory);
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  t->index = global().next_thread_index.fetch_add(1, std::memory_order_relaxed);
  start_lifecycle(*t);
  {
    RegistryLock lock;
    t->running_next = global().running;
    if (global().running) global().running->running_prev = t;
    global().running = t;
  }
  tls_state = t;
  pthread_setspecific(thread_exit_key, t);
  return t;
}

}  // namespace memoplan::shim
