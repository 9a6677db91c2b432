#!/bin/sh
# The shim under a real PyTorch workload: resnet18 forward passes in Debian's Python must give
# bit-identical outputs with and without the shim, in every mode: auto (one plan, at most two
# steady-state fallbacks), off, profile (writes the pass as a trace) and replay (a new process replays that
# trace from its first pass).
#   run_torch_forward.sh SHIM_SO SCRIPT [MODEL [PASSES]]
# Exits 77 (CTest's SKIP_RETURN_CODE) when /usr/bin/python3 cannot import torch and torchvision.
set -u
shim=$1
script=$2
model=${3:-resnet18}
passes=${4:-40}
. "$(dirname "$0")/torch_test_env.sh"

"$python" "$script" "$model" "$passes" >"$work/plain.txt" || { echo "FAIL: run without the shim"; exit 1; }
if [ "$(wc -l <"$work/plain.txt")" -ne "$passes" ]; then
  echo "FAIL: expected $passes digests without the shim"
  exit 1
fi

failed=0
# run MODE CONF: one run under the shim; outputs must equal the plain run's.
run() {
  LD_PRELOAD="$shim" MEMOPLAN_CONF="$2,stats_print:true" \
    "$python" "$script" "$model" "$passes" >"$work/$1.txt" 2>"$work/$1.err"
  status=$?
  sed "s/^/[$1] /" "$work/$1.err"
  [ $status -eq 0 ] || { echo "FAIL: $1: run under the shim exited with $status"; failed=1; }
  if ! cmp -s "$work/plain.txt" "$work/$1.txt"; then
    echo "FAIL: $1: outputs differ under the shim:"
    diff "$work/plain.txt" "$work/$1.txt" | head -20
    failed=1
  fi
  grep -q "^memoplan: options mode:${1%%_*}" "$work/$1.err" || { echo "FAIL: $1: the shim did not load"; failed=1; }
}
expect() {  # expect MODE REGEX WHAT
  grep -Eq "$2" "$work/$1.err" || { echo "FAIL: $1: $3"; failed=1; }
}

# Steady-state fallbacks: none on LibTorch 1.13; on 2.6 two requests of 4 KiB or more that no
# pass repeats, made once whatever the number of passes (40 or 100: 2), go to the fallback.
run auto mode:auto
expect auto 'plans 1,' "expected exactly one plan"
expect auto 'steady-state fallbacks [0-2]$' "steady-state fallbacks"
expect auto 'steady-state hits [1-9]' "no steady-state hits"
expect auto 'peak live slab bytes [1-9]' "no peak live slab bytes"

run off mode:off
expect off ' plans 0,' "mode:off planned"

run profile "mode:profile,trace:$work/pass-%t.json.gz"
expect profile '^memoplan: wrote the pass of thread 0 ' "no trace written"
expect profile ' plans 0,' "mode:profile planned"

run replay "mode:replay,trace:$work/pass-0.json.gz"
expect replay '^memoplan: replaying ' "the trace was not loaded"
expect replay 'plans 1,' "expected exactly one plan"
expect replay 'steady-state fallbacks [0-2]$' "steady-state fallbacks"
expect replay 'steady-state hits [1-9]' "no steady-state hits"

[ $failed -eq 0 ] && echo "PASS: $passes identical digests in modes auto, off, profile and replay; one plan, at most two steady-state fallbacks"
exit $failed
