// The requests the shim leaves to its fallback, on the shortest path the exported functions can
// take: malloc and calloc below min_size (every size under mode:off) call the fallback's own
// function, and free, realloc and malloc_usable_size of a block the shim did not hand out call
// the fallback's after one range check (the shim's span). Nothing else runs there: thread state,
// counters, call-site keys and pass bookkeeping belong to the engine's path (engine.h), which
// only requests the shim may plan and its own blocks take. Measured by bench/shim_bench
// BM_Malloc64 (docs/SHIM.md, cost model).
//
// errno: free of a fallback's block is that allocator's free, tail-called, so errno is what it
// leaves. glibc's keeps errno (POSIX 2024; glibc >= 2.33); mimalloc 2.0.9's changes it only when a
// kernel call inside it fails (munmap, madvise or mprotect while it decommits or releases memory;
// its src/os.c), as mimalloc alone does. Saving and restoring errno around it cost 0.9-1.0 ns of a
// 5.3 ns 64-byte pair (half the shim's overhead there), so it is not done; fallback:next over glibc
// keeps errno on every free. The engine's path keeps errno always.
//
// One cache line, written by initialization (engine.cc) before it publishes the functions with a
// release store, read without locks after; all null before (every request then takes the engine's
// path, which serves the bootstrap pool), and with fallback:jemalloc (mallocx API only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::shim {

struct alignas(64) Unplanned {
  // malloc/calloc of fewer bytes than this call the fallback directly (min_size; SIZE_MAX under
  // mode:off); 0 until the functions below are set. Stored last, with release.
  std::atomic<size_t> direct_below{0};
  void* (*malloc)(size_t) = nullptr;
  void* (*calloc)(size_t, size_t) = nullptr;
  void* (*realloc)(void*, size_t) = nullptr;
  size_t (*usable_size)(void*) = nullptr;  // may stay null (no malloc_usable_size in the chain)
  // The fallback's free; published with release after everything above and the range below.
  std::atomic<void (*)(void*)> free{nullptr};
  // Every block the shim hands out lies in [own_base, own_base + own_size): its span (tag region,
  // slab region and bootstrap pool, engine.cc), or under mode:off the static bootstrap pool.
  uintptr_t own_base = 0, own_size = 0;

  // Whether p may be a block the shim handed out: one range check.
  bool may_own(const void* p) const { return reinterpret_cast<uintptr_t>(p) - own_base < own_size; }
};

extern Unplanned unplanned;

}  // namespace memoplan::shim
