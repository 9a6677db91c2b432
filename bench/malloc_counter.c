/* libmemoplan_malloc_counter.so: counts a thread's calls into the allocator, for benchmarks.
 *
 * Preload it FIRST, in front of whatever allocator is measured:
 *     LD_PRELOAD="libmemoplan_malloc_counter.so libjemalloc.so.2" ./torch_alloc_bench ...
 * Every entry point forwards to the next definition in the symbol chain (dlsym(RTLD_NEXT)), so the
 * allocator behind it is unchanged; only the counts are added. The program reads its own thread's
 * counts through memoplan_bench_malloc_counts() (declare it weak, so the program also runs without
 * the counter). Counts are per-thread, in initial-exec TLS: no locks, no atomics.
 *
 * operator new/delete are wrapped too, because libstdc++'s call malloc through the PLT but
 * jemalloc, tcmalloc, mimalloc and the memoplan shim each define their own, which never reach
 * malloc. A per-thread depth counter makes one call count once: libstdc++'s operator new calling
 * malloc, or an allocator's realloc calling its own malloc, is one allocator call, not two. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "malloc_counter.h"

#define TLS __thread __attribute__((tls_model("initial-exec")))

static TLS struct memoplan_bench_counts counts;
static TLS int depth; /* > 0 while inside one of our entry points on this thread */

/* dlsym allocates (dlerror's buffer); until the real functions are known, requests are served
 * from this pool and never freed. Each block starts with its size, for realloc. */
static _Alignas(64) char bootstrap[64 << 10];
static size_t bootstrap_used;
static int resolving;

typedef void* (*MallocFn)(size_t);
typedef void (*FreeFn)(void*);
typedef void* (*CallocFn)(size_t, size_t);
typedef void* (*ReallocFn)(void*, size_t);
typedef int (*PosixMemalignFn)(void**, size_t, size_t);
typedef void* (*AlignedFn)(size_t, size_t);

static MallocFn real_malloc;
static FreeFn real_free;
static CallocFn real_calloc;
static ReallocFn real_realloc;
static PosixMemalignFn real_posix_memalign;
static AlignedFn real_aligned_alloc, real_memalign;
static MallocFn real_valloc, real_pvalloc;

static void* bootstrap_alloc(size_t size) {
  size_t start = (bootstrap_used + 63) & ~(size_t)63;
  if (size > sizeof bootstrap || start + 64 + size > sizeof bootstrap) return NULL;
  bootstrap_used = start + 64 + size;
  *(size_t*)(bootstrap + start) = size;
  return bootstrap + start + 64;
}

static int in_bootstrap(const void* p) {
  return (const char*)p >= bootstrap && (const char*)p < bootstrap + sizeof bootstrap;
}

/* Runs before threads exist (from the constructor or the process's first allocation). */
static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_free = (FreeFn)dlsym(RTLD_NEXT, "free");
  real_calloc = (CallocFn)dlsym(RTLD_NEXT, "calloc");
  real_realloc = (ReallocFn)dlsym(RTLD_NEXT, "realloc");
  real_posix_memalign = (PosixMemalignFn)dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = (AlignedFn)dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = (AlignedFn)dlsym(RTLD_NEXT, "memalign");
  real_valloc = (MallocFn)dlsym(RTLD_NEXT, "valloc");
  real_pvalloc = (MallocFn)dlsym(RTLD_NEXT, "pvalloc");
  real_malloc = (MallocFn)dlsym(RTLD_NEXT, "malloc"); /* last: it marks "resolved" */
  resolving = 0;
}

__attribute__((constructor)) static void init(void) { resolve(); }

void memoplan_bench_malloc_counts(struct memoplan_bench_counts* out) { *out = counts; }

/* Counts an allocation at the outermost entry point only. */
static inline void count_alloc(size_t size) {
  if (depth == 1) {
    ++counts.allocs;
    counts.bytes += size;
    if (size == 0) ++counts.zero_size;
  }
}

void* malloc(size_t size) {
  if (!real_malloc) {
    resolve();
    if (!real_malloc) return bootstrap_alloc(size);
  }
  ++depth;
  count_alloc(size);
  void* p = real_malloc(size);
  --depth;
  return p;
}

void free(void* p) {
  if (!p || in_bootstrap(p)) return;
  ++depth;
  if (depth == 1) ++counts.frees;
  int saved = errno; /* free must not change errno; a counter surely must not */
  real_free(p);
  errno = saved;
  --depth;
}

void* calloc(size_t n, size_t size) {
  if (!real_calloc) {
    resolve();
    if (!real_calloc) {
      if (size && n > SIZE_MAX / size) return NULL;
      return bootstrap_alloc(n * size); /* static storage: already zero */
    }
  }
  ++depth;
  count_alloc(n * size);
  void* p = real_calloc(n, size);
  --depth;
  return p;
}

void* realloc(void* p, size_t size) {
  if (!real_realloc || in_bootstrap(p)) {
    void* q = malloc(size);
    if (q && p) {
      size_t old = *(size_t*)((char*)p - 64);
      memcpy(q, p, old < size ? old : size);
    }
    return q;
  }
  ++depth;
  if (depth == 1) {
    /* realloc(NULL, n) is an allocation and realloc(p, 0) may be a free: count what it is. */
    if (p) {
      ++counts.reallocs;
    } else {
      ++counts.allocs;
      counts.bytes += size;
    }
  }
  void* q = real_realloc(p, size);
  --depth;
  return q;
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  resolve();
  ++depth;
  count_alloc(size);
  int rc = real_posix_memalign(out, alignment, size);
  --depth;
  return rc;
}

#define ALIGNED_WRAPPER(name, real)           \
  void* name(size_t alignment, size_t size) { \
    resolve();                                \
    ++depth;                                  \
    count_alloc(size);                        \
    void* p = real(alignment, size);          \
    --depth;                                  \
    return p;                                 \
  }
ALIGNED_WRAPPER(aligned_alloc, real_aligned_alloc)
ALIGNED_WRAPPER(memalign, real_memalign)

#define PAGE_WRAPPER(name, real) \
  void* name(size_t size) {      \
    resolve();                   \
    ++depth;                     \
    count_alloc(size);           \
    void* p = real(size);        \
    --depth;                     \
    return p;                    \
  }
PAGE_WRAPPER(valloc, real_valloc)
PAGE_WRAPPER(pvalloc, real_pvalloc)

/* C++ operators, by their Itanium ABI names (std::align_val_t is a size_t, a nothrow_t& a
 * pointer). Each finds the next definition on first use; one with no next definition (a program
 * without libstdc++) falls back to malloc/free. */
#define NOTHROW const void*
#define ALIGN size_t

/* Finds the next definition on first use. Inside ++depth: dlsym's own allocations are not counted.
 * Two threads racing here store the same value. */
#define NEXT(name, type)                                       \
  static type next_##name;                                     \
  type next = __atomic_load_n(&next_##name, __ATOMIC_RELAXED); \
  if (!next) {                                                 \
    next = (type)dlsym(RTLD_NEXT, #name);                      \
    __atomic_store_n(&next_##name, next, __ATOMIC_RELAXED);    \
  }

#define NEW_WRAPPER(name, PARAMS, ARGS) \
  void* name PARAMS {                   \
    typedef void*(*Fn)PARAMS;           \
    ++depth;                            \
    NEXT(name, Fn);                     \
    if (!next) {                        \
      --depth;                          \
      return malloc(size);              \
    }                                   \
    count_alloc(size);                  \
    void* p = next ARGS;                \
    --depth;                            \
    return p;                           \
  }

#define DELETE_WRAPPER(name, PARAMS, ARGS) \
  void name PARAMS {                       \
    typedef void(*Fn) PARAMS;              \
    if (!p || in_bootstrap(p)) return;     \
    ++depth;                               \
    NEXT(name, Fn);                        \
    if (next) {                            \
      if (depth == 1) ++counts.frees;      \
      next ARGS;                           \
      --depth;                             \
    } else {                               \
      --depth;                             \
      free(p);                             \
    }                                      \
  }

/* An operator new that throws leaves depth raised and the thread's later calls uncounted; the
 * benchmarks never run out of memory. -fexceptions lets the exception pass through these frames. */
NEW_WRAPPER(_Znwm, (size_t size), (size))
NEW_WRAPPER(_Znam, (size_t size), (size))
NEW_WRAPPER(_ZnwmRKSt9nothrow_t, (size_t size, NOTHROW t), (size, t))
NEW_WRAPPER(_ZnamRKSt9nothrow_t, (size_t size, NOTHROW t), (size, t))
NEW_WRAPPER(_ZnwmSt11align_val_t, (size_t size, ALIGN a), (size, a))
NEW_WRAPPER(_ZnamSt11align_val_t, (size_t size, ALIGN a), (size, a))
NEW_WRAPPER(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t size, ALIGN a, NOTHROW t), (size, a, t))
NEW_WRAPPER(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t size, ALIGN a, NOTHROW t), (size, a, t))

DELETE_WRAPPER(_ZdlPv, (void* p), (p))
DELETE_WRAPPER(_ZdaPv, (void* p), (p))
DELETE_WRAPPER(_ZdlPvm, (void* p, size_t n), (p, n))
DELETE_WRAPPER(_ZdaPvm, (void* p, size_t n), (p, n))
DELETE_WRAPPER(_ZdlPvRKSt9nothrow_t, (void* p, NOTHROW t), (p, t))
DELETE_WRAPPER(_ZdaPvRKSt9nothrow_t, (void* p, NOTHROW t), (p, t))
DELETE_WRAPPER(_ZdlPvSt11align_val_t, (void* p, ALIGN a), (p, a))
DELETE_WRAPPER(_ZdaPvSt11align_val_t, (void* p, ALIGN a), (p, a))
DELETE_WRAPPER(_ZdlPvmSt11align_val_t, (void* p, size_t n, ALIGN a), (p, n, a))
DELETE_WRAPPER(_ZdaPvmSt11align_val_t, (void* p, size_t n, ALIGN a), (p, n, a))
DELETE_WRAPPER(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void* p, ALIGN a, NOTHROW t), (p, a, t))
DELETE_WRAPPER(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void* p, ALIGN a, NOTHROW t), (p, a, t))
