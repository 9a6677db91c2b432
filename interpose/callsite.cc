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

// Frames that belong to the shim itself: callsite_key, engine_alloc and the exported entry.
constexpr int kOwnFrames = 3;

}  // namespace

uint64_t callsite_key(size_t size, unsigned depth) {
  uint64_t h = mix(0x6d656d6f706c616eull, size);
  if (depth == 0) return h;
  void* frames[kOwnFrames + 16];
  const int n = unw_backtrace(frames, kOwnFrames + static_cast<int>(depth));
  for (int i = kOwnFrames; i < n; ++i) h = mix(h, reinterpret_cast<uint64_t>(frames[i]));
  return h;
}

}  // namespace memoplan::shim
