#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test with CTest —
# the normal build, then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
# and the shim's tests under ThreadSanitizer (set MEMOPLAN_SANITIZERS=0 to skip those two), then
# every fuzz target for MEMOPLAN_FUZZ_SECONDS (default 15; 0 skips) under libFuzzer with ASan +
# UBSan when clang's libFuzzer is installed (docs/RELIABILITY.md), then the normal build and its
# tests again in a Debian 13 root against LibTorch 2.6 (scripts/debian13.sh; set
# MEMOPLAN_DEBIAN13=0 to skip it; the sanitizer builds run on Debian 12 only), then the Debian
# packages made from that build, installed with apt on a clean Debian 13 root and smoke-tested
# there (scripts/debian13.sh package-test; MEMOPLAN_PACKAGES=0 skips it), then the aarch64
# cross build of the planner, the runtime and the kernels with their tests under qemu-user
# (scripts/cross_aarch64.sh; MEMOPLAN_CROSS=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, printed as it ends and again, all of them, when the script exits (CI's
# budget: 60 minutes from a cold machine, docs/INSTALL.md).
stage_start=$SECONDS
stage_times=""
stage_done() {
  local took=$((SECONDS - stage_start))
  stage_times+="$(printf '  %-24s %5d s' "$1" "$took")"$'\n'
  echo "memoplan: stage $1: ${took} s (${SECONDS} s in all)" >&2
  stage_start=$SECONDS
}
prep_pid=""
trap '[ -z "$prep_pid" ] || wait "$prep_pid" 2>/dev/null
      printf "memoplan: stage times (%d s in all)\n%s" "$SECONDS" "$stage_times" >&2' EXIT
scripts/install_deps.sh
stage_done install
# The Debian 13 roots (scripts/debian13.sh roots) and the aarch64 toolchain are installed in the
# background while the Debian 12 build compiles: debootstrap and apt wait mostly on the mirror
# and the disk. They are waited for before the first tests, whose timings they must not disturb;
# what fails here is tried again, and reported, by its own stage.
prep_log="$(mktemp)"
{
  if [ "${MEMOPLAN_DEBIAN13:-1}" != 0 ] || [ "${MEMOPLAN_PACKAGES:-1}" != 0 ]; then
    scripts/debian13.sh roots || echo "memoplan: debian13.sh roots: exit $?"
  fi
  if [ "${MEMOPLAN_CROSS:-1}" != 0 ]; then
    scripts/cross_aarch64.sh --install-only ||
      echo "memoplan: cross_aarch64.sh --install-only: exit $?"
  fi
} > "$prep_log" 2>&1 &
prep_pid=$!
# ccache: paths under the checkout hashed relative to it and the build directory left out of the
# hash (it would be, with -g), so a clone elsewhere (CI's) reuses what another clone compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# The shim's engine tests fail, rather than skip, where the engine cannot reserve its address space.
export MEMOPLAN_REQUIRE_PLANS=1
scripts/build.sh default
stage_done build
wait "$prep_pid" || true
prep_pid=""
sed 's/^/  (background) /' "$prep_log" >&2
rm -f "$prep_log"
stage_done background-wait
# run_ctest PRESET [ARGS...]: a failure runs the failed tests once more, their output last (CI
# shows a log's tail); the stage fails whatever that run gives.
run_ctest() {
  local preset="$1" status=0
  shift
  ctest --preset "$preset" -j "$(nproc)" "$@" || status=$?
  [ "$status" -eq 0 ] && return 0
  echo "memoplan: the failed tests once more, for their output:" >&2
  ctest --preset "$preset" --rerun-failed --output-on-failure || true
  return "$status"
}
run_ctest default
stage_done test
if [ "${MEMOPLAN_SANITIZERS:-1}" != 0 ]; then
  scripts/build.sh asan
  stage_done asan-build
  run_ctest asan
  stage_done asan-test
  cmake --preset tsan >/dev/null
  # ThreadSanitizer: the shared record/replay runtime, the shim's engine (its unit and fault tests
  # and the deviation fuzzer's bounded slices) and, when LibTorch is installed, the extension's tests (concurrent forward
  # calls on one planned module).
  tsan_targets=(runtime_tests interpose_tests interpose_fault_tests deviation_fuzz)
  if cmake --build --preset tsan --target help | grep -c '^torch_ext_tests:' >/dev/null; then
    tsan_targets+=(torch_ext_tests)
  fi
  cmake --build --preset tsan -j "$(nproc)" --target "${tsan_targets[@]}"
  stage_done tsan-build
  run_ctest tsan -L 'runtime|interpose|torch' -E '^(run|serve)\.'
  stage_done tsan-test
fi
if [ "${MEMOPLAN_FUZZ_SECONDS:-15}" != 0 ]; then
  scripts/run_fuzz.sh "${MEMOPLAN_FUZZ_SECONDS:-15}" --if-available
  stage_done fuzz
fi
if [ "${MEMOPLAN_DEBIAN13:-1}" != 0 ]; then
  # 77: the Debian mirror cannot be reached to make the root (said on stderr): skipped, not failed.
  status=0
  scripts/debian13.sh test || status=$?
  [ "$status" -eq 0 ] || [ "$status" -eq 77 ] || exit "$status"
  stage_done debian13
fi
if [ "${MEMOPLAN_PACKAGES:-1}" != 0 ]; then
  # 77: the Debian mirror cannot be reached (the roots, the packages' dependencies): skipped.
  status=0
  scripts/debian13.sh package-test || status=$?
  [ "$status" -eq 0 ] || [ "$status" -eq 77 ] || exit "$status"
  stage_done package-test
fi
if [ "${MEMOPLAN_CROSS:-1}" != 0 ]; then
  # 77: the cross toolchain or qemu-user could not be installed: skipped, not failed.
  status=0
  scripts/cross_aarch64.sh || status=$?
  [ "$status" -eq 0 ] || [ "$status" -eq 77 ] || exit "$status"
  stage_done aarch64
fi
