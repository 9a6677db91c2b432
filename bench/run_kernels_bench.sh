#!/bin/bash
# The measurements of docs/results/KERNELS.md: memoplan's GEMM against OpenBLAS per shape
# (kernels_bench), the layout plan against brute force (layout_table), and end to end
# `memoplan run --kernels tuned` (stock TorchScript vs planned vs planned + tuned kernels, one
# process each, interleaved per iteration) on the transformer models and two CNNs.
#
#   bench/run_kernels_bench.sh              # ~6 min here; writes bench/results/kernels_<stamp>.md
#   ITERS=10 MODELS="transformer_encoder" bench/run_kernels_bench.sh
#
# Environment: BUILD_DIR (build-bench), ITERS (30), THREADS (1), MODELS (bert_encoder gpt_decoder
# transformer_encoder resnet18 mobilenet_v2), RESULTS_DIR (bench/results), NO_BUILD=1,
# BASELINE_THREADS ("1 2 2:1": intra-op threads of the optimize_for_inference comparison, T or
# T:B with B OpenBLAS threads, default B = T),
# BASELINE_ITERS (20).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
ITERS=${ITERS:-30}
THREADS=${THREADS:-1}
MODELS=${MODELS:-"bert_encoder gpt_decoder transformer_encoder resnet18 mobilenet_v2"}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
BASELINE_THREADS=${BASELINE_THREADS:-"1 2 2:1"}
BASELINE_ITERS=${BASELINE_ITERS:-20}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT="$RESULTS_DIR/kernels_$STAMP.md"
mkdir -p "$RESULTS_DIR"

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  cmake --build "$BUILD_DIR" --target kernels_bench layout_table memoplan memoplan-run \
    memoplan_torch >/dev/null
fi
model_file() {
  case "$1" in
    transformer_encoder) echo bench/results/tmp/models/transformer_encoder.pt ;;
    *) echo "models/$1.pt" ;;
  esac
}
for m in $MODELS; do
  f=$(model_file "$m")
  if [[ ! -f "$f" ]]; then
    if [[ "$m" == transformer_encoder ]]; then
      /usr/bin/python3 bench/make_torchscript_models.py bench/results/tmp/models transformer_encoder
    else
      /usr/bin/python3 bench/models/make_zoo.py --only "$m"
    fi
  fi
done

{
  echo "# memoplan kernels: measurements of $STAMP"
  echo
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores," \
       "flags: $(grep -m1 flags /proc/cpuinfo | grep -o 'avx512f\|avx2\|fma' | sort -u | xargs)"
  echo "- packages: $(dpkg-query -W -f '${Package} ${Version}, ' libtorch-dev libopenblas0-pthread 2>/dev/null)"
  echo "- commit $(git rev-parse --short HEAD); load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "## GEMM per shape, one thread"
  echo
  echo "\`$BUILD_DIR/bench/kernels_bench --benchmark_min_time=0.5 --benchmark_format=csv\`"
  echo
  echo "| benchmark | µs per call | GFLOP/s | configuration |"
  echo "|---|---|---|---|"
  "$BUILD_DIR/bench/kernels_bench" --benchmark_min_time=0.5 --benchmark_format=csv 2>/dev/null |
    /usr/bin/python3 -c '
import csv, sys
for r in csv.DictReader(l for l in sys.stdin if not l.startswith(("Run", "-"))):
    print("| %s | %.1f | %.1f | %s |" % (r["name"], float(r["real_time"]), float(r["GFLOPS"]), r["label"]))'
  echo
  echo "## Layout plan against brute force (FluidML Table 3 form)"
  echo
  echo "\`$BUILD_DIR/bench/layout_table\`"
  echo
  "$BUILD_DIR/bench/layout_table"
  echo
  echo "## End to end: \`memoplan run MODEL --kernels tuned --iters $ITERS --threads $THREADS --json\`"
  echo
  echo "Each iteration runs a stock pass, a planned pass and a planned + tuned pass (three copies"
  echo "of the model in one process, interleaved); medians over the iterations."
  echo
  echo "| model | input | stock ms | planned ms | tuned ms | tuned / stock | tuned / planned | max relative difference | within 1e-5 |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for m in $MODELS; do
    json=$("$BUILD_DIR/src/memoplan" run "$(model_file "$m")" --kernels tuned --iters "$ITERS" \
             --threads "$THREADS" --json --quiet)
    echo "$json" > "$RESULTS_DIR/kernels_${STAMP}_$m.json"
    echo "$json" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print("| %s | %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.1e | %s |" % (sys.argv[1], j["input"], j["stock_ms"], j["planned_ms"], j["tuned_ms"], j["tuned_ms"] / j["stock_ms"], j["tuned_ms"] / j["planned_ms"], j["tuned_max_relative_difference"], "yes" if j["tuned_within_tolerance"] else "NO"))' "$m"
  done
  echo
  echo "### Per op: what plan() measured (\`kernel_shapes\` of the runs above)"
  echo
  for m in $MODELS; do
    /usr/bin/python3 - "$RESULTS_DIR/kernels_${STAMP}_$m.json" "$m" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
lines = j.get("kernel_shapes", [])
if isinstance(lines, str):
    lines = lines.splitlines()
print("**%s** (%d lines)" % (sys.argv[2], len(lines)))
print()
print("```")
for line in lines[:40]:
    print(line)
if len(lines) > 40:
    print("... %d more" % (len(lines) - 40))
print("```")
print()
PY
  done
  echo "## Against optimize_for_inference, one and more intra-op threads"
  echo
  echo "Per thread count T (and B OpenBLAS threads): \`OPENBLAS_NUM_THREADS=B /usr/bin/python3 bench/tuned_baselines.py"
  echo "--lib $BUILD_DIR/torch_ext/libmemoplan_torch.so --threads T --iters $BASELINE_ITERS\`: five"
  echo "copies of each model in one process (stock; torch.jit.optimize_for_inference; memoplan's plan"
  echo "with stock kernels; with tuned kernels; tuned plan of the optimized module), one pass of each"
  echo "per iteration, the order rotated; medians."
  echo
  echo "| model | threads | OpenBLAS threads | stock ms | optimize_for_inference ms | planned ms | tuned ms | optimized + tuned ms | tuned / stock | tuned / optimized | tuned max relative difference |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for spec in $BASELINE_THREADS; do
    t=${spec%%:*}
    b=${spec#*:}
    OPENBLAS_NUM_THREADS=$b /usr/bin/python3 bench/tuned_baselines.py \
      --lib "$BUILD_DIR/torch_ext/libmemoplan_torch.so" --threads "$t" --iters "$BASELINE_ITERS" \
      --models "$(echo $MODELS | tr ' ' ',')" \
      --json "$RESULTS_DIR/kernels_${STAMP}_baselines_t${t}_b$b.json" >/dev/null 2>&1
    /usr/bin/python3 - "$RESULTS_DIR/kernels_${STAMP}_baselines_t${t}_b$b.json" "$b" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    ms = r["median_ms"]
    both = "%.2f" % ms["optimized+tuned"] if "optimized+tuned" in ms else "n/a"
    print("| %s | %d | %s | %.2f | %.2f | %.2f | %.2f | %s | %.3f | %.3f | %.1e |" % (
        r["model"], r["threads"], sys.argv[2], ms["stock"], ms["optimized"], ms["planned"], ms["tuned"], both,
        ms["tuned"] / ms["stock"], ms["tuned"] / ms["optimized"],
        r["max_relative_difference"]["tuned"]))
PY
  done
  echo
  echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
echo "wrote $OUT"
