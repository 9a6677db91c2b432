/* Alignment of every aligned entry point, in every phase of the shim: warm-up, the profiled pass
 * (tag slots), replay (slab offsets) and whatever falls back. Blocks overlap-checked and patterned.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

enum entry { kPosixMemalign, kAlignedAlloc, kMemalign, kValloc, kPvalloc, kEntries };
static const char* const kEntryNames[] = {"posix_memalign", "aligned_alloc", "memalign", "valloc",
                                          "pvalloc"};

static void* allocate(enum entry e, size_t alignment, size_t size) {
  void* p = NULL;
  switch (e) {
    case kPosixMemalign:
      CHECK(posix_memalign(&p, alignment, size) == 0);
      return p;
    case kAlignedAlloc:
      return aligned_alloc(alignment, size);
    case kMemalign:
      return memalign(alignment, size);
    case kValloc:
      return valloc(size);
    case kPvalloc:
      return pvalloc(size);
    case kEntries:
      break;
  }
  return NULL;
}

static size_t effective_alignment(enum entry e, size_t alignment) {
  return e == kValloc || e == kPvalloc ? 4096 : alignment;
}

/* An alignment of 16 holds on every small size, 64 blocks alive at once (mimalloc's own blocks
 * of 8 or 24 bytes are only 8-aligned, which malloc may be but these may not). */
static void small_sizes_at_16(void) {
  static void* blocks[64];
  for (size_t size = 1; size <= 1024; size += (size < 64 ? 1 : 61)) {
    for (int e = kPosixMemalign; e <= kMemalign; ++e) {
      for (int k = 0; k < 64; ++k) {
        blocks[k] = allocate((enum entry)e, 16, size);
        CHECK(blocks[k] != NULL && ((uintptr_t)blocks[k] & 15) == 0);
        CHECK(malloc_usable_size(blocks[k]) >= size);
      }
      for (int k = 0; k < 64; ++k) free(blocks[k]);
    }
  }
}

#define KEPT 3 /* blocks alive at once: each is freed three allocations later */

int main(void) {
  CHECK(shim_loaded());
  small_sizes_at_16();
  struct live_set live = {0};
  void* kept[KEPT] = {0};
  size_t kept_size[KEPT] = {0};
  uint32_t kept_seed[KEPT] = {0};
  uint32_t seed = 1;
  int slot = 0;
  for (int pass = 0; pass < 10; ++pass) {
    pass_begin();
    for (int e = 0; e < kEntries; ++e) {
      for (size_t alignment = 16; alignment <= 65536; alignment *= 2) {
        for (int large = 0; large < 2; ++large) {
          const size_t size = large ? 4096 + alignment / 4 + 64 * (size_t)e : 24;
          void* p = allocate((enum entry)e, alignment, size);
          const size_t want = effective_alignment((enum entry)e, alignment);
          if (!p || (uintptr_t)p % want) {
            fprintf(stderr, "%s(%zu, %zu) gave %p in pass %d\n", kEntryNames[e], alignment, size, p,
                    pass);
          }
          CHECK(p != NULL && (uintptr_t)p % want == 0);
          CHECK(malloc_usable_size(p) >= size);
          CHECK(live_set_add(&live, p, size));
          fill_pattern(p, size, seed);
          if (kept[slot]) {
            CHECK(pattern_intact(kept[slot], kept_size[slot], kept_seed[slot]));
            live_set_remove(&live, kept[slot]);
            free(kept[slot]);
          }
          kept[slot] = p;
          kept_size[slot] = size;
          kept_seed[slot] = seed++;
          slot = (slot + 1) % KEPT;
        }
      }
    }
    for (int i = 0; i < KEPT; ++i) {
      CHECK(pattern_intact(kept[i], kept_size[i], kept_seed[i]));
      live_set_remove(&live, kept[i]);
      free(kept[i]);
      kept[i] = NULL;
    }
    pass_end();
  }
  return 0;
}
