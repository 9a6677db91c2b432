/* A program that reaches the shim's steady state and then deviates from its plan, one way per
 * pass: skipped, extra, longer-lived and resized blocks, frees in reverse order, and blocks freed
 * by other threads now and after the next pass. The shim may fall back as often as it needs to;
 * live blocks must never overlap (address check) and never change (pattern check). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

#define CHAIN 10
#define PASSES 90

enum deviation { kNone, kSkip, kExtra, kKeep, kResize, kReverse, kFreeElsewhere, kHandOff, kKinds };

struct block {
  char* p;
  size_t size;
  uint32_t seed;
};

static struct live_set live;
static uint32_t next_seed = 1;
static struct block held;   /* kKeep: lives into the next pass, freed in its middle */
static struct block handed; /* kHandOff: freed by another thread at the next pass start */

static size_t size_of(int i) { return 4096 + 1536 * (size_t)(i % 5) + 64 * (size_t)i; }

static struct block make(size_t size) {
  struct block b = {malloc(size), size, next_seed++};
  CHECK(b.p != NULL);
  CHECK(live_set_add(&live, b.p, size));
  fill_pattern(b.p, size, b.seed);
  return b;
}

static void release(struct block* b) {
  if (!b->p) return;
  CHECK(pattern_intact(b->p, b->size, b->seed));
  live_set_remove(&live, b->p);
  free(b->p);
  b->p = NULL;
}

static void* check_and_free(void* arg) {
  struct block* b = (struct block*)arg;
  CHECK(pattern_intact(b->p, b->size, b->seed));
  free(b->p);
  return NULL;
}

static void release_elsewhere(struct block* b) {
  if (!b->p) return;
  live_set_remove(&live, b->p);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, check_and_free, b) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  b->p = NULL;
}

static void resize(struct block* b, size_t size) {
  char* q = realloc(b->p, size);
  CHECK(q != NULL);
  const size_t kept = b->size < size ? b->size : size;
  CHECK(pattern_intact(q, kept, b->seed));
  live_set_remove(&live, b->p);
  CHECK(live_set_add(&live, q, size));
  b->p = q;
  b->size = size;
  b->seed = next_seed++;
  fill_pattern(q, size, b->seed);
}

static void run_pass(enum deviation deviation) {
  struct block chain[CHAIN] = {{0}};
  struct block extra = {0};
  release_elsewhere(&handed);
  for (int i = 0; i < CHAIN; ++i) {
    if (!(deviation == kSkip && i == 3)) chain[i] = make(size_of(i));
    if (deviation == kExtra && i == 1) extra = make(size_of(6)); /* block 6's key, early */
    if (deviation == kResize && i == 5) resize(&chain[5], 3 * size_of(5));
    if (deviation == kResize && i == 7) resize(&chain[7], size_of(7) / 2);
    if (i == 5) release(&held);
    if (i < 2 || deviation == kReverse) continue;
    struct block* old = &chain[i - 2];
    if (deviation == kKeep && i - 2 == 4) {
      held = *old;
      old->p = NULL;
    } else if (deviation == kHandOff && i - 2 == 6) {
      handed = *old;
      old->p = NULL;
    } else if (deviation == kFreeElsewhere && i - 2 == 2) {
      release_elsewhere(old);
    } else {
      release(old);
    }
  }
  for (int i = CHAIN - 1; i >= 0; --i) release(&chain[i]);
  release(&extra);
}

/* Out of line so that run_pass has one call site: the shim's keys hash the return addresses
 * above malloc (callsite_depth:4), and a compiler that split the loop in two (before and after
 * pass 6) would give the deviating passes other keys than the profiled one. */
static __attribute__((noinline)) enum deviation deviation_of(int pass) {
  return pass < 6 ? kNone : (enum deviation)(pass % kKinds);
}

int main(void) {
  CHECK(shim_loaded());
  for (int pass = 0; pass < PASSES; ++pass) {
    pass_begin();
    run_pass(deviation_of(pass));
    pass_end();
  }
  release(&held);
  release_elsewhere(&handed);
  CHECK(live.count == 0);
  return 0;
}
