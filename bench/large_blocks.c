/* Large blocks, allocated and freed at random: a program whose requests are all past every
 * allocator's small-object path (glibc's mmap threshold, mimalloc's "huge" pages), the case where
 * allocators differ most (issue 53). Twenty live blocks of 5-25 MiB; each step frees one at random
 * and allocates a new one of a random size, writing its first and last byte. Seeded, so every
 * allocator sees the same requests; prints a checksum of the sizes.
 *
 *   bench/large_blocks [STEPS]     (default 50000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { kLive = 20 };

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) { /* xorshift64 */
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

int main(int argc, char** argv) {
  const long steps = argc > 1 ? atol(argv[1]) : 50000;
  char* live[kLive] = {0};
  uint64_t checksum = 0;
  for (long i = 0; i < steps; ++i) {
    const int slot = (int)(next_random() % kLive);
    const size_t size = ((size_t)5 << 20) + (size_t)(next_random() % ((size_t)20 << 20));
    free(live[slot]);
    char* p = malloc(size);
    if (!p) {
      fprintf(stderr, "large_blocks: malloc(%zu) failed\n", size);
      return 1;
    }
    p[0] = (char)i;
    p[size - 1] = (char)i;
    live[slot] = p;
    checksum = checksum * 31 + size;
  }
  for (int i = 0; i < kLive; ++i) free(live[i]);
  printf("%llu\n", (unsigned long long)checksum);
  return 0;
}
