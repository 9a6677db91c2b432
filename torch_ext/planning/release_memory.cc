// After planning: give back to the system what the allocator underneath keeps free from the
// warm-up and profiled passes (the JIT's optimization temporaries, the passes' own tensors). A
// planned pass takes its tensors from the slab, so that memory would otherwise sit idle next to
// it. Whichever allocator serves malloc: glibc (malloc_trim), tcmalloc
// (MallocExtension_ReleaseFreeMemory), mimalloc (mi_collect), jemalloc (purge every arena).
#include <dlfcn.h>
#include <malloc.h>

#include "planning.h"

namespace memoplan::torch_ext {

void release_free_memory() {
  if (auto* tcmalloc =
          reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"))) {
    tcmalloc();
  }
  if (auto* mimalloc = reinterpret_cast<void (*)(bool)>(dlsym(RTLD_DEFAULT, "mi_collect"))) {
    mimalloc(true);
  }
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto* mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // MALLCTL_ARENAS_ALL
  }
  malloc_trim(0);  // glibc's; where another allocator replaced malloc, its idle arenas only
}

}  // namespace memoplan::torch_ext
