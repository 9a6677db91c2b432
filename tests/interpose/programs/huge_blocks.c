/* Huge blocks the shim keeps from mimalloc (interpose/huge_blocks.h): 4-40 MiB blocks allocated
 * and freed at random, 12 alive at once: none overlaps a live one, and each keeps the pattern
 * written into its first and last 64 KiB until its free (a kept slot never hands out a block still
 * in use). Then realloc up and down keeps content (in place, where the argument `in-place` asks),
 * calloc is zero, posix_memalign keeps a 2 MiB alignment, malloc_usable_size covers the request,
 * free keeps errno, and malloc_trim gives the kept pages back. The CTest reads the shim's report
 * for the blocks' count. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

enum { kLive = 12, kSteps = 600 };

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

int main(int argc, char** argv) {
  CHECK(shim_loaded());
  char* live[kLive] = {0};
  size_t sizes[kLive] = {0};
  static struct live_set blocks;
  const size_t edge = (size_t)64 << 10;
  for (int step = 0; step < kSteps; ++step) {
    const int slot = (int)(next_random() % kLive);
    if (live[slot]) {
      CHECK(pattern_intact(live[slot], edge, (uint32_t)slot));
      CHECK(pattern_intact(live[slot] + sizes[slot] - edge, edge, (uint32_t)slot + 100));
      live_set_remove(&blocks, live[slot]);
      errno = ERANGE;
      free(live[slot]);
      CHECK(errno == ERANGE);
    }
    sizes[slot] = ((size_t)4 << 20) + (size_t)(next_random() % ((size_t)36 << 20));
    live[slot] = malloc(sizes[slot]);
    CHECK(live[slot] != NULL);
    CHECK(malloc_usable_size(live[slot]) >= sizes[slot]);
    CHECK(live_set_add(&blocks, live[slot], sizes[slot]));
    fill_pattern(live[slot], edge, (uint32_t)slot);
    fill_pattern(live[slot] + sizes[slot] - edge, edge, (uint32_t)slot + 100);
  }
  for (int i = 0; i < kLive; ++i) free(live[i]);

  /* `in-place` (behind mimalloc): a huge block grows, and shrinks by less than half, in place. */
  const int in_place = argc > 1 && !strcmp(argv[1], "in-place");
  char* r = malloc((size_t)6 << 20);
  CHECK(r != NULL);
  fill_pattern(r, (size_t)6 << 20, 42);
  char* const was = r;
  r = realloc(r, (size_t)30 << 20); /* grows: the first 6 MiB come along */
  CHECK(r != NULL && pattern_intact(r, (size_t)6 << 20, 42));
  CHECK(!in_place || r == was);
  CHECK(malloc_usable_size(r) >= ((size_t)30 << 20));
  fill_pattern(r, (size_t)30 << 20, 43);
  r = realloc(r, (size_t)20 << 20);
  CHECK(r != NULL && pattern_intact(r, (size_t)20 << 20, 43));
  CHECK(!in_place || r == was);
  r = realloc(r, (size_t)5 << 20); /* under half: moves */
  CHECK(r != NULL && pattern_intact(r, (size_t)5 << 20, 43));
  r = realloc(r, 1000); /* leaves the huge blocks */
  CHECK(r != NULL && pattern_intact(r, 1000, 43));
  free(r);

  for (int i = 0; i < 4; ++i) { /* calloc stays zero, also where a kept slot's pages were dirty */
    char* d = malloc((size_t)8 << 20);
    CHECK(d != NULL);
    fill_pattern(d, (size_t)8 << 20, 7);
    free(d);
    char* z = calloc(1, (size_t)8 << 20);
    CHECK(z != NULL && all_zero(z, (size_t)8 << 20));
    free(z);
  }

  void* a = NULL;
  CHECK(posix_memalign(&a, (size_t)2 << 20, (size_t)10 << 20) == 0);
  CHECK(((uintptr_t)a & (((size_t)2 << 20) - 1)) == 0);
  fill_pattern(a, (size_t)10 << 20, 9);
  CHECK(pattern_intact(a, (size_t)10 << 20, 9));
  free(a);

  malloc_trim(0); /* gives the kept pages back: nothing to check from here */
  return 0;
}
