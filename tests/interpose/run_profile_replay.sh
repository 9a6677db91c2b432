#!/bin/sh
# mode:profile -> trace files -> mode:replay, across processes (ASLR moves every address between
# them), with the plan made in-process and by `memoplan plan -s best`, and with bad files that
# must leave the program running unplanned with one clear line. Every run's output must equal the
# run without the shim.
#   run_profile_replay.sh SHIM MEMOPLAN_CLI PROGRAM ARGS...
set -u
shim=$1 cli=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$@" >"$dir/expected.txt" || fail "the program fails without the shim"

# run NAME CONF: runs the program under the shim; its stderr lands in $dir/NAME.err.
run() {
  name=$1 conf=$2
  shift 2
  MEMOPLAN_CONF="$conf,stats_print:true" LD_PRELOAD="$shim" "$@" >"$dir/$name.out" \
    2>"$dir/$name.err" || { cat "$dir/$name.err" >&2; fail "$name: the program failed"; }
  cmp -s "$dir/$name.out" "$dir/expected.txt" || fail "$name: output differs from the run without the shim"
}
expect() {  # expect NAME REGEX
  grep -Eq "$2" "$dir/$1.err" || { cat "$dir/$1.err" >&2; fail "$1: no line matches '$2'"; }
}

run profile "mode:profile,trace:$dir/pass-%t.json.gz" "$@"
expect profile "^memoplan: wrote the pass of thread [0-9]+ \([0-9]+ allocations\) to $dir/pass-"
expect profile " plans 0,"
trace=$(ls "$dir"/pass-*.json.gz | head -n 1)
[ -n "$trace" ] || fail "mode:profile wrote no trace"
"$cli" info "$trace" >"$dir/info.txt" || fail "memoplan info cannot read $trace"
grep -q "libmemoplan_preload callsite_depth:4" "$dir/info.txt" || fail "trace source not recorded"

steady='steady-state hits [1-9][0-9]*, steady-state fallbacks 0$'
run replay "mode:replay,trace:$trace" "$@"
expect replay "^memoplan: replaying $trace \([0-9]+ allocations, greedy_by_size plan"
expect replay "$steady"

"$cli" plan -s best -o "$dir/best.plan.json" "$trace" >/dev/null || fail "memoplan plan failed"
run replay_best "mode:replay,trace:$trace,plan:$dir/best.plan.json" "$@"
expect replay_best "^memoplan: replaying .* best plan"
expect replay_best "$steady"

# Bad input: the program runs unplanned and says why.
/usr/bin/env python3 - "$dir/best.plan.json" "$dir/overlapping.plan.json" <<'PY' || fail "python3"
import json, sys
plan = json.load(open(sys.argv[1]))
plan["offsets"] = [0 for _ in plan["offsets"]]  # everything at offset 0: overlaps
json.dump(plan, open(sys.argv[2], "w"))
PY
run overlapping "mode:replay,trace:$trace,plan:$dir/overlapping.plan.json" "$@"
expect overlapping "^memoplan: mode:replay runs unplanned: .*overlapping.plan.json is not a valid plan"
expect overlapping " plans 0,"
printf '{"format": "memoplan.plan", "version": 1, "offsets": [' >"$dir/truncated.plan.json"
run truncated "mode:replay,trace:$trace,plan:$dir/truncated.plan.json" "$@"
expect truncated "^memoplan: mode:replay runs unplanned: .*truncated.plan.json"
run missing "mode:replay,trace:$dir/missing.json.gz" "$@"
expect missing "^memoplan: mode:replay runs unplanned: .*missing.json.gz: cannot open"
run other_depth "mode:replay,trace:$trace,callsite_depth:2" "$@"
expect other_depth "^memoplan: mode:replay runs unplanned: .*not \"libmemoplan_preload callsite_depth:2"
echo "profile -> replay: ok ($(grep -c . "$dir/expected.txt") output lines identical in 7 runs)"
