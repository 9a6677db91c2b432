#!/bin/sh
# mode:replay while its trace and plan files change: deleted and rewritten with garbage while the
# program runs (the loaded pass keeps serving every thread, new ones included), and garbage,
# empty, directory and truncated files at start-up (the program runs unplanned and says why).
#   run_file_changes.sh SHIM MEMOPLAN_CLI PROGRAM
set -u
shim=$1 cli=$2 program=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME CONF ARGS...: the program under the shim; stderr in $dir/NAME.err.
run() {
  name=$1 conf=$2
  shift 2
  MEMOPLAN_CONF="$conf,stats_print:true" LD_PRELOAD="$shim" "$program" "$@" >"$dir/$name.out" \
    2>"$dir/$name.err" || { cat "$dir/$name.err" >&2; fail "$name: the program failed"; }
  grep -qx ok "$dir/$name.out" || fail "$name: no 'ok' from the program"
}
expect() {  # expect NAME REGEX
  grep -Eq "$2" "$dir/$1.err" || { cat "$dir/$1.err" >&2; fail "$1: no line matches '$2'"; }
}

run profile "mode:profile,trace:$dir/pass-%t.json.gz" 8
trace=$(ls "$dir"/pass-*.json.gz 2>/dev/null | head -n 1)
[ -n "$trace" ] || { cat "$dir/profile.err" >&2; fail "mode:profile wrote no trace"; }
"$cli" plan -o "$dir/plan.json" "$trace" >/dev/null || fail "memoplan plan failed"

# Deleted, then rewritten with garbage, in the middle of passes: both threads replay throughout.
cp "$trace" "$dir/t.json.gz" && cp "$dir/plan.json" "$dir/p.json" || fail "cp"
run changed "mode:replay,trace:$dir/t.json.gz,plan:$dir/p.json" 30 "$dir/t.json.gz" "$dir/p.json"
expect changed "^memoplan: replaying $dir/t.json.gz"
expect changed " plans 2,"
expect changed "steady-state hits [1-9][0-9]*, steady-state fallbacks 0$"

# Unusable files at start-up: one line says why, nothing is planned, the program runs.
head -c 5000 /dev/urandom >"$dir/random.json.gz"
printf 'not a trace at all' | gzip >"$dir/garbage.json.gz"
: >"$dir/empty.json.gz"
mkdir "$dir/directory.json.gz"
head -c 200 "$trace" >"$dir/truncated.json.gz"
for bad in random garbage empty directory truncated; do
  run "$bad" "mode:replay,trace:$dir/$bad.json.gz" 8
  expect "$bad" "^memoplan: mode:replay runs unplanned: "
  expect "$bad" " plans 0,"
done
head -c 5000 /dev/urandom >"$dir/random.plan.json"
run random_plan "mode:replay,trace:$trace,plan:$dir/random.plan.json" 8
expect random_plan "^memoplan: mode:replay runs unplanned: .*random.plan.json"
expect random_plan " plans 0,"
echo "file changes: ok (9 runs)"
