// The key an allocation is matched by: its size and a hash of the few return addresses above the
// allocator, unwound by libunwind (no malloc; our reentry guard covers the rest) and cached per
// thread under the call's return address and stack pointer, confirmed by the deeper return
// addresses still on the stack (CallsiteCacheEntry, callsite_cache.h).
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>

#include "callsite_cache.h"
#include "fallback.h"
#include "stats.h"
#include "unwind_tables.h"

namespace memoplan::shim {
namespace {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Frames that belong to the shim: unwind_path, cached_callsite_key (both noinline, so this count
// holds) and engine_alloc. The exported malloc tail-calls engine_alloc, so the next frame is the
// program's call site (operator new, or an unoptimized build's malloc, adds one frame of ours that
// is the same for every call and so does not hurt the key).
constexpr int kOwnFrames = 3;

// A return address as (module file name, offset in the module): the same in every process that
// runs the same binaries, wherever ASLR loaded them. dladdr takes the loader's lock but does not
// allocate; this runs only on a call-site cache miss.
uint64_t portable_address(void* address) {
  Dl_info info;
  if (!dladdr(address, &info) || !info.dli_fbase) return 0;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the file's base name
  const char* name = info.dli_fname ? info.dli_fname : "";
  for (const char* c = name; *c; ++c) {
    if (*c == '/')
      h = 0xcbf29ce484222325ull;
    else
      h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
  }
  return mix(h, reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase));
}

// The gate fork closes (unwind_gate_close_for_fork): threads inside an unwind, and whether a fork
// is waiting for them to leave. The forking thread itself passes (an allocation from another
// fork handler after ours).
std::atomic<int> unwinding{0};
std::atomic<bool> fork_waiting{false};
__thread bool tls_forking __attribute__((tls_model("initial-exec"))) = false;

class UnwindGate {
 public:
  UnwindGate() {
    for (;;) {
      unwinding.fetch_add(1, std::memory_order_seq_cst);
      if (!fork_waiting.load(std::memory_order_seq_cst) || tls_forking) return;
      unwinding.fetch_sub(1, std::memory_order_seq_cst);
      while (fork_waiting.load(std::memory_order_acquire)) sched_yield();
    }
  }
  ~UnwindGate() { unwinding.fetch_sub(1, std::memory_order_release); }
  UnwindGate(const UnwindGate&) = delete;
  UnwindGate& operator=(const UnwindGate&) = delete;
};

// Whether the stack still holds the entry's path: its deeper return addresses where they were.
// Reads only slots above the stack pointer, each in the frame the previous one confirmed.
__attribute__((no_sanitize("address", "thread"))) inline bool confirms(
    const CallsiteCacheEntry& entry, uintptr_t stack) {
  for (uint32_t i = 0; i < entry.checked; ++i) {
    if (*reinterpret_cast<const volatile uint64_t*>(stack + entry.offset[i]) != entry.address[i]) {
      return false;
    }
  }
  return true;
}

// The key's hash from `depth` frames above ours, unwound step by step so that each deeper return
// address's stack slot is known: they go into `fill` (its tag set to `tag`) when every one is in
// memory above `stack`; otherwise `fill` is left empty and the path is unwound at every request.
// Every frame's return address, ours included, goes into `visited` (kOwnFrames + 16 at most), their
// number into `visited_count`. Called by cached_callsite_key only (kOwnFrames counts this frame).
constexpr unsigned kMaxFrames = kOwnFrames + 16;
__attribute__((noinline)) uint64_t unwind_path(unsigned depth, bool portable, uintptr_t stack,
                                               uint64_t tag, CallsiteCacheEntry& fill,
                                               uintptr_t* visited, unsigned& visited_count) {
  visited_count = 0;
  uint64_t h = mix(0x6d656d6f706c616eull, 0);  // the hash of a size-0 key, as before the cache
  fill.tag = 0;
  fill.checked = 0;
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) return h;
  bool cacheable = depth - 1 <= kCallsiteCheckedFrames;
  const unsigned frames = kOwnFrames + depth;
  for (unsigned i = 0; i < frames; ++i) {
    unw_word_t ip = 0;
    unw_get_reg(&cursor, UNW_REG_IP, &ip);
    if (visited_count < kMaxFrames) visited[visited_count++] = ip;
    if (i >= kOwnFrames) {
      h = mix(h, portable ? portable_address(reinterpret_cast<void*>(ip)) : ip);
      if (i > kOwnFrames && cacheable) {
        unw_save_loc_t where;
        const bool in_memory = unw_get_save_loc(&cursor, UNW_REG_IP, &where) == 0 &&
                               where.type == UNW_SLT_MEMORY && where.u.addr > stack &&
                               where.u.addr - stack <= UINT32_MAX;
        if (in_memory) {
          fill.offset[fill.checked] = static_cast<uint32_t>(where.u.addr - stack);
          fill.address[fill.checked] = ip;
          ++fill.checked;
        } else {
          cacheable = false;
        }
      }
    }
    if (i + 1 < frames && unw_step(&cursor) <= 0) break;
  }
  if (cacheable) {
    fill.tag = tag;
    fill.hash = h;
  } else {
    fill.checked = 0;
  }
  return h;
}

// The process's call paths, shared by its threads: a thread whose own cache misses looks here
// before it unwinds. A thread-per-request server runs the same paths on fresh threads, whose own
// caches are empty: without this each thread unwound every path again, and every unwind maps and
// gives back the unwind tables' pages (unwind_tables.h; 8 ms more CPU a request in
// bench/shim_thread_server.py). An entry is written once, then published (a slot's pointer, set
// from null) and never changed or freed, so readers take no lock. Slots fill in probe order and
// are never emptied, so a lookup ends at the first empty one. With the pool used up, or a probe
// window full, paths go unpublished: the threads' own caches still hold them.
constexpr size_t kSharedSlots = 8192;  // a power of two
constexpr size_t kSharedProbe = 8;
constexpr size_t kSharedEntries = 4096;
std::atomic<const CallsiteCacheEntry*> shared_slots[kSharedSlots];
CallsiteCacheEntry shared_pool[kSharedEntries];
std::atomic<size_t> shared_used{0};

size_t shared_slot(uint64_t path, size_t probe) {
  return ((path ^ (path >> 31)) + probe) & (kSharedSlots - 1);
}

// Another thread's entry is read on this thread's stack, at its offsets: only where they all lie
// under this thread's descriptor, that is in its stack (a thread on a stack of its own making,
// a coroutine's, or the main thread, whose descriptor is not above its stack, uses its own cache).
const CallsiteCacheEntry* find_shared(uint64_t path, uintptr_t stack) {
  const uintptr_t descriptor = reinterpret_cast<uintptr_t>(pthread_self());
  if (descriptor <= stack) return nullptr;
  for (size_t probe = 0; probe < kSharedProbe; ++probe) {
    const CallsiteCacheEntry* entry =
        shared_slots[shared_slot(path, probe)].load(std::memory_order_acquire);
    if (!entry) return nullptr;
    const bool in_stack =
        entry->checked == 0 || entry->offset[entry->checked - 1] < descriptor - stack;
    if (entry->tag == path && in_stack && confirms(*entry, stack)) return entry;
  }
  return nullptr;
}

void publish_shared(const CallsiteCacheEntry& filled) {
  if (!filled.tag) return;  // not cacheable (unwind_path)
  if (shared_used.load(std::memory_order_relaxed) >= kSharedEntries) return;
  const size_t index = shared_used.fetch_add(1, std::memory_order_relaxed);
  if (index >= kSharedEntries) return;
  CallsiteCacheEntry* entry = &shared_pool[index];
  *entry = filled;
  for (size_t probe = 0; probe < kSharedProbe; ++probe) {
    const CallsiteCacheEntry* empty = nullptr;
    if (shared_slots[shared_slot(filled.tag, probe)].compare_exchange_strong(
            empty, entry, std::memory_order_release, std::memory_order_relaxed)) {
      return;
    }
  }
}

// The unwind tables read since the last release given back (unwind_tables.h); under the gate.
void release_unreleased(CallsiteCache& cache) {
  if (cache.places_unreleased) release_unwind_tables(cache.unreleased, cache.places_unreleased);
  cache.places_unreleased = 0;
  cache.unwinds_unreleased = 0;
}

// An unwind (unwind_path, its arguments), inside the fork's gate; every kUnwindsPerRelease
// unwinds of the thread (`cache`; each one without it), the unwind tables they read are given
// back. Inlined: kOwnFrames counts no frame of its own.
__attribute__((always_inline)) inline uint64_t unwind_and_release(unsigned depth, bool portable,
                                                                  uintptr_t stack, uint64_t tag,
                                                                  CallsiteCacheEntry& fill,
                                                                  CallsiteCache* cache) {
  uintptr_t visited[kMaxFrames];
  unsigned visited_count = 0;
  UnwindGate gate;
  const uint64_t hash = unwind_path(depth, portable, stack, tag, fill, visited, visited_count);
  if (!cache) {
    release_unwind_tables(visited, visited_count);
    return hash;
  }
  for (unsigned i = 0; i < visited_count; ++i) {
    bool known = false;
    for (uint32_t j = 0; j < cache->places_unreleased && !known; ++j) {
      known = (cache->unreleased[j] >> 20) == (visited[i] >> 20);
    }
    if (known) continue;
    if (cache->places_unreleased == kUnreleasedPlaces) release_unreleased(*cache);
    cache->unreleased[cache->places_unreleased++] = visited[i];
  }
  if (++cache->unwinds_unreleased >= kUnwindsPerRelease) release_unreleased(*cache);
  return hash;
}

}  // namespace

__attribute__((noinline)) uint64_t cached_callsite_key(CallsiteCache*& cache, size_t size,
                                                       unsigned depth, bool portable,
                                                       uintptr_t return_address, uintptr_t stack,
                                                       uint64_t* site) {
  const uint64_t sized = mix(0x6d656d6f706c616eull, size);
  constexpr uint64_t kSite = 0x73697a6566726565ull;  // keys without the size
  *site = kSite;
  if (depth == 0) return sized;
  // The same call path reaches us with the same return address and stack pointer; the converse
  // does not hold, which the entry's deeper return addresses check (CallsiteCacheEntry). The stack
  // pointer is taken as its distance from the thread's descriptor, which glibc keeps at the top of
  // a thread's stack: the same for one call path on every thread a process starts alike (so a
  // thread-per-request server's threads agree on their passes, learned_pass.h, and share cached
  // paths, below).
  const uint64_t path = mix(mix(0x63616c6c73697465ull, return_address),
                            reinterpret_cast<uintptr_t>(pthread_self()) - stack);
  // The stack pointer is not the same in another process: portable keys unwind even at depth 1.
  if (depth == 1 && !portable) {
    *site = mix(kSite, path);
    return mix(sized, path);
  }
  if (!cache) {
    cache = static_cast<CallsiteCache*>(fallback::calloc(1, sizeof(CallsiteCache)));
    // Said as any failure of the shim's own bookkeeping; the next unwind tries again.
    if (!cache) stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
  }
  CallsiteCacheEntry scratch;  // without memory for the cache: uncached
  CallsiteCacheEntry* set = nullptr;
  uint64_t hash = 0;
  bool found = false;
  if (cache) {
    // The set is chosen from the whole path hash so allocations through one helper spread over
    // the cache; paths that share the tag take separate ways.
    set = &cache->entries[(path >> 17) % (kCallsiteCacheEntries / kCallsiteCacheWays) *
                          kCallsiteCacheWays];
    for (size_t way = 0; way < kCallsiteCacheWays && !found; ++way) {
      if (set[way].tag == path && confirms(set[way], stack)) {
        hash = set[way].hash;
        found = true;
      }
    }
  }
  if (!found) {
    CallsiteCacheEntry& fill = set ? set[cache->victim++ % kCallsiteCacheWays] : scratch;
    if (const CallsiteCacheEntry* shared = find_shared(path, stack)) {
      fill = *shared;
      hash = shared->hash;
    } else {
      hash = unwind_and_release(depth, portable, stack, path, fill, cache);
      publish_shared(fill);
    }
  }
  *site = mix(kSite, hash);
  return mix(sized, hash);
}

void give_back_unwind_tables(CallsiteCache* cache) {
  if (!cache || !cache->places_unreleased) return;
  UnwindGate gate;
  release_unreleased(*cache);
}

void release_callsite_cache(CallsiteCache*& cache) {
  fallback::free(cache);
  cache = nullptr;
}

void unwind_gate_close_for_fork() {
  tls_forking = true;
  fork_waiting.store(true, std::memory_order_seq_cst);
  while (unwinding.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void unwind_gate_open_after_fork(bool in_child) {
  // In the child no other thread exists: one that was backing off from the gate at the fork left
  // its count behind.
  if (in_child) unwinding.store(0, std::memory_order_relaxed);
  tls_forking = false;
  fork_waiting.store(false, std::memory_order_release);
}

}  // namespace memoplan::shim
