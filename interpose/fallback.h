// The real allocator behind the shim, for every request it does not plan (the small ones, those
// outside passes, fallbacks): the next malloc in the symbol chain (glibc, or a jemalloc/tcmalloc/
// mimalloc preloaded after us), mimalloc's mi_* API or jemalloc's mallocx API loaded with dlopen.
// fallback:auto, the default, keeps a composed allocator and otherwise takes mimalloc over glibc:
// behind the shim glibc's small-block path was the gap to the best allocator (docs/SHIM.md, "The
// allocator behind the shim"). With the mimalloc compiled in, only for requests under 512 bytes
// ("mimalloc+glibc"): glibc's holds the larger ones in less memory (fallback.cc).
#pragma once

#include <malloc.h>

#include <cstddef>
#include <cstdint>

#include "options.h"

namespace memoplan::shim::fallback {

// Resolves the functions. Allocations made while this runs come from the bootstrap pool.
// Returns false (and says why through `error`) when nothing usable was found.
bool init(FallbackKind kind, const char** error);

// A failing allocation returns NULL with errno ENOMEM.
void* malloc(size_t size);
void* calloc(size_t count, size_t size);
void* realloc(void* p, size_t size);
void* aligned(size_t alignment, size_t size);  // alignment: power of two >= sizeof(void*)
void free(void* p);                            // keeps errno
size_t usable_size(void* p);

// glibc's malloc_trim, mallopt and mallinfo2 (where the chain has them: 0 / a zeroed struct when
// not); with mimalloc behind, trim also collects mimalloc's free memory and mallinfo2 adds the
// bytes mimalloc has committed.
int trim(size_t pad);
int mallopt(int param, int value);
struct mallinfo2 mallinfo2();

// What init chose: "glibc", "next" (another allocator in the chain), "mimalloc", "mimalloc+glibc"
// (fallback:auto with the mimalloc compiled in: fallback.cc) or "jemalloc".
const char* name();
// Whether huge blocks come from the tag region (huge_blocks.h): the fallback maps and unmaps
// blocks of several MiB at each malloc and free (measured, bench/large_blocks: mimalloc 2.0.9 and
// jemalloc 5.3, 4-6x glibc's time), or, under mimalloc+glibc, glibc's heap would keep them
// (bench/large_blocks: 108 MiB, the region 12).
bool maps_each_large_block();

// The fallback's own C functions, for the exported functions' direct path (unplanned.h). Unlike
// fallback::free, `free` may change errno where the fallback's does (unplanned.h); a
// failing call sets ENOMEM (mimalloc's through its error handler, registered by init). False,
// with nothing set, under fallback:jemalloc (its mallocx API has no plain functions).
struct Plain {
  void* (*malloc)(size_t) = nullptr;
  void* (*calloc)(size_t, size_t) = nullptr;
  void* (*realloc)(void*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  size_t (*usable_size)(void*) = nullptr;  // null where the chain has no malloc_usable_size
  bool embedded_mimalloc = false;          // malloc under small_below: the mimalloc compiled in
  // With the compiled-in mimalloc confined to its arena (fallback:auto): the requests under
  // small_below are mimalloc's, the others glibc's, and its blocks lie in [small_base,
  // small_base + small_size). Elsewhere small_size is 0 (and small_below SIZE_MAX).
  size_t small_below = SIZE_MAX;
  uintptr_t small_base = 0;
  size_t small_size = 0;
};
bool plain(Plain& out);

}  // namespace memoplan::shim::fallback
