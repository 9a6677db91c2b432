#!/bin/sh
# Automatic pass detection on PyTorch programs that do not mark their passes (issue 17's cases):
# under the shim (mode:auto) the outputs must equal a run without it, and on each of the
# INFERENCE_THREADS threads that run the model (the busiest in steady state) at least MIN_SHARE
# percent of the steady-state requests of min_size or more must come from a slab. The main
# thread's start-up is not judged: Python's imports repeat short patterns that a plan may serve
# for a while (how much depends on the hash seed), which is not the model's pass.
#   run_torch_detection.sh SHIM_SO SCRIPT CASE PASSES MIN_SHARE INFERENCE_THREADS
# Exits 77 (CTest's SKIP_RETURN_CODE) when /usr/bin/python3 cannot import torch and torchvision.
set -u
shim=$1 script=$2 case=$3 passes=$4 min_share=$5 inference_threads=$6
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
# "memoplan: steady state by thread, busiest first: thread 1 planned 98.6% of 4986, thread 0 ..."
shares=$(sed -n 's/^memoplan: steady state by thread, busiest first://p' "$work/shim.err" |
  tr ',' '\n' | sed -n 's/^ thread [0-9]* planned \([0-9.]*\)% of [0-9]*$/\1/p' |
  head -n "$inference_threads")
[ "$(echo "$shares" | grep -c .)" -eq "$inference_threads" ] ||
  { echo "FAIL: expected $inference_threads planned threads, got: $shares"; exit 1; }
for s in $shares; do
  if ! awk -v s="$s" -v m="$min_share" 'BEGIN { exit !(s >= m) }'; then
    echo "FAIL: an inference thread planned $s% of its steady-state requests, expected at least $min_share%"
    exit 1
  fi
done
echo "PASS: $case: outputs identical over $passes passes, inference threads planned" $shares "% of their steady-state requests ($share% of all threads')"
