#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and plans the default model's
# trace (resnet18) with every strategy, writes its plan and heap map to out/, then runs the model
# under the LD_PRELOAD shim and checks its outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh default
mkdir -p out
trace="${1:-tests/data/traces/resnet18.json.gz}"
build/src/memoplan info "$trace"
echo
build/src/memoplan compare "$trace"
echo
build/src/memoplan plan "$trace" -o out/plan.json
build/src/memoplan validate "$trace" out/plan.json
build/src/memoplan heapmap "$trace" out/plan.json -o out/heapmap.svg

# The same model run for real under the LD_PRELOAD shim: outputs must match a run without it.
if /usr/bin/python3 -c "import torch, torchvision" 2>/dev/null; then
  echo
  echo "== resnet18 forward x40 in python3, without and with libmemoplan_preload.so (mode:auto)"
  /usr/bin/python3 tests/interpose/torch_forward.py resnet18 40 > out/digests_plain.txt
  MEMOPLAN_CONF=stats_print:true LD_PRELOAD=build/interpose/libmemoplan_preload.so \
    /usr/bin/python3 tests/interpose/torch_forward.py resnet18 40 > out/digests_shim.txt
  if cmp -s out/digests_plain.txt out/digests_shim.txt; then
    echo "outputs identical in all 40 passes"
  else
    echo "outputs DIFFER (see out/digests_*.txt)"
    exit 1
  fi
fi
