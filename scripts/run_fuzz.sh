#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, ASan + UBSan) and runs every fuzz target of
# tests/fuzz/, as many at once as the cores hold (docs/RELIABILITY.md).
#
#   scripts/run_fuzz.sh [SECONDS]          each target SECONDS seconds (default 30)
#   scripts/run_fuzz.sh --hours H          the long run: H hours in all, split over the targets
#   options: --jobs J (libFuzzer -fork=J: J processes per target; default 1)
#            --targets "a b" (default: all)   --no-build   --if-available (exit 0, saying why,
#            when clang's libFuzzer is missing: what CI uses)
#
# Each target fuzzes a work copy of its committed corpus (build-fuzz/fuzz-work/TARGET/corpus; it
# grows from run to run, the committed tests/fuzz/corpus changes only on purpose), with its
# dictionary from tests/fuzz/dict. Crashing inputs go to build-fuzz/fuzz-work/TARGET/crashes/;
# a found crash belongs, once fixed, under tests/fuzz/regressions/TARGET/. Prints per target:
# executions, executions per second, coverage (edges, features), corpus size, crashes. Exits 1
# when any target crashed, leaked, timed out or ran out of memory.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30
jobs=1
build=1
if_available=0
targets=(trace_csv trace_json plan_json conf kserve replay_matcher)
hours=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hours) hours="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --targets) read -r -a targets <<<"$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --if-available) if_available=1; shift ;;
    [0-9]*) seconds="$1"; shift ;;
    *) echo "usage: $0 [SECONDS] [--hours H] [--jobs J] [--targets \"a b\"] [--no-build]" >&2
       exit 2 ;;
  esac
done
# The targets side by side, as many at once as the cores hold their jobs (2 cores, 1 job each:
# two at a time); each prints when all are done, in order.
at_once=$(($(nproc) / jobs))
[ "$at_once" -ge 1 ] || at_once=1
if [ -n "$hours" ]; then
  seconds=$(awk -v h="$hours" -v n="${#targets[@]}" -v k="$at_once" \
    'BEGIN { printf "%d", h * 3600 * (n < k ? n : k) / n }')
fi

# libFuzzer ships with clang (Debian: clang and libclang-rt-14-dev, scripts/install_deps.sh).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' \
  >"$probe/probe.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
  >/dev/null 2>&1; then
  echo "run_fuzz: clang++ with libFuzzer (-fsanitize=fuzzer) is not available"
  [ "$if_available" = 1 ] && exit 0
  exit 2
fi

if [ "$build" = 1 ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
fi

work="build-fuzz/fuzz-work"
# fuzz_one TARGET: fuzzes TARGET and writes what it prints to $work/TARGET/out, its summary row to
# $work/TARGET/row and, when it crashed, leaked, timed out or ran out of memory, $work/TARGET/failed.
fuzz_one() {
  local t="$1" dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/crashes"
  rm -f "$dir/row" "$dir/failed"
  cp -rn "tests/fuzz/corpus/$t/." "$dir/corpus/"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$dir/crashes/")
  [ -f "tests/fuzz/dict/$t.dict" ] && args+=(-dict="tests/fuzz/dict/$t.dict")
  case "$t" in
    trace_json|plan_json) args+=(-max_len=16384) ;;
    replay_matcher) args+=(-max_len=512) ;;
    *) args+=(-max_len=4096) ;;
  esac
  # -fork: J worker processes; a crash stops the run (-ignore_crashes=0, the default).
  [ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
  local crashes_before status=0 start elapsed crashes last runs cov ft corp per_s
  crashes_before=$(find "$dir/crashes" -type f | wc -l)
  echo "== $t: ${seconds}s, $jobs job(s), corpus $(find "$dir/corpus" -type f | wc -l) inputs"
  start=$(date +%s)
  "build-fuzz/tests/fuzz/fuzz_$t" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - start))
  crashes=$(($(find "$dir/crashes" -type f | wc -l) - crashes_before))
  # The last status line: "#N ... cov: C ft: F corp: K/..." (fork mode: "#N: cov: ...").
  last=$(grep -E '^#[0-9]+' "$dir/log" | grep 'cov: ' | tail -1 || true)
  runs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$dir/log" | awk '{print $2}' || true)
  [ -n "$runs" ] || runs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")
  cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | awk '{print $2}' || true)
  ft=$(grep -oE 'ft: [0-9]+' <<<"$last" | awk '{print $2}' || true)
  corp=$(grep -oE 'corp: [0-9]+' <<<"$last" | awk '{print $2}' || true)
  per_s=$(awk -v r="${runs:-0}" -v s="$elapsed" 'BEGIN { printf "%d", s ? r / s : 0 }')
  if [ "$status" != 0 ] || [ "$crashes" -gt 0 ]; then
    touch "$dir/failed"
    echo "   FAILED (exit $status): log $dir/log, inputs in $dir/crashes/"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*check failed|.*runtime error)' "$dir/log" | head -5 || true
  fi
  printf '%-15s %12s %8s %7s %7s %7s %6ss %8s\n' "$t" "${runs:-?}" "$per_s" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$elapsed" "$crashes" > "$dir/row"
}

for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  fuzz_one "$t" > "$work/$t/out" 2>&1 &
  while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do wait -n || true; done
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "$work/$t/out"
  [ ! -f "$work/$t/failed" ] && [ -f "$work/$t/row" ] || failed=1
done

echo
printf '%-15s %12s %8s %7s %7s %7s %7s %8s\n' target executions exec/s cov ft corpus time crashes
for t in "${targets[@]}"; do cat "$work/$t/row" 2>/dev/null || echo "$t: no result"; done
if [ "$failed" = 1 ]; then
  echo "run_fuzz: crashes found; inputs under $work/*/crashes/"
  exit 1
fi
