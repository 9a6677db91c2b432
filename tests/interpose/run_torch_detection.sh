#!/bin/sh
# Automatic pass detection on PyTorch programs that do not mark their passes (issue 17's cases):
# under the shim (mode:auto) the outputs must equal a run without it, and at least MIN_SHARE
# percent of the steady-state requests of min_size or more must come from a slab.
#   run_torch_detection.sh SHIM_SO SCRIPT CASE PASSES MIN_SHARE
# Exits 77 (CTest's SKIP_RETURN_CODE) when /usr/bin/python3 cannot import torch and torchvision.
set -u
shim=$1 script=$2 case=$3 passes=$4 min_share=$5
. "$(dirname "$0")/torch_test_env.sh"

"$python" "$script" "$case" "$passes" >"$work/plain.txt" 2>"$work/plain.err" ||
  { cat "$work/plain.err"; echo "FAIL: run without the shim"; exit 1; }
LD_PRELOAD="$shim" MEMOPLAN_CONF=stats_print:true \
  "$python" "$script" "$case" "$passes" >"$work/shim.txt" 2>"$work/shim.err"
status=$?
grep '^memoplan: ' "$work/shim.err"
[ $status -eq 0 ] || { tail -20 "$work/shim.err"; echo "FAIL: run under the shim exited with $status"; exit 1; }
if ! cmp -s "$work/plain.txt" "$work/shim.txt"; then
  echo "FAIL: outputs differ under the shim:"
  diff "$work/plain.txt" "$work/shim.txt" | head -20
  exit 1
fi
share=$(sed -n 's/^memoplan: planned \([0-9.]*\)% of [0-9]* steady-state requests.*/\1/p' "$work/shim.err")
[ -n "$share" ] || { echo "FAIL: no verdict line (nothing planned?)"; exit 1; }
if ! awk -v s="$share" -v m="$min_share" 'BEGIN { exit !(s >= m) }'; then
  echo "FAIL: $share% of the steady-state requests planned, expected at least $min_share%"
  exit 1
fi
echo "PASS: $case: outputs identical over $passes passes, $share% of steady-state requests planned"
