// The real allocator behind the shim: by default the next malloc in the symbol chain (glibc, or a
// preloaded jemalloc/tcmalloc after us), or jemalloc's mallocx API loaded with dlopen.
#pragma once

#include <malloc.h>

#include <cstddef>

#include "options.h"

namespace memoplan::shim::fallback {

// Resolves the functions. Allocations made while this runs come from the bootstrap pool.
// Returns false (and says why through `error`) when nothing usable was found.
bool init(FallbackKind kind, const char** error);

void* malloc(size_t size);
void* calloc(size_t count, size_t size);
void* realloc(void* p, size_t size);
void* aligned(size_t alignment, size_t size);  // alignment: power of two >= sizeof(void*)
void free(void* p);
size_t usable_size(void* p);

// True when the fallback's free is known to keep errno (glibc's since 2.33), so ours need not
// save and restore it around the call.
bool free_keeps_errno();

// The next allocator's malloc_trim, mallopt and mallinfo2 (glibc's, where the chain has them):
// 0 / a zeroed struct when it has none.
int trim(size_t pad);
int mallopt(int param, int value);
struct mallinfo2 mallinfo2();

// The next allocator's malloc and free, when that is the fallback (nullptr with fallback:jemalloc).
void* (*next_malloc())(size_t);
void (*next_free())(void*);

}  // namespace memoplan::shim::fallback
