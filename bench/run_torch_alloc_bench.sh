#!/usr/bin/env bash
# Runs bench/torch_alloc_bench (LibTorch forward passes, T threads, one intra-op thread each) under
# every allocator configuration: one process per (round, model, threads, config), the
# configurations of one (model, threads) cell run back to back and rotated every round (round 1:
# A B C ..., round 2: B C ... A) because this VM's timings drift 20-30% between runs. The malloc
# counter (libmemoplan_malloc_counter.so) is preloaded only in separate counting runs, so its cost
# never reaches the timings: first in LD_PRELOAD (the program's allocator calls per pass) and, for
# the shim, also behind it (the calls the shim passes on to the allocator behind it).
# Prints a markdown table per model: median of the per-process median latencies (min..max over the
# rounds), ratio to glibc, peak RSS, allocator calls per pass, and the shim's statistics (proof of
# replay). Writes bench/results/torch_alloc_bench_<stamp>.csv (one row per process; machine info
# and exact commands in '#' lines) and torch_alloc_bench_<stamp>.md (the tables).
#
#   BUILD_DIR=build-bench bench/run_torch_alloc_bench.sh           # 5 rounds, ~11-15 minutes
#   QUICK=1 BUILD_DIR=build-bench bench/run_torch_alloc_bench.sh   # smoke test: 1 round, 5 passes
#   CONFIGS="glibc shim" MODELS=resnet18 THREADS=1 bench/run_torch_alloc_bench.sh
#
# Environment: BUILD_DIR (build), ROUNDS (5), MODELS (resnet18 mobilenet_v3_small
# transformer_encoder), THREADS (1 2), WARMUP (5), PASSES (per model: 30 / 150 / 80), COUNT_PASSES
# (10), CONFIGS (all), QUICK (0), MODEL_DIR (bench/results/tmp/models), RESULTS_DIR (bench/results),
# NO_BUILD (0; 1: run the binaries as they are, e.g. while others edit the tree).
# Needs /usr/bin/python3 with torch and torchvision (to write the models once) and python3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
[[ "$BUILD_DIR" = /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"
QUICK="${QUICK:-0}"
if [[ "$QUICK" = 1 ]]; then
  ROUNDS="${ROUNDS:-1}" PASSES="${PASSES:-5}" COUNT_PASSES="${COUNT_PASSES:-5}"
fi
ROUNDS="${ROUNDS:-5}"
MODELS="${MODELS:-resnet18 mobilenet_v3_small transformer_encoder}"
THREADS="${THREADS:-1 2}"
WARMUP="${WARMUP:-5}"
PASSES="${PASSES:-}"
COUNT_PASSES="${COUNT_PASSES:-10}"
RESULTS_DIR="${RESULTS_DIR:-$ROOT/bench/results}"
MODEL_DIR="${MODEL_DIR:-$RESULTS_DIR/tmp/models}"
LIBDIR=/usr/lib/x86_64-linux-gnu

BENCH="$BUILD_DIR/bench/torch_alloc_bench"
COUNTER="$BUILD_DIR/bench/libmemoplan_malloc_counter.so"
SHIM="$BUILD_DIR/interpose/libmemoplan_preload.so"
JEMALLOC="$LIBDIR/libjemalloc.so.2"
TCMALLOC="$LIBDIR/libtcmalloc_minimal.so.4"
MIMALLOC="$LIBDIR/libmimalloc.so.2"

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja >/dev/null
  fi
  cmake --build "$BUILD_DIR" --target torch_alloc_bench memoplan_malloc_counter memoplan_preload \
    >/dev/null
fi
for f in "$BENCH" "$COUNTER" "$SHIM" "$JEMALLOC" "$TCMALLOC" "$MIMALLOC"; do
  [[ -f "$f" ]] || { echo "run_torch_alloc_bench: missing $f (LibTorch not found?)" >&2; exit 1; }
done
# shellcheck disable=SC2086  # MODELS is a word list by design
/usr/bin/python3 "$ROOT/bench/make_torchscript_models.py" "$MODEL_DIR" $MODELS >/dev/null

# Timed passes per process: each process's timed part takes about 1 s on this VM.
passes_for() {
  if [[ -n "$PASSES" ]]; then echo "$PASSES"; return; fi
  case "$1" in
    mobilenet_v3_small) echo 150 ;;
    transformer_encoder) echo 80 ;;
    *) echo 30 ;;
  esac
}

# glibc tuned to keep memory: 32 MiB is the largest mmap threshold glibc accepts on x86-64
# (HEAP_MAX_SIZE / 2; larger values are ignored), so every tensor here comes from the heap; a
# 1 GiB trim threshold never gives freed memory back; 256 MiB of top pad grows the heap in large
# steps. These also switch off glibc's dynamic mmap threshold.
GLIBC_KEEP="MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824"
GLIBC_KEEP+=" MALLOC_TOP_PAD_=268435456"
# The thesis's jemalloc tuning: 4 arenas per CPU (jemalloc's own default, so on this machine only
# the oversize threshold differs: 1 MiB instead of 8 MiB), thread cache on (the default).
JEMALLOC_THESIS="MALLOC_CONF=narenas:$((4 * $(nproc))),oversize_threshold:1048576"
SHIM_CONF="MEMOPLAN_CONF=mode:auto,stats_print:true"

# name|LD_PRELOAD|extra environment (space-separated NAME=value)|extra bench arguments
ALL_CONFIGS=(
  "glibc|||"
  "glibc-keep||$GLIBC_KEEP|"
  "jemalloc-thesis|$JEMALLOC|$JEMALLOC_THESIS|"
  "jemalloc|$JEMALLOC||"
  "tcmalloc|$TCMALLOC||"
  "mimalloc|$MIMALLOC||"
  "shim|$SHIM|$SHIM_CONF|"
  "shim+jemalloc|$SHIM $JEMALLOC|$SHIM_CONF|"
  "shim-detect|$SHIM|$SHIM_CONF|--marks 0"
  "graph-pass|||--plan greedy_by_size"
)
CONFIG_LIST=()
for config in "${ALL_CONFIGS[@]}"; do
  if [[ -z "${CONFIGS:-}" || " $CONFIGS " == *" ${config%%|*} "* ]]; then
    CONFIG_LIST+=("$config")
  fi
done
[[ ${#CONFIG_LIST[@]} -gt 0 ]] || { echo "run_torch_alloc_bench: no config in '$CONFIGS'" >&2; exit 1; }

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RESULTS_DIR/tmp"
RAW="$(mktemp -d "$RESULTS_DIR/tmp/torch_alloc_bench_${STAMP}_XXXX")"
CSV="$RESULTS_DIR/torch_alloc_bench_$STAMP.csv"
SUMMARY="$RESULTS_DIR/torch_alloc_bench_$STAMP.md"

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cpu MHz: $(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cores: $(nproc)"
  echo "memory: $(grep -m1 MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2-)"
  echo "kernel: $(uname -sr)"
  cxx="$(grep -m1 '^CMAKE_CXX_COMPILER:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-)"
  echo "compiler: $("$cxx" --version | head -1)"
  build_type="$(grep -m1 '^CMAKE_BUILD_TYPE:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-)"
  echo "build type: ${build_type:-RelWithDebInfo (the project default)}"
  for p in libc6 libtorch1.13 python3-torch python3-torchvision libopenblas0-pthread libjemalloc2 \
    libtcmalloc-minimal4 libmimalloc2.0 libunwind8; do
    echo "package $p: $(pkg_version "$p")"
  done
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
    git -C "$ROOT" diff --quiet HEAD -- interpose bench 2>/dev/null ||
      echo ' (interpose/ or bench/ modified)')"
  # The tree may have moved on since the binaries were built (NO_BUILD=1, others' edits).
  echo "built: torch_alloc_bench $(date -u -r "$BENCH" +%FT%TZ), shim $(date -u -r "$SHIM" +%FT%TZ)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rounds: $ROUNDS, models: $MODELS, threads: $THREADS, warm-up passes: $WARMUP"
  echo "timed passes per thread: $(for m in $MODELS; do echo -n "$m $(passes_for "$m"), "; done)counting runs: $COUNT_PASSES"
  echo "glibc-keep: $GLIBC_KEEP"
  echo "jemalloc-thesis: $JEMALLOC_THESIS"
  echo "script: BUILD_DIR=$BUILD_DIR ROUNDS=$ROUNDS MODELS='$MODELS' THREADS='$THREADS'" \
    "WARMUP=$WARMUP PASSES=$PASSES COUNT_PASSES=$COUNT_PASSES CONFIGS='${CONFIGS:-}' $0"
} >"$RAW/machine.txt"
"$BENCH" --header >"$RAW/header.csv"

# One process. kind: time (no counter), count (counter first), behind (counter behind the shim).
run_one() {
  local kind="$1" round="$2" name="$3" preload="$4" extra="$5" args="$6" model="$7" threads="$8"
  local passes
  passes="$(passes_for "$model")"
  case "$kind" in
    count) preload="$COUNTER${preload:+ $preload}" passes="$COUNT_PASSES" ;;
    behind) preload="${preload/"$SHIM"/"$SHIM $COUNTER"}" passes="$COUNT_PASSES" ;;
  esac
  local tag="${kind}__r${round}__${name}__${model}__t${threads}"
  local -a cmd=(env)
  [[ -n "$preload" ]] && cmd+=("LD_PRELOAD=$preload")
  local kv
  for kv in $extra; do cmd+=("$kv"); done
  # shellcheck disable=SC2206  # args is a word list by design
  cmd+=("$BENCH" --model "$MODEL_DIR/$model.pt" --config "$name" --threads "$threads"
    --warmup "$WARMUP" --passes "$passes" $args)
  printf '%q ' "${cmd[@]}" >"$RAW/$tag.cmd"
  cut -d' ' -f1 /proc/loadavg >"$RAW/$tag.load"  # others' load on a shared VM shows up here
  if ! "${cmd[@]}" >"$RAW/$tag.out" 2>"$RAW/$tag.err"; then
    echo "run_torch_alloc_bench: $tag failed; see $RAW/$tag.err" >&2
    exit 1
  fi
}

n=${#CONFIG_LIST[@]}
start_time=$SECONDS
for config in "${CONFIG_LIST[@]}"; do echo "${config%%|*}"; done >"$RAW/configs.txt"
echo "$MODELS" >"$RAW/models.txt"
for ((round = 1; round <= ROUNDS; ++round)); do
  for model in $MODELS; do
    for threads in $THREADS; do
      for ((k = 0; k < n; ++k)); do
        IFS='|' read -r name preload extra args <<<"${CONFIG_LIST[$(((k + round - 1) % n))]}"
        run_one time "$round" "$name" "$preload" "$extra" "$args" "$model" "$threads"
      done
    done
  done
  echo "run_torch_alloc_bench: round $round/$ROUNDS done ($((SECONDS - start_time)) s)" >&2
done
for model in $MODELS; do
  for threads in $THREADS; do
    for config in "${CONFIG_LIST[@]}"; do
      IFS='|' read -r name preload extra args <<<"$config"
      run_one count 0 "$name" "$preload" "$extra" "$args" "$model" "$threads"
      if [[ "$preload" == *"$SHIM"* ]]; then
        run_one behind 0 "$name" "$preload" "$extra" "$args" "$model" "$threads"
      fi
    done
  done
done
echo "run_torch_alloc_bench: counting runs done ($((SECONDS - start_time)) s)" >&2
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"

python3 "$ROOT/bench/torch_alloc_report.py" "$RAW" "$CSV" "$SUMMARY"
