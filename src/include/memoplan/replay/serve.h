// The replay hit, for both ways in: match the request at the cursor, check the slot, place it in
// the arena. One small inline function; every miss returns nullptr with its reason, and the
// caller's named slow path (counting, re-detection, the fallback allocator) takes it from there.
#pragma once

#include <cstdint>

#include "memoplan/replay/arena.h"
#include "memoplan/replay/matcher.h"

namespace memoplan::replay {

// The matched slot's part: its checks, then the block in the arena (or nullptr and why).
__attribute__((always_inline)) inline void* serve_slot(const Slot& slot, Arena& arena,
                                                       uint64_t size, uint64_t alignment,
                                                       Fallback* why) {
  if (__builtin_expect(size > slot.size, 0)) {  // keys collide: never serve past a planned slot
    *why = Fallback::kNotPlanned;
    return nullptr;
  }
  if (__builtin_expect(!slot.planned, 0)) {
    *why = Fallback::kEscaping;
    return nullptr;
  }
  if (__builtin_expect(slot.offset & (alignment - 1), 0)) {
    *why = Fallback::kAlignment;
    return nullptr;
  }
  void* block = arena.place(slot.offset, size, why);
  if (__builtin_expect(block == nullptr, 0) && slot.alternate != Slot::kNoAlternate &&
      *why == Fallback::kOverlap && !(slot.alternate & (alignment - 1))) {
    block = arena.place(slot.alternate, size, why);  // the block two passes back is still alive
  }
  return block;
}

__attribute__((always_inline)) inline void* serve(Matcher& matcher, const Slot* slots, Arena& arena,
                                                  uint64_t key, uint64_t size, uint64_t alignment,
                                                  Fallback* why) {
  const uint32_t index = matcher.match(key);
  if (__builtin_expect(index == Matcher::kNone, 0)) {
    *why = Fallback::kNotPlanned;
    return nullptr;
  }
  return serve_slot(slots[index], arena, size, alignment, why);
}

}  // namespace memoplan::replay
