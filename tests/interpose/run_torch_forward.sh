#!/bin/sh
# The shim under a real PyTorch workload: resnet18 forward passes in Debian's Python must give
# bit-identical outputs with and without the shim, from one plan with no steady-state fallbacks.
#   run_torch_forward.sh SHIM_SO SCRIPT [MODEL [PASSES]]
# Exits 77 (CTest's SKIP_RETURN_CODE) when /usr/bin/python3 cannot import torch and torchvision.
set -u
shim=$1
script=$2
model=${3:-resnet18}
passes=${4:-40}
python=/usr/bin/python3

if ! "$python" -c 'import torch, torchvision' >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and torchvision"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" "$script" "$model" "$passes" >"$work/plain.txt" || { echo "FAIL: run without the shim"; exit 1; }
LD_PRELOAD="$shim" MEMOPLAN_CONF=mode:auto,stats_print:true \
  "$python" "$script" "$model" "$passes" >"$work/shim.txt" 2>"$work/shim.err"
status=$?
cat "$work/shim.err"
[ $status -eq 0 ] || { echo "FAIL: run under the shim exited with $status"; exit 1; }

failed=0
if [ "$(wc -l <"$work/plain.txt")" -ne "$passes" ]; then
  echo "FAIL: expected $passes digests without the shim"
  failed=1
fi
if ! cmp -s "$work/plain.txt" "$work/shim.txt"; then
  echo "FAIL: outputs differ under the shim:"
  diff "$work/plain.txt" "$work/shim.txt" | head -20
  failed=1
fi
grep -q '^memoplan: options mode:auto' "$work/shim.err" || { echo "FAIL: the shim did not load"; failed=1; }
grep -Eq 'plans 1,' "$work/shim.err" || { echo "FAIL: expected exactly one plan"; failed=1; }
grep -Eq 'steady-state fallbacks 0$' "$work/shim.err" || { echo "FAIL: steady-state fallbacks"; failed=1; }
grep -Eq 'steady-state hits [1-9]' "$work/shim.err" || { echo "FAIL: no steady-state hits"; failed=1; }
grep -Eq 'peak live slab bytes [1-9]' "$work/shim.err" || { echo "FAIL: no peak live slab bytes"; failed=1; }
[ $failed -eq 0 ] && echo "PASS: $passes identical digests, one plan, no steady-state fallbacks"
exit $failed
