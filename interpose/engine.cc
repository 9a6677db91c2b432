#include "engine.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fcntl.h>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#include "bootstrap.h"
#include "fallback.h"
#include "fault_injection.h"
#include "stats.h"

extern char** environ;

namespace memoplan::shim {

__thread ThreadState* tls_state __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<void* (*)(size_t)> passthrough_malloc{nullptr};
std::atomic<void (*)(void*)> passthrough_free{nullptr};
std::atomic<bool> passthrough_free_keeps_errno{false};
std::atomic<void* (*)(size_t)> small_malloc{nullptr};
std::atomic<size_t> small_malloc_limit{0};

namespace {

Global g;
__thread int tls_reentry __attribute__((tls_model("initial-exec"))) = 0;
__thread bool tls_dead __attribute__((tls_model("initial-exec"))) = false;
pthread_key_t thread_exit_key;

constexpr unsigned kTagShift = 28;  // 256 MiB per tag slot; 2^16 slots = 16 TiB reserved

void warn_line(const char* message) { log_line("%s", message); }

// getenv is not safe this early in a preloaded library; walk the environment ourselves.
const char* find_env(const char* name) {
  const size_t n = strlen(name);
  for (char** e = environ; e && *e; ++e) {
    if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

void* map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// fork: only the forking thread lives on in the child; its state and every slab are copied intact
// and the bookkeeping is atomics. The prepare handler takes the registry lock, which a thread
// holds through its whole exit: so at the fork every other thread is either running (on
// Global::running) or retired with its exit_lock free, never half-way.
void before_fork() {
  while (g.registry_lock.test_and_set(std::memory_order_acquire)) {
  }
}
void after_fork_in_parent() { g.registry_lock.clear(std::memory_order_release); }

// In the child the other threads are gone, but their states stay reachable through the blocks
// they owned. An exited thread's exit_lock may have been held by another thread's free at the
// fork: released. Threads that were running are retired now as if they had exited: an empty slab
// is given back at once (else a child of a server with `threads` inference threads would find no
// slab left for its own), one with live blocks when the child frees the last of them.
void after_fork_in_child() {
  stats().forks.fetch_add(1, std::memory_order_relaxed);
  for (ThreadState* t = g.retired.load(std::memory_order_relaxed); t; t = t->next_retired) {
    t->exit_lock.clear(std::memory_order_relaxed);
  }
  ThreadState* self = tls_state;
  ThreadState* t = g.running;
  g.running = nullptr;
  while (t) {
    ThreadState* next = t->running_next;
    t->running_prev = t->running_next = nullptr;
    if (t == self) {
      t->running_next = g.running;
      g.running = t;
    } else {
      flush_counters_locked(*t);
      t->exit_lock.clear(std::memory_order_relaxed);
      t->exited.store(true, std::memory_order_seq_cst);
      retire_replay(*t);
      t->next_retired = g.retired.load(std::memory_order_relaxed);
      g.retired.store(t, std::memory_order_relaxed);
    }
    t = next;
  }
  g.registry_lock.clear(std::memory_order_release);
}

// A thread that exits gives its slab back when none of its blocks is alive any more (servers
// that start a thread per request would otherwise run out of slabs), and its records when no
// profiled block is. Otherwise both stay: another thread may still free into them.
void on_thread_exit(void* state) {
  ThreadState* t = static_cast<ThreadState*>(state);
  ReentryGuard guard;
  bool keep = true;
  {
    RegistryLock lock;  // the whole exit: see before_fork
    flush_counters_locked(*t);
    (t->running_prev ? t->running_prev->running_next : g.running) = t->running_next;
    if (t->running_next) t->running_next->running_prev = t->running_prev;
    while (t->exit_lock.test_and_set(std::memory_order_acquire)) {
    }
    t->exited.store(true, std::memory_order_seq_cst);  // before the last drain: see slab_free
    const bool slab_released = retire_replay(*t);
    t->exit_lock.clear(std::memory_order_release);
    // The state itself stays while anything may still reach it: a live slab block (whose last
    // free releases the slab) or a profiled block in a tag slot.
    keep = !slab_released || t->profiled_live.load(std::memory_order_acquire) != 0;
    if (keep) {
      t->next_retired = g.retired.load(std::memory_order_relaxed);
      while (!g.retired.compare_exchange_weak(t->next_retired, t, std::memory_order_release,
                                              std::memory_order_relaxed)) {
      }
    }
  }
  if (!keep) {
    if (t->record_chunks) {
      for (uint64_t c = 0; c < kRecordChunks && t->record_chunks[c]; ++c) {
        fallback::free(t->record_chunks[c]);
      }
      fallback::free(t->record_chunks);
    }
    t->~ThreadState();
    fallback::free(t);
  }
  tls_state = nullptr;
  tls_dead = true;  // later allocations of this thread's own TLS destructors: fallback only
}

void initialize() {
  int expected = 0;
  if (!g.init_state.compare_exchange_strong(expected, 1)) return;
  const char* conf = find_env("MEMOPLAN_CONF");
  fault::parse_rules(find_env("MEMOPLAN_FAULTS"));  // the fault-injection build only
  parse_options(conf, g.options, warn_line);
  if (g.options.log_path[0]) {
    const int fd = open(g.options.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) g.log_fd = fd;
  }
  const char* error = nullptr;
  if (!fallback::init(g.options.fallback, &error)) {
    // Without a real allocator nothing works; the bootstrap pool keeps us alive long enough to
    // say why.
    log_line("%s", error);
    g.init_state.store(2);
    return;
  }
  if (error) log_line("%s", error);
  passthrough_free_keeps_errno.store(fallback::free_keeps_errno(), std::memory_order_relaxed);
  g.mode_off = g.options.mode == Mode::kOff;
  g.portable_keys = portable_keys(g.options);
  if (!g.mode_off) {
    // 16 TiB of tag slots; where the address space is smaller (sanitizers, ulimit -v), smaller
    // slots (larger allocations then go untracked).
    bool ok = !fault::should_fail(fault::Site::kTagRegion);
    if (!ok) errno = ENOMEM;
    for (unsigned shift = kTagShift; ok && !g.tags.reserved() && shift >= 20; shift -= 4) {
      g.tags.reserve(shift, 1u << 16);
    }
    unsigned slab_shift = static_cast<unsigned>(__builtin_ctzll(g.options.slab_max));
    uint32_t slab_slots = 1;
    while (slab_slots < g.options.threads) slab_slots *= 2;
    ok = ok && g.tags.reserved() && g.slabs.reserve(slab_shift, slab_slots);
    g.tag_owner = static_cast<Global::SlotOwner*>(map_zeroed(sizeof(Global::SlotOwner) << 16));
    g.slab_owner = static_cast<ThreadState**>(map_zeroed(sizeof(ThreadState*) * slab_slots));
    if (!ok || !g.tag_owner || !g.slab_owner) {
      log_line("memoplan: cannot reserve address space for tags and slabs (%s); running unplanned",
               strerror(errno));
      g.mode_off = true;
      stats().address_space_failures.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!g.mode_off && fallback::next_malloc()) {
    small_malloc.store(fallback::next_malloc(), std::memory_order_relaxed);
    small_malloc_limit.store(g.options.min_size, std::memory_order_release);  // after small_malloc
  }
  if (g.mode_off && fallback::next_malloc()) {
    passthrough_free.store(fallback::next_free(), std::memory_order_relaxed);
    passthrough_malloc.store(fallback::next_malloc(), std::memory_order_relaxed);
  }
  pthread_key_create(&thread_exit_key, on_thread_exit);
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  g.init_state.store(2, std::memory_order_release);
}

inline bool ready() {
  if (__builtin_expect(g.init_state.load(std::memory_order_acquire) == 2, 1)) return true;
  initialize();
  return g.init_state.load(std::memory_order_acquire) == 2;
}

}  // namespace

Global& global() { return g; }

void engine_load_files() {
  if (ready()) load_replay_pass();
}

ReentryGuard::ReentryGuard() { ++tls_reentry; }
ReentryGuard::~ReentryGuard() { --tls_reentry; }
bool ReentryGuard::active() { return tls_reentry != 0; }

void log_line(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(line, sizeof line - 1, format, args);
  va_end(args);
  if (n < 0) return;
  if (n > static_cast<int>(sizeof line) - 2) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t ignored = write(g.log_fd, line, static_cast<size_t>(n));
  (void)ignored;
}

RegistryLock::RegistryLock() {
  while (g.registry_lock.test_and_set(std::memory_order_acquire)) {
  }
}
RegistryLock::~RegistryLock() { g.registry_lock.clear(std::memory_order_release); }

void flush_counters(ThreadState& t) {
  RegistryLock lock;
  flush_counters_locked(t);
}

void flush_counters_locked(ThreadState& t) {
  Stats& s = stats();
  LocalCounters& c = t.counters;
  s.planned_hits.fetch_add(c.planned_hits.get(), std::memory_order_relaxed);
  s.steady_hits.fetch_add(c.steady_hits.get(), std::memory_order_relaxed);
  s.passes.fetch_add(c.passes.get(), std::memory_order_relaxed);
  s.outside_passes.fetch_add(c.outside_passes.get(), std::memory_order_relaxed);
  for (OwnedCounter* counter : {&c.planned_hits, &c.steady_hits, &c.passes, &c.outside_passes}) {
    counter->value.store(0, std::memory_order_relaxed);
  }
  const uint64_t thread_peak = t.peak_live_bytes.get();
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
  t->index = g.next_thread_index.fetch_add(1, std::memory_order_relaxed);
  // With detection on, record from the first allocation; explicit passes (if the program calls
  // memoplan_pass_begin) take over and restart profiling after the warm-up passes.
  if (!g.options.detect) {
    t->phase = Phase::kWarmup;
  } else {
    t->phase = g.options.mode == Mode::kReplay ? Phase::kSeeking : Phase::kProfiling;
  }
  {
    RegistryLock lock;
    t->running_next = g.running;
    if (g.running) g.running->running_prev = t;
    g.running = t;
  }
  tls_state = t;
  pthread_setspecific(thread_exit_key, t);
  return t;
}

// mode:replay on a thread without pass marks: replay starts at the loaded pass's first
// allocation (a wrong start costs one pass of fallbacks: the matcher finds the start again).
static void seek_loaded_pass(ThreadState& t, uint64_t key) {
  const int state = g.replay_pass_state.load(std::memory_order_acquire);
  if (state == 2) {
    t.phase = Phase::kDisabled;
  } else if (state == 1 && key == g.replay_pass.slots[0].key && !start_loaded_replay(t)) {
    t.phase = Phase::kDisabled;
  }
}

// The program's request meets a failing allocator: it gets NULL (errno ENOMEM, set by the
// fallback) exactly as without memoplan. The shim's own failing requests count elsewhere.
__attribute__((noinline, cold)) void* out_of_memory() {
  if (!tls_reentry) stats().out_of_memory.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

void* fallback_alloc(size_t size, size_t alignment, bool zero) {
  void* p;
  if (alignment <= 16) {
    p = zero ? fallback::calloc(1, size) : fallback::malloc(size);
  } else {
    p = fallback::aligned(alignment, size);
    if (p && zero) memset(p, 0, size);
  }
  return __builtin_expect(p != nullptr, 1) ? p : out_of_memory();
}

void* engine_alloc(size_t size, size_t alignment, bool zero) {
  // While the fallback is being resolved (by this thread or another), serve from the static
  // pool: it is zero-initialized and never reused, so `zero` holds without a memset.
  if (__builtin_expect(!ready(), 0)) return bootstrap::allocate(size, alignment);
  if (g.mode_off || tls_reentry || size < g.options.min_size) {
    return fallback_alloc(size, alignment, zero);
  }

  ThreadState* t = thread_state();
  void* p = nullptr;
  if (t && t->explicit_passes && !t->in_pass) {
    // Marked passes: what happens between them is not part of the plan.
    t->counters.outside_passes.bump();
  } else if (t && t->phase >= Phase::kProfiling && t->phase <= Phase::kSeeking) {
    ReentryGuard guard;
    char stack_marker;
    uint64_t key = cached_callsite_key(*t, size, static_cast<unsigned>(g.options.callsite_depth),
                                       g.portable_keys,
                                       reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                       reinterpret_cast<uintptr_t>(&stack_marker));
    // A request for stricter alignment is a different request: it needs a differently aligned slot.
    if (alignment > 16) key ^= alignment * 0x9e3779b97f4a7c15ull;
    if (t->phase == Phase::kSeeking) seek_loaded_pass(*t, key);
    if (t->phase == Phase::kReplaying) {
      p = replay_alloc(*t, size, alignment, key);
      if (p && zero) memset(p, 0, size);
    } else if (t->phase == Phase::kProfiling && alignment <= g.tags.slot_bytes()) {
      p = profile_alloc(*t, size, alignment, key);  // fresh pages: already zero
    }
  }
  if (p) return p;
  return fallback_alloc(size, alignment, zero);
}

void engine_free(void* p) {
  if (!p) return;
  if (__builtin_expect(g.slabs.contains(p), 0)) return slab_free(p);
  if (__builtin_expect(g.tags.contains(p), 0)) {
    const int saved = errno;  // decommitting can fail (ENOMEM at the map count limit)
    profile_free(p);
    errno = saved;
    return;
  }
  if (__builtin_expect(bootstrap::owns(p), 0)) return;
  fallback::free(p);
}

size_t engine_usable_size(void* p) {
  if (!p) return 0;
  if (g.slabs.contains(p)) return slab_usable_size(p);
  if (g.tags.contains(p)) return profile_usable_size(p);
  if (bootstrap::owns(p)) return bootstrap::usable_size(p);
  return fallback::usable_size(p);
}

void* engine_realloc(void* p, size_t size) {
  if (!p) return engine_alloc(size, 16, false);
  const bool ours = g.slabs.contains(p) || g.tags.contains(p) || bootstrap::owns(p);
  if (!ours) {
    void* q = fallback::realloc(p, size);
    return q || size == 0 ? q : out_of_memory();
  }
  if (size == 0) {
    engine_free(p);
    return nullptr;
  }
  // Our blocks never grow in place: move them to the fallback, which is where a resized block
  // belongs anyway (its size no longer matches the plan).
  const size_t old_size = engine_usable_size(p);
  void* q = fallback::malloc(size);
  if (!q) return out_of_memory();  // errno is ENOMEM; p is untouched, as realloc promises
  memcpy(q, p, old_size < size ? old_size : size);
  if (g.slabs.contains(p)) stats().moved_by_realloc.fetch_add(1, std::memory_order_relaxed);
  engine_free(p);
  return q;
}

void engine_pass_begin() {
  if (!ready() || g.mode_off) return;
  ThreadState* t = thread_state();
  if (!t) return;
  ReentryGuard guard;
  if (!t->explicit_passes && (t->phase == Phase::kProfiling || t->phase == Phase::kReplaying ||
                              t->phase == Phase::kSeeking)) {
    // The program marks its passes: they replace automatic detection (and a plan it made, once
    // none of that plan's blocks is alive), warm-up passes first.
    if (retire_replay(*t)) t->phase = Phase::kWarmup;
  }
  t->explicit_passes = true;
  t->in_pass = true;
  ++t->passes_begun;
  t->counters.passes.bump();
  switch (t->phase) {
    case Phase::kWarmup:
      if (t->passes_begun <= g.options.passes) break;
      if (g.options.mode != Mode::kReplay) {
        t->phase = Phase::kProfiling;
        t->pass_first_record = t->record_count;
      } else if (start_loaded_replay(*t)) {
        t->replayed_passes = 1;
      } else if (g.replay_pass_state.load(std::memory_order_acquire) != 0) {
        t->phase = Phase::kDisabled;  // unusable files, or no slab for this thread
      }
      break;
    case Phase::kProfiling:
      // The previous profiled pass ended without memoplan_pass_end: profile this one instead.
      t->pass_first_record = t->record_count;
      break;
    case Phase::kReplaying:
      t->cursor = 0;
      ++t->replayed_passes;
      break;
    case Phase::kSeeking:
    case Phase::kDisabled:
      break;
  }
}

void engine_pass_end() {
  if (!ready() || g.mode_off) return;
  ThreadState* t = thread_state();
  if (!t) return;
  t->in_pass = false;
  flush_counters(*t);
  if (t->phase != Phase::kProfiling || !t->explicit_passes) return;
  ReentryGuard guard;
  const uint64_t count = t->record_count - t->pass_first_record;
  if (!finish_profile(*t, t->pass_first_record, count, t->tick, 0)) {
    t->phase = Phase::kDisabled;
    stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
    log_line("memoplan: thread %u runs unplanned: its profiled pass could not be planned",
             t->index);
  }
  // The first replayed pass starts at the next memoplan_pass_begin.
  t->cursor = 0;
}

}  // namespace memoplan::shim
