#include "fallback.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <cerrno>
#include <cstring>

#include "fault_injection.h"

// The mimalloc compiled into the shim (embedded_mimalloc.c), where it was built with one: weak,
// null in the engine's tests (linked without it), which load libmimalloc.so.2 instead. Declared
// only then: in a build without it a weak reference would bind, at load, to a program's own
// mi_malloc (mimalloc 3 on Debian 13, which the shim keeps out).
#if MEMOPLAN_EMBEDDED_MIMALLOC
extern "C" {
void* mi_malloc(size_t) __attribute__((weak));
void* mi_calloc(size_t, size_t) __attribute__((weak));
void* mi_realloc(void*, size_t) __attribute__((weak));
void mi_free(void*) __attribute__((weak));
size_t mi_usable_size(const void*) __attribute__((weak));
void* mi_malloc_aligned_at(size_t, size_t, size_t) __attribute__((weak));
void mi_collect(bool) __attribute__((weak));
void mi_process_info(size_t*, size_t*, size_t*, size_t*, size_t*, size_t*, size_t*, size_t*)
    __attribute__((weak));
void mi_register_error(void (*)(int, void*), void*) __attribute__((weak));
int memoplan_mi_confine(size_t bytes, uintptr_t* base) __attribute__((weak));
}
#endif

namespace memoplan::shim::fallback {
namespace {

using MallocFn = void* (*)(size_t);
using CallocFn = void* (*)(size_t, size_t);
using ReallocFn = void* (*)(void*, size_t);
using MemalignFn = int (*)(void**, size_t, size_t);
using FreeFn = void (*)(void*);
using UsableFn = size_t (*)(void*);
using MallocxFn = void* (*)(size_t, int);
using RallocxFn = void* (*)(void*, size_t, int);
using DallocxFn = void (*)(void*, int);
using SallocxFn = size_t (*)(const void*, int);
using TrimFn = int (*)(size_t);
using MalloptFn = int (*)(int, int);
using Mallinfo2Fn = struct mallinfo2 (*)();
using AlignedAtFn = void* (*)(size_t, size_t, size_t);
using CollectFn = void (*)(bool);
using ProcessInfoFn = void (*)(size_t*, size_t*, size_t*, size_t*, size_t*, size_t*, size_t*,
                               size_t*);

struct Functions {
  MallocFn malloc = nullptr;
  CallocFn calloc = nullptr;
  ReallocFn realloc = nullptr;
  MemalignFn posix_memalign = nullptr;
  FreeFn free = nullptr;
  UsableFn usable = nullptr;
  // jemalloc's non-standard API, when fallback:jemalloc
  MallocxFn mallocx = nullptr;
  RallocxFn rallocx = nullptr;
  DallocxFn dallocx = nullptr;
  SallocxFn sallocx = nullptr;
  // mimalloc's aligned allocation and collection, when mimalloc is the fallback. The `_at` form
  // (offset 0): mi_malloc_aligned's shortcut takes a power-of-two size as aligned to itself, and
  // Debian 12's mimalloc 2.0.9 then answers some requests misaligned (512 bytes at 256: ...180;
  // found by the deviation fuzzer).
  AlignedAtFn mi_malloc_aligned_at = nullptr;
  CollectFn mi_collect = nullptr;
  ProcessInfoFn mi_process_info = nullptr;
  // glibc's tuning and statistics calls, forwarded
  TrimFn trim = nullptr;
  MalloptFn mallopt = nullptr;
  Mallinfo2Fn mallinfo2 = nullptr;
};

Functions fn;
bool glibc_free_keeps_errno = false;

template <typename F>
bool resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}
const char* chosen = "next";

bool in_libc(void* function) {
  Dl_info info;
  if (!function || !dladdr(function, &info) || !info.dli_fname) return false;
  const char* slash = strrchr(info.dli_fname, '/');
  return strncmp(slash ? slash + 1 : info.dli_fname, "libc.so", 7) == 0;
}

// mimalloc through its own API (mi_*), loaded privately: its exported malloc interposes nothing.
// Its free takes only its own blocks: every block the program frees came through this shim
// (glibc routes its internal allocations through the interposed malloc), so none is foreign.
// A failure sets errno through mimalloc_error (below).
ReallocFn mi_realloc_fn = nullptr;
// realloc(p, 0) frees p and returns NULL, as glibc's does (mimalloc's would return a new block,
// which a program written for glibc leaks).
void* mi_realloc_glibc(void* p, size_t size) {
  if (size == 0 && p) {
    fn.free(p);
    return nullptr;
  }
  return mi_realloc_fn(p, size);
}

// mimalloc reports a failed allocation to its error handler, not through errno (2.0: "unable to
// allocate memory" with ENOMEM, or EOVERFLOW for a size past its largest): errno ENOMEM, as
// glibc's malloc sets, so its functions answer the program directly (unplanned.h). Its other
// reports (EFAULT for an invalid free, EINVAL, EAGAIN) are not the program's allocation failing.
using ErrorFn = void (*)(int, void*);
using RegisterErrorFn = void (*)(ErrorFn, void*);
void mimalloc_error(int err, void*) {
  if (err == ENOMEM || err == EOVERFLOW) errno = ENOMEM;
}

// mimalloc's functions into `mi`: the copy compiled into the shim where there is one, else
// libmimalloc.so.2's; false (with `mi` partly written) when one is missing.
bool find_mimalloc(Functions& mi, RegisterErrorFn& register_error) {
#if MEMOPLAN_EMBEDDED_MIMALLOC
  if (&::mi_malloc != nullptr) {
    mi.malloc = &mi_malloc;
    mi.calloc = &mi_calloc;
    mi_realloc_fn = &mi_realloc;
    mi.free = &mi_free;
    mi.usable = reinterpret_cast<UsableFn>(&mi_usable_size);
    mi.mi_malloc_aligned_at = &mi_malloc_aligned_at;
    mi.mi_collect = &mi_collect;
    mi.mi_process_info = &mi_process_info;
    register_error = &mi_register_error;
    return true;
  }
#endif
  // mimalloc 2 only. Debian 13 ships mimalloc 3.0.1 (libmimalloc.so.3, a beta of the 3 series):
  // behind the shim it crashed in mi_malloc on a fresh thread under the deviation fuzzer's thread
  // churn (interpose.deviation_fuzz, 4 threads, 20000 passes; glibc behind the shim passes), as
  // mimalloc's tracker reports for 3.x on other platforms. There the shim takes glibc, or an
  // allocator composed after it.
  void* handle = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL);
  // On a failure the handle stays: closing a library that may have started threads is unsafe.
  return handle && resolve(handle, "mi_malloc", mi.malloc) &&
         resolve(handle, "mi_calloc", mi.calloc) && resolve(handle, "mi_realloc", mi_realloc_fn) &&
         resolve(handle, "mi_free", mi.free) && resolve(handle, "mi_usable_size", mi.usable) &&
         resolve(handle, "mi_malloc_aligned_at", mi.mi_malloc_aligned_at) &&
         resolve(handle, "mi_collect", mi.mi_collect) &&
         resolve(handle, "mi_process_info", mi.mi_process_info) &&
         resolve(handle, "mi_register_error", register_error);
}

bool load_mimalloc() {
  Functions mi = fn;  // fn changes only when every function is found
  RegisterErrorFn register_error = nullptr;
  if (!find_mimalloc(mi, register_error)) return false;
  register_error(&mimalloc_error, nullptr);
  mi.realloc = &mi_realloc_glibc;
  fn = mi;
  return true;
}

constexpr size_t kSmallBelow = 512;  // below: mimalloc (fallback:auto, compiled in)

#if MEMOPLAN_EMBEDDED_MIMALLOC
// fallback:auto with the mimalloc compiled in: mimalloc takes the requests under kSmallBelow
// bytes, glibc's malloc (the next in the chain: `glibc` below) the rest; huge ones still come from
// the tag region (huge_blocks.h), where glibc's heap would keep bench/large_blocks' 108 MiB.
// Measured one process each (CHANGELOG 2026-12-07): peak RSS over glibc alone, bert_encoder eager
// +6.1 -> +3.3 MiB, gpt_decoder eager +4.1 -> +0.9; glibc for 512 B - 4 KiB only (mimalloc above)
// kept bert's +6. mimalloc's small-object path stays (the faster one: docs/SHIM.md). Its blocks
// lie in one arena (`small_base`, `small_size`: memoplan_mi_confine), so a block's owner is a
// range check; a request mimalloc cannot serve (its arena full) goes to glibc's.
size_t small_below = 0;  // mimalloc's requests: those under it
uintptr_t small_base = 0;
size_t small_size = 0;
constexpr size_t kSmallArenaBytes = size_t{64} << 30;
Functions glibc;     // the chain's next: malloc, calloc, realloc, posix_memalign, free, usable
Functions mimalloc;  // the confined mimalloc's, under the routed ones in `fn`

inline bool small_owns(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - small_base < small_size;
}
inline bool mimalloc_size(size_t size) { return size < small_below; }
void* routed_malloc(size_t size) {
  if (mimalloc_size(size)) {
    if (void* p = mimalloc.malloc(size)) return p;
  }
  return glibc.malloc(size);
}
void* routed_calloc(size_t count, size_t size) {
  size_t bytes;
  if (!__builtin_mul_overflow(count, size, &bytes) && mimalloc_size(bytes)) {
    if (void* p = mimalloc.calloc(count, size)) return p;
  }
  return glibc.calloc(count, size);
}
void routed_free(void* p) {
  if (small_owns(p)) return mimalloc.free(p);
  glibc.free(p);
}
size_t routed_usable(void* p) {
  if (small_owns(p)) return mimalloc.usable(p);
  return glibc.usable ? glibc.usable(p) : 0;
}
// A block stays with its allocator, whatever its new size, unless mimalloc cannot grow it (its
// arena full): then it moves to glibc's, as a request mimalloc cannot serve does (errno may then
// say ENOMEM on a success, as POSIX allows).
void* routed_realloc(void* p, size_t size) {
  if (!p) return routed_malloc(size);
  if (!small_owns(p)) return glibc.realloc(p, size);
  if (void* q = mimalloc.realloc(p, size); q || size == 0) return q;
  void* q = glibc.malloc(size);
  if (!q) return nullptr;  // p stays valid, errno ENOMEM (glibc's malloc)
  size_t keep = mimalloc.usable(p);
  memcpy(q, p, keep < size ? keep : size);
  mimalloc.free(p);
  return q;
}
int routed_memalign(void** out, size_t alignment, size_t size) {
  if (mimalloc_size(size)) {
    if (void* p = mimalloc.mi_malloc_aligned_at(size, alignment, 0)) {
      *out = p;
      return 0;
    }
  }
  return glibc.posix_memalign(out, alignment, size);
}

#endif

// Confines the mimalloc compiled in to its arena and routes `fn` between it and glibc's (the
// chain's next), mimalloc taking the requests under `below`. False (fn unchanged) where the
// mimalloc is not the compiled-in one or its arena cannot be had.
bool route_small_to_mimalloc(size_t below) {
#if MEMOPLAN_EMBEDDED_MIMALLOC
  if (&::memoplan_mi_confine == nullptr || fn.malloc != &::mi_malloc) return false;
  Functions next;
  if (!resolve(RTLD_NEXT, "malloc", next.malloc) || !resolve(RTLD_NEXT, "calloc", next.calloc) ||
      !resolve(RTLD_NEXT, "realloc", next.realloc) ||
      !resolve(RTLD_NEXT, "posix_memalign", next.posix_memalign) ||
      !resolve(RTLD_NEXT, "free", next.free)) {
    return false;
  }
  resolve(RTLD_NEXT, "malloc_usable_size", next.usable);
  uintptr_t base = 0;
  if (!::memoplan_mi_confine(kSmallArenaBytes, &base)) return false;
  glibc = next;
  mimalloc = fn;
  small_base = base;
  small_size = kSmallArenaBytes;
  small_below = below;
  fn.malloc = &routed_malloc;
  fn.calloc = &routed_calloc;
  fn.realloc = &routed_realloc;
  fn.free = &routed_free;
  fn.usable = &routed_usable;
  fn.posix_memalign = &routed_memalign;
  fn.mi_malloc_aligned_at = nullptr;  // aligned() takes routed_memalign
  return true;
#else
  (void)below;
  return false;
#endif
}

// glibc's free keeps errno from 2.33 on (its NEWS for 2.33); other allocators promise nothing.
bool is_glibc_free_keeping_errno(FreeFn free_fn) {
  if (!in_libc(reinterpret_cast<void*>(free_fn))) return false;
  int major = 0, minor = 0;
  const char* version = gnu_get_libc_version();
  for (; *version >= '0' && *version <= '9'; ++version) major = major * 10 + (*version - '0');
  if (*version == '.') {
    for (++version; *version >= '0' && *version <= '9'; ++version) {
      minor = minor * 10 + (*version - '0');
    }
  }
  return major > 2 || (major == 2 && minor >= 33);
}
constexpr int kJemallocZero = 0x40;  // MALLOCX_ZERO

// The fault-injection build fails some calls as an exhausted allocator would (always false, and
// gone, in the shipped library).
inline bool injected_out_of_memory() {
  if (!fault::should_fail(fault::Site::kFallbackAlloc)) return false;
  errno = ENOMEM;
  return true;
}
inline int jemalloc_align_flag(size_t alignment) { return __builtin_ctzll(alignment); }

}  // namespace

bool init(FallbackKind kind, const char** error) {
  resolve(RTLD_NEXT, "malloc_trim", fn.trim);  // these three are optional
  resolve(RTLD_NEXT, "mallopt", fn.mallopt);
  resolve(RTLD_NEXT, "mallinfo2", fn.mallinfo2);
  if (kind == FallbackKind::kAuto) {
    // A malloc other than glibc's next in the chain: the user composed it, it stays.
    void* next = dlsym(RTLD_NEXT, "malloc");
    if (in_libc(next) && load_mimalloc()) {
      chosen = route_small_to_mimalloc(kSmallBelow) ? "mimalloc+glibc" : "mimalloc";
      return true;
    }
  }
  if (kind == FallbackKind::kMimalloc) {
    if (load_mimalloc()) {
      chosen = "mimalloc";
      return true;
    }
    *error =
        "memoplan: fallback:mimalloc but libmimalloc.so.2 could not be loaded; using the next "
        "malloc in the chain";
  }
  if (kind == FallbackKind::kJemalloc) {
    void* handle = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle && resolve(handle, "mallocx", fn.mallocx) &&
        resolve(handle, "rallocx", fn.rallocx) && resolve(handle, "dallocx", fn.dallocx) &&
        resolve(handle, "sallocx", fn.sallocx)) {
      chosen = "jemalloc";
      return true;
    }
    fn.mallocx = nullptr;
    *error =
        "memoplan: fallback:jemalloc but libjemalloc.so.2 (mallocx) could not be loaded (its "
        "static TLS: preload it after the shim, LD_PRELOAD=\"libmemoplan_preload.so "
        "libjemalloc.so.2\"); using the next malloc in the chain";
  }
  resolve(RTLD_NEXT, "malloc_usable_size", fn.usable);  // optional
  if (!resolve(RTLD_NEXT, "malloc", fn.malloc) || !resolve(RTLD_NEXT, "calloc", fn.calloc) ||
      !resolve(RTLD_NEXT, "realloc", fn.realloc) ||
      !resolve(RTLD_NEXT, "posix_memalign", fn.posix_memalign) ||
      !resolve(RTLD_NEXT, "free", fn.free)) {
    *error = "memoplan: no next malloc in the symbol chain";
    return false;
  }
  glibc_free_keeps_errno = is_glibc_free_keeping_errno(fn.free);
  chosen = in_libc(reinterpret_cast<void*>(fn.malloc)) ? "glibc" : "next";
  return true;
}

const char* name() { return chosen; }

bool maps_each_large_block() {
  if (!strncmp(chosen, "mimalloc", 8) || !strcmp(chosen, "jemalloc")) return true;
  // Preloaded after the shim: jemalloc is the one with mallocx.
  return !strcmp(chosen, "next") && dlsym(RTLD_NEXT, "mallocx") != nullptr;
}

void* malloc(size_t size) {
  if (injected_out_of_memory()) return nullptr;
  if (fn.mallocx) {
    void* p = fn.mallocx(size ? size : 1, 0);
    if (!p) errno = ENOMEM;
    return p;
  }
  return fn.malloc(size);
}

void* calloc(size_t count, size_t size) {
  if (injected_out_of_memory()) return nullptr;
  if (fn.mallocx) {
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes)) {
      errno = ENOMEM;
      return nullptr;
    }
    void* p = fn.mallocx(bytes ? bytes : 1, kJemallocZero);
    if (!p) errno = ENOMEM;
    return p;
  }
  return fn.calloc(count, size);
}

void* realloc(void* p, size_t size) {
  if (size && injected_out_of_memory()) return nullptr;  // p stays as it was
  if (fn.mallocx) {
    if (!p) return malloc(size);
    void* q = fn.rallocx(p, size ? size : 1, 0);
    if (!q) errno = ENOMEM;
    return q;
  }
  return fn.realloc(p, size);
}

void* aligned(size_t alignment, size_t size) {
  if (injected_out_of_memory()) return nullptr;
  if (fn.mallocx) {
    void* p = fn.mallocx(size ? size : 1, jemalloc_align_flag(alignment));
    if (!p) errno = ENOMEM;
    return p;
  }
  if (fn.mi_malloc_aligned_at) {
    void* p = fn.mi_malloc_aligned_at(size, alignment, 0);
    if (!p) errno = ENOMEM;
    return p;
  }
  void* p = nullptr;
  const int rc = fn.posix_memalign(&p, alignment, size);
  if (rc != 0) {
    errno = rc;
    return nullptr;
  }
  return p;
}

void free(void* p) {
  if (!p) return;
  if (glibc_free_keeps_errno) return fn.free(p);
  const int saved = errno;  // POSIX 2024: free keeps errno; mimalloc and jemalloc promise nothing
  if (fn.mallocx) {
    fn.dallocx(p, 0);
  } else {
    fn.free(p);
  }
  errno = saved;
}

int trim(size_t pad) {
  if (fn.mi_collect) {
    fn.mi_collect(true);  // gives back what mimalloc holds free; glibc's part is trimmed too
  }
  return fn.trim ? fn.trim(pad) : 0;
}
int mallopt(int param, int value) { return fn.mallopt ? fn.mallopt(param, value) : 0; }
struct mallinfo2 mallinfo2() {
  if (fn.mi_process_info) {
    // mimalloc counts what it has committed, not what is in use: both fields get that (an upper
    // bound of the bytes in use), with glibc's own (what it still holds) added.
    size_t elapsed, user, system, rss, peak_rss, commit = 0, peak_commit, faults;
    fn.mi_process_info(&elapsed, &user, &system, &rss, &peak_rss, &commit, &peak_commit, &faults);
    struct mallinfo2 info {};
    if (fn.mallinfo2) info = fn.mallinfo2();
    info.arena += commit;
    info.uordblks += commit;
    return info;
  }
  if (fn.mallinfo2) return fn.mallinfo2();
  struct mallinfo2 none {};
  return none;
}

bool plain(Plain& out) {
  if (fn.mallocx || !fn.malloc) return false;
  out.malloc = fn.malloc;
  out.calloc = fn.calloc;
  out.realloc = fn.realloc;
  out.free = fn.free;
  out.usable_size = fn.usable;
#if MEMOPLAN_EMBEDDED_MIMALLOC
  out.embedded_mimalloc = &::mi_malloc != nullptr && fn.malloc == &::mi_malloc;
  if (small_size) {  // malloc's under small_below are mimalloc's, inline (exports.cc)
    out.embedded_mimalloc = true;
    out.small_below = small_below;
    out.small_base = small_base;
    out.small_size = small_size;
  }
#endif
  return true;
}

size_t usable_size(void* p) {
  if (!p) return 0;
  if (fn.mallocx) return fn.sallocx(p, 0);
  return fn.usable ? fn.usable(p) : 0;
}

}  // namespace memoplan::shim::fallback
