// The exported allocation family: every function glibc documents for a malloc replacement, and
// every C++ operator new/delete. Each is a thin shell over engine.h.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>

#include <malloc.h>
#include <unistd.h>

#include "bootstrap.h"
#include "engine.h"
#include "fallback.h"
#include "host_cxx.h"
#include "memoplan/pass.h"
#include "memoplan/stats.h"
#include "unplanned.h"

using namespace memoplan::shim;

#if MEMOPLAN_EMBEDDED_MIMALLOC
// The mimalloc compiled into this library (embedded_mimalloc.c; under LTO its fast path inlines
// here): malloc's below unplanned.inline_below.
extern "C" __attribute__((visibility("hidden"))) void* mi_malloc(size_t);
extern "C" __attribute__((visibility("hidden"))) void mi_free(void*);
#endif

#if MEMOPLAN_SHIM_STATIC_CXX
// This library's own code, from its ELF header to the end of its text (the linker's symbols,
// bound here: hidden).
extern "C" __attribute__((visibility("hidden"))) const char __ehdr_start[];
extern "C" __attribute__((visibility("hidden"))) const char __etext[];
#endif

namespace {

constexpr size_t kMinAlign = 16;  // what glibc's malloc guarantees on x86-64

// A malloc call from this library's own code (its copy of libstdc++ above all: host_cxx.h) is the
// shim's, not the program's: it goes to the fallback, unprofiled. At load, that copy's emergency
// exception pool (71 KiB) was every process's first tracked request: the main thread's state, a
// profile, an unwind and a tag slot made before the program ran (`perf stat -r 100 -e page-faults
// /bin/true`: 172 faults under the shim, 121 now, 50 without; CHANGELOG 2026-12-08).
inline bool own_call(const void* caller) {
#if MEMOPLAN_SHIM_STATIC_CXX
  return static_cast<const char*>(caller) >= __ehdr_start &&
         static_cast<const char*>(caller) < __etext;
#else
  (void)caller;
  return false;
#endif
}

// malloc: below min_size the fallback's, one compare where it is the mimalloc compiled in (its
// fast path inline) and two through a pointer otherwise; the engine's for the rest.
inline void* plain_malloc(size_t size, const void* caller = nullptr) {
#if MEMOPLAN_EMBEDDED_MIMALLOC
  if (__builtin_expect(size < unplanned.inline_below.load(std::memory_order_acquire), 1)) {
    if (void* p = mi_malloc(size)) return p;  // else (its arena full) glibc's, below
  }
#endif
  if (__builtin_expect(size < unplanned.direct_below.load(std::memory_order_acquire), 1)) {
    return unplanned.malloc(size);
  }
  if (__builtin_expect(own_call(caller), 0)) {
    ReentryGuard guard;  // the engine's rule for its own requests: the fallback's
    return engine_alloc(size, kMinAlign, false);
  }
  return engine_alloc(size, kMinAlign, false);
}

inline bool valid_alignment(size_t a) { return a && !(a & (a - 1)) && a % sizeof(void*) == 0; }

// The aligned entry points' block. An alignment of malloc's (16) or less: the fallback's malloc
// aligns a block only as far as its size needs (mimalloc: 8 bytes for 8 or 24), so the size
// rounds up to 16, where every block is 16-aligned (glibc's all are).
inline void* aligned_block(size_t size, size_t alignment) {
  if (alignment > kMinAlign) return engine_alloc(size, alignment, false);
  return engine_alloc(size <= SIZE_MAX - 15 ? (size + 15) & ~size_t{15} : size, kMinAlign, false);
}

// One attempt of every operator new: size 0 is 1 byte, alignment at least malloc's.
inline void* try_new(size_t size, size_t alignment) {
  alignment = alignment < kMinAlign ? kMinAlign : alignment;
  if (size == 0) size = 1;
  return alignment == kMinAlign ? plain_malloc(size) : engine_alloc(size, alignment, false);
}

// operator new: on failure call the installed new-handler and retry, throw when there is none
// ([new.delete.single]). The handler and the exception are the program's runtime's (host_cxx.h);
// the shim's own code (under ReentryGuard: the planner, the trace reader) gets its own
// std::bad_alloc, which it catches, and no handler of the program's.
inline void* new_or_throw(size_t size, size_t alignment) {
  for (;;) {
    void* p = try_new(size, alignment);
    if (p) return p;
    if (ReentryGuard::active()) throw std::bad_alloc();
    std::new_handler handler = host_cxx::new_handler();
    if (!handler) host_cxx::throw_bad_alloc();
    handler();
  }
}

// The nothrow forms: nullptr where the throwing form would throw. A handler may throw, so with one
// installed the program's runtime runs the retries and catches (host_cxx::nothrow_new).
inline void* new_or_null(size_t size, size_t alignment) noexcept {
  void* p = try_new(size, alignment);
  if (p || ReentryGuard::active() || !host_cxx::new_handler()) return p;
  return host_cxx::nothrow_new(size, alignment);
}

inline size_t page_size() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// free and every operator delete: the fallback's free for a block the shim did not hand out, a
// tail call (errno as that free leaves it: unplanned.h).
inline void release(void* p) {
#if MEMOPLAN_EMBEDDED_MIMALLOC
  if (__builtin_expect(unplanned.small_owns(p), 1)) return mi_free(p);
#endif
  if (__builtin_expect(!unplanned.may_own(p), 1)) return unplanned.free(p);
  engine_free(p);
}

}  // namespace

// mode:replay reads its files before main: the C++ runtime the trace reader needs is up (this
// library depends on it, so its constructors ran first) and no inference has started. Only the
// preloaded library does this; the engine's unit tests set their options first.
__attribute__((constructor)) static void load_files_at_start() { engine_load_files(); }

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t size) {
  return plain_malloc(size, __builtin_return_address(0));
}

// free keeps errno (POSIX 2024) on the engine's every path; a block of the fallback's keeps it as
// the fallback's own free does (unplanned.h).
__attribute__((visibility("default"))) void free(void* p) { release(p); }

__attribute__((visibility("default"))) void cfree(void* p) { free(p); }

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (__builtin_expect(bytes < unplanned.direct_below.load(std::memory_order_acquire), 1)) {
    return unplanned.calloc(count, size);
  }
  return engine_alloc(bytes, kMinAlign, true);
}

// A block the shim did not hand out stays with the fallback, whatever its new size (the engine's
// path does the same); p == NULL is malloc.
__attribute__((visibility("default"))) void* realloc(void* p, size_t size) {
  if (p && !unplanned.may_own(p)) return unplanned.realloc(p, size);
  return p ? engine_realloc(p, size) : malloc(size);
}

__attribute__((visibility("default"))) void* reallocarray(void* p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  if (!valid_alignment(alignment)) return EINVAL;
  const int saved = errno;
  void* p = aligned_block(size, alignment);
  if (!p) return ENOMEM;
  errno = saved;
  *out = p;
  return 0;
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  if (!alignment || (alignment & (alignment - 1))) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned_block(size, alignment);
}

// glibc's memalign takes any alignment: smaller than malloc's is malloc's, others round up to a
// power of two.
__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  if (alignment <= kMinAlign) return aligned_block(size, alignment);
  if (alignment > (SIZE_MAX >> 1) + 1) {
    errno = EINVAL;
    return nullptr;
  }
  size_t rounded = kMinAlign;
  while (rounded < alignment) rounded <<= 1;
  return aligned_block(size, rounded);
}

__attribute__((visibility("default"))) void* valloc(size_t size) {
  return engine_alloc(size, page_size(), false);
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  if (size > SIZE_MAX - page_size()) {  // rounding up to a page would wrap to 0
    errno = ENOMEM;
    return nullptr;
  }
  const size_t rounded = (size + page_size() - 1) & ~(page_size() - 1);
  return engine_alloc(rounded ? rounded : page_size(), page_size(), false);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
  if (p && !unplanned.may_own(p) && unplanned.usable_size) {
    return unplanned.usable_size(p);
  }
  return engine_usable_size(p);
}

// glibc's tuning and statistics calls: malloc_trim also gives back what memoplan holds idle for
// the calling thread (engine_trim); mallopt and mallinfo2 are the fallback's (fallback.h;
// memoplan's own arenas are not in mallinfo2).
__attribute__((visibility("default"))) int malloc_trim(size_t pad) { return engine_trim(pad); }
__attribute__((visibility("default"))) int mallopt(int param, int value) {
  return fallback::mallopt(param, value);
}
__attribute__((visibility("default"))) struct mallinfo2 mallinfo2(void) {
  return fallback::mallinfo2();
}

__attribute__((visibility("default"))) void memoplan_pass_begin(void) { engine_pass_begin(); }
__attribute__((visibility("default"))) void memoplan_pass_end(void) { engine_pass_end(); }
__attribute__((visibility("default"))) int memoplan_stats_json(char* buf, size_t len) {
  return engine_stats_json(buf, len);
}

}  // extern "C"

// C++ operators. The throwing forms throw std::bad_alloc; nothrow forms return nullptr.
#define MEMOPLAN_EXPORT __attribute__((visibility("default")))
MEMOPLAN_EXPORT void* operator new(size_t n) { return new_or_throw(n, kMinAlign); }
MEMOPLAN_EXPORT void* operator new[](size_t n) { return new_or_throw(n, kMinAlign); }
MEMOPLAN_EXPORT void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return new_or_null(n, kMinAlign);
}
MEMOPLAN_EXPORT void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return new_or_null(n, kMinAlign);
}
MEMOPLAN_EXPORT void* operator new(size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<size_t>(a));
}
MEMOPLAN_EXPORT void* operator new[](size_t n, std::align_val_t a) {
  return new_or_throw(n, static_cast<size_t>(a));
}
MEMOPLAN_EXPORT void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, static_cast<size_t>(a));
}
MEMOPLAN_EXPORT void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_or_null(n, static_cast<size_t>(a));
}
MEMOPLAN_EXPORT void operator delete(void* p) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete[](void* p) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete(void* p, size_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, size_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete(void* p, std::align_val_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
MEMOPLAN_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
MEMOPLAN_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
