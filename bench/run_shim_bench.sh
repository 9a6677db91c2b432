#!/usr/bin/env bash
# Runs bench/shim_bench under every allocator configuration, interleaved (round 1: A B C ...,
# round 2: B C ... A, ...) because a small VM's timings drift 20-30% between runs, and one
# benchmark per process because the shim gives each thread one replay plan for its lifetime.
# Prints a table of medians (min..max over all repetitions of all rounds) in ns per malloc+free
# pair, with ratios to jemalloc, and the shim's own statistics for the mode:auto runs (proof that
# the timed allocations were replay hits). Writes bench/results/shim_bench_<stamp>.csv (raw rows,
# machine info and exact commands in '#' lines) and shim_bench_<stamp>.md (the tables).
#
#   bench/run_shim_bench.sh                      # BUILD_DIR=build, 10 rounds, ~2.5 minutes
#   BUILD_DIR=build-shimbench ROUNDS=3 bench/run_shim_bench.sh
#   PERF=1 bench/run_shim_bench.sh               # also perf-profile the shim's replay runs
#
# Environment: BUILD_DIR, ROUNDS (10), REPS (2, --benchmark_repetitions), MIN_TIME (0.1 s),
# PERF (0), RESULTS_DIR (bench/results). Needs python3 for the tables; perf only with PERF=1.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
[[ "$BUILD_DIR" = /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"
ROUNDS="${ROUNDS:-10}"
REPS="${REPS:-2}"
MIN_TIME="${MIN_TIME:-0.1}"
PERF="${PERF:-0}"
RESULTS_DIR="${RESULTS_DIR:-$ROOT/bench/results}"
LIBDIR=/usr/lib/x86_64-linux-gnu

BENCH="$BUILD_DIR/bench/shim_bench"
SHIM="$BUILD_DIR/interpose/libmemoplan_preload.so"
JEMALLOC="$LIBDIR/libjemalloc.so.2"
TCMALLOC="$LIBDIR/libtcmalloc_minimal.so.4"
MIMALLOC="$LIBDIR/libmimalloc.so.2"
BENCHMARKS=(BM_PassLoop BM_Malloc64K BM_Malloc64)

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja >/dev/null
fi
cmake --build "$BUILD_DIR" --target shim_bench memoplan_preload >/dev/null
for lib in "$SHIM" "$JEMALLOC" "$TCMALLOC" "$MIMALLOC"; do
  [[ -f "$lib" ]] || { echo "run_shim_bench: missing $lib" >&2; exit 1; }
done

# name|LD_PRELOAD|extra environment (space-separated NAME=value)
CONFIGS=(
  "glibc||"
  "jemalloc|$JEMALLOC|"
  "jemalloc-tcache1M|$JEMALLOC|MALLOC_CONF=tcache_max:1048576"
  "tcmalloc|$TCMALLOC|"
  "mimalloc|$MIMALLOC|"
  "shim-off|$SHIM|MEMOPLAN_CONF=mode:off"
  "shim-off-glibc|$SHIM|MEMOPLAN_CONF=mode:off,fallback:next"
  "shim-auto|$SHIM|MEMOPLAN_CONF=mode:auto,callsite_depth:4,stats_print:true"
  "shim-auto-depth0|$SHIM|MEMOPLAN_CONF=mode:auto,callsite_depth:0,stats_print:true"
  "shim-auto-glibc|$SHIM|MEMOPLAN_CONF=mode:auto,callsite_depth:4,fallback:next,stats_print:true"
  "shim-auto+jemalloc|$SHIM $JEMALLOC|MEMOPLAN_CONF=mode:auto,callsite_depth:4,stats_print:true"
)

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RESULTS_DIR/tmp"
RAW="$(mktemp -d "$RESULTS_DIR/tmp/shim_bench_${STAMP}_XXXX")"
CSV="$RESULTS_DIR/shim_bench_$STAMP.csv"
SUMMARY="$RESULTS_DIR/shim_bench_$STAMP.md"

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "not installed"; }
{
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cpu MHz: $(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cores: $(nproc)"
  echo "kernel: $(uname -sr)"
  cxx="$(grep -m1 '^CMAKE_CXX_COMPILER:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-)"
  echo "compiler: $("$cxx" --version | head -1)"
  build_type="$(grep -m1 '^CMAKE_BUILD_TYPE:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-)"
  echo "build type: ${build_type:-RelWithDebInfo (the project default)}"
  for p in libc6 libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 libbenchmark1debian libunwind8; do
    echo "package $p: $(pkg_version "$p")"
  done
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
    git -C "$ROOT" diff --quiet HEAD -- interpose 2>/dev/null || echo ' (interpose/ modified)')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rounds: $ROUNDS, repetitions per process: $REPS, min_time: ${MIN_TIME}s"
  echo "script: BUILD_DIR=$BUILD_DIR ROUNDS=$ROUNDS REPS=$REPS MIN_TIME=$MIN_TIME $0"
} >"$RAW/machine.txt"

# One process: one configuration, one benchmark. Its command line goes next to its results.
run_one() {
  local round="$1" name="$2" preload="$3" extra="$4" bench="$5"
  local tag="r${round}__${name}__${bench}"
  local -a cmd=(env)
  [[ -n "$preload" ]] && cmd+=("LD_PRELOAD=$preload")
  local kv
  for kv in $extra; do cmd+=("$kv"); done
  cmd+=("$BENCH" "--benchmark_filter=^${bench}\$" "--benchmark_repetitions=$REPS"
    "--benchmark_min_time=$MIN_TIME" "--benchmark_out=$RAW/$tag.json"
    "--benchmark_out_format=json")
  printf '%q ' "${cmd[@]}" >"$RAW/$tag.cmd"
  if ! "${cmd[@]}" >"$RAW/$tag.out" 2>"$RAW/$tag.err"; then
    echo "run_shim_bench: $tag failed; see $RAW/$tag.err" >&2
    exit 1
  fi
}

n=${#CONFIGS[@]}
start_time=$SECONDS
for config in "${CONFIGS[@]}"; do echo "${config%%|*}"; done >"$RAW/configs.txt"
for ((round = 1; round <= ROUNDS; ++round)); do
  for ((k = 0; k < n; ++k)); do
    IFS='|' read -r name preload extra <<<"${CONFIGS[$(((k + round - 1) % n))]}"
    for bench in "${BENCHMARKS[@]}"; do run_one "$round" "$name" "$preload" "$extra" "$bench"; done
  done
  echo "run_shim_bench: round $round/$ROUNDS done ($((SECONDS - start_time)) s)" >&2
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"

if [[ "$PERF" = 1 ]]; then
  # Flat profiles (self time) of the shim's paths: by library, then by source line (perf's skid
  # puts a lock-prefixed instruction's samples on it and the instruction after it).
  for spec in "mode:auto,callsite_depth:4 BM_PassLoop" "mode:auto,callsite_depth:0 BM_PassLoop" \
    "mode:auto,callsite_depth:4 BM_Malloc64K" "mode:auto,callsite_depth:0 BM_Malloc64K" \
    "mode:auto BM_Malloc64" "mode:off BM_Malloc64"; do
    read -r conf bench <<<"$spec"
    data="$RAW/perf_${conf//[:,]/_}_$bench.data"
    perf record -q -e cpu-clock -F 4999 -o "$data" -- env LD_PRELOAD="$SHIM" \
      "MEMOPLAN_CONF=$conf" "$BENCH" "--benchmark_filter=^${bench}\$" --benchmark_min_time=1 \
      >"$data.out" 2>&1
    {
      echo "== MEMOPLAN_CONF=$conf $bench: $(grep "^$bench" "$data.out" | tr -s ' ')"
      for sort in dso dso,symbol dso,srcline; do
        perf report -i "$data" --stdio --no-children --sort "$sort" --percent-limit 2 \
          2>/dev/null | grep -v '^#' | grep -v '^$' | head -16 | sed 's/ *- *- *$//'
      done
    } >>"$RAW/perf.txt"
  done
fi

python3 - "$RAW" "$CSV" "$SUMMARY" <<'PY'
import csv, glob, json, os, re, statistics, sys

raw, csv_path, summary_path = sys.argv[1:4]
machine = open(os.path.join(raw, "machine.txt")).read().splitlines()
rows, stats = [], {}
STAT_RE = {
    "planned_hits": r"planned hits (\d+)",
    "steady_hits": r"steady-state hits (\d+)",
    "steady_fallbacks": r"steady-state fallbacks (\d+)",
    "not_planned": r"not_planned (\d+)",
    "escaping": r"escaping (\d+)",
    "overlap": r"overlap (\d+)",
    "alignment": r"alignment (\d+)",
    "guard_full": r"guard_full (\d+)",
    "profiled": r"profiled allocations (\d+)",
}
for path in sorted(glob.glob(os.path.join(raw, "r*.json"))):
    tag = os.path.basename(path)[:-5]
    round_, config, bench = tag[1:].split("__")
    doc = json.load(open(path))
    command = open(os.path.join(raw, tag + ".cmd")).read().strip()
    timed = 0
    for b in doc["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        pairs = int(b.get("pairs_per_iter", 1))
        timed += b["iterations"] * pairs
        unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
        rows.append({
            "round": int(round_), "config": config, "benchmark": bench,
            "repetition": b.get("repetition_index", 0), "iterations": b["iterations"],
            "pairs_per_iter": int(pairs),
            "cpu_ns_per_pair": b["cpu_time"] * unit / pairs,
            "real_ns_per_pair": b["real_time"] * unit / pairs,
            "malloc_chain": doc["context"].get("malloc_chain", ""),
            "command": command,
        })
    err = open(os.path.join(raw, tag + ".err")).read()
    if "memoplan: planned hits" in err:
        s = stats.setdefault((config, bench), {"timed_pairs": 0, "runs": 0})
        s["timed_pairs"] += timed
        s["runs"] += 1
        for key, pattern in STAT_RE.items():
            m = re.search(pattern, err)
            s[key] = s.get(key, 0) + (int(m.group(1)) if m else 0)

order = open(os.path.join(raw, "configs.txt")).read().split()
bench_order = ["BM_PassLoop", "BM_Malloc64K", "BM_Malloc64"]
rows.sort(key=lambda r: (r["round"], order.index(r["config"]), bench_order.index(r["benchmark"]),
                         r["repetition"]))
with open(csv_path, "w", newline="") as f:
    for line in machine:
        f.write("# " + line + "\n")
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})

configs = [c for c in order if any(r["config"] == c for r in rows)]
benches = [b for b in bench_order if any(r["benchmark"] == b for r in rows)]
def samples(c, b):
    return [r["cpu_ns_per_pair"] for r in rows if r["config"] == c and r["benchmark"] == b]
med = {(c, b): statistics.median(samples(c, b)) for c in configs for b in benches if samples(c, b)}

out = ["## ns per malloc+free pair (CPU time): median [min..max], n samples", ""]
out += ["Machine and run:", ""] + ["    " + line for line in machine] + [""]
out.append("| config | " + " | ".join(benches) + " |")
out.append("|---|" + "---|" * len(benches))
for c in configs:
    cells = []
    for b in benches:
        s = samples(c, b)
        cells.append(f"{med[c, b]:.1f} [{min(s):.1f}..{max(s):.1f}] n={len(s)}" if s else "-")
    out.append(f"| {c} | " + " | ".join(cells) + " |")
refs = [r for r in ("jemalloc", "jemalloc-tcache1M") if r in configs]
out += ["", "## Ratio of medians to jemalloc (default) / to jemalloc with "
        "MALLOC_CONF=tcache_max:1048576 (all sizes here through its thread cache)", ""]
out.append("| config | " + " | ".join(benches) + " |")
out.append("|---|" + "---|" * len(benches))
for c in configs:
    cells = [" / ".join(f"{med[c, b] / med[r, b]:.2f}x" for r in refs) for b in benches]
    out.append(f"| {c} | " + " | ".join(cells) + " |")
out.append("")
out += ["## Shim statistics of the mode:auto runs (summed over all processes)", ""]
out.append("| config | benchmark | processes | timed pairs | planned hits | steady-state hits "
           "| steady-state fallbacks | not_planned | overlap | guard_full | profiled "
           "| verdict |")
out.append("|---|" * 1 + "---|" * 11)
for (c, b), s in sorted(stats.items()):
    other = s["not_planned"] + s["escaping"] + s["overlap"] + s["alignment"] + s["guard_full"]
    if b == "BM_Malloc64":
        # Below min_size the exported malloc hands requests to the fallback without the engine.
        # (the few profiled allocations are the benchmark framework's own, of 4 KiB and more)
        verdict = ("fallback path: all below min_size" if s["planned_hits"] == 0
                   and other == 0 else "CHECK")
    else:
        verdict = ("replay hits" if s["planned_hits"] >= s["timed_pairs"]
                   and other <= s["runs"] * 2 else "NOT replay hits")
    out.append(f"| {c} | {b} | {s['runs']} | {s['timed_pairs']} | {s['planned_hits']} | "
               f"{s['steady_hits']} | {s['steady_fallbacks']} | {s['not_planned']} | "
               f"{s['overlap']} | {s['guard_full']} | {s['profiled']} | {verdict} |")
out += ["", "Timed pairs: iterations x pairs per iteration of the reported repetitions; the hits "
        "also count warm-up and calibration runs, so hits >= timed pairs with ~0 fallbacks means "
        "every timed allocation of 4 KiB and more was a replay hit."]
perf_path = os.path.join(raw, "perf.txt")
if os.path.exists(perf_path):
    out += ["", "## perf (self time, >= 1%)", "", "```"] + open(perf_path).read().splitlines()
    out += ["```"]
text = "\n".join(out) + "\n"
open(summary_path, "w").write(text)
print(text)
print(f"raw rows: {csv_path}\nsummary: {summary_path}\nraw JSON, stderr, commands: {raw}")
PY
