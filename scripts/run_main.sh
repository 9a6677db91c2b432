#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and plans the default model's
# trace (resnet18) with every strategy, then writes its plan and heap map to out/.
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
