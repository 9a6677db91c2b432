/* calloc zeroes memory the plan reuses, realloc keeps content when it grows or shrinks a planned
 * block, and free keeps errno, in every phase of the shim (explicit passes). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

static void free_keeping_errno(void* p) {
  errno = ERANGE;
  free(p);
  CHECK(errno == ERANGE);
}

int main(void) {
  CHECK(shim_loaded());
  int reused = 0;
  const int passes = 12;
  for (int pass = 0; pass < passes; ++pass) {
    pass_begin();
    /* a: dirty memory, freed before b and c exist; the plan puts them into a's bytes. */
    char* a = malloc(32768);
    CHECK(a != NULL);
    fill_pattern(a, 32768, 1000 + pass);
    const uintptr_t a_start = (uintptr_t)a;
    free_keeping_errno(a);

    char* b = calloc(4, 4096);
    CHECK(b != NULL && all_zero(b, 16384));
    if ((uintptr_t)b >= a_start && (uintptr_t)b < a_start + 32768) ++reused;
    fill_pattern(b, 16384, 2000 + pass);

    char* c = calloc(1, 20000);
    CHECK(c != NULL && all_zero(c, 20000));
    fill_pattern(c, 20000, 3000 + pass);
    c = realloc(c, 40000); /* grows: the first 20,000 bytes come along */
    CHECK(c != NULL && pattern_intact(c, 20000, 3000 + pass));
    CHECK(malloc_usable_size(c) >= 40000);
    fill_pattern(c, 40000, 4000 + pass);
    c = realloc(c, 5000); /* shrinks: the first 5,000 bytes stay */
    CHECK(c != NULL && pattern_intact(c, 5000, 4000 + pass));

    /* A planned block shrunk and grown back while b is alive. */
    char* d = malloc(12288);
    CHECK(d != NULL);
    fill_pattern(d, 12288, 5000 + pass);
    d = realloc(d, 6000);
    CHECK(d != NULL && pattern_intact(d, 6000, 5000 + pass));
    d = realloc(d, 24000);
    CHECK(d != NULL && pattern_intact(d, 6000, 5000 + pass));

    CHECK(pattern_intact(b, 16384, 2000 + pass));
    free_keeping_errno(d);
    free_keeping_errno(c);
    free_keeping_errno(b);
    pass_end();
  }
  /* Most passes put b into a's freed bytes (the plan does from the first replayed pass on): the
   * zeroing above was tested on dirty memory, not only on fresh pages. */
  if (shim_planning()) {
    fprintf(stderr, "calloc reused dirty planned memory in %d of %d passes\n", reused, passes);
    CHECK(reused >= passes - 4);
  }
  return 0;
}
