/* An inference thread that stops getting requests: after `idle_release` ms without a placement its
 * slab's pages go back to the OS (the reaper thread), and the next pass finds the slab again,
 * planned, its pages fresh zeros. Run with idle_release:100. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "program_check.h"

enum { kBlocks = 6, kBlockBytes = 512 << 10 };

static char* last[kBlocks];

/* A pass: a chain of blocks, each alive while the next is made, every byte written and read. */
static void pass(int round) {
  pass_begin();
  char* blocks[kBlocks];
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(kBlockBytes + (size_t)i * 4096);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], (round + i) & 0x7f, kBlockBytes);
    if (i > 0) {
      CHECK(blocks[i - 1][kBlockBytes - 1] == (char)((round + i - 1) & 0x7f));
      free(blocks[i - 1]);
    }
    last[i] = blocks[i];
  }
  free(blocks[kBlocks - 1]);
  pass_end();
}

int main(void) {
  CHECK(shim_loaded());
  const char* conf = getenv("MEMOPLAN_CONF");
  const int reaping = shim_planning() && conf && strstr(conf, "idle_release:100");
  char* first = NULL;
  /* One call of pass() for every round: a call from elsewhere in main would be another call path
   * (callsite_depth:4 reaches main), which the plan does not know. */
  for (int round = 0; round < 12; ++round) {
    if (round == 8) {
      first = last[0];
      if (reaping)
        CHECK(resident_pages(first, kBlockBytes) > 0); /* the slab's pages, after the pass */
      const struct timespec idle = {0, 600 * 1000 * 1000};
      nanosleep(&idle, NULL); /* six idle periods */
      if (reaping) CHECK(resident_pages(first, kBlockBytes) == 0);
    }
    pass(round);
  }
  if (reaping) CHECK(last[0] == first); /* planned again, at the same place */
  puts(reaping ? "idle slab: pages given back while idle, planned again after" : "idle slab: ran");
  return 0;
}
