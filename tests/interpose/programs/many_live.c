/* A host that keeps 120,000 blocks of 4-68 KiB alive at once, of sizes that never repeat in a
 * period, then starts threads and maps 256 MiB. Under the shim (mode:auto) every one of them is a
 * profiled request: with a tag slot (a mapping) each, the process ran past vm.max_map_count and
 * pthread_create and mmap failed. The shim must stop tagging at its budget and leave the host its
 * mappings. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "program_check.h"

enum { kBlocks = 120000 };

static void* worker(void* arg) {
  char* p = malloc(64 << 10);
  CHECK(p != NULL);
  memset(p, 1, 64 << 10);
  free(p);
  return arg;
}

int main(void) {
  CHECK(shim_loaded());
  static char* blocks[kBlocks];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < kBlocks; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: no period a detector could find */
    const size_t size = 4096 + (size_t)(x % (64 << 10));
    blocks[i] = malloc(size);
    CHECK(blocks[i] != NULL);
    blocks[i][0] = (char)i; /* touch one byte: RSS stays small */
  }
  pthread_t threads[8];
  for (int t = 0; t < 8; ++t) {
    const int rc = pthread_create(&threads[t], NULL, worker, NULL);
    if (rc != 0) fprintf(stderr, "pthread_create: %s\n", strerror(rc));
    CHECK(rc == 0);
  }
  for (int t = 0; t < 8; ++t) CHECK(pthread_join(threads[t], NULL) == 0);
  const size_t big = (size_t)256 << 20;
  char* mapped = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) fprintf(stderr, "mmap 256 MiB: %s\n", strerror(errno));
  CHECK(mapped != MAP_FAILED);
  mapped[0] = 1;
  mapped[big - 1] = 1;
  munmap(mapped, big);
  for (int i = 0; i < kBlocks; ++i) {
    CHECK(blocks[i][0] == (char)i);
    free(blocks[i]);
  }
  return 0;
}
