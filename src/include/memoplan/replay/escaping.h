// Escaping blocks of a cyclic plan (the shim's). A block the profiled pass allocated and did not
// free — the pass's output, a block freed just after the cut — is still alive when the next pass
// starts, and usually until that pass has made its own: `out = model(x)` frees the old output
// only once the new one exists. The planner leaves such blocks out of the slab (their lifetime
// has no end in the pass), so without more they all go to the fallback allocator, which maps and
// faults the pages of a large output afresh in every pass. Here each gets two places in a region
// after the planned slab, used in turn: a pass places its block where the one of two passes back
// lived (serve() tries `offset`, then `alternate`), and the arena's live-range guard sends it to
// the fallback when both are still alive (a program that keeps its outputs). Pages are touched
// only where blocks are placed, so the region costs address space, and memory only for blocks
// the fallback would otherwise have held. A freed place keeps its pages for the next pass, except
// a large block's (the shim's rule: 4 MiB or more, Arena::discard_when_freed), which go back as a
// general allocator's would: gpt_decoder's 25.7 MiB output otherwise kept a third output resident
// where mimalloc held two (the copy a program makes of its output, a second inference thread).
#pragma once

#include <cstdint>

#include "memoplan/replay/matcher.h"

namespace memoplan::replay {

// Lays out the unplanned slots of a `slab_bytes` plan in the region after it. Returns the slab
// size with the region (slab_bytes when nothing escapes, or when the region would take the slab
// past `limit` bytes: the escaping blocks then stay with the fallback).
inline uint64_t place_escaping(Slot* slots, uint32_t count, uint64_t slab_bytes, uint64_t limit) {
  constexpr uint64_t kPage = 4096, kAlign = 64;
  auto round_up = [](uint64_t n, uint64_t to) { return (n + to - 1) / to * to; };
  // One copy of every escaping block, laid out one after another: offsets within the copy first
  // (in `alternate`, which an unplanned slot does not use), then the two copies placed.
  uint64_t half = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (slots[i].planned) continue;
    const uint64_t size = slots[i].size ? slots[i].size : 1;
    slots[i].alternate = round_up(half, size >= kPage ? kPage : kAlign);
    half = slots[i].alternate + size;
    if (half > limit) break;
  }
  half = round_up(half, kPage);
  const uint64_t first = round_up(slab_bytes, kPage);
  const bool fits = half != 0 && first <= limit && 2 * half <= limit - first;
  for (uint32_t i = 0; i < count; ++i) {
    Slot& s = slots[i];
    if (s.planned) continue;
    if (!fits) {
      s.alternate = Slot::kNoAlternate;
      continue;
    }
    s.offset = first + s.alternate;
    s.alternate = first + half + s.alternate;
    s.planned = true;
  }
  return fits ? first + 2 * half : slab_bytes;
}

}  // namespace memoplan::replay
