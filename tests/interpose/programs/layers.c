/* A small "network" run pass after pass on one or more threads: layers made by different
 * functions (different call sites), activations that live while the next layers run, a residual
 * kept across a block, small scratch requests below min_size, and an output that escapes the pass
 * (freed only after the next pass). Every block carries a pattern checked before it is freed, no
 * two live blocks may overlap, and the program prints a digest of each thread's outputs, so runs
 * with and without the shim (in any mode) can be compared byte for byte.
 *   layers marks|auto PASSES [THREADS] */
#include <pthread.h>

#include "program_check.h"

#define LAYERS 6

struct thread_args {
  int index;
  int marks;
  int passes;
  uint64_t digest;
  int failed;
};

static uint64_t mix64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* Each layer reads its input and writes an output of its own size: the values depend on every
 * byte that came before, so a block overwritten by another changes the digest. */
__attribute__((noinline)) static uint32_t* layer(const uint32_t* in, size_t in_words, size_t words,
                                                 uint32_t salt) {
  uint32_t* out = (uint32_t*)malloc(words * sizeof(uint32_t));
  char* scratch = (char*)malloc(256); /* below min_size: stays with the fallback */
  if (!out || !scratch) return NULL;
  uint32_t acc = salt;
  for (size_t i = 0; i < in_words; ++i) acc = acc * 2654435761u + in[i];
  for (size_t i = 0; i < words; ++i) out[i] = acc ^ (uint32_t)(i * 0x9e3779b9u) ^ in[i % in_words];
  memset(scratch, (int)(acc & 0xff), 256);
  free(scratch);
  return out;
}

__attribute__((noinline)) static uint32_t* residual_add(const uint32_t* a, const uint32_t* b,
                                                        size_t words) {
  uint32_t* out = (uint32_t*)calloc(words, sizeof(uint32_t));
  if (!out) return NULL;
  for (size_t i = 0; i < words; ++i) out[i] = a[i] + b[i];
  return out;
}

static void* run(void* arg) {
  struct thread_args* t = (struct thread_args*)arg;
  const size_t words[LAYERS] = {4096, 3072, 6144, 2048, 5120, 4096};
  uint32_t* previous_output = NULL;
  uint64_t digest = 0xcbf29ce484222325ull;
  uint32_t input[1024];
  for (int i = 0; i < 1024; ++i) input[i] = (uint32_t)(i * 7 + t->index);
  for (int pass = 0; pass < t->passes; ++pass) {
    if (t->marks) pass_begin();
    struct live_set live = {0};
    uint32_t* act[LAYERS];
    const uint32_t* in = input;
    size_t in_words = 1024;
    for (int l = 0; l < LAYERS; ++l) {
      act[l] = layer(in, in_words, words[l], (uint32_t)l);
      CHECK(act[l] && live_set_add(&live, act[l], words[l] * 4));
      if (l >= 2 && l != 3) { /* act[1] is the residual: it lives until the add */
        live_set_remove(&live, act[l - 2]);
        free(act[l - 2]);
        act[l - 2] = NULL;
      }
      in = act[l];
      in_words = words[l];
    }
    uint32_t* out = residual_add(act[LAYERS - 1], act[1], 2048);
    CHECK(out && live_set_add(&live, out, 2048 * 4));
    for (int l = 0; l < LAYERS; ++l) {
      if (act[l]) {
        live_set_remove(&live, act[l]);
        free(act[l]);
      }
    }
    for (size_t i = 0; i < 2048; ++i) digest = mix64(digest, out[i]);
    /* The output escapes: the caller keeps it until the next pass is done. */
    free(previous_output);
    previous_output = out;
    if (t->marks) pass_end();
  }
  free(previous_output);
  t->digest = digest;
  return NULL;
}

int main(int argc, char** argv) {
  CHECK(argc >= 3 && (!strcmp(argv[1], "marks") || !strcmp(argv[1], "auto")));
  const int threads = argc > 3 ? atoi(argv[3]) : 1;
  CHECK(threads >= 1 && threads <= 16);
  struct thread_args args[16];
  pthread_t ids[16];
  for (int i = 0; i < threads; ++i) {
    args[i] = (struct thread_args){i, !strcmp(argv[1], "marks"), atoi(argv[2]), 0, 0};
    CHECK(pthread_create(&ids[i], NULL, run, &args[i]) == 0);
  }
  for (int i = 0; i < threads; ++i) {
    CHECK(pthread_join(ids[i], NULL) == 0);
    printf("thread %d digest %016llx\n", i, (unsigned long long)args[i].digest);
  }
  return 0;
}
