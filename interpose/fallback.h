// The real allocator behind the shim, for every request it does not plan (the small ones, those
// outside passes, fallbacks): the next malloc in the symbol chain (glibc, or a jemalloc/tcmalloc/
// mimalloc preloaded after us), mimalloc's mi_* API or jemalloc's mallocx API loaded with dlopen.
// fallback:auto, the default, keeps a composed allocator and otherwise takes mimalloc over glibc:
// behind the shim glibc's small-block path was the gap to the best allocator (docs/SHIM.md, "The
// allocator behind the shim").
#pragma once

#include <malloc.h>

#include <cstddef>

#include "options.h"

namespace memoplan::shim::fallback {

// Resolves the functions. Allocations made while this runs come from the bootstrap pool.
// Returns false (and says why through `error`) when nothing usable was found.
bool init(FallbackKind kind, const char** error);

// A failing allocation may leave errno unset (mimalloc 2.0): callers that answer the program set
// ENOMEM on NULL (engine.cc's out_of_memory, exports.cc).
void* malloc(size_t size);
void* calloc(size_t count, size_t size);
void* realloc(void* p, size_t size);
void* aligned(size_t alignment, size_t size);  // alignment: power of two >= sizeof(void*)
void free(void* p);                            // keeps errno
size_t usable_size(void* p);

// True when the fallback's free is known to keep errno (glibc's since 2.33), so ours need not
// save and restore it around the call.
bool free_keeps_errno();

// glibc's malloc_trim, mallopt and mallinfo2 (where the chain has them: 0 / a zeroed struct when
// not); with mimalloc behind, trim also collects mimalloc's free memory and mallinfo2 adds the
// bytes mimalloc has committed.
int trim(size_t pad);
int mallopt(int param, int value);
struct mallinfo2 mallinfo2();

// What init chose: "glibc", "next" (another allocator in the chain), "mimalloc" or "jemalloc".
const char* name();

// The fallback's plain malloc and free (nullptr with fallback:jemalloc, which needs mallocx).
// Unlike fallback::free, the plain free may change errno (the caller keeps it, free_keeps_errno).
void* (*next_malloc())(size_t);
void (*next_free())(void*);

}  // namespace memoplan::shim::fallback
