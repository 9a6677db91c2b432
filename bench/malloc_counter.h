/* The per-thread allocator call counts of libmemoplan_malloc_counter.so (bench/malloc_counter.c).
 *
 * The symbol is weak: a program calls it through
 *     if (memoplan_bench_malloc_counts) memoplan_bench_malloc_counts(&counts);
 * and runs unchanged (without counts) when the counter is not preloaded. C and C++. */
#ifndef MEMOPLAN_BENCH_MALLOC_COUNTER_H_
#define MEMOPLAN_BENCH_MALLOC_COUNTER_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Calls made by the calling thread since it started; each call counted once, at the outermost
 * entry point (an operator new that calls malloc is one allocation). */
struct memoplan_bench_counts {
  uint64_t allocs;    /* malloc, calloc, posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
                         realloc(NULL, n), every operator new */
  uint64_t frees;     /* free(p != NULL), every operator delete of a non-null pointer */
  uint64_t reallocs;  /* realloc(p != NULL, n) */
  uint64_t zero_size; /* allocations of 0 bytes (included in allocs) */
  uint64_t bytes;     /* bytes requested by allocs */
};

void memoplan_bench_malloc_counts(struct memoplan_bench_counts* out) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#endif /* MEMOPLAN_BENCH_MALLOC_COUNTER_H_ */
