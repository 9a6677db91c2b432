// A small pool that serves allocations made before the fallback allocator is resolved: dlsym and
// dlopen allocate while we look the real malloc up, and other libraries' constructors may run
// before ours. Never freed (it is tiny); heaptrack and jemalloc do the same.
//
// The pool lies in the shim's span with its tags and slabs (engine.cc), so that free's check of
// "the shim's block?" is one range (unplanned.h): initialization reserves the span before anything
// can allocate and places the pool there. Until it does, other threads wait (a few system calls);
// the static pool serves only the initializing thread (nothing it calls there allocates), and
// every process that has no span (mode:off, no address space).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::shim::bootstrap {

inline constexpr size_t kPoolBytes = 1 << 20;
// Hidden: their addresses are read directly, not through the GOT.
extern char pool[kPoolBytes] __attribute__((visibility("hidden")));
// The pool in the span once placed; the static one until then (and without a span).
extern std::atomic<char*> span_pool __attribute__((visibility("hidden")));

// The calling thread initializes the shim: until place(), its requests take the static pool.
void begin();
// Where requests go from now on: `at` (kPoolBytes, committed, in the span) or, when null, the
// static pool. Called once.
void place(char* at);
// Whether the static pool handed out a block while a span was to come (then the span's range
// does not hold every pool block).
bool static_pool_used();

void* allocate(size_t size, size_t alignment);  // nullptr + ENOMEM when exhausted
// Inline: every free ends here or at a range check holding both.
inline bool owns(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a - reinterpret_cast<uintptr_t>(pool) < kPoolBytes ||
         a - reinterpret_cast<uintptr_t>(span_pool.load(std::memory_order_relaxed)) < kPoolBytes;
}
size_t usable_size(const void* p);

}  // namespace memoplan::shim::bootstrap
