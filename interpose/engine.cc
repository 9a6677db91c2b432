#include "engine.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#include "bootstrap.h"
#include "fallback.h"
#include "fault_injection.h"
#include "huge_blocks.h"
#include "learned_pass.h"
#include "lifecycle.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "stats.h"
#include "unplanned.h"

extern char** environ;

namespace memoplan::shim {

MEMOPLAN_CONSTINIT Unplanned unplanned;  // see state.h

namespace {

MEMOPLAN_CONSTINIT Global g;
__thread int tls_reentry __attribute__((tls_model("initial-exec"))) = 0;

constexpr unsigned kTagShift = 28;  // 256 MiB per tag slot; 2^16 slots = 16 TiB reserved
// Freed profiled blocks keep their pages for the next one, up to profile_keep bytes in all (32 MiB
// by default); they go back when a plan is made (install_replay). Unmapping at every free costs two
// system calls, a TLB shootdown on every core the process ran on and fresh page faults per
// allocation. Measured with `OPENBLAS_NUM_THREADS=1 LD_PRELOAD=<shim> /usr/bin/python3
// bench/shim_effect_workload.py mobilenet_v2 eager 20 1 1 out.json`: profiled passes 52 ms with 0
// (every free unmaps), 15 ms with 64 MiB, replayed 13.5 ms, glibc 21 ms; peak RSS 286, 296 and 292
// MiB. resnet18 (its eager convolutions reorder every weight, ~90 MB a pass): profiled passes
// 310-330 ms with 0, 136-141 with 16 MiB, 36-40 with 64; peak RSS 318 (mimalloc alone's), 331, 335.
// 64 MiB until 12-06: a model's load filled it (torch.jit.trace's temporaries, profiled) and held
// it into the run. 60 passes, EPYC: mobilenet_v2 traced peak RSS 375 -> 363 MiB with 32 (glibc
// 358, mimalloc 367), efficientnet_b0 traced 408 -> 387 (380, 386); its first ten passes 231 ->
// 293 ms and 299 -> 359, replay unchanged; the other zoo cells within 1 MiB.
// Huge blocks served in tag slots (huge_blocks.h) keep freed pages up to max(profile_keep, the
// live huge bytes).

void warn_line(const char* message) { log_line("%s", message); }

// Tag slots in use allowed at once: each is a mapping of its own (about two VMAs), and a
// process past vm.max_map_count cannot mmap anything — thread stacks, dlopen, glibc's large
// blocks. An eighth of the limit leaves the host the rest. Read without malloc.
uint32_t tag_budget() {
  uint64_t max_map_count = 65530;  // the kernel's default
  const int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char text[32];
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    uint64_t value = 0;
    for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
      value = value * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (value > 0) max_map_count = value;
  }
  const uint64_t budget = max_map_count / 8;
  return static_cast<uint32_t>(budget < 256 ? 256 : budget > 65536 ? 65536 : budget);
}

// getenv is not safe this early in a preloaded library; walk the environment ourselves.
const char* find_env(const char* name) {
  const size_t n = strlen(name);
  for (char** e = environ; e && *e; ++e) {
    if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

bool slab_map_fault() { return fault::should_fail(fault::Site::kSlabCommit); }
bool tag_commit_fault() { return fault::should_fail(fault::Site::kTagCommit); }

// The shim's span: [tags | slabs | bootstrap pool], so that "did the shim hand this block out?" is
// one range check on free's direct path (unplanned.h). 16 TiB of tag slots; where the address
// space is smaller (sanitizers, ulimit -v), smaller slots (larger allocations then go untracked).
// The tag region starts on a multiple of its size, as its own reservation would; the slabs follow
// on a multiple of theirs (1 GiB by default), the pool after them. Reserving allocates nothing:
// it runs before anything that could. False (errno set): none could be had.
bool reserve_span(replay::ArenaRegion::Config& slabs) {
  constexpr uint64_t kPoolSpan = bootstrap::kPoolBytes;
  for (unsigned shift = kTagShift; shift >= 20; shift -= 4) {
    const uint64_t tag_bytes = record::TagRegion::bytes(shift);
    const uint64_t slab_bytes = replay::ArenaRegion::bytes(slabs);
    if (tag_bytes % (uint64_t{1} << slabs.largest_shift)) continue;  // slabs off their alignment
    const uintptr_t base = vm::reserve_range(tag_bytes + slab_bytes + kPoolSpan, tag_bytes);
    if (!base) continue;
    slabs.within = base + tag_bytes;
    char* pool = reinterpret_cast<char*>(base + tag_bytes + slab_bytes);
    if (g.tags.adopt(base, shift) && g.slabs.reserve(slabs) &&
        mmap(pool, kPoolSpan, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED) {
      g.span_base = base;
      g.span_size = tag_bytes + slab_bytes + kPoolSpan;
      bootstrap::place(pool);
      return true;
    }
    const int saved = errno;
    g.tags.release_all();
    g.slabs.release_all();
    munmap(reinterpret_cast<void*>(base), tag_bytes + slab_bytes + kPoolSpan);
    errno = saved;
    slabs.within = 0;
  }
  return false;
}

// The exported functions' direct path (unplanned.h): the range, then free, then the size limit
// that opens malloc's. Not under fallback:jemalloc (no plain functions). Where the static pool
// served a block although a span came (something allocated on the initializing thread before the
// span existed), one range holds not every block of the shim's: free keeps the engine's path.
void publish_unplanned() {
  fallback::Plain plain;
  if (!fallback::plain(plain)) return;
  unplanned.malloc = plain.malloc;
  unplanned.calloc = plain.calloc;
  unplanned.realloc = plain.realloc;
  unplanned.usable_size = plain.usable_size;
  unplanned.free = plain.free;
  if (!bootstrap::static_pool_used()) {
    unplanned.own_base = g.span_base ? g.span_base : reinterpret_cast<uintptr_t>(bootstrap::pool);
    unplanned.own_size.store(g.span_base ? g.span_size : bootstrap::kPoolBytes,
                             std::memory_order_release);
  }
  unplanned.small_base = plain.small_base;
  unplanned.small_size.store(plain.small_size, std::memory_order_relaxed);
  const size_t below = g.mode_off ? SIZE_MAX : g.options.min_size;
  unplanned.direct_below.store(below, std::memory_order_release);
  if (plain.embedded_mimalloc) {
    unplanned.inline_below.store(below < plain.small_below ? below : plain.small_below,
                                 std::memory_order_release);
  }
}

void initialize() {
  int expected = 0;
  if (!g.init_state.compare_exchange_strong(expected, 1)) return;
  bootstrap::begin();
  const char* conf = find_env("MEMOPLAN_CONF");
  fault::parse_rules(find_env("MEMOPLAN_FAULTS"));  // the fault-injection build only
  parse_options(conf, g.options, warn_line);
  if (g.options.log_path[0]) {
    const int fd = open(g.options.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) g.log_fd = fd;
  }
  g.mode_off = g.options.mode == Mode::kOff;
  replay::ArenaRegion::Config slabs;
  slabs.largest_shift = slabs.smallest_shift =
      static_cast<unsigned>(__builtin_ctzll(g.options.slab_max));
  slabs.arenas = static_cast<uint32_t>(g.options.threads);
  slabs.track_sizes = true;  // malloc_usable_size and realloc of any slab block
  slabs.huge_pages = g.options.huge_pages;
  // Slabs of exited threads stay mapped for the next thread on the same plan (a server with a
  // thread per request, learned_pass.h) until idle_release; as many as threads may have slabs.
  slabs.parked = std::min(slabs.arenas, replay::ArenaRegion::kMaxParked);
  if (!g.mode_off) {
    bool ok = !fault::should_fail(fault::Site::kTagRegion);
    if (!ok) errno = ENOMEM;
    ok = ok && reserve_span(slabs);
    if (!ok) {
      log_line("memoplan: cannot reserve address space for tags and slabs (%s); running unplanned",
               strerror(errno));
      g.mode_off = true;
      stats().address_space_failures.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (g.mode_off) bootstrap::place(nullptr);  // the static pool it is
  const char* error = nullptr;
  if (!fallback::init(g.options.fallback, &error)) {
    // Without a real allocator nothing works; the bootstrap pool keeps us alive long enough to
    // say why.
    log_line("%s", error);
    g.init_state.store(2);
    return;
  }
  if (error) log_line("%s", error);
  g.portable_keys = portable_keys(g.options);
  if (!g.mode_off) {
    // Profiled blocks of 32 KiB or less packed, up to 16 to a 64 KiB slot mapped once: sqlite3's
    // 4.1-7.5 KiB pages took two pages and a mapping each (peak RSS 49.5 MiB, 39.0 packed, 36.1
    // under mimalloc alone; time over mimalloc 1.06 with small slots, 1.03 packed).
    g.tags.share_small_slots();
    g.tags.set_live_limit(tag_budget());
    g.tags.set_retain_bytes(g.options.profile_keep);
    g.tags.set_kept_expiry(0, kKeptNs);  // engine.h; the reaper expires them
    g.tags.set_kept_expiry(kKeptLargeBytes, kKeptLargeNs);
    g.slabs.set_counters(&stats());
    if (fault::kCompiledIn) {
      g.slabs.set_map_fault(&slab_map_fault);
      g.tags.set_commit_fault(&tag_commit_fault);
    }
  }
  if (!g.mode_off && fallback::maps_each_large_block()) {
    set_huge_blocks(kHugeRequest, g.options.profile_keep);  // huge_blocks.h
  }
  if (!install_thread_hooks()) {
    log_line("memoplan: cannot register thread-exit and fork handlers; running unplanned");
    g.mode_off = true;
  }
  publish_unplanned();
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
  if (!ready()) return;
  load_replay_pass();
  start_stats_writer();
}

int engine_stats_json(char* buf, size_t len) {
  if (!ready()) {
    if (buf && len) buf[0] = '\0';
    return -1;
  }
  const size_t needed = stats_json(buf, len, /*at_exit=*/false);
  return needed > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(needed);
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

// The program's request meets a failing allocator: it gets NULL and errno ENOMEM, as malloc
// promises, whatever the allocator behind set (jemalloc's realloc leaves errno alone). The shim's
// own failing requests count elsewhere.
__attribute__((noinline, cold)) void* out_of_memory() {
  if (!tls_reentry) stats().out_of_memory.fetch_add(1, std::memory_order_relaxed);
  errno = ENOMEM;
  return nullptr;
}

void* fallback_alloc(size_t size, size_t alignment, bool zero) {
  void* p;
  if (__builtin_expect(size >= kHugeRequest, 0)) {  // the small path makes no call here
    p = huge_alloc(size, alignment, zero);
    if (p) return p;
  }
  if (alignment <= 16) {
    p = zero ? fallback::calloc(1, size) : fallback::malloc(size);
  } else {
    p = fallback::aligned(alignment, size);
    if (p && zero) memset(p, 0, size);
  }
  return __builtin_expect(p != nullptr, 1) ? p : out_of_memory();
}

void* engine_alloc(size_t size, size_t alignment, bool zero) {
  // While the fallback is being resolved (by this thread or another), serve from the bootstrap
  // pool: zero pages never reused, so `zero` holds without a memset.
  if (__builtin_expect(!ready(), 0)) return bootstrap::allocate(size, alignment);
  if (g.mode_off || tls_reentry || size < g.options.min_size) {
    return fallback_alloc(size, alignment, zero);
  }

  ThreadState* t = thread_state();
  void* p = nullptr;
  if (t) {
    replay::OwnedCounters::bump(t->counters.requests);
    if (t->phase == Phase::kDisabled && !(t->detection.paused_left && pause_counts_down(*t))) {
      replay::OwnedCounters::bump(t->counters.unplanned_requests);
    }
  }
  if (t && t->explicit_passes && !t->in_pass) {
    // Marked passes: what happens between them is not part of the plan.
    replay::OwnedCounters::bump(t->counters.outside_passes);
  } else if (t && t->phase >= Phase::kProfiling && t->phase <= Phase::kSeeking) {
    ReentryGuard guard;
    char stack_marker;
    uint64_t site = 0;
    uint64_t key = cached_callsite_key(
        t->callsite, size, static_cast<unsigned>(g.options.callsite_depth), g.portable_keys,
        reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
        reinterpret_cast<uintptr_t>(&stack_marker), &site);
    // A request for stricter alignment is a different request: it needs a differently aligned slot.
    if (alignment > 16) {
      key ^= alignment * 0x9e3779b97f4a7c15ull;
      site ^= alignment * 0x9e3779b97f4a7c15ull;
    }
    if (t->phase == Phase::kSeeking) {
      seek_loaded_pass(*t, key);
    } else if (t->phase == Phase::kProfiling &&
               g.replay_pass_state.load(std::memory_order_acquire) == 1) {
      adopt_learned_pass(*t, key);
    }
    if (t->phase == Phase::kReplaying) {
      p = replay_alloc(*t, size, alignment, t->replay.size_free ? site : key);
      if (p && zero) memset(p, 0, size);
    } else if (t->phase == Phase::kProfiling && alignment <= g.tags.slot_bytes()) {
      p = profile_alloc(*t, size, alignment, key, site, zero);
    }
  }
  if (p) return p;
  return fallback_alloc(size, alignment, zero);
}

void engine_free(void* p) {
  if (!p) return;
  if (__builtin_expect(g.slabs.contains(p), 0)) return g.slabs.free(p, tls_state);
  if (__builtin_expect(g.tags.contains(p), 0)) {
    const int saved = errno;  // decommitting can fail (ENOMEM at the map count limit)
    if (!huge_free(p)) profile_free(p);
    errno = saved;
    return;
  }
  if (__builtin_expect(bootstrap::owns(p), 0)) return;
  fallback::free(p);
}

size_t engine_usable_size(void* p) {
  if (!p) return 0;
  if (g.slabs.contains(p)) return g.slabs.usable_size(p);
  if (g.tags.contains(p)) return profile_usable_size(p);
  if (bootstrap::owns(p)) return bootstrap::usable_size(p);
  return fallback::usable_size(p);
}

void* engine_realloc(void* p, size_t size) {
  if (!p) return engine_alloc(size, 16, false);
  if (__builtin_expect(!ready(), 0)) {
    // During initialization (dlsym reallocating its own buffers) there is no fallback yet: the
    // block moves within the bootstrap pool, whose blocks are never freed.
    void* q = bootstrap::allocate(size ? size : 1, 16);
    if (q && bootstrap::owns(p)) {
      const size_t old_size = bootstrap::usable_size(p);
      memcpy(q, p, old_size < size ? old_size : size);
    }
    return q;
  }
  const bool ours = g.slabs.contains(p) || g.tags.contains(p) || bootstrap::owns(p);
  if (!ours) {
    void* q = fallback::realloc(p, size);
    return q || size == 0 ? q : out_of_memory();
  }
  if (size == 0) {
    engine_free(p);
    return nullptr;
  }
  if (g.tags.contains(p) && huge_resize(p, size)) return p;
  // Planned and profiled blocks never grow in place: move them to the fallback, which is where a
  // resized block belongs anyway (its size no longer matches the plan).
  const size_t old_size = engine_usable_size(p);
  void* q = fallback_alloc(size, 16, false);
  if (!q) return nullptr;  // errno is ENOMEM; p is untouched, as realloc promises
  memcpy(q, p, old_size < size ? old_size : size);
  if (g.slabs.contains(p)) stats().moved_by_realloc.fetch_add(1, std::memory_order_relaxed);
  engine_free(p);
  return q;
}

int engine_trim(size_t pad) {
  if (!ready()) return 0;
  uint64_t released = 0;
  if (!g.mode_off && tls_state && !ReentryGuard::active()) {
    ThreadState& t = *tls_state;
    ReentryGuard guard;
    released += trim_replay(t.replay);
    released += g.slabs.release_parked();
    stats().released_bytes.fetch_add(released, std::memory_order_relaxed);
    // Records matter only while profiling (release_records counts them as released).
    if (t.phase != Phase::kProfiling) released += release_records(t.profiling);
  }
  if (!g.mode_off) released += give_back_kept_pages();  // whoever freed the blocks
  return fallback::trim(pad) || released ? 1 : 0;
}

void engine_pass_begin() {
  if (!ready() || g.mode_off) return;
  ThreadState* t = thread_state();
  if (!t) return;
  ReentryGuard guard;
  pass_begins(*t);
}

void engine_pass_end() {
  if (!ready() || g.mode_off) return;
  ThreadState* t = thread_state();
  if (t) pass_ends(*t);
}

}  // namespace memoplan::shim
