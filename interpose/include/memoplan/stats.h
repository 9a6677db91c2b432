/* Live statistics of libmemoplan_preload.so: the figures its stats_print report gives at exit, as
 * one JSON object, at any time (docs/SHIM.md, "Live statistics").
 *
 *   char buf[8192];
 *   int n = memoplan_stats_json ? memoplan_stats_json(buf, sizeof buf) : -1;
 *   if (n >= (int)sizeof buf) { ...retry with a buffer of n + 1 bytes... }
 *
 * Writes the JSON into buf, NUL-terminated (cut short when it does not fit; nothing is written
 * when len is 0) and returns the length it needed, NUL excluded, as snprintf does: a result of len
 * or more means buf was too small. Returns -1 only before the shim has initialized. It never calls
 * malloc, and any thread may call it at any time, also while others allocate (not from a signal
 * handler: it takes the shim's thread-registry lock for a moment).
 *
 * The symbol is weak here: without the shim it is NULL and the program runs unchanged. A program
 * that does not include this header (or a language without weak symbols) looks it up at run time:
 *     int (*stats)(char*, size_t) = (int (*)(char*, size_t))dlsym(RTLD_DEFAULT,
 *                                                                  "memoplan_stats_json");
 * (NULL when the process does not run under the shim); from Python,
 * ctypes.CDLL(None).memoplan_stats_json. C and C++. */
#ifndef MEMOPLAN_STATS_H_
#define MEMOPLAN_STATS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int memoplan_stats_json(char* buf, size_t len) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#endif /* MEMOPLAN_STATS_H_ */
