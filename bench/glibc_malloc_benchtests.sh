#!/usr/bin/env bash
# glibc_malloc_benchtests.sh OUT_DIR
#
# Builds glibc's own malloc micro-benchmarks (benchtests/bench-malloc-simple.c
# and benchtests/bench-malloc-thread.c, from Debian's glibc-source package,
# glibc 2.36) as standalone executables dynamically linked against the system
# glibc.  malloc/free are plain PLT calls (-fno-builtin-malloc etc.), so an
# LD_PRELOADed allocator (memoplan's shim, mimalloc, jemalloc, ...) replaces
# them.  Prints OUT_DIR/bench-malloc-simple and OUT_DIR/bench-malloc-thread,
# one per line, on stdout; all logging goes to stderr.  Idempotent: if both
# binaries exist and are newer than this script, it only prints the paths.
#
# The benchmark .c files are compiled unmodified.  The only glibc-internal
# header that cannot be used outside glibc's tree (<_itoa.h>) is replaced by a
# stub written below; the run duration of bench-malloc-thread is changed via a
# link-time wrapper of alarm() (see below), not by editing the source.
#
# Environment (build time):
#   CC                     compiler (default gcc)
#   GBT_TIMING=clock       (default) timestamps from clock_gettime(CLOCK_MONOTONIC):
#                          all times are in NANOSECONDS (glibc's USE_CLOCK_GETTIME).
#   GBT_TIMING=rdtsc       glibc's x86 default: TSC ticks (x86_64 only).
#   GBT_THREAD_DURATION=N  default run length of bench-malloc-thread in seconds
#                          (default 3; upstream hard-codes 10).  Changing it does
#                          not trigger a rebuild; delete the binaries first.
#
# ---------------------------------------------------------------------------
# bench-malloc-simple [BLOCK_SIZE]        (BLOCK_SIZE default 16 bytes)
#   Measures the fast path (tcache/fastbins in glibc): for N in {25,100,400,1600}
#   it does  (200000/N) x { N x malloc(BLOCK_SIZE); N x free }  i.e. 200000
#   malloc+free pairs per N, in three scenarios:
#     main_arena_st  single-threaded process (glibc: SINGLE_THREAD_P fast path)
#     thread_arena_  in a second thread (glibc: a per-thread arena)
#     main_arena_mt  main thread again, after a thread has existed (process is
#                    now "multi-threaded": glibc takes locks/atomics)
#   Only ONE block size per invocation; glibc's `make bench-malloc` runs it for
#   8 16 32 64 128 256 512 1024 2048 4096.
#   Output (one JSON document on stdout):
#     {"timing_type": "hp_timing", "functions": {"malloc": {"": {
#        "malloc_block_size": 16, "max_rss": <KiB>,
#        "main_arena_st_allocs_0025_time": T, ... _0100_, _0400_, _1600_,
#        "main_arena_mt_allocs_0025_time": T, ...,
#        "thread_arena__allocs_0025_time": T, ... }}}}
#   T = elapsed / 200000 = time per malloc+free PAIR (ns with GBT_TIMING=clock,
#   TSC ticks with rdtsc).  LOWER IS BETTER.  "timing_type" always says
#   "hp_timing" (hard-coded in bench-timing.h) whatever GBT_TIMING is.
#   Run time measured here (2 vCPU AMD EPYC VM, glibc 2.36 malloc vs
#   LD_PRELOAD=libmimalloc.so.2): mimalloc ~0.02-0.05 s per size (10-size sweep
#   0.4 s); glibc 0.04 s for 16 B but 0.7 s / 1.8 s / 4 s for 1024 / 2048 /
#   4096 B (10-size sweep ~7 s), almost all SYSTEM time: with 400/1600 live
#   blocks glibc's free() trims the heap (brk) every round.  Sample (ns/pair,
#   16 B, st_0025): glibc 10.7, mimalloc 7.1.
#
# bench-malloc-thread [NUM_THREADS]       (NUM_THREADS default 1)
#   Measures a random workload: each thread has a 1024-slot working set and in
#   a loop frees a random slot and mallocs a new block there, sizes 4..32768
#   bytes drawn from an inverse-square distribution (mostly small), fixed
#   seed/tables.  Runs for a fixed wall-clock duration (alarm()), then reports.
#   glibc's `make bench-malloc` runs it with 1, 8, 16, 32 threads.
#   Output (one JSON document on stdout):
#     {"timing_type": "hp_timing", "functions": {"malloc": {"": {
#        "duration": D, "iterations": I, "time_per_iteration": D/I,
#        "max_rss": <KiB>, "threads": N, "min_size": 4, "max_size": 32768,
#        "random_seed": 88 }}}}
#   D = SUM over threads of each thread's elapsed time (ns / TSC ticks),
#   I = total free+malloc iterations of all threads.  Compare
#   "time_per_iteration" (LOWER IS BETTER) or "iterations" (higher is better)
#   at the same NUM_THREADS.  With more threads than CPUs (2 here) each
#   thread's elapsed time includes time it was descheduled, so
#   time_per_iteration grows ~ NUM_THREADS/NCPU; compare like with like only.
#   Duration: upstream `#define BENCHMARK_DURATION 10` (unconditional, so a
#   -DBENCHMARK_DURATION=... would be overridden by the source).  This build
#   links with -Wl,--wrap=alarm and a 5-line wrapper that replaces the alarm()
#   argument by GBT_THREAD_DURATION (3 s), overridable at RUN time:
#     BENCH_MALLOC_THREAD_DURATION=1 OUT_DIR/bench-malloc-thread 2
#   (An unmodified 10 s build can also be cut short with
#    `timeout -s ALRM 3 bench-malloc-thread 2`: SIGALRM ends it cleanly.)
#   Run time here: duration + ~0.01 s (3.0 s wall with the default build) for
#   any thread count; it keeps min(NUM_THREADS, 2) CPUs busy the whole time.
#   Sample (3 s, ns/iteration, 1 / 2 threads): glibc 13.5 / 14.1,
#   mimalloc 6.8 / 6.5.
#
# Both print the JSON WITHOUT a trailing newline (json-lib never writes one);
# add `; echo` when concatenating outputs.  With GBT_TIMING=rdtsc values are
# TSC ticks (~2.6 per ns on this VM) instead of ns.
# ---------------------------------------------------------------------------
set -euo pipefail

log() { printf 'glibc_malloc_benchtests: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ $# -ne 1 || -z "$1" ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi

script="$(readlink -f "${BASH_SOURCE[0]}")"
mkdir -p "$1"
out_dir="$(cd "$1" && pwd)"
simple="$out_dir/bench-malloc-simple"
thread="$out_dir/bench-malloc-thread"

if [[ -x "$simple" && -x "$thread" && "$simple" -nt "$script" && "$thread" -nt "$script" ]]; then
  printf '%s\n%s\n' "$simple" "$thread"
  exit 0
fi

cc="${CC:-gcc}"
timing="${GBT_TIMING:-clock}"
duration="${GBT_THREAD_DURATION:-3}"
[[ "$duration" =~ ^[1-9][0-9]*$ ]] || die "GBT_THREAD_DURATION must be a positive integer"

# Empty (not a failure: set -e and pipefail) where /usr/src/glibc does not exist yet.
find_tarball() {
  [[ -d /usr/src/glibc ]] || return 0
  find /usr/src/glibc -maxdepth 1 -type f -name 'glibc-*.tar.*' | sort -V | tail -n 1
}

tarball="$(find_tarball)"
if [[ -z "$tarball" ]]; then
  log "no glibc tarball under /usr/src/glibc; installing glibc-source"
  sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
  if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y glibc-source >&2; then
    "${sudo[@]}" apt-get update >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y glibc-source >&2
  fi
  tarball="$(find_tarball)"
  [[ -n "$tarball" ]] || die "glibc-source installed but no tarball in /usr/src/glibc"
fi
top="$(basename "$tarball")"
top="${top%.tar.*}"   # glibc-2.36.tar.xz -> glibc-2.36 (the tarball's top dir)
log "using $tarball"

work="$(mktemp -d "$out_dir/.glibc-benchtests-src.XXXXXX")"
trap 'rm -rf "$work"' EXIT
src="$work/src"
compat="$work/compat"
mkdir -p "$src" "$compat"

members=(
  benchtests/bench-malloc-simple.c
  benchtests/bench-malloc-thread.c
  benchtests/bench-timing.h
  benchtests/json-lib.h
  benchtests/json-lib.c
  sysdeps/generic/hp-timing.h
  sysdeps/generic/hp-timing-common.h
  sysdeps/x86/hp-timing.h
  sysdeps/x86_64/isa.h
)
tar -xf "$tarball" -C "$src" --strip-components=1 "${members[@]/#/$top/}" >&2 \
  || die "extracting benchtests from $tarball failed"

# hp-timing-common.h includes <_itoa.h> for HP_TIMING_PRINT, which the malloc
# benchmarks never use.  glibc's real _itoa.h needs internal macros (IS_IN,
# hidden_proto, attribute_hidden) that only exist inside glibc's build, so
# provide an empty stand-in.
cat > "$compat/_itoa.h" <<'EOF'
/* Stand-in for glibc-internal <_itoa.h>, written by
   bench/glibc_malloc_benchtests.sh.  The real header needs glibc build
   macros (IS_IN, hidden_proto); it is only pulled in by hp-timing-common.h for
   HP_TIMING_PRINT, which bench-malloc-*.c never use.  */
#ifndef _ITOA_H
#define _ITOA_H 1
#endif
EOF

# bench-malloc-thread.c hard-codes `#define BENCHMARK_DURATION 10` and calls
# alarm (BENCHMARK_DURATION).  Rather than edit it, link with --wrap=alarm so
# that call lands here and gets a shorter, configurable duration.
cat > "$compat/gbt-alarm.c" <<'EOF'
/* Written by bench/glibc_malloc_benchtests.sh: replaces the run duration of
   bench-malloc-thread (linked with -Wl,--wrap=alarm).  Seconds come from
   $BENCH_MALLOC_THREAD_DURATION if set, else the build-time GBT_DURATION.  */
#include <stdlib.h>
unsigned int __real_alarm (unsigned int);
unsigned int __wrap_alarm (unsigned int seconds)
{
  const char *e = getenv ("BENCH_MALLOC_THREAD_DURATION");
  long v = e != NULL ? strtol (e, NULL, 10) : 0;
  return __real_alarm (v > 0 ? (unsigned int) v : seconds ? GBT_DURATION : 0);
}
EOF

cppflags=(-D_ISOMAC -I"$compat" -I"$src/benchtests" -I"$src/sysdeps/generic" -I"$src")
case "$timing" in
  clock) cppflags+=(-DUSE_CLOCK_GETTIME) ;;
  rdtsc)
    [[ "$(uname -m)" == x86_64 ]] || die "GBT_TIMING=rdtsc needs x86_64"
    cppflags=(-D_ISOMAC -I"$compat" -I"$src/benchtests" -I"$src/sysdeps/x86"
              -I"$src/sysdeps/x86_64" -I"$src/sysdeps/generic" -I"$src") ;;
  *) die "GBT_TIMING must be clock or rdtsc" ;;
esac
cflags=(-O2 -g -Wall -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc
        -fno-builtin-realloc)
libs=(-lpthread -lm)

log "building with $cc (timing=$timing, bench-malloc-thread duration=${duration}s)"
"$cc" "${cflags[@]}" "${cppflags[@]}" -o "$work/bench-malloc-simple" \
  "$src/benchtests/bench-malloc-simple.c" "$src/benchtests/json-lib.c" "${libs[@]}" >&2
"$cc" "${cflags[@]}" "${cppflags[@]}" -DGBT_DURATION="$duration" -Wl,--wrap=alarm \
  -o "$work/bench-malloc-thread" "$src/benchtests/bench-malloc-thread.c" \
  "$src/benchtests/json-lib.c" "$compat/gbt-alarm.c" "${libs[@]}" >&2

mv -f "$work/bench-malloc-simple" "$simple"
mv -f "$work/bench-malloc-thread" "$thread"
printf '%s\n%s\n' "$simple" "$thread"
