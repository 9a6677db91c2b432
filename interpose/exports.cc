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
#include "memoplan/pass.h"
#include "memoplan/stats.h"

using namespace memoplan::shim;

namespace {

constexpr size_t kMinAlign = 16;  // what glibc's malloc guarantees on x86-64

inline bool valid_alignment(size_t a) { return a && !(a & (a - 1)) && a % sizeof(void*) == 0; }

// operator new: on failure call the installed new-handler and retry, throw when there is none
// ([new.delete.single]).
inline void* new_or_throw(size_t size, size_t alignment) {
  alignment = alignment < kMinAlign ? kMinAlign : alignment;
  for (;;) {
    if (void* p = engine_alloc(size ? size : 1, alignment, false)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

inline void* new_or_null(size_t size, size_t alignment) noexcept {
  try {
    return new_or_throw(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

__attribute__((noinline)) void call_keeping_errno(void (*release)(void*), void* p) {
  const int saved = errno;
  release(p);
  errno = saved;
}

inline size_t page_size() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// The fallback's plain malloc (glibc's or mimalloc's, called directly): mimalloc 2.0 may fail
// without setting errno.
inline void* enomem_if_null(void* p) {
  if (__builtin_expect(p == nullptr, 0)) errno = ENOMEM;
  return p;
}

}  // namespace

// mode:replay reads its files before main: the C++ runtime the trace reader needs is up (this
// library depends on it, so its constructors ran first) and no inference has started. Only the
// preloaded library does this; the engine's unit tests set their options first.
__attribute__((constructor)) static void load_files_at_start() { engine_load_files(); }

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t size) {
  if (auto next = passthrough_malloc.load(std::memory_order_relaxed)) {
    return enomem_if_null(next(size));
  }
  if (size < small_malloc_limit.load(std::memory_order_acquire)) {
    return enomem_if_null(small_malloc.load(std::memory_order_relaxed)(size));
  }
  return engine_alloc(size, kMinAlign, false);
}

// free preserves errno (POSIX 2024). The engine keeps it on every path (fallback::free saves it
// around an allocator that may change it), so a slab block's free pays nothing for it; only
// mode:off's direct call to such an allocator needs the save, out of line.
__attribute__((visibility("default"))) void free(void* p) {
  void (*release)(void*) = passthrough_free.load(std::memory_order_relaxed);
  if (!release) return engine_free(p);
  // Blocks from before initialization (the bootstrap pool) were never the next allocator's.
  if (__builtin_expect(bootstrap::owns(p), 0)) return;
  if (__builtin_expect(passthrough_free_keeps_errno.load(std::memory_order_relaxed), 1)) {
    return release(p);
  }
  call_keeping_errno(release, p);
}

__attribute__((visibility("default"))) void cfree(void* p) { free(p); }

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return engine_alloc(bytes, kMinAlign, true);
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t size) {
  return engine_realloc(p, size);
}

__attribute__((visibility("default"))) void* reallocarray(void* p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return engine_realloc(p, bytes);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  if (!valid_alignment(alignment)) return EINVAL;
  const int saved = errno;
  void* p = engine_alloc(size, alignment < kMinAlign ? kMinAlign : alignment, false);
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
  return engine_alloc(size, alignment < kMinAlign ? kMinAlign : alignment, false);
}

// glibc's memalign takes any alignment: smaller than malloc's is malloc's, others round up to a
// power of two.
__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  if (alignment <= kMinAlign) return engine_alloc(size, kMinAlign, false);
  if (alignment > (SIZE_MAX >> 1) + 1) {
    errno = EINVAL;
    return nullptr;
  }
  size_t rounded = kMinAlign;
  while (rounded < alignment) rounded <<= 1;
  return engine_alloc(size, rounded, false);
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
MEMOPLAN_EXPORT void operator delete(void* p) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete[](void* p) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete(void* p, size_t) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, size_t) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete(void* p, std::align_val_t) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { engine_free(p); }
MEMOPLAN_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  engine_free(p);
}
MEMOPLAN_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  engine_free(p);
}
MEMOPLAN_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  engine_free(p);
}
