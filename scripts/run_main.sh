#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, makes the default model
# (models/resnet18.pt), plans the default model's trace (resnet18) with every strategy, writes its
# plan and heap map to out/, runs the model under the LD_PRELOAD shim and checks its outputs, and
# ends with the `memoplan run` report of the default model (LibTorch, no Python).
# scripts/debian13.sh main runs it in the Debian 13 root: MEMOPLAN_PRESET=debian13 (its build
# directory), MEMOPLAN_NO_INSTALL=1 (the root has its packages), MEMOPLAN_MODELS=models-debian13
# (TorchScript files saved by PyTorch 2.6 do not load in 1.13: each keeps its own).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${MEMOPLAN_PRESET:-default}"
build=build  # CMakePresets.json: preset P builds into build-P, the default one into build
[ "$preset" = default ] || build="build-$preset"
[ "${MEMOPLAN_NO_INSTALL:-0}" = 1 ] || scripts/install_deps.sh
scripts/build.sh "$preset"
export MEMOPLAN_MODELS="${MEMOPLAN_MODELS:-models}"
# The default model of `memoplan run` (kept when it is there; the whole zoo: docs/RUN.md).
/usr/bin/python3 bench/models/make_zoo.py --only resnet18 --out "$MEMOPLAN_MODELS"
mkdir -p out
trace="${1:-tests/data/traces/resnet18.json.gz}"
"$build"/src/memoplan info "$trace"
echo
"$build"/src/memoplan compare "$trace"
echo
"$build"/src/memoplan plan "$trace" -o out/plan.json
"$build"/src/memoplan validate "$trace" out/plan.json
"$build"/src/memoplan heapmap "$trace" out/plan.json -o out/heapmap.svg

# The same model run for real under the LD_PRELOAD shim: outputs must match a run without it.
if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
  echo
  echo "== resnet18 forward x40 in python3, without and with libmemoplan_preload.so (mode:auto)"
  /usr/bin/python3 tests/interpose/torch_forward.py resnet18 40 > out/digests_plain.txt
  MEMOPLAN_CONF=stats_print:true LD_PRELOAD="$build"/interpose/libmemoplan_preload.so \
    /usr/bin/python3 tests/interpose/torch_forward.py resnet18 40 > out/digests_shim.txt
  if cmp -s out/digests_plain.txt out/digests_shim.txt; then
    echo "outputs identical in all 40 passes"
  else
    echo "outputs DIFFER (see out/digests_*.txt)"
    exit 1
  fi
fi

# Last: the default model planned in C++, measured against itself unplanned in the same process.
echo
echo "== memoplan run: $MEMOPLAN_MODELS/resnet18.pt unplanned vs planned, interleaved"
"$build"/src/memoplan run --heapmap out/run_heapmap.svg
