// The key an allocation is matched by: its size and a hash of the few return addresses above the
// allocator, from libunwind's cached fast path (no malloc; our reentry guard covers the rest).
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>

#include "engine.h"

namespace memoplan::shim {
namespace {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Frames that belong to the shim: callsite_key, cached_callsite_key (both noinline, so this count
// holds) and engine_alloc. The exported malloc tail-calls engine_alloc, so the next frame is the
// program's call site (operator new, or an unoptimized build's malloc, adds one frame of ours that
// is the same for every call and so does not hurt the key).
constexpr int kOwnFrames = 3;

// A return address as (module file name, offset in the module): the same in every process that
// runs the same binaries, wherever ASLR loaded them. dladdr takes the loader's lock but does not
// allocate; this runs only on a call-site cache miss.
uint64_t portable_address(void* address) {
  Dl_info info;
  if (!dladdr(address, &info) || !info.dli_fbase) return 0;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the file's base name
  const char* name = info.dli_fname ? info.dli_fname : "";
  for (const char* c = name; *c; ++c) {
    if (*c == '/')
      h = 0xcbf29ce484222325ull;
    else
      h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
  }
  return mix(h, reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase));
}

}  // namespace

__attribute__((noinline)) uint64_t callsite_key(size_t size, unsigned depth, bool portable) {
  uint64_t h = mix(0x6d656d6f706c616eull, size);
  if (depth == 0) return h;
  void* frames[kOwnFrames + 16];
  const int n = unw_backtrace(frames, kOwnFrames + static_cast<int>(depth));
  for (int i = kOwnFrames; i < n; ++i) {
    h = mix(h, portable ? portable_address(frames[i]) : reinterpret_cast<uint64_t>(frames[i]));
  }
  return h;
}

__attribute__((noinline)) uint64_t cached_callsite_key(ThreadState& t, size_t size, unsigned depth,
                                                       bool portable, uintptr_t return_address,
                                                       uintptr_t stack, uint64_t* site) {
  const uint64_t sized = mix(0x6d656d6f706c616eull, size);
  constexpr uint64_t kSite = 0x73697a6566726565ull;  // keys without the size
  *site = kSite;
  if (depth == 0) return sized;
  // The same call path reaches us with the same return address and stack pointer: a key that is
  // deterministic (the same in every pass, whatever ran in between) and costs no unwinding.
  const uint64_t path = mix(mix(0x63616c6c73697465ull, return_address), stack);
  // The stack pointer is not the same in another process: portable keys unwind even at depth 1.
  if (depth == 1 && !portable) {
    *site = mix(kSite, path);
    return mix(sized, path);
  }
  // Deeper keys unwind; the result is cached under the path, and the bucket is chosen from the
  // whole path hash so allocations through one helper spread over the cache.
  CallsiteCacheEntry& entry = t.callsite_cache[(path >> 17) % kCallsiteCacheEntries];
  if (entry.tag != path) {
    entry.tag = path;
    entry.hash = callsite_key(0, depth, portable);
  }
  *site = mix(kSite, entry.hash);
  return mix(sized, entry.hash);
}

}  // namespace memoplan::shim
