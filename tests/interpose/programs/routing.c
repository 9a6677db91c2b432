/* The fallback's routing by size (interpose/fallback.cc, fallback:auto with the mimalloc compiled
 * in): requests under 512 bytes go to mimalloc, larger ones to glibc's malloc, and free, realloc,
 * malloc_usable_size and the aligned calls find each block's owner whatever its size is now. Every
 * block keeps its content and alignment across the boundary, is usable for its size, calloc's are
 * zero on reused memory, and blocks freed by another thread go back to their owner.
 *
 *   routing          the content checks only (any fallback)
 *   routing split    also which allocator took what, from glibc's own mallinfo2 (libc.so.6's,
 *                    not the shim's): the small blocks leave glibc's in-use bytes unchanged, the
 *                    larger ones add theirs, and freeing them gives those back. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

#define COUNT 2000

typedef struct mallinfo2 (*Mallinfo2Fn)(void);
static Mallinfo2Fn glibc_mallinfo2;

/* Bytes glibc's malloc has handed out and not had back (its arenas and its own mmaps). */
static size_t glibc_in_use(void) {
  struct mallinfo2 info = glibc_mallinfo2();
  return info.uordblks + info.hblkhd;
}

static size_t small_size(int i) { return 16 + (size_t)(i * 37) % 495; }   /* 16..510 */
static size_t large_size(int i) { return 512 + (size_t)(i * 53) % 3584; } /* 512..4095 */

static void check_block(char* p, size_t size, int seed) {
  CHECK(p != NULL);
  CHECK(((uintptr_t)p & 15) == 0);
  CHECK(malloc_usable_size(p) >= size);
  CHECK(pattern_intact(p, size, seed));
}

typedef struct {
  char** blocks;
  int count;
} Batch;

static void* free_batch(void* arg) {
  Batch* batch = (Batch*)arg;
  for (int i = 0; i < batch->count; ++i) free(batch->blocks[i]);
  return NULL;
}

int main(int argc, char** argv) {
  CHECK(shim_loaded());
  const int split = argc > 1 && strcmp(argv[1], "split") == 0;
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc != NULL);
  glibc_mallinfo2 = (Mallinfo2Fn)dlsym(libc, "mallinfo2");
  CHECK(glibc_mallinfo2 != NULL);

  static char* small[COUNT];
  static char* large[COUNT];
  size_t large_bytes = 0;
  const size_t before = glibc_in_use();
  for (int i = 0; i < COUNT; ++i) {
    small[i] = malloc(small_size(i));
    CHECK(small[i] != NULL);
    fill_pattern(small[i], small_size(i), i);
  }
  const size_t after_small = glibc_in_use();
  for (int i = 0; i < COUNT; ++i) {
    large[i] = malloc(large_size(i));
    CHECK(large[i] != NULL);
    fill_pattern(large[i], large_size(i), COUNT + i);
    large_bytes += large_size(i);
  }
  const size_t after_large = glibc_in_use();
  if (split) {
    /* glibc's own bookkeeping may move a little (stdio's buffer, dlopen's); ~500 KiB of small
     * blocks must not reach it, ~4 MiB of larger ones must. */
    CHECK(after_small < before + 64 * 1024);
    CHECK(after_large >= after_small + large_bytes);
  }
  for (int i = 0; i < COUNT; ++i) {
    check_block(small[i], small_size(i), i);
    check_block(large[i], large_size(i), COUNT + i);
  }

  /* realloc across the boundary both ways, and back: content kept up to the smaller size. */
  for (int i = 0; i < COUNT; i += 4) {
    const size_t grown = large_size(i) + 600;
    small[i] = realloc(small[i], grown);
    check_block(small[i], small_size(i), i);
    fill_pattern(small[i], grown, 5 * COUNT + i);
    small[i] = realloc(small[i], small_size(i));
    check_block(small[i], small_size(i), 5 * COUNT + i);
    fill_pattern(small[i], small_size(i), i);

    large[i] = realloc(large[i], 100);
    check_block(large[i], 100, COUNT + i);
    large[i] = realloc(large[i], large_size(i));
    check_block(large[i], 100, COUNT + i);
    fill_pattern(large[i], large_size(i), COUNT + i);
  }
  /* realloc(NULL, n) of either size, realloc(p, 0) frees p (glibc's contract). */
  char* from_null = realloc(NULL, 200);
  CHECK(from_null != NULL);
  fill_pattern(from_null, 200, 7);
  CHECK(realloc(from_null, 0) == NULL);
  from_null = realloc(NULL, 2000);
  CHECK(from_null != NULL);
  fill_pattern(from_null, 2000, 8);
  CHECK(realloc(from_null, 0) == NULL);

  /* Aligned blocks of both sizes, each freed by free(). */
  static const size_t alignments[] = {16, 32, 64, 128, 256, 1024, 4096};
  for (size_t a = 0; a < sizeof alignments / sizeof alignments[0]; ++a) {
    const size_t alignment = alignments[a];
    static const size_t sizes[] = {8, 200, 511, 512, 513, 3000, 9000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
      void* p = NULL;
      CHECK(posix_memalign(&p, alignment, sizes[s]) == 0);
      CHECK(((uintptr_t)p & (alignment - 1)) == 0);
      CHECK(malloc_usable_size(p) >= sizes[s]);
      fill_pattern(p, sizes[s], (int)(a * 10 + s));
      void* q = aligned_alloc(alignment, sizes[s]);
      CHECK(q != NULL && ((uintptr_t)q & (alignment - 1)) == 0);
      void* r = memalign(alignment, sizes[s]);
      CHECK(r != NULL && ((uintptr_t)r & (alignment - 1)) == 0);
      CHECK(pattern_intact(p, sizes[s], (int)(a * 10 + s)));
      free(r);
      free(q);
      p = realloc(p, sizes[s] * 3); /* an aligned block grows with its owner */
      CHECK(p != NULL && pattern_intact(p, sizes[s], (int)(a * 10 + s)));
      free(p);
    }
  }

  /* calloc of both sizes on the memory just freed (dirty) reads zero. */
  for (int i = 0; i < COUNT; i += 8) {
    free(small[i]);
    free(large[i]);
    small[i] = calloc(1, small_size(i));
    large[i] = calloc(large_size(i), 1);
    CHECK(small[i] != NULL && all_zero(small[i], small_size(i)));
    CHECK(large[i] != NULL && all_zero(large[i], large_size(i)));
    fill_pattern(small[i], small_size(i), i);
    fill_pattern(large[i], large_size(i), COUNT + i);
  }

  /* Another thread frees every block: each goes back to its owner. */
  for (int i = 0; i < COUNT; ++i) {
    check_block(small[i], small_size(i), i);
    check_block(large[i], large_size(i), COUNT + i);
  }
  Batch smalls = {small, COUNT}, larges = {large, COUNT};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_batch, &smalls) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(pthread_create(&thread, NULL, free_batch, &larges) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  if (split) CHECK(glibc_in_use() < after_large - large_bytes / 2);
  fprintf(stderr, "routing: %d small and %d larger blocks right%s\n", COUNT, COUNT,
          split ? ", each with its allocator" : "");
  return 0;
}
