#!/usr/bin/env bash
# Runs `memoplan run --json` on every model of the zoo (or the ones named) and prints the table
# docs/results/KERNELS.md shows. Batch 1, one inference thread; the heavy models get fewer iterations.
#
#   bench/models/run_zoo.sh [-b BUILD_DIR] [-m MODELS_DIR] [-o OUT.jsonl] [MODEL...]
#
# Defaults: build/, models/ (make it first: /usr/bin/python3 bench/models/make_zoo.py),
# out/zoo_run.jsonl. Each model's JSON object is appended to OUT as it finishes; the markdown
# table (bench/models/zoo_table.py) is printed at the end. A model that fails is reported and
# skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
models=models
out=out/zoo_run.jsonl
while getopts "b:m:o:" opt; do
  case "$opt" in
    b) build="$OPTARG" ;;
    m) models="$OPTARG" ;;
    o) out="$OPTARG" ;;
    *) sed -n 2,10p "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t names < <(/usr/bin/python3 bench/models/make_zoo.py --list)
fi

# The heaviest CNNs (up to 4 s a pass on one core here): 10 timed iterations after 1 warm-up; the
# rest 30 after 3.
heavy=" wide_resnet50_2 resnext101_32x8d regnet_x_8gf vgg16 fcn_resnet50 deeplabv3_resnet50 "
mkdir -p "$(dirname "$out")"
: > "$out"
for name in "${names[@]}"; do
  model="$models/$name.pt"
  if [ ! -f "$model" ]; then
    echo "$name: $model is missing (make it: /usr/bin/python3 bench/models/make_zoo.py --only $name)" >&2
    continue
  fi
  if [[ "$heavy" == *" $name "* ]]; then args=(--iters 10 --warmup 1); else args=(--iters 30 --warmup 3); fi
  echo "== $name ${args[*]}" >&2
  if ! "$build/src/memoplan" run "$model" --json "${args[@]}" >> "$out"; then
    echo "$name: memoplan run failed" >&2
  fi
done
/usr/bin/python3 bench/models/zoo_table.py "$out"
