/* mode:replay's trace and plan files change under a running program: deleted in the middle of a
 * pass, then rewritten with garbage, and a new thread starts after that. The shim read them once
 * at start-up, so every thread keeps replaying the loaded pass. Each block carries a pattern
 * checked before it is freed; live blocks must not overlap.
 *   file_changes PASSES [TRACE PLAN]   (with TRACE and PLAN: delete and rewrite them) */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "program_check.h"

#define BLOCKS 6

static const char* trace_path;
static const char* plan_path;

/* open/write, not stdio: a FILE's buffer would be an allocation the plan does not know. */
static void write_garbage(const char* path) {
  char bytes[3000];
  for (int i = 0; i < 3000; ++i) bytes[i] = (char)((i * 7919) & 0xff);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0 && write(fd, bytes, sizeof bytes) == (ssize_t)sizeof bytes && close(fd) == 0);
}

/* Mid-pass: pass == at / 3 deletes the files, pass == at / 2 rewrites them with garbage. */
static void change_files(int pass, int passes) {
  if (!trace_path) return;
  if (pass == passes / 3) {
    CHECK(unlink(trace_path) == 0 && unlink(plan_path) == 0);
  } else if (pass == passes / 2) {
    write_garbage(trace_path);
    write_garbage(plan_path);
  }
}

__attribute__((noinline)) static char* make_block(size_t size, uint32_t seed,
                                                  struct live_set* live) {
  char* p = (char*)malloc(size);
  CHECK(p != NULL && live_set_add(live, p, size));
  fill_pattern(p, size, seed);
  return p;
}

static void drop_block(char* p, size_t size, uint32_t seed, struct live_set* live) {
  CHECK(pattern_intact(p, size, seed));
  live_set_remove(live, p);
  free(p);
}

struct thread_args {
  int passes;
  int change;
};

static void* run(void* arg) {
  const struct thread_args* a = (const struct thread_args*)arg;
  for (int pass = 0; pass < a->passes; ++pass) {
    pass_begin();
    struct live_set live = {0};
    char* block[BLOCKS];
    size_t size[BLOCKS];
    for (int b = 0; b < BLOCKS; ++b) {
      size[b] = BIG * (size_t)(1 + (b * 3) % 5) + 64 * (size_t)b;
      block[b] = make_block(size[b], (uint32_t)(pass * BLOCKS + b), &live);
      if (b == BLOCKS / 2 && a->change) change_files(pass, a->passes);
      if (b >= 2) drop_block(block[b - 2], size[b - 2], (uint32_t)(pass * BLOCKS + b - 2), &live);
    }
    for (int b = BLOCKS - 2; b < BLOCKS; ++b) {
      drop_block(block[b], size[b], (uint32_t)(pass * BLOCKS + b), &live);
    }
    pass_end();
  }
  return NULL;
}

int main(int argc, char** argv) {
  CHECK(argc == 2 || argc == 4);
  struct thread_args first = {atoi(argv[1]), argc == 4};
  CHECK(first.passes >= 6);
  if (argc == 4) {
    trace_path = argv[2];
    plan_path = argv[3];
  }
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, run, &first) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  /* A thread that starts after the files are gone replays the loaded pass too. */
  struct thread_args second = {first.passes, 0};
  CHECK(pthread_create(&thread, NULL, run, &second) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  if (trace_path) CHECK(access(trace_path, F_OK) == 0); /* the garbage is still there */
  printf("ok\n");
  return 0;
}
