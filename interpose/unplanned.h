// The requests the shim leaves to its fallback, on the shortest path the exported functions can
// take: malloc and calloc below min_size (every size under mode:off) call the fallback's own
// function, and free, realloc and malloc_usable_size of a block the shim did not hand out call
// the fallback's after one range check (the shim's span; where the compiled-in mimalloc is
// confined to its arena, free checks that range first: mimalloc's free, inline). Nothing else
// runs there: thread state, counters, call-site keys and pass bookkeeping belong to the engine's
// path (engine.h), which only requests the shim may plan and its own blocks take. Measured by
// bench/shim_bench BM_Malloc64 (docs/SHIM.md, cost model).
//
// errno: free of a fallback's block is that allocator's free, tail-called, so errno is what it
// leaves. glibc's keeps errno (POSIX 2024; glibc >= 2.33); mimalloc 2.0.9's changes it only when a
// kernel call inside it fails (munmap, madvise or mprotect while it decommits or releases memory;
// its src/os.c), as mimalloc alone does. Saving and restoring errno around it cost 0.9-1.0 ns of a
// 5.3 ns 64-byte pair (half the shim's overhead there), so it is not done; fallback:next over glibc
// keeps errno on every free. The engine's path keeps errno always.
//
// The fast path is one compare for malloc where the fallback is the mimalloc compiled in (its own
// fast path inline after it) and a range check and a jump for free: glibc's bench-malloc-simple,
// 64 bytes, 0.96x mimalloc alone (5 rounds, d684e51d; shim_bench's pair 0.92x), 1.07-1.11x with
// the null check and the fallback's identity test free had before (docs/SHIM.md, cost model).
// Behind another allocator (fallback:next) malloc is a compare and a call through a pointer:
// tcmalloc's 3.5 ns pair takes 1.20x.
//
// One cache line, written by initialization (engine.cc) before it publishes the functions with
// release stores, read without locks after; before, the limits are 0 and the range every address
// (every request then takes the engine's path, which serves the bootstrap pool), and so they stay
// with fallback:jemalloc (mallocx API only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::shim {

struct alignas(64) Unplanned {
  // malloc/calloc of fewer bytes than this call the fallback directly (min_size; SIZE_MAX under
  // mode:off); 0 until the functions below are set. Stored after them, with release.
  std::atomic<size_t> direct_below{0};
  // The same limit where the fallback is the mimalloc compiled in (0 otherwise): malloc below it
  // takes mimalloc's fast path inline (exports.cc), one compare in all. Stored last, with release.
  std::atomic<size_t> inline_below{0};
  void* (*malloc)(size_t) = nullptr;
  void* (*calloc)(size_t, size_t) = nullptr;
  void* (*realloc)(void*, size_t) = nullptr;
  size_t (*usable_size)(void*) = nullptr;  // may stay null (no malloc_usable_size in the chain)
  void (*free)(void*) = nullptr;
  // Every block the shim hands out lies in [own_base, own_base + own_size): its span (tag region,
  // slab region and bootstrap pool, engine.cc), or under mode:off the static bootstrap pool. Until
  // the functions above are set the range is every address, so every free takes the engine's
  // path; own_size is stored after them, with release.
  uintptr_t own_base = 0;
  std::atomic<uintptr_t> own_size{UINTPTR_MAX};
  // The arena of the mimalloc compiled in, where it is confined to one (fallback.h, Plain): free
  // of a block in it is mimalloc's, inline. 0 until the functions above are set, and elsewhere.
  uintptr_t small_base = 0;
  std::atomic<size_t> small_size{0};

  // Whether p may be a block the shim handed out: one range check. False only once the functions
  // above are set (own_size is read first, with acquire).
  bool may_own(const void* p) const {
    const uintptr_t size = own_size.load(std::memory_order_acquire);
    return reinterpret_cast<uintptr_t>(p) - own_base < size;
  }
  // Whether p is a block of the confined mimalloc's: one range check.
  bool small_owns(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - small_base < small_size.load(std::memory_order_relaxed);
  }
};

extern Unplanned unplanned;

}  // namespace memoplan::shim
