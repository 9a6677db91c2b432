/* Helpers for the programs the integration tests run under LD_PRELOAD=libmemoplan_preload.so.
 * Each program checks its own results and exits 1 at the first failed CHECK, naming it. C and
 * C++; static inline so every program is one source file. */
#ifndef MEMOPLAN_TESTS_PROGRAM_CHECK_H_
#define MEMOPLAN_TESTS_PROGRAM_CHECK_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memoplan/pass.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Tracked requests are at least this large (the default min_size). */
#define BIG 8192

static inline void pass_begin(void) {
  if (memoplan_pass_begin) memoplan_pass_begin();
}
static inline void pass_end(void) {
  if (memoplan_pass_end) memoplan_pass_end();
}

/* A marked pass of six blocks of 8 KiB and more, each alive while the next is made. */
static inline void one_pass(void) {
  pass_begin();
  char* previous = NULL;
  for (int i = 0; i < 6; ++i) {
    char* p = (char*)malloc(BIG + (size_t)i * 4096);
    CHECK(p != NULL);
    memset(p, i, BIG);
    free(previous);
    previous = p;
  }
  free(previous);
  pass_end();
}

/* The weak pass marks resolve only when the shim is preloaded. */
static inline int shim_loaded(void) { return memoplan_pass_begin != NULL; }

/* The shim plans (mode:auto, the default) unless MEMOPLAN_CONF says mode:off. */
static inline int shim_planning(void) {
  const char* conf = getenv("MEMOPLAN_CONF");
  return shim_loaded() && !(conf && strstr(conf, "mode:off"));
}

/* The object that defines `symbol` for everyone (the first in the lookup chain) is the shim. */
static inline int resolves_to_shim(const char* symbol) {
  void* address = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_fname) return 0;
  return strstr(info.dli_fname, "libmemoplan_preload") != NULL;
}

/* In mode:auto a thread profiles from its first allocation, and every profiled block is placed
 * in the tag region (record::TagRegion, src/include/memoplan/record/tag_region.h), 2^44 bytes
 * aligned to its size: a block inside the region that holds a 1 MiB block (a large tag slot's, at
 * a 256 MiB boundary) shows the request reached the shim's engine. */
static inline int in_tag_slot(const void* p) {
  static uintptr_t region; /* its base */
  if (!region) {
    void* probe = malloc(1u << 20);
    CHECK(probe != NULL && ((uintptr_t)probe & ((1u << 28) - 1)) == 0);
    region = (uintptr_t)probe & ~(((uintptr_t)1 << 44) - 1);
    free(probe);
  }
  return ((uintptr_t)p & ~(((uintptr_t)1 << 44) - 1)) == region;
}

/* A byte pattern that differs for every seed, so one block overwriting another shows. */
static inline uint8_t pattern_byte(uint32_t seed, size_t i) {
  const uint32_t word = (seed * 2654435761u) ^ (uint32_t)((i >> 2) * 0x9e3779b9u);
  return (uint8_t)(word >> ((i & 3) * 8));
}
static inline void fill_pattern(void* p, size_t size, uint32_t seed) {
  uint8_t* bytes = (uint8_t*)p;
  for (size_t i = 0; i < size; ++i) bytes[i] = pattern_byte(seed, i);
}
static inline int pattern_intact(const void* p, size_t size, uint32_t seed) {
  const uint8_t* bytes = (const uint8_t*)p;
  for (size_t i = 0; i < size; ++i) {
    if (bytes[i] != pattern_byte(seed, i)) {
      fprintf(stderr, "pattern %u broken at byte %zu of %zu (block %p)\n", seed, i, size, p);
      return 0;
    }
  }
  return 1;
}
static inline int all_zero(const void* p, size_t size) {
  const uint8_t* bytes = (const uint8_t*)p;
  for (size_t i = 0; i < size; ++i) {
    if (bytes[i]) return 0;
  }
  return 1;
}

/* The blocks one thread holds, to check that a new block overlaps none of them. */
#define LIVE_SET_CAPACITY 256
struct live_set {
  const char* start[LIVE_SET_CAPACITY];
  size_t size[LIVE_SET_CAPACITY];
  int count;
};
static inline int live_set_add(struct live_set* set, const void* p, size_t size) {
  const char* c = (const char*)p;
  for (int i = 0; i < set->count; ++i) {
    if (c < set->start[i] + set->size[i] && set->start[i] < c + size) {
      fprintf(stderr, "block %p +%zu overlaps live block %p +%zu\n", p, size,
              (const void*)set->start[i], set->size[i]);
      return 0;
    }
  }
  if (set->count == LIVE_SET_CAPACITY) return 0;
  set->start[set->count] = c;
  set->size[set->count] = size;
  ++set->count;
  return 1;
}
static inline void live_set_remove(struct live_set* set, const void* p) {
  for (int i = 0; i < set->count; ++i) {
    if (set->start[i] == (const char*)p) {
      set->start[i] = set->start[set->count - 1];
      set->size[i] = set->size[set->count - 1];
      --set->count;
      return;
    }
  }
}

/* Resident pages of [p, p + bytes), asked a chunk at a time (mincore); a range no longer mapped
 * counts none. */
static inline size_t resident_pages(const void* p, size_t bytes) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t at = (uintptr_t)p & ~(page - 1);
  const uintptr_t end = (uintptr_t)p + bytes;
  unsigned char in_core[1024];
  size_t n = 0;
  while (at < end) {
    size_t pages = (size_t)((end - at + page - 1) / page);
    if (pages > sizeof in_core) pages = sizeof in_core;
    if (mincore((void*)at, pages * page, in_core) == 0) {
      for (size_t i = 0; i < pages; ++i) n += in_core[i] & 1;
    }
    at += pages * page;
  }
  return n;
}

#endif /* MEMOPLAN_TESTS_PROGRAM_CHECK_H_ */
