/* Blocks allocated by one thread and freed by another, in the profiled pass and in replay. Two
 * threads run passes in lockstep (a barrier at each pass start and in the middle); each hands
 * blocks to the other:
 *   X: freed by the peer in the middle of odd passes, locally in even ones (so the profile, an
 *      even pass, plans it, and replay sees it freed from the slab by a foreign thread);
 *   Y: always freed by the peer, at the start of the next pass (after the owner allocated again);
 *   Z: always freed by the peer in the middle of the pass, so also while the owner profiles.
 * Every block is patterned; the peer checks the pattern before freeing. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "program_check.h"

#define PASSES 24
#define CHAIN 6

struct handoff {
  char* block;
  size_t size;
  uint32_t seed;
};

struct worker {
  int index;
  struct handoff x, y, y_previous, z; /* the owner writes, the peer reads after a barrier */
};

static struct worker workers[2];
static pthread_barrier_t barrier;

static void check_and_free(struct handoff* h) {
  if (!h->block) return;
  CHECK(pattern_intact(h->block, h->size, h->seed));
  free(h->block);
  h->block = NULL;
}

static struct handoff make(size_t size, uint32_t seed) {
  struct handoff h = {malloc(size), size, seed};
  CHECK(h.block != NULL);
  fill_pattern(h.block, size, seed);
  return h;
}

static void* run(void* arg) {
  struct worker* self = (struct worker*)arg;
  struct worker* peer = &workers[1 - self->index];
  struct live_set live = {0};
  uint32_t seed = 1 + 100000u * (uint32_t)self->index;
  for (int pass = 0; pass < PASSES; ++pass) {
    pthread_barrier_wait(&barrier);
    pass_begin();
    /* The peer's Y from its previous pass: freed here, while the peer is in this pass. */
    check_and_free(&peer->y_previous);
    char* chain[CHAIN] = {0};
    size_t sizes[CHAIN];
    uint32_t seeds[CHAIN];
    for (int i = 0; i < CHAIN; ++i) {
      sizes[i] = 4096 + 1024 * (size_t)i + 64 * (size_t)self->index;
      seeds[i] = seed++;
      chain[i] = malloc(sizes[i]);
      CHECK(chain[i] && live_set_add(&live, chain[i], sizes[i]));
      fill_pattern(chain[i], sizes[i], seeds[i]);
      if (i == 2) self->x = make(30000 + 64 * (size_t)self->index, seed++);
      if (i == 3) self->z = make(24000 + 64 * (size_t)self->index, seed++);
      if (i >= 2) {
        CHECK(pattern_intact(chain[i - 2], sizes[i - 2], seeds[i - 2]));
        live_set_remove(&live, chain[i - 2]);
        free(chain[i - 2]);
      }
    }
    self->y = make(20000 + 64 * (size_t)self->index, seed++);
    pthread_barrier_wait(&barrier); /* both passes are half done */
    if (pass % 2) check_and_free(&peer->x);
    check_and_free(&peer->z);
    pthread_barrier_wait(&barrier);
    check_and_free(&self->x); /* even passes: still ours */
    for (int i = CHAIN - 2; i < CHAIN; ++i) {
      CHECK(pattern_intact(chain[i], sizes[i], seeds[i]));
      live_set_remove(&live, chain[i]);
      free(chain[i]);
    }
    pass_end();
    self->y_previous = self->y;
    self->y.block = NULL;
  }
  pthread_barrier_wait(&barrier);
  check_and_free(&peer->y_previous);
  return NULL;
}

int main(void) {
  CHECK(shim_loaded());
  CHECK(pthread_barrier_init(&barrier, NULL, 2) == 0);
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i) {
    workers[i].index = i;
    CHECK(pthread_create(&threads[i], NULL, run, &workers[i]) == 0);
  }
  for (int i = 0; i < 2; ++i) CHECK(pthread_join(threads[i], NULL) == 0);
  return 0;
}
