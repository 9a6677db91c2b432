/* Every C entry point of the malloc family: resolved to the shim, served by it (mode:auto), and
 * behaving as glibc documents, including the error cases, and free keeping errno. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "program_check.h"

static int planning;
static uint32_t next_seed = 1;

/* A large block from `name`: non-null, reaching the engine, usable for its size, with room for a
 * pattern that survives until it is freed. */
static void exercise(const char* name, void* p, size_t size) {
  if (!p) fprintf(stderr, "%s returned NULL\n", name);
  CHECK(p != NULL);
  if (planning && !in_tag_slot(p)) fprintf(stderr, "%s was not served by the shim: %p\n", name, p);
  CHECK(!planning || in_tag_slot(p));
  CHECK(malloc_usable_size(p) >= size);
  const uint32_t seed = next_seed++;
  fill_pattern(p, size, seed);
  CHECK(pattern_intact(p, size, seed));
}

static void check_symbols(void) {
  static const char* const kSymbols[] = {"malloc",
                                         "free",
                                         "calloc",
                                         "realloc",
                                         "reallocarray",
                                         "posix_memalign",
                                         "aligned_alloc",
                                         "memalign",
                                         "valloc",
                                         "pvalloc",
                                         "malloc_usable_size",
                                         "cfree",
                                         "malloc_trim",
                                         "mallopt",
                                         "mallinfo2",
                                         "memoplan_pass_begin",
                                         "memoplan_pass_end"};
  for (size_t i = 0; i < sizeof kSymbols / sizeof kSymbols[0]; ++i) {
    if (!resolves_to_shim(kSymbols[i])) fprintf(stderr, "%s is not the shim's\n", kSymbols[i]);
    CHECK(resolves_to_shim(kSymbols[i]));
  }
}

static void check_large_blocks(void) {
  void* p = malloc(BIG);
  exercise("malloc", p, BIG);
  free(p);

  p = calloc(4, BIG / 4);
  CHECK(p && all_zero(p, BIG));
  exercise("calloc", p, BIG);
  free(p);

  p = realloc(NULL, BIG);
  exercise("realloc(NULL)", p, BIG);
  free(p);

  p = reallocarray(NULL, 2, BIG / 2);
  exercise("reallocarray(NULL)", p, BIG);
  free(p);

  CHECK(posix_memalign(&p, 64, BIG) == 0);
  CHECK((uintptr_t)p % 64 == 0);
  exercise("posix_memalign", p, BIG);
  free(p);

  p = aligned_alloc(256, BIG);
  CHECK((uintptr_t)p % 256 == 0);
  exercise("aligned_alloc", p, BIG);
  free(p);

  p = memalign(128, BIG);
  CHECK((uintptr_t)p % 128 == 0);
  exercise("memalign", p, BIG);
  free(p);

  p = valloc(BIG);
  CHECK((uintptr_t)p % 4096 == 0);
  exercise("valloc", p, BIG);
  free(p);

  p = pvalloc(BIG - 100); /* rounded up to whole pages */
  CHECK((uintptr_t)p % 4096 == 0);
  exercise("pvalloc", p, BIG);
  free(p);

  void (*cfree_fn)(void*) = (void (*)(void*))dlsym(RTLD_DEFAULT, "cfree");
  CHECK(cfree_fn != NULL);
  p = malloc(BIG);
  exercise("malloc for cfree", p, BIG);
  cfree_fn(p);
}

/* The same entry points with small sizes (the fallback's business) and at their edges. */
static void check_small_blocks_and_edges(void) {
  void* p = malloc(0);
  CHECK(p != NULL);
  free(p);
  free(NULL);
  CHECK(malloc_usable_size(NULL) == 0);

  p = calloc(10, 10);
  CHECK(p && all_zero(p, 100));
  p = realloc(p, 1000);
  CHECK(p != NULL);
  p = reallocarray(p, 10, 300);
  CHECK(p != NULL);
  free(p);

  volatile size_t huge = SIZE_MAX; /* hidden from the compiler's size warnings */
  errno = 0;
  CHECK(malloc(huge) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(huge / 2, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(reallocarray(NULL, huge / 2, 3) == NULL && errno == ENOMEM);
  p = malloc(16);
  errno = 0;
  CHECK(realloc(p, huge) == NULL && errno == ENOMEM); /* p is untouched */
  free(p);

  CHECK(posix_memalign(&p, 3, 100) == EINVAL);
  CHECK(posix_memalign(&p, 4, 100) == EINVAL); /* not a multiple of sizeof(void*) */
  CHECK(posix_memalign(&p, 0, 100) == EINVAL);
  CHECK(posix_memalign(&p, 8, 100) == 0 && (uintptr_t)p % 8 == 0);
  free(p);
  errno = 0;
  CHECK(aligned_alloc(3, 100) == NULL && errno == EINVAL);
  p = aligned_alloc(8, 100);
  CHECK(p != NULL && (uintptr_t)p % 8 == 0);
  free(p);

  /* Sizes whose rounding to pages or alignment would wrap around: NULL and ENOMEM, never a page. */
  errno = 0;
  CHECK(pvalloc(huge - 100) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(valloc(huge - 100) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(memalign(4096, huge - 100) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(aligned_alloc(4096, huge - 100) == NULL && errno == ENOMEM);
  CHECK(posix_memalign(&p, 4096, huge - 100) == ENOMEM);

  p = pvalloc(1);
  CHECK(p != NULL && (uintptr_t)p % 4096 == 0 && malloc_usable_size(p) >= 4096);
  free(p);
  p = valloc(1);
  CHECK(p != NULL && (uintptr_t)p % 4096 == 0);
  free(p);

  /* realloc(p, 0) frees p; glibc returns NULL. */
  p = malloc(BIG);
  CHECK(realloc(p, 0) == NULL);
  p = malloc(100);
  CHECK(realloc(p, 0) == NULL);
}

/* glibc's tuning and statistics calls reach the fallback (and malloc_trim memoplan's idle memory).
 */
static void check_tuning_calls(void) {
  CHECK(mallopt(M_ARENA_MAX, 8) == 1);
  void* blocks[64];
  for (int i = 0; i < 64; ++i) blocks[i] = malloc(1000);
  struct mallinfo2 info = mallinfo2();
  CHECK(info.uordblks >= 64 * 1000);
  for (int i = 0; i < 64; ++i) free(blocks[i]);
  const int trimmed = malloc_trim(0);
  CHECK(trimmed == 0 || trimmed == 1);
}

static void check_free_keeps_errno(void) {
  void* blocks[] = {NULL, malloc(16), malloc(BIG), calloc(1, 3 * BIG), valloc(100)};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
    errno = EDOM;
    free(blocks[i]);
    CHECK(errno == EDOM);
  }
}

/* Small requests, which the shim hands to its fallback directly, failing in the fallback: NULL and
 * ENOMEM, as glibc's malloc answers, whichever allocator is behind (mimalloc reports its failures
 * to an error handler, not through errno). An address-space limit 64 MiB above what the process
 * maps now makes them fail. 600 bytes: under fallback:auto the compiled-in mimalloc takes only
 * requests under 512 bytes, from an arena reserved at start (interpose/fallback.cc), which such a
 * limit does not shrink; glibc's malloc takes these. */
static void check_small_requests_out_of_memory(void) {
  unsigned long pages = 0;
  FILE* statm = fopen("/proc/self/statm", "r");
  CHECK(statm && fscanf(statm, "%lu", &pages) == 1);
  fclose(statm);
  struct rlimit old;
  CHECK(getrlimit(RLIMIT_AS, &old) == 0);
  struct rlimit tight = old;
  tight.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
  CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
  void* chain = NULL;
  int failed_errno = 0;
  for (long n = 0; n < 10 * 1000 * 1000; ++n) {
    errno = 0;
    void** p = malloc(600);
    if (!p) {
      failed_errno = errno;
      break;
    }
    *p = chain;
    chain = p;
  }
  while (chain) {
    void* next = *(void**)chain;
    free(chain);
    chain = next;
  }
  CHECK(setrlimit(RLIMIT_AS, &old) == 0);
  if (failed_errno != ENOMEM) fprintf(stderr, "small malloc failed with errno %d\n", failed_errno);
  CHECK(failed_errno == ENOMEM);
}

int main(void) {
  CHECK(shim_loaded());
  planning = shim_planning();
  check_symbols();
  check_large_blocks();
  check_small_blocks_and_edges();
  check_tuning_calls();
  check_free_keeps_errno();
  check_small_requests_out_of_memory();
  return 0;
}
