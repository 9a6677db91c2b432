/* fork in the middle of a pass, in the warm-up, the profiled pass and replay, while another thread
 * keeps allocating. Parent and child both finish the pass and run more, checking every block's
 * pattern; the child exits cleanly (exit, so the shim's exit-time code runs there too). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "program_check.h"

#define HALF 8
#define MAX_CHILDREN 8

static atomic_int stop_background;

/* Allocates and frees large blocks without pause, so forks happen while it is inside malloc. */
static void* background(void* arg) {
  (void)arg;
  uint32_t seed = 900000;
  while (!atomic_load(&stop_background)) {
    char* p = malloc(BIG + 64 * (seed % 8));
    CHECK(p != NULL);
    fill_pattern(p, BIG, seed);
    CHECK(pattern_intact(p, BIG, seed));
    free(p);
    ++seed;
  }
  return NULL;
}

static size_t size_of(int i) { return 4096 + 512 * (size_t)i; }

int main(void) {
  CHECK(shim_loaded());
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, background, NULL) == 0);

  int in_child = 0, last_pass = 12;
  pid_t children[MAX_CHILDREN];
  int child_count = 0;
  struct live_set live = {0};
  for (int pass = 0; pass < last_pass; ++pass) {
    pass_begin();
    char* first[HALF];
    for (int i = 0; i < HALF; ++i) {
      first[i] = malloc(size_of(i));
      CHECK(first[i] && live_set_add(&live, first[i], size_of(i)));
      fill_pattern(first[i], size_of(i), (uint32_t)(pass * 100 + i));
    }
    if (!in_child && (pass == 0 || pass == 2 || pass == 6 || pass == 9)) {
      const pid_t pid = fork();
      CHECK(pid >= 0);
      if (pid == 0) {
        in_child = 1;
        last_pass = pass + 6;
      } else {
        children[child_count++] = pid;
      }
    }
    /* Both processes: the blocks from before the fork are intact; allocate the second half while
     * freeing the first. */
    char* second[HALF];
    for (int i = 0; i < HALF; ++i) {
      second[i] = malloc(size_of(HALF + i));
      CHECK(second[i] && live_set_add(&live, second[i], size_of(HALF + i)));
      fill_pattern(second[i], size_of(HALF + i), (uint32_t)(pass * 100 + HALF + i));
      CHECK(pattern_intact(first[i], size_of(i), (uint32_t)(pass * 100 + i)));
      live_set_remove(&live, first[i]);
      free(first[i]);
    }
    for (int i = 0; i < HALF; ++i) {
      CHECK(pattern_intact(second[i], size_of(HALF + i), (uint32_t)(pass * 100 + HALF + i)));
      live_set_remove(&live, second[i]);
      free(second[i]);
    }
    pass_end();
  }
  if (in_child) exit(0);

  atomic_store(&stop_background, 1);
  CHECK(pthread_join(thread, NULL) == 0);
  for (int i = 0; i < child_count; ++i) {
    int status = 0;
    CHECK(waitpid(children[i], &status, 0) == children[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "child %d ended with status %#x\n", i, status);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return 0;
}
