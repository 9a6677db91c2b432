// The reaper: one background thread that gives back the pages of slabs nobody placed into for
// `idle_release` ms (an inference thread that gets no requests), through
// replay::ArenaRegion::discard_idle, and of tag slots kept past their expiry (engine.h, kKeptNs,
// kKeptLargeNs). Started with the first plan or block freed into a tag slot; a fork child
// starts its own at its next pass end. Like jemalloc's background threads it is created from inside
// the allocator, under the reentry guard, with every signal blocked (the program's signals never
// land on it), and it never allocates. The statistics writer (stats_file.cc) is made the same way
// (spawn_background_thread).
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "engine.h"
#include "memoplan/vm/monotonic.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

enum : int { kNotStarted, kRunning, kUnavailable };
std::atomic<int> reaper_state{kNotStarted};
std::atomic<bool> reaper_looping{false};  // the thread is past its start-up, in its loop
bool discards = false;                    // idle slabs too (the kernel has membarrier)
// 1 while the reaper waits with nothing kept (a futex word): start_reaper wakes it.
std::atomic<uint32_t> reaper_parked{0};

timespec duration(uint64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

bool watches_slabs() {
  const Global& g = global();
  return discards && (g.slabs.arenas_in_use() != 0 || g.slabs.arenas_parked() != 0);
}

// Nothing kept: waits `timeout_ns` (0: until woken) or until start_reaper's wake. Announced before
// the last look: a thread that keeps pages (or makes a slab) after that look sees the flag (both
// sides sequentially consistent); one before it left work that look finds. True when
// start_reaper's wake (or work found at the last look) ended it; false on a timeout or a spurious
// return, after which the loop looks again at once.
bool park(uint64_t timeout_ns) {
  reaper_parked.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (global().tags.retained_bytes() != 0 || (timeout_ns == 0 && watches_slabs())) {
    reaper_parked.store(0, std::memory_order_relaxed);
    return true;
  }
  const timespec timeout = duration(timeout_ns);
  syscall(SYS_futex, &reaper_parked, FUTEX_WAIT_PRIVATE, 1, timeout_ns ? &timeout : nullptr,
          nullptr, 0);
  return reaper_parked.exchange(0, std::memory_order_relaxed) == 0;  // the waker cleared it
}

void* reaper_main(void*) {
  const uint64_t idle_ns = global().options.idle_release * 1000000ull;
  // Slabs: looked at four times per period (a slab goes between 1 and 1.25 periods after its last
  // use), at most once per second and at least once per millisecond. Kept large tag slots: every
  // kKeptLargeNs, the others four times per kKeptNs (engine.h). Nothing kept: parked, woken by
  // the next keep (start_reaper); an idle process without slabs makes no wakeups at all.
  uint64_t discard_ns = idle_ns / 4;
  discard_ns = discard_ns < 1000000 ? 1000000 : discard_ns > 1000000000 ? 1000000000 : discard_ns;
  const uint64_t kept_ns = kKeptNs / 4;
  reaper_looping.store(true, std::memory_order_release);
  uint64_t next_discard = 0;
  uint64_t next_kept = 0;
  for (;;) {
    Global& g = global();
    const uint64_t now = vm::monotonic_ns();
    if (g.tags.retained_bytes() != 0) {
      const bool all = now >= next_kept;
      if (all) next_kept = now + kept_ns;
      stats().released_bytes.fetch_add(g.tags.expire_kept(now, all ? 0 : kKeptLargeBytes),
                                       std::memory_order_relaxed);
    }
    const bool slabs = watches_slabs();
    if (slabs && now >= next_discard) {
      g.slabs.discard_idle(now, idle_ns);
      next_discard = now + discard_ns;
    }
    // Woken, it sleeps one interval before it looks: nothing it was woken for is due sooner (a
    // kept slot expires after kKeptNs, a slab after idle_release), and a program that keeps a
    // block and takes it back thousands of times a second (sqlite3's page cache) would otherwise
    // pay a wake, a system call, for each keep.
    if (g.tags.retained_bytes() == 0 && !park(slabs ? discard_ns : 0)) continue;
    uint64_t wait = g.tags.keeps(kKeptLargeBytes) ? kKeptLargeNs : kept_ns;
    if (watches_slabs() && discard_ns < wait) wait = discard_ns;
    const timespec interval = duration(wait);
    nanosleep(&interval, nullptr);
  }
  return nullptr;
}

}  // namespace

int spawn_background_thread(void* (*main)(void*), const char* name) {
  ReentryGuard guard;  // pthread_create's own allocations go to the fallback
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // A small stack; where the program's static TLS does not fit in it (LibTorch's does not: glibc
  // puts static TLS on each thread's stack and answers EINVAL), the default size.
  pthread_t thread;
  int rc = EINVAL;
  for (size_t stack : {size_t{64} << 10, size_t{0}}) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack) pthread_attr_setstacksize(&attr, stack);
    rc = pthread_create(&thread, &attr, main, nullptr);
    pthread_attr_destroy(&attr);
    if (rc != EINVAL) break;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc == 0) pthread_setname_np(thread, name);
  return rc;
}

void start_reaper() {
  if (reaper_state.load(std::memory_order_relaxed) != kNotStarted) {
    // Running, maybe parked (park()): the caller's new work is ordered before this look.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (reaper_parked.load(std::memory_order_relaxed) != 0 &&
        reaper_parked.exchange(0, std::memory_order_acq_rel) != 0) {
      syscall(SYS_futex, &reaper_parked, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
    return;
  }
  // idle_release:0 turns the thread off (kept slots then stay until a plan or malloc_trim):
  // ThreadSanitizer refuses it in a fork child, whose next pass end starts its own.
  if (global().options.idle_release == 0 || global().mode_off) return;
  int expected = kNotStarted;
  if (!reaper_state.compare_exchange_strong(expected, kRunning)) return;
  discards = replay::ArenaRegion::idle_discard_supported();
  if (!discards) log_line("memoplan: the kernel has no membarrier: idle slabs stay resident");
  const int rc = spawn_background_thread(&reaper_main, "memoplan-reaper");
  if (rc != 0) {
    reaper_state.store(kUnavailable);
    log_line(
        "memoplan: cannot start the reaper (%s): idle slabs and kept large blocks stay "
        "resident",
        strerror(rc));
  }
}

bool reaper_settled() {
  const int state = reaper_state.load(std::memory_order_acquire);
  return state != kRunning || reaper_looping.load(std::memory_order_acquire);
}

void reaper_after_fork_in_child() {
  reaper_looping.store(false, std::memory_order_relaxed);
  reaper_parked.store(0, std::memory_order_relaxed);
  if (reaper_state.load(std::memory_order_relaxed) == kRunning) {
    reaper_state.store(kNotStarted, std::memory_order_relaxed);
  }
}

}  // namespace memoplan::shim
