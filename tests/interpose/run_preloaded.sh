#!/bin/sh
# Runs a program with the shim preloaded and checks what the shim printed at exit.
#   run_preloaded.sh [--expect REGEX]... [--reject REGEX]... -- PROGRAM [ARGS...]
# CTest passes the shim as MEMOPLAN_TEST_PRELOAD and its options as MEMOPLAN_CONF (with
# stats_print:true). Only PROGRAM gets LD_PRELOAD: this shell and grep run without the shim, so
# their own exit statistics never mix into the output checked here.
# Fails when PROGRAM fails, when the shim did not load (no "memoplan: options" line), when an
# --expect pattern (an extended regex) matches no line of PROGRAM's stderr, or when a --reject
# pattern matches one (a program that forks prints the statistics of every process).
set -u
expects=""
rejects=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --expect) expects="$expects$2
"; shift 2 ;;
    --reject) rejects="$rejects$2
"; shift 2 ;;
    *) echo "run_preloaded.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 1 ] || { echo "usage: run_preloaded.sh [--expect RE]... [--reject RE]... -- PROGRAM [ARGS...]" >&2; exit 2; }
shift
: "${MEMOPLAN_TEST_PRELOAD:?the shim to preload}"

stderr_file=$(mktemp)
trap 'rm -f "$stderr_file"' EXIT
LD_PRELOAD="$MEMOPLAN_TEST_PRELOAD" "$@" 2>"$stderr_file"
status=$?
cat "$stderr_file" >&2
if [ $status -ne 0 ]; then
  echo "FAIL: $1 exited with status $status" >&2
  exit 1
fi
if ! grep -q '^memoplan: options ' "$stderr_file"; then
  echo "FAIL: no statistics from the shim: was it preloaded (and stats_print:true)?" >&2
  exit 1
fi
failed=0
set -f  # the patterns are regexes, not globs
old_ifs=$IFS
IFS='
'
for pattern in $expects; do
  if ! grep -Eq -- "$pattern" "$stderr_file"; then
    echo "FAIL: expected a line matching '$pattern'" >&2
    failed=1
  fi
done
for pattern in $rejects; do
  if grep -Eq -- "$pattern" "$stderr_file"; then
    echo "FAIL: unexpected line matching '$pattern'" >&2
    failed=1
  fi
done
IFS=$old_ifs
exit $failed
