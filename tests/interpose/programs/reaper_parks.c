/* The reaper thread (interpose/reaper.cc) parks while nothing is kept: a process that freed a huge
 * block once and then waits makes no more wakeups (it made 100 a second for good before), and
 * the next huge free wakes it, that block's kept pages going back within their expiry as the
 * first one's did; a block freed and taken back again and again (sqlite3's page cache does so
 * thousands of times a second) wakes it at most once per interval, not at each free (it did).
 * Run with detect:false behind mimalloc, where huge blocks come from tag slots
 * (interpose/huge_blocks.h); under mode:off it only runs. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "program_check.h"

enum { kBlock = 24 << 20 };

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void sleep_ms(long ms) {
  const struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&t, NULL);
}

/* Frees a written huge block and waits (5 s at most) for its kept pages to go back. */
static int freed_pages_go_back(void) {
  char* p = malloc(kBlock);
  CHECK(p != NULL);
  memset(p, 1, kBlock);
  const uint64_t start = now_ns();
  free(p);
  const size_t kept = resident_pages(p, kBlock);
  /* Kept at the free, unless this thread lost the processor past the expiry (10 ms). */
  if (now_ns() - start < 5000000) CHECK(kept > 0);
  for (int waited_ms = 0; waited_ms < 5000; waited_ms += 5) {
    if (resident_pages(p, kBlock) == 0) return 1;
    sleep_ms(5);
  }
  return 0;
}

/* The reaper's context switches so far (-1: no thread named memoplan-reaper). */
static long reaper_switches(void) {
  DIR* tasks = opendir("/proc/self/task");
  CHECK(tasks != NULL);
  long switches = -1;
  struct dirent* e;
  while ((e = readdir(tasks)) != NULL && switches < 0) {
    if (e->d_name[0] == '.') continue;
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    const int reaper = fgets(line, sizeof line, f) && !strncmp(line, "memoplan-reaper", 15);
    fclose(f);
    if (!reaper) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = fopen(path, "r");
    CHECK(f != NULL);
    long n = 0, total = 0;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %ld", &n) == 1) {
        total += n;
      }
    }
    fclose(f);
    switches = total;
  }
  closedir(tasks);
  return switches;
}

/* Context switches of the reaper over half a second, once it has had time to park. */
static long wakeups_while_idle(void) {
  sleep_ms(100);
  const long before = reaper_switches();
  CHECK(before >= 0);
  sleep_ms(500);
  return reaper_switches() - before;
}

/* Frees and takes back a huge block 2000 times, holding it 100 us each time (time for a woken
 * reaper to find nothing kept and park again): the reaper, woken by a free, sleeps its interval for
 * kept large blocks (10 ms, interpose/engine.h) before it looks, so it switches at most twice an
 * interval (its sleep, its park), not at every free. */
static void keep_and_take_back(void) {
  const long before = reaper_switches();
  CHECK(before >= 0);
  const uint64_t start = now_ns();
  for (int i = 0; i < 2000; ++i) {
    char* p = malloc(kBlock);
    CHECK(p != NULL);
    p[i] = 1;
    for (const uint64_t until = now_ns() + 100000; now_ns() < until;) {
    }
    free(p); /* kept, and taken back at once by the next malloc */
  }
  const long intervals = (long)((now_ns() - start) / 10000000u) + 1;
  const long switches = reaper_switches() - before;
  fprintf(stderr, "reaper: %ld switches in %ld intervals of 2000 frees\n", switches, intervals);
  CHECK(switches <= 2 * intervals + 4);
}

int main(void) {
  CHECK(shim_loaded());
  if (!shim_planning()) { /* mode:off: mimalloc's own blocks, nothing to check */
    free(malloc(kBlock));
    return 0;
  }
  for (int round = 0; round < 2; ++round) {
    CHECK(freed_pages_go_back()); /* the second time, the free woke the parked reaper */
    const long wakeups = wakeups_while_idle();
    fprintf(stderr, "reaper: %ld wakeups in 0.5 s with nothing kept\n", wakeups);
    CHECK(wakeups <= 2);
  }
  keep_and_take_back();
  return 0;
}
