// The key an allocation is matched by: its size and a hash of the few return addresses above the
// allocator, from libunwind's cached fast path (no malloc; our reentry guard covers the rest).
#define UNW_LOCAL_ONLY
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

}  // namespace

__attribute__((noinline)) uint64_t callsite_key(size_t size, unsigned depth) {
  uint64_t h = mix(0x6d656d6f706c616eull, size);
  if (depth == 0) return h;
  void* frames[kOwnFrames + 16];
  const int n = unw_backtrace(frames, kOwnFrames + static_cast<int>(depth));
  for (int i = kOwnFrames; i < n; ++i) h = mix(h, reinterpret_cast<uint64_t>(frames[i]));
  return h;
}

__attribute__((noinline)) uint64_t cached_callsite_key(ThreadState& t, size_t size, unsigned depth,
                                                       uintptr_t return_address, uintptr_t stack) {
  if (depth == 0) return mix(0x6d656d6f706c616eull, size);
  const uint64_t tag = (return_address ^ (stack << 17) ^ (stack >> 47)) | 1;
  CallsiteCacheEntry& entry = t.callsite_cache[mix(tag, 0) % kCallsiteCacheEntries];
  if (entry.tag != tag) {
    entry.tag = tag;
    entry.hash = callsite_key(0, depth);  // the call path alone; the size is mixed in below
  }
  return mix(entry.hash, size);
}

}  // namespace memoplan::shim
