#!/usr/bin/env bash
# Regenerates the model-trace table of docs/results/PLANNER.md from the committed model traces,
# and heap maps of swin_t under greedy_by_size and best.
# Usage: scripts/planner_report.sh [OUTDIR] (default out/planner-report)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-out/planner-report}"
mkdir -p "$out"
memoplan=build/src/memoplan
[ -x "$memoplan" ] || scripts/build.sh default
traces=(tests/data/traces/*.json.gz)
"$memoplan" compare "${traces[@]}" --time-limit 1 --markdown | tee "$out/compare.md"
"$memoplan" compare "${traces[@]}" --time-limit 1 --csv > "$out/compare.csv"
"$memoplan" heapmap tests/data/traces/swin_t.json.gz -s greedy_by_size -o "$out/swin_t_greedy_by_size.svg"
"$memoplan" heapmap tests/data/traces/swin_t.json.gz -s best -o "$out/swin_t_best.svg"
echo "wrote $out"
